"""The batch path from NumPy and Arrow on N ranks, every rank a source and a target of two flows:

  py-cols    key-hash shuffle pushed as columns: a dict of strided columns (fields of a structured
             array), a dict of contiguous columns, an Arrow RecordBatch; consumed with
             consume_columns into 1000-row column arrays, alternating with try_consume. Each
             target checks every row against its key; rank 0 checks exactly once overall.
  py-routed  explicit-routing shuffle pushed with push_to(array of targets): rows with scattered
             targets (grouped in C++), then columns with targets in long runs (pushed run by
             run); consumed with consume_into. Each target checks that it got exactly the rows
             addressed to it, every column equal to the structured arrays' and the padding bytes
             zero, each source's rows in the order pushed.

Then errors: a target out of range (naming the row), a targets array of another length, a column
of another dtype.

    batch_numpy.py ROWS
"""
import os
import sys
import threading
import traceback

import numpy as np
import pyarrow as pa

import dfi
from totals import publish_received, total_received

rows = int(sys.argv[1])
node = dfi.Node()
ranks = list(range(node.size))
n = node.size
row = np.dtype([("key", "u8"), ("value", "f8"), ("tag", "S4"), ("small", "i2")], align=True)
if node.rank == 0:
    for name, routing in (("py-cols", "key_hash"), ("py-routed", "explicit")):
        dfi.create_flow(node, name, sources=[(r, 0) for r in ranks], targets=[(r, 0) for r in ranks],
                        schema=row, key="key", routing=routing)


def rows_of(rank):
    """Rank `rank`'s rows (zeroed first: padding bytes are zero, as the columnar path writes)."""
    keys = np.arange(rank * rows, (rank + 1) * rows, dtype=np.uint64)
    data = np.zeros(rows, row)
    data["key"] = keys
    data["value"] = keys * 0.5
    data["tag"] = np.char.add(b"t", (keys % 100).astype("S3"))
    data["small"] = (keys % 1000).astype(np.int16)
    return data


def target_of(keys):
    return ((keys * np.uint64(2654435761)) >> np.uint64(7)) % np.uint64(n)


data = rows_of(node.rank)
targets = target_of(data["key"]).astype(np.uint8)
errors = []
checks = []


def push():
    try:
        third, half = rows // 3, rows // 2
        with dfi.ShuffleSource(node, "py-cols", thread=0) as source:
            source.push({name: data[name][:third] for name in row.names})  # strided columns
            source.push({name: np.ascontiguousarray(data[name][third:2 * third]) for name in row.names})
            rest = data[2 * third:]
            source.push(pa.RecordBatch.from_arrays(
                [pa.array(rest["key"]), pa.array(rest["value"]),
                 pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(rest), [
                     None, pa.py_buffer(np.ascontiguousarray(rest["tag"]).tobytes())]),
                 pa.array(rest["small"])],
                names=list(row.names)))
        with dfi.ShuffleSource(node, "py-routed", thread=0) as source:
            source.push_to(targets[:half], data[:half])  # scattered targets: grouped in C++
            later = data[half:]
            order = np.argsort(targets[half:], kind="stable")  # long runs, per target in order
            source.push_to(targets[half:][order].astype(np.int64),
                           {name: later[name][order] for name in row.names})
            for check, call in (
                    ("target-range", lambda: source.push_to(np.array([0, n], np.int32), data[:2])),
                    ("targets-length", lambda: source.push_to(targets[:3], data[:2])),
                    ("column-dtype", lambda: source.push(
                        {"key": data["key"].astype(np.int64), "value": data["value"],
                         "tag": data["tag"], "small": data["small"]}))):
                try:
                    call()
                    errors.append(AssertionError(f"{check}: no error"))
                except dfi.Error as e:
                    checks.append(f"ok {check}: {e.code.name}: {e.message}")
    except Exception:  # the targets would wait for this source: end the rank at once
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)


sender = threading.Thread(target=push)
sender.start()

# py-cols: consume_columns into 1000-row column arrays, alternating with try_consume.
cols = dfi.ShuffleTarget(node, "py-cols", id=0)
out = {name: np.empty(1000, row.fields[name][0]) for name in row.names}
received = []
polls = 0
while True:
    count = cols.consume_columns(out)
    if count == 0:
        break
    got = np.zeros(count, row)
    for name in row.names:
        got[name] = out[name][:count]
    received.append(got)
    batch = cols.try_consume()
    while batch is not None and len(batch) == 0 and polls < 1000:  # nothing there yet
        polls += 1
        batch = cols.try_consume()
    if batch is None:
        break
    received.append(batch.copy())
assert cols.consume_columns(out) == 0 and cols.end
got = np.concatenate(received) if received else np.zeros(0, row)
want = np.zeros(len(got), row)
want["key"] = got["key"]
want["value"] = got["key"] * 0.5
want["tag"] = np.char.add(b"t", (got["key"] % 100).astype("S3"))
want["small"] = (got["key"] % 1000).astype(np.int16)
# Field by field: NumPy's concatenate leaves padding bytes undefined (py-routed checks the bytes).
assert all(np.array_equal(got[name], want[name]) for name in row.names), \
    "py-cols: a row does not belong to its key"
assert len(np.unique(got["key"])) == len(got), "py-cols: a key arrived twice at this target"
publish_received(node, "py-cols", len(got), int(got["key"].sum(dtype=np.uint64)))

# py-routed: consume_into one array; exactly the rows addressed here, byte for byte, in order.
routed = dfi.ShuffleTarget(node, "py-routed", id=0)
into = np.empty(rows * n, row)
at = 0
while count := routed.consume_into(into[at:]):
    at += count
assert routed.consume() is None
got = into[:at]
# Byte for byte: the padding bytes of the rows as they came out of the flow are zero (both the
# row path, from np.zeros arrays, and the columnar path write zeros there) ...
covered = np.zeros(row.itemsize, bool)
for name in row.names:
    field, offset = row.fields[name][:2]
    covered[offset:offset + field.itemsize] = True
assert not got.view(np.uint8).reshape(at, row.itemsize)[:, ~covered].any(), "py-routed: padding not zero"
# ... and every column equals the pushed rows' (compared field by field: NumPy's copies below
# leave padding bytes undefined).
for source in ranks:
    theirs = rows_of(source)
    expected = theirs[target_of(theirs["key"]) == node.rank]
    mine = got[got["key"] // np.uint64(rows) == source]
    assert len(mine) == len(expected) and all(np.array_equal(mine[name], expected[name]) for name in row.names), \
        f"py-routed: rows from rank {source}: not exactly those addressed here, in order"
print(f"rank {node.rank} py-routed: {at} rows, exactly those addressed here, in order, byte for byte",
      flush=True)
sender.join()
if errors:
    raise errors[0]
for line in checks:
    print(line, flush=True)
if node.rank == 0:
    count, total = total_received(node, "py-cols")
    sent = rows * n
    expected = sent * (sent - 1) // 2
    print(f"py-cols: {count} of {sent} rows, key sum {total} of {expected}: "
          f"{'exactly once' if (count, total) == (sent, expected) else 'MISMATCH'}", flush=True)
node.finish()
