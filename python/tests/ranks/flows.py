"""Replicate, combiner, explicit routing and barrier from Python on 2 ranks: rank 0 replicates ROWS
rows to a target on each rank (each gets all of them, in order); both ranks push rows into a
combiner whose target on rank 0 checks sum/count/min/max/avg per key against NumPy; both push
row i to target i % 2 of an explicit-routing shuffle (push_to); a barrier runs three rounds."""
import threading

import numpy as np

import dfi

ROWS = 30000
node = dfi.Node()
ranks = list(range(node.size))
row = np.dtype([("key", "i4"), ("amount", "i8")], align=True)
if node.rank == 0:
    dfi.create_flow(node, "py-rep", type="replicate", sources=[(0, 0)],
                    targets=[(r, 0) for r in ranks], schema=row)
    dfi.create_flow(node, "py-comb", type="combiner", sources=[(r, 0) for r in ranks],
                    targets=[(0, 0)], schema=row, key="key",
                    aggregates="sum(amount),count(*),min(amount),max(amount),avg(amount)")
    dfi.create_barrier(node, "py-barrier", [(r, 0) for r in ranks])
    dfi.create_flow(node, "py-explicit", sources=[(r, 0) for r in ranks],
                    targets=[(r, 0) for r in ranks], schema=row, routing="explicit")

data = np.empty(ROWS, row)
data["key"] = np.arange(ROWS) % 97
data["amount"] = np.arange(ROWS) * (node.rank + 1)
errors = []


def sources():
    try:
        if node.rank == 0:
            with dfi.ReplicateSource(node, "py-rep", 0) as source:
                source.push(data)
        with dfi.CombinerSource(node, "py-comb", 0) as source:
            source.push(data[:ROWS // 2])
            source.push(data[ROWS // 2:])
        with dfi.ShuffleSource(node, "py-explicit", 0) as source:  # row i to target i % 2
            for t in range(source.target_count):
                source.push_to(t, np.ascontiguousarray(data[t::source.target_count]))
    except Exception as e:
        errors.append(e)


sender = threading.Thread(target=sources)
sender.start()
replicated = np.concatenate(list(map(np.copy, dfi.ReplicateTarget(node, "py-rep", 0))))
assert np.array_equal(replicated["amount"], np.arange(ROWS)), "replicate: not every row in order"
print(f"rank {node.rank} replicate: {len(replicated)} rows in order", flush=True)
if node.rank == 0:
    combiner = dfi.CombinerTarget(node, "py-comb")
    result = np.concatenate([b.copy() for b in combiner])
    assert result.dtype.names == ("key", "sum_amount", "count", "min_amount", "max_amount",
                                  "avg_amount"), result.dtype
    result.sort(order="key")
    keys = np.arange(ROWS) % 97
    amounts = np.concatenate([np.arange(ROWS) * (r + 1) for r in ranks])
    all_keys = np.concatenate([keys] * len(ranks))
    for k, s, c, lo, hi, avg in result.tolist():
        mine = amounts[all_keys == k]
        assert (s, c, lo, hi) == (mine.sum(), len(mine), mine.min(), mine.max()), k
        assert abs(avg - mine.mean()) < 1e-9 * max(1, abs(avg)), k
    print(f"combiner: {len(result)} groups match NumPy", flush=True)
explicit = np.concatenate([b.copy() for b in dfi.ShuffleTarget(node, "py-explicit", 0)])
# Every rank sent its rows node.rank, node.rank + 2, ... here (amount = row * (sender + 1)).
got = np.sort(explicit["amount"])
want = np.sort(np.concatenate([np.arange(node.rank, ROWS, len(ranks)) * (r + 1) for r in ranks]))
assert np.array_equal(got, want), "push_to: not exactly the rows addressed to this target"
print(f"rank {node.rank} push_to: {len(explicit)} rows, each where it was sent", flush=True)
sender.join()
if errors:
    raise errors[0]
barrier = dfi.Barrier(node, "py-barrier", 0)
for _ in range(3):
    barrier.wait()
print(f"rank {node.rank} barrier: {barrier.rounds} rounds", flush=True)
del barrier  # leaves before the node finishes
node.finish()
