"""N:N key shuffle from NumPy: every rank pushes ROWS rows (key = rank * ROWS + i, value = a
function of the key) from a source thread while its main thread consumes its target; each target
checks every row's value and that no key came twice or to the wrong target; rank 0 checks that
the counts and key sums of all targets add up to what was pushed: every row exactly once.

    shuffle_numpy.py ROWS [CHUNK]
"""
import sys
import threading

import numpy as np

import dfi
from totals import publish_received, total_received

rows, chunk = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 65536
node = dfi.Node()
ranks = list(range(node.size))
row = np.dtype([("key", "u8"), ("value", "f8"), ("tag", "S4"), ("small", "i2")], align=True)
if node.rank == 0:
    dfi.create_flow(node, "py-shuffle", sources=[(r, 0) for r in ranks],
                    targets=[(r, 0) for r in ranks], schema=row, key="key")

keys = np.arange(node.rank * rows, (node.rank + 1) * rows, dtype=np.uint64)
data = np.empty(rows, row)
data["key"] = keys
data["value"] = keys * 0.5
data["tag"] = b"py"
data["small"] = (keys % 1000).astype(np.int16)
errors = []


def push():
    try:
        with dfi.ShuffleSource(node, "py-shuffle", thread=0) as source:
            assert source.dtype == row, (source.dtype, row)
            for start in range(0, rows, chunk):
                source.push(data[start:start + chunk])  # contiguous slices: no copy
    except Exception as e:  # reported by the main thread
        errors.append(e)


sender = threading.Thread(target=push)
sender.start()
target = dfi.ShuffleTarget(node, "py-shuffle", id=0)
received = []
# Alternately a view of a batch (kept as a copy: it is valid until the next consume) and
# consume_into a 700-row array, which cuts batches (the rest comes first next time).
into = np.empty(700, row)
while True:
    batch = target.consume()
    if batch is None:
        break
    assert not batch.flags.writeable
    received.append(batch.copy())
    n = target.consume_into(into)
    if n == 0:
        break
    received.append(into[:n].copy())
assert target.consume() is None and target.consume_into(into) == 0 and target.end
sender.join()
if errors:
    raise errors[0]
got = np.concatenate(received) if received else np.empty(0, row)
assert np.all(got["value"] == got["key"] * 0.5), "a value does not belong to its key"
assert np.all(got["tag"] == b"py") and np.all(got["small"] == (got["key"] % 1000).astype(np.int16))
assert len(np.unique(got["key"])) == len(got), "a key arrived twice at this target"
publish_received(node, "py-shuffle", len(got), int(got["key"].sum(dtype=np.uint64)))
if node.rank == 0:
    count, total = total_received(node, "py-shuffle")
    sent = rows * node.size
    expected = sent * (sent - 1) // 2
    print(f"py-shuffle: {count} of {sent} rows, key sum {total} of {expected}: "
          f"{'exactly once' if (count, total) == (sent, expected) else 'MISMATCH'}")
node.finish()
