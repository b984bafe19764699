"""The Python side of `dfi bench python` (src/tools/bench/python_bench.cpp): an N:N key-hash
shuffle of ROWS 16-byte rows per rank (uint64 key, float64 value; rank r's keys r*ROWS ..
(r+1)*ROWS - 1, value = key) with the Python bindings, every rank a source and a target.

A source thread opens the flow's source, waits for the start, pushes its NumPy structured array
with one push() (handed to push_batch without a copy: hashed and scattered in C++) and closes; the
main thread opens the target, passes a barrier with every rank, starts the clock and collects the
rows into a preallocated NumPy array with consume_into (the batches that are there per call,
copied in C++ with the GIL released). The rank's time: from the barrier until its target saw the
end of the stream and its source closed. Count and key sum are computed after the clock stopped.
Each rank prints one result line (the bench marker + JSON), as the C++ rank program does.

    shuffle_rank.py '{"flow": "...", "rows": 1000000, "consume_timeout_ms": 60000}'
"""
import json
import sys
import threading
import time

import numpy as np

import dfi

MARKER = "DFI_BENCH_RESULT "
params = json.loads(sys.argv[1])
name, rows, timeout_ms = params["flow"], params["rows"], params["consume_timeout_ms"]
row = np.dtype([("key", "u8"), ("value", "f8")], align=True)
node = dfi.Node()
ranks = range(node.size)
if node.rank == 0:
    dfi.create_flow(node, name, sources=[(r, 0) for r in ranks], targets=[(r, 0) for r in ranks],
                    schema=row, key="key")
data = np.empty(rows, row)
data["key"] = np.arange(node.rank * rows, (node.rank + 1) * rows, dtype=np.uint64)
data["value"] = data["key"]
capacity = rows + rows // 4 + 4096  # key hashing spreads rows evenly: ~rows per target
out = np.empty(capacity, row)
out[:] = 0  # touched before the clock, as the C++ side's vector
ready, go = threading.Event(), threading.Event()
source_end = []
errors = []


def push():
    try:
        source = dfi.ShuffleSource(node, name, 0)  # belongs to this thread
        ready.set()
        go.wait()
        source.push(data)
        source.close()
        source_end.append(time.perf_counter())
    except Exception as e:
        errors.append(e)
        ready.set()


sender = threading.Thread(target=push)
sender.start()
target = dfi.ShuffleTarget(node, name, 0)
ready.wait()
node.barrier(name + "/start")
start = time.perf_counter()
go.set()
at = 0
while at < capacity and (n := target.consume_into(out[at:], timeout_ms)):
    at += n
if not target.end:
    raise AssertionError(f"more than the {capacity} rows this rank has room for arrived")
target_end = time.perf_counter()
sender.join()
if errors:
    raise errors[0]
seconds = max(target_end, source_end[0]) - start
keys = data["key"]
result = {"rank": node.rank, "sent_tuples": rows, "sent_key_sum": int(keys.sum(dtype=np.uint64)),
          "received_tuples": at, "received_key_sum": int(out["key"][:at].sum(dtype=np.uint64)),
          "seconds": seconds}
print(MARKER + json.dumps(result), flush=True)
node.finish()
