"""DFI from Python: declare flows, push NumPy structured arrays (or Arrow record batches), consume
NumPy views.

    import numpy as np, dfi

    node = dfi.Node()                                   # rank and size from `dfi cluster run`
    row = np.dtype([("key", "i8"), ("value", "f8")], align=True)
    if node.rank == 0:
        dfi.create_flow(node, "orders", sources=[(0, 0), (1, 0)], targets=[(0, 0), (1, 0)],
                        schema=row, key="key")
    with dfi.ShuffleSource(node, "orders", thread=0) as out:   # closes on leaving the block
        out.push(np.zeros(1000, row))                   # zero-copy: the dtype is the flow's
    target = dfi.ShuffleTarget(node, "orders", id=0)
    total = sum(batch["value"].sum() for batch in target)   # NumPy views, each valid until
                                                              # the next consume
    node.finish()

Everything here binds the C++ API of include/dfi/flow (see python/README.md); a failed call raises
dfi.Error with the C++ error's code (dfi.Errc) and message. Calls that wait (opening a flow,
push, flush, close, consume, barriers) release the GIL. A source, target or barrier belongs to
the thread that created it, like its C++ counterpart.
"""

from __future__ import annotations

import numpy as np

from . import _dfi
from ._dfi import Errc, Node

__version__ = _dfi.version

__all__ = [
    "Errc", "Error", "Node", "Barrier", "create_flow", "create_barrier", "flow_dtype",
    "ShuffleSource", "ShuffleTarget", "ReplicateSource", "ReplicateTarget", "CombinerSource",
    "CombinerTarget", "Producer", "Consumer", "Mover",
]


class Error(Exception):
    """A DFI error: `code` (a dfi.Errc) and `message`, exactly as the C++ dfi::Error or
    dfi::Status carried them; str(error) is the message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = Errc(code)
        self.message = message

    def __reduce__(self):
        return (Error, (int(self.code), self.message))


_dfi._set_error_class(Error)


def _invalid(message):
    return Error(Errc.invalid_argument, message)


# Schema type names (dfi::flow::type_name) and the NumPy types of the same layout.
_TO_NUMPY = {
    "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8",
    "float": "f4", "double": "f8",
}
_FROM_NUMPY = {np.dtype(v).str[1:]: k for k, v in _TO_NUMPY.items()}


def _numpy_type(type_name, nbytes):
    if type_name == "chars":
        return np.dtype(f"S{nbytes}")
    return np.dtype(_TO_NUMPY[type_name])


def _schema_text(schema, flow):
    """'key:int64,value:double' from a NumPy dtype (or anything np.dtype accepts); a string is
    taken as the schema text itself. The flow lays columns out like a C struct, so the dtype
    should be built with align=True for arrays of it to be pushed without a copy."""
    if isinstance(schema, str):
        return schema
    dtype = np.dtype(schema)
    if dtype.names is None:
        raise _invalid(f"flow '{flow}': a schema needs named fields, not the dtype {dtype}")
    columns = []
    for name in dtype.names:
        field = dtype.fields[name][0]
        if field.kind == "S":
            columns.append(f"{name}:chars[{field.itemsize}]")
        elif field.str[1:] in _FROM_NUMPY and field.isnative:
            columns.append(f"{name}:{_FROM_NUMPY[field.str[1:]]}")
        else:
            raise _invalid(f"flow '{flow}': column '{name}': DFI has no column type for the NumPy type {field} "
                           "(native ints, uints, float32/64, fixed bytes 'S<n>')")
    return ",".join(columns)


def flow_dtype(layout):
    """The NumPy dtype of a flow's tuples, from its (columns, tuple_bytes) layout."""
    columns, tuple_bytes = layout
    return np.dtype({
        "names": [c[0] for c in columns],
        "formats": [_numpy_type(c[1], c[3]) for c in columns],
        "offsets": [c[2] for c in columns],
        "itemsize": tuple_bytes,
    })


def create_flow(node, name, *, sources, targets, schema, type="shuffle", key="", routing="key_hash",
                mode="bandwidth", segments=0, segment_bytes=0, stall_timeout_ms=0, aggregates="",
                replication="naive", fanout=2, ordered=False, gap_timeout_ms=1000, pattern="shuffle",
                doorbell=False, batch_bytes=0, poll_interval_us=0, share=1):
    """Creates flow `name` (call once, from one rank): flow::create_flow.

    sources: [(rank, thread)], targets: [(rank, id)], schema: a NumPy dtype with named fields
    (align=True) or a schema text ('key:int64,value:double,tag:chars[8]').
    type 'shuffle': key (key_hash routing) or routing='explicit' (ShuffleSource.push_to).
    type 'replicate': replication 'naive' | 'relay', fanout, ordered, gap_timeout_ms.
    type 'combiner': key (group by) and aggregates ('sum(value),count(*),avg(value)').
    type 'driven' (driven::kDriven; sources are Producers, targets Consumers, a Mover moves the
    data): pattern 'shuffle' (key, or routing='explicit') | 'balance' | 'replicate', doorbell,
    batch_bytes (0: 4 MiB), poll_interval_us, share (driven::DrivenOptions).
    mode 'bandwidth' | 'latency'; segments, segment_bytes: 0 for the transport's defaults.
    Raises dfi.Error: already_exists, invalid_argument (naming the flow and the problem), timeout.
    """
    _dfi._create_flow(node, name, type, [tuple(s) for s in sources], [tuple(t) for t in targets],
                      _schema_text(schema, name), key, routing, mode, segments, segment_bytes,
                      stall_timeout_ms, aggregates, replication, fanout, ordered, gap_timeout_ms,
                      pattern, doorbell, batch_bytes, poll_interval_us, share)


def create_barrier(node, name, members):
    """Creates barrier `name` of members [(rank, thread)] (once, from one rank)."""
    _dfi._create_barrier(node, name, [tuple(m) for m in members])


class Barrier:
    """Joins barrier `name` as member `thread` of this rank (flow::Barrier); opening waits for
    the barrier's creation (up to open_timeout_ms, 0: the registry timeout)."""

    def __init__(self, node, name, thread=0, open_timeout_ms=0):
        self._native = _dfi.Barrier(node, name, thread, open_timeout_ms)

    def wait(self, timeout_ms=0):
        """Returns once every member called wait() this round (GIL released). Raises dfi.Error:
        peer_failed (a member's rank died), timeout (0: the flow_timeout_ms setting)."""
        self._native.wait(timeout_ms)

    @property
    def rounds(self):
        return self._native.rounds


def _check_array(flow, dtype, array):
    """The array itself when its layout is the flow's (then it is pushed without a copy), else
    dfi.Error(invalid_argument) naming the flow and the first column that differs."""
    if not isinstance(array, np.ndarray):
        raise _invalid(f"flow '{flow}': expected a NumPy structured array of dtype {dtype} "
                       f"(push also takes an Arrow RecordBatch), not {type(array).__name__}")
    have = array.dtype
    if have != dtype:
        if have.names is None:
            raise _invalid(f"flow '{flow}': the array's dtype {have} has no fields; the flow's tuples "
                           f"are {dtype}")
        for name in dtype.names:
            want_type, want_offset = dtype.fields[name][:2]
            if name not in have.fields:
                raise _invalid(f"flow '{flow}': column '{name}' is missing from the array "
                               f"(its fields: {', '.join(have.names)})")
            got_type, got_offset = have.fields[name][:2]
            if got_type != want_type:
                raise _invalid(f"flow '{flow}': column '{name}' is {want_type} in the flow, "
                               f"{got_type} in the array")
            if got_offset != want_offset:
                raise _invalid(f"flow '{flow}': column '{name}' is at byte {want_offset} of the "
                               f"flow's {dtype.itemsize}-byte tuple, at byte {got_offset} of the "
                               f"array's {have.itemsize}-byte rows (build the dtype with "
                               "align=True, or use the source's dtype)")
        extra = [n for n in have.names if n not in dtype.fields]
        if extra:
            raise _invalid(f"flow '{flow}': the array has field '{extra[0]}', which is no column "
                           f"of the flow ({', '.join(dtype.names)})")
        raise _invalid(f"flow '{flow}': the array's rows are {have.itemsize} bytes, the flow's "
                       f"tuples {dtype.itemsize} (padding differs; use the source's dtype)")
    if array.ndim != 1 or not array.flags.c_contiguous:
        raise _invalid(f"flow '{flow}': the array must be one-dimensional and contiguous "
                       "(np.ascontiguousarray(a.ravel()) copies it into one)")
    return array


def _arrow_columns(flow, dtype, batch):
    """The columns of an Arrow RecordBatch as NumPy arrays over its buffers (no copy), in the
    flow's column order, checked against the flow's columns (names, types, no nulls)."""
    import pyarrow as pa

    names = batch.schema.names
    extra = [n for n in names if n not in dtype.fields]
    if extra:
        raise _invalid(f"flow '{flow}': the record batch has column '{extra[0]}', which is no "
                       f"column of the flow ({', '.join(dtype.names)})")
    columns = []
    for name in dtype.names:
        want = dtype.fields[name][0]
        if name not in names:
            raise _invalid(f"flow '{flow}': column '{name}' is missing from the record batch "
                           f"(its columns: {', '.join(names)})")
        column = batch.column(names.index(name))
        if column.null_count:
            raise _invalid(f"flow '{flow}': column '{name}' has {column.null_count} nulls; "
                           "flow tuples have no nulls")
        if want.kind == "S":
            if column.type != pa.binary(want.itemsize):
                raise _invalid(f"flow '{flow}': column '{name}' is chars[{want.itemsize}] in the "
                               f"flow (Arrow fixed_size_binary[{want.itemsize}]), {column.type} in "
                               "the record batch")
            data = np.frombuffer(column.buffers()[1], dtype=want, count=len(column),
                                 offset=column.offset * want.itemsize)
        else:
            try:
                got = np.dtype(column.type.to_pandas_dtype())
            except (NotImplementedError, TypeError):
                got = None
            if got != want:
                raise _invalid(f"flow '{flow}': column '{name}' is {want} in the flow, "
                               f"{column.type} in the record batch")
            data = column.to_numpy(zero_copy_only=True)
        columns.append(data)
    return columns


def _numpy_columns(flow, dtype, data, writable=False, partial=False):
    """The arrays of a {column name: 1-D array} mapping in the flow's column order (None for a
    column left out, where `partial`), checked: every name a column, each array one-dimensional
    with the column's exact dtype (any stride), all of one length. No copy, no conversion."""
    extra = [n for n in data if n not in dtype.fields]
    if extra:
        raise _invalid(f"flow '{flow}': '{extra[0]}' is no column of the flow "
                       f"({', '.join(dtype.names)})")
    columns, length = [], None
    for name in dtype.names:
        want = dtype.fields[name][0]
        if name not in data:
            if partial:
                columns.append(None)
                continue
            raise _invalid(f"flow '{flow}': column '{name}' is missing (the flow's columns: "
                           f"{', '.join(dtype.names)})")
        array = data[name]
        if not isinstance(array, np.ndarray) or array.ndim != 1:
            raise _invalid(f"flow '{flow}': column '{name}' must be a one-dimensional NumPy array")
        if array.dtype != want:
            raise _invalid(f"flow '{flow}': column '{name}' is {want} in the flow, {array.dtype} in "
                           "the array (nothing is converted: astype() it first)")
        if writable and not array.flags.writeable:
            raise _invalid(f"flow '{flow}': column '{name}' is not writable")
        if length is not None and len(array) != length:
            raise _invalid(f"flow '{flow}': column '{name}' has {len(array)} rows, the others "
                           f"{length}")
        length = len(array)
        columns.append(array)
    if length is None:
        raise _invalid(f"flow '{flow}': no column given")
    return columns


def _batches(flow, dtype, data):
    """What a push hands to C++, one item per batch: a checked structured array (rows, no copy)
    or a list of column arrays (columns, interleaved in C++ chunk by chunk)."""
    if isinstance(data, dict):
        return [_numpy_columns(flow, dtype, data)]
    if _is_arrow(data):
        if type(data).__name__ == "Table":
            return [_arrow_columns(flow, dtype, b) for b in data.to_batches()]
        return [_arrow_columns(flow, dtype, data)]
    return [_check_array(flow, dtype, data)]


def _rows_to_arrow(dtype, rows):
    import pyarrow as pa

    arrays = []
    for name in dtype.names:
        field = dtype.fields[name][0]
        column = rows[name].copy()  # pa.array would share a contiguous view of the ring
        if field.kind == "S":
            arrays.append(pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(field.itemsize), len(column), [None, pa.py_buffer(column.tobytes())]))
        else:
            arrays.append(pa.array(column))
    return pa.RecordBatch.from_arrays(arrays, names=list(dtype.names))


def _is_arrow(data):
    module = type(data).__module__
    return module.startswith("pyarrow") and type(data).__name__ in ("RecordBatch", "Table")


class _Source:
    """What every source has: push (NumPy or Arrow), flush, close, a context manager."""

    def __init__(self, native):
        self._native = native
        self.name = native.name
        self.dtype = flow_dtype(native._layout)  # the dtype whose arrays push takes without a copy

    def push(self, data):
        """Pushes every row of `data` (GIL released), routed as the flow routes:
        - rows: a 1-D contiguous NumPy array of the flow's dtype, handed to push_batch (shuffle;
          push_bulk for replicate and combiner) without a copy;
        - columns: a dict {column name: 1-D NumPy array of the column's dtype, any stride} with
          every column of the flow, or an Arrow RecordBatch/Table with the flow's columns (its
          buffers, no copy): interleaved into rows in C++, one cache-sized chunk at a time, each
          chunk handed to push_batch — no interleave pass over the whole batch, no Python work
          per row.
        Raises dfi.Error: invalid_argument naming the flow and the column that differs;
        peer_failed, flow_failed, timeout as the C++ push (then a part of `data` may have been
        pushed)."""
        for batch in _batches(self.name, self.dtype, data):
            self._native._push(batch)

    def flush(self):
        """Sends everything pushed so far without closing (GIL released)."""
        self._native.flush()

    def close(self):
        """Sends what is buffered and marks end of stream at the targets. Idempotent."""
        self._native.close()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.close()
        return False


class _TargetedSource(_Source):
    """A source that takes explicit targets: ShuffleSource, Producer (a shuffle pattern)."""

    def push_to(self, target, data):
        """Pushes rows (or columns, as push) to explicit targets (any routing; GIL released).
        `target` is a target index (every row to it: push_batch_to, one run) or a NumPy integer
        array with one target index per row: the rows are grouped by target in C++ (runs of one
        target pushed as they are, other chunks grouped in one pass, per target in order) and each
        group goes out with push_batch_to. Raises dfi.Error: invalid_argument for a target that
        does not exist (naming the row) or a targets array of another length; else as push."""
        if isinstance(target, (int, np.integer)):
            for batch in _batches(self.name, self.dtype, data):
                self._native._push_to(int(target), batch)
            return
        targets = np.ascontiguousarray(target)
        if targets.dtype.kind not in "iu" or targets.ndim != 1:
            raise _invalid(f"flow '{self.name}': push_to takes a target index or a one-dimensional "
                           f"integer array of them, not {targets.dtype} of shape {targets.shape}")
        if _is_arrow(data) and type(data).__name__ == "Table":
            data = data.combine_chunks().to_batches()[0] if data.num_rows else np.empty(0, self.dtype)
        (batch,) = _batches(self.name, self.dtype, data)
        self._native._push_routed(targets, targets.dtype.kind == "i", batch)


class ShuffleSource(_TargetedSource):
    """Source `thread` of this rank in shuffle flow `name` (flow::ShuffleSource); opening waits
    for the flow and its targets (up to open_timeout_ms, 0: the registry timeout)."""

    def __init__(self, node, name, thread=0, open_timeout_ms=0):
        super().__init__(_dfi._ShuffleSource(node, name, thread, open_timeout_ms))

    @property
    def target_count(self):
        return self._native.target_count


class ReplicateSource(_Source):
    """Source `thread` of this rank in replicate flow `name` (flow::ReplicateSource)."""

    def __init__(self, node, name, thread=0, open_timeout_ms=0):
        super().__init__(_dfi._ReplicateSource(node, name, thread, open_timeout_ms))


class CombinerSource(_Source):
    """Source `thread` of this rank in combiner flow `name` (flow::CombinerSource)."""

    def __init__(self, node, name, thread=0, open_timeout_ms=0):
        super().__init__(_dfi._CombinerSource(node, name, thread, open_timeout_ms))


class _Target:
    """What every target has: consume (a NumPy view, or a copy), consume_arrow, iteration."""

    def __init__(self, native):
        self._native = native
        self.name = native.name
        self.dtype = flow_dtype(native._layout)  # of the rows consume hands out
        self._empty = np.empty(0, self.dtype)
        self._empty.flags.writeable = False

    def consume(self, timeout_ms=0, copy=False):
        """Waits (GIL released) for the next batch and returns its rows as a read-only NumPy array
        of self.dtype, or None once every source closed. The array is a view into the flow's
        ring, valid until the next consume on this target: keep rows longer with copy=True (or
        array.copy()). Raises dfi.Error: timeout (nothing within timeout_ms; 0: the flow's stall
        timeout), peer_failed (a source died before closing), flow_failed (every call after it);
        replicate flows also gap (ordered: numbers that will never arrive; call again)."""
        raw = self._native._consume(timeout_ms)
        if raw is None:
            return None
        rows = raw.view(self.dtype)
        return rows.copy() if copy else rows

    def consume_into(self, out, timeout_ms=0):
        """Copies the next rows into `out` (a writable, one-dimensional, contiguous array of
        self.dtype) and returns how many: it waits (GIL released) for the first batch, then takes
        the batches that are already there, as many rows as fit, in one call — the cheapest way
        to collect a flow into one NumPy array (no Python work per batch). Rows of a batch that
        do not fit come first in the next call (or consume()). Returns 0 only once every source
        closed. Raises dfi.Error as consume (an error after some rows were copied is raised by
        the next call), invalid_argument for an array of another dtype or without room."""
        if not (type(out) is np.ndarray and out.dtype == self.dtype and out.ndim == 1
                and out.flags.c_contiguous and out.flags.writeable and len(out)):
            _check_array(self.name, self.dtype, out)  # raises naming what differs
            raise _invalid(f"flow '{self.name}': consume_into needs a writable array with room "
                           "for at least one row")
        return self._native._consume_into(out, timeout_ms)

    def consume_columns(self, out, timeout_ms=0):
        """consume_into for columns: copies the next rows into the arrays of `out`, a dict
        {column name: writable 1-D array of the column's dtype, any stride, all of one length}
        (columns left out are not copied), and returns how many rows — the same calls and
        semantics as consume_into, the rows taken apart in C++ straight from the flow's ring."""
        columns = _numpy_columns(self.name, self.dtype, out, writable=True, partial=True)
        return self._native._consume_columns(columns, timeout_ms)

    def try_consume(self):
        """As consume, but never waits (shuffle targets and driven consumers): the next batch's
        view, an empty array when nothing has arrived yet, or None once every source closed."""
        if not hasattr(self._native, "_try_consume"):
            raise _invalid(f"flow '{self.name}': {type(self).__name__} has no try_consume")
        raw = self._native._try_consume()
        if raw is False:
            return self._empty
        return None if raw is None else raw.view(self.dtype)

    def consume_arrow(self, timeout_ms=0):
        """The next batch as a pyarrow.RecordBatch (a copy: Arrow is columnar), or None at the
        end."""
        rows = self.consume(timeout_ms)
        return None if rows is None else _rows_to_arrow(self.dtype, rows)

    @property
    def end(self):
        return self._native.end

    def __iter__(self):
        """Yields each batch's view (valid until the next one) until every source closed."""
        while (rows := self.consume()) is not None:
            yield rows


class ShuffleTarget(_Target):
    """Target `id` of this rank in shuffle flow `name` (flow::ShuffleTarget)."""

    def __init__(self, node, name, id=0, open_timeout_ms=0):
        super().__init__(_dfi._ShuffleTarget(node, name, id, open_timeout_ms))


class ReplicateTarget(_Target):
    """Target `id` of this rank in replicate flow `name` (flow::ReplicateTarget). A relaying
    target must keep consuming until the end, or its subtree stalls."""

    def __init__(self, node, name, id=0, open_timeout_ms=0):
        super().__init__(_dfi._ReplicateTarget(node, name, id, open_timeout_ms))


class CombinerTarget(_Target):
    """The target of combiner flow `name` (flow::CombinerTarget): consume hands out the result
    rows (key, then one column per aggregate: sum_c, count, min_c, max_c, avg_c) once every
    source closed."""

    def __init__(self, node, name, id=0, open_timeout_ms=0):
        super().__init__(_dfi._CombinerTarget(node, name, id, open_timeout_ms))


class Producer(_TargetedSource):
    """Producer `thread` of this rank in driven flow `name` (driven::Producer): pushes into rings
    in its own memory, which a Mover drains; no fabric call on this thread. push and push_to
    take what ShuffleSource's take (rows, columns, Arrow; a target or an array of them for an
    explicit-routing shuffle pattern); the producer's rings take tuples one by one (in C++, GIL
    released). push waits while a ring is full. close() returns once the mover took everything.
    Opening does not wait for the mover or the consumers."""

    def __init__(self, node, name, thread=0, open_timeout_ms=0):
        super().__init__(_dfi._Producer(node, name, thread, open_timeout_ms))

    @property
    def ring_count(self):
        """Rings this producer writes: the consumers of a shuffle-pattern flow, else 1."""
        return self._native.ring_count


class Consumer(_Target):
    """Consumer `id` of this rank in driven flow `name` (driven::Consumer): consume,
    consume_into, consume_columns, try_consume and iteration as a ShuffleTarget; batch views
    point into the consumer's ring, which the mover fills."""

    def __init__(self, node, name, id=0, open_timeout_ms=0):
        super().__init__(_dfi._Consumer(node, name, id, open_timeout_ms))

    def leave(self):
        """Balance flows: asks the mover to stop serving this consumer; keep consuming to the end."""
        self._native.leave()


class Mover:
    """The data mover of driven flows (driven::Mover), on this rank and thread (it owns a fabric
    worker):

        mover = dfi.Mover(node)
        mover.add_flow("orders")      # waits for every producer's and consumer's buffers
        mover.run(60_000)             # until every flow ended (GIL released)
    """

    def __init__(self, node):
        self._native = _dfi._Mover(node)

    def add_flow(self, name, timeout_ms=0):
        """Takes over driven flow `name` (GIL released while it waits for the buffers)."""
        self._native.add_flow(name, timeout_ms)

    def run(self, timeout_ms):
        """Moves until every flow ended (GIL released). Raises dfi.Error: timeout (naming what is
        still open), peer_failed (a PU died)."""
        self._native.run(timeout_ms)

    def step(self):
        """One pass over every flow; returns the payload bytes moved."""
        return self._native.step()

    @property
    def done(self):
        return self._native.done

    @property
    def counters(self):
        """{'segments', 'bytes', 'idle_steps', 'retries'} over all flows."""
        return dict(zip(("segments", "bytes", "idle_steps", "retries"), self._native._counters()))
