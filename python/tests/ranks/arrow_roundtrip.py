"""Arrow round trip: each rank pushes an Arrow RecordBatch (int64 key, float64 value,
fixed_size_binary(4) tag, int32 small) into a 2:2 shuffle and consumes pyarrow RecordBatches;
every target checks each row against its key, rank 0 that all rows arrived exactly once. Then a
one-column flow, whose Arrow column is pushed without a copy, and a record batch whose types do
not match the flow (an error naming flow and column)."""
import threading

import numpy as np
import pyarrow as pa

import dfi
from totals import publish_received, total_received

ROWS = 50000
node = dfi.Node()
ranks = list(range(node.size))
row = np.dtype([("key", "i8"), ("value", "f8"), ("tag", "S4"), ("small", "i4")], align=True)
if node.rank == 0:
    dfi.create_flow(node, "py-arrow", sources=[(r, 0) for r in ranks],
                    targets=[(r, 0) for r in ranks], schema=row, key="key")
    dfi.create_flow(node, "py-arrow-1col", sources=[(r, 0) for r in ranks], targets=[(0, 0)],
                    schema=[("key", "i8")], key="key")

keys = np.arange(node.rank * ROWS, (node.rank + 1) * ROWS, dtype=np.int64)
batch = pa.RecordBatch.from_arrays(
    [pa.array(keys), pa.array(keys * 0.25),
     pa.array([b"ar%02d" % (k % 100) for k in keys.tolist()], pa.binary(4)),
     pa.array((keys % 7).astype(np.int32))],
    names=["key", "value", "tag", "small"])
errors = []


def push():
    try:
        with dfi.ShuffleSource(node, "py-arrow", 0) as source:
            try:
                source.push(batch.set_column(1, "value", pa.array(keys.astype(np.float32))))
                errors.append(AssertionError("a float32 column was accepted for a float64 one"))
            except dfi.Error as e:
                assert e.code == dfi.Errc.invalid_argument and "flow 'py-arrow'" in e.message \
                    and "column 'value'" in e.message, e.message
                print(f"ok arrow-mismatch: {e.message}", flush=True)
            source.push(batch.slice(0, ROWS // 2))
            source.push(pa.Table.from_batches([batch.slice(ROWS // 2)]))
        with dfi.ShuffleSource(node, "py-arrow-1col", 0) as source:
            source.push(pa.RecordBatch.from_arrays([pa.array(keys)], names=["key"]))
    except Exception as e:
        errors.append(e)


sender = threading.Thread(target=push)
sender.start()
target = dfi.ShuffleTarget(node, "py-arrow", 0)
parts = []
while (got := target.consume_arrow()) is not None:
    parts.append(got)
single = dfi.ShuffleTarget(node, "py-arrow-1col", 0) if node.rank == 0 else None
single_keys = []
if single is not None:
    while (got := single.consume_arrow()) is not None:
        single_keys.append(got.column(0).to_numpy())
sender.join()
if errors:
    raise errors[0]
table = pa.Table.from_batches(parts, schema=batch.schema) if parts else batch.schema.empty_table()
assert table.schema == batch.schema, table.schema
k = table.column("key").to_numpy()
assert np.all(table.column("value").to_numpy() == k * 0.25)
assert table.column("tag").to_pylist() == [b"ar%02d" % (x % 100) for x in k.tolist()]
assert np.all(table.column("small").to_numpy() == k % 7)
assert len(np.unique(k)) == len(k)
publish_received(node, "py-arrow", len(k), int(k.sum()))
if node.rank == 0:
    count, total = total_received(node, "py-arrow")
    sent = ROWS * node.size
    single_all = np.sort(np.concatenate(single_keys))
    print(f"py-arrow: {count} of {sent} rows, key sum {total} of {sent * (sent - 1) // 2}; "
          f"one column: {'exactly once' if np.array_equal(single_all, np.arange(sent)) else 'MISMATCH'}")
node.finish()
