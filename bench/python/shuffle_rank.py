"""The Python side of `dfi bench python` (src/tools/bench/python_bench.cpp): one 1:1 shuffle of
ROWS 16-byte rows (uint64 key, float64 value), rank 0 -> rank 1, with the Python bindings.
Rank 0 builds a NumPy structured array of the rows and pushes it with one push() (handed to
push_bulk without a copy), then closes; rank 1 collects the rows into a preallocated NumPy array
with consume_into (the batches that are there per call, copied in C++ with the GIL released). Both start at a common barrier; rank 1 times from the
barrier to the end of the stream and checks count and key sum after the clock stopped. Each rank
prints one result line (the bench marker + JSON), as the C++ rank program does.

    shuffle_rank.py '{"flow": "...", "rows": 1000000, "consume_timeout_ms": 60000}'
"""
import json
import sys
import time

import numpy as np

import dfi

MARKER = "DFI_BENCH_RESULT "
params = json.loads(sys.argv[1])
name, rows = params["flow"], params["rows"]
row = np.dtype([("key", "u8"), ("value", "f8")], align=True)
node = dfi.Node()
if node.rank == 0:
    dfi.create_flow(node, name, sources=[(0, 0)], targets=[(1, 0)], schema=row, key="key")
    data = np.empty(rows, row)
    data["key"] = np.arange(rows, dtype=np.uint64)
    data["value"] = data["key"]
    source = dfi.ShuffleSource(node, name, 0)
    node.barrier(name + "/start")
    start = time.perf_counter()
    source.push(data)
    source.close()
    seconds = time.perf_counter() - start
    result = {"rank": 0, "sent_tuples": rows, "sent_key_sum": rows * (rows - 1) // 2 % 2**64,
              "source_seconds": seconds}
else:
    target = dfi.ShuffleTarget(node, name, 0)
    out = np.empty(rows, row)
    node.barrier(name + "/start")
    start = time.perf_counter()
    at = 0
    while at < rows and (n := target.consume_into(out[at:], params["consume_timeout_ms"])):
        at += n
    if target.consume(params["consume_timeout_ms"]) is not None:
        raise AssertionError(f"more than the {rows} rows pushed arrived")
    seconds = time.perf_counter() - start
    result = {"rank": 1, "received_tuples": at,
              "received_key_sum": int(out["key"][:at].sum(dtype=np.uint64)), "seconds": seconds}
print(MARKER + json.dumps(result), flush=True)
node.finish()
