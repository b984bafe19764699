"""A driven (network-driven) key-hash shuffle from Python on N ranks: every rank has a producer
and a consumer; rank 0 also runs the mover in a thread of its own. Producers push half their rows
as a structured array and half as columns (a dict), then close (returning once the mover took
everything); consumers collect with consume_into and try_consume. Each consumer checks every row
against its key and that no key came twice; rank 0 checks exactly once overall and prints what
the mover moved. Then an explicit-routing driven flow pushed with an array of targets.

    driven.py ROWS
"""
import os
import sys
import threading
import traceback

import numpy as np

import dfi
from totals import publish_received, total_received

rows = int(sys.argv[1])
node = dfi.Node()
ranks = list(range(node.size))
row = np.dtype([("key", "i8"), ("value", "f8"), ("small", "i4")], align=True)
if node.rank == 0:
    dfi.create_flow(node, "py-driven", type="driven", sources=[(r, 0) for r in ranks],
                    targets=[(r, 0) for r in ranks], schema=row, key="key")
    dfi.create_flow(node, "py-driven-to", type="driven", routing="explicit",
                    sources=[(r, 0) for r in ranks], targets=[(r, 0) for r in ranks], schema=row)

keys = np.arange(node.rank * rows, (node.rank + 1) * rows, dtype=np.int64)
data = np.zeros(rows, row)
data["key"] = keys
data["value"] = keys * 0.25
data["small"] = keys % 977
moved = {}


def fail_fast(work):
    def run():
        try:
            work()
        except Exception:  # the other side would wait for this thread: end the rank at once
            traceback.print_exc()
            sys.stdout.flush()
            os._exit(1)
    return threading.Thread(target=run)


def mover():
    m = dfi.Mover(node)
    m.add_flow("py-driven")
    m.add_flow("py-driven-to")
    m.run(120_000)
    moved.update(m.counters)


def produce():
    # Both producers open first: the mover takes a flow once all its buffers are there.
    with dfi.Producer(node, "py-driven", thread=0) as producer, \
            dfi.Producer(node, "py-driven-to", thread=0) as producer_to:
        assert producer.ring_count == node.size
        half = rows // 2
        producer.push(data[:half])
        producer.push({name: data[name][half:] for name in row.names})
        producer.close()
        producer_to.push_to(keys % node.size, data)  # row with key k to consumer k % size


threads = ([fail_fast(mover)] if node.rank == 0 else []) + [fail_fast(produce)]
for t in threads:
    t.start()
consumer = dfi.Consumer(node, "py-driven", id=0)
explicit = dfi.Consumer(node, "py-driven-to", id=0)
into = np.empty(rows * node.size, row)
at = 0
while True:
    count = consumer.consume_into(into[at:])
    if count == 0:
        break
    at += count
    batch = consumer.try_consume()  # a batch that is there already, or an empty array
    if batch is None:
        break
    into[at:at + len(batch)] = batch
    at += len(batch)
assert consumer.end
got = into[:at]
assert np.all(got["value"] == got["key"] * 0.25) and np.all(got["small"] == got["key"] % 977), \
    "a row does not belong to its key"
assert len(np.unique(got["key"])) == len(got), "a key arrived twice"
publish_received(node, "py-driven", len(got), int(got["key"].sum()))

out = {"key": np.empty(rows * node.size, np.int64)}  # only the key column is copied
count = 0
while n := explicit.consume_columns({"key": out["key"][count:]}):
    count += n
mine = np.sort(out["key"][:count])
want = np.sort(np.concatenate([np.arange(r * rows, (r + 1) * rows) for r in ranks]))
want = want[want % node.size == node.rank]
assert np.array_equal(mine, want), "driven push_to: not exactly the rows addressed here"
print(f"rank {node.rank} driven push_to: {count} rows, each where it was sent", flush=True)
for t in threads:
    t.join()
if node.rank == 0:
    total_rows, total = total_received(node, "py-driven")
    sent = rows * node.size
    expected = sent * (sent - 1) // 2
    print(f"py-driven: {total_rows} of {sent} rows, key sum {total} of {expected}: "
          f"{'exactly once' if (total_rows, total) == (sent, expected) else 'MISMATCH'}; "
          f"mover moved {moved['bytes']} bytes", flush=True)
node.finish()
