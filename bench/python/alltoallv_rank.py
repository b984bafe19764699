"""The mpi4py peer of `dfi bench python` (src/tools/bench/python_bench.cpp), started by mpirun:
the same rows as shuffle_rank.py (ROWS 16-byte rows per rank, uint64 key, float64 value; rank r's
keys r*ROWS .. (r+1)*ROWS - 1) shuffled by key with MPI_Alltoallv, the way a NumPy user does it:
hash the key column to a target per row (vectorized), group the rows by target (a stable
argsort of the uint8 targets, NumPy's radix sort, and np.take into a preallocated send array),
exchange the counts with Alltoall and the rows with one Alltoallv of bytes into a preallocated
receive array. The rank's time: from a barrier to the end of its Alltoallv; rank 0 prints the
slowest rank's time (and the slowest rank's NumPy partitioning before the exchange) with the counts and key sums (Allreduce) as one JSON line.

    mpirun -np N python alltoallv_rank.py '{"rows": 1000000}'
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rows = json.loads(sys.argv[1])["rows"]
row = np.dtype([("key", "u8"), ("value", "f8")], align=True)
data = np.empty(rows, row)
data["key"] = np.arange(rank * rows, (rank + 1) * rows, dtype=np.uint64)
data["value"] = data["key"]
capacity = rows + rows // 4 + 4096
send = np.zeros(rows, row)  # both touched before the clock, as the DFI sides' arrays
out = np.zeros(capacity, row)
counts_in = np.empty(size, np.int64)
width = row.itemsize

comm.Barrier()
start = time.perf_counter()
targets = ((data["key"] * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(size)
targets = targets.astype(np.uint8)
order = np.argsort(targets, kind="stable")
np.take(data, order, out=send)
partitioned = time.perf_counter()
counts = np.bincount(targets, minlength=size).astype(np.int64)
comm.Alltoall(counts, counts_in)
if counts_in.sum() > capacity:
    raise AssertionError(f"rank {rank}: {counts_in.sum()} rows arrive, room for {capacity}")
send_displs = np.concatenate(([0], np.cumsum(counts)[:-1])) * width
recv_displs = np.concatenate(([0], np.cumsum(counts_in)[:-1])) * width
comm.Alltoallv([send.view(np.uint8), counts * width, send_displs, MPI.BYTE],
               [out.view(np.uint8), counts_in * width, recv_displs, MPI.BYTE])
seconds = time.perf_counter() - start

received = int(counts_in.sum())
local = np.array([rows, int(data["key"].sum(dtype=np.uint64)), received,
                  int(out["key"][:received].sum(dtype=np.uint64))], dtype=np.uint64)
totals = np.zeros(4, np.uint64)
comm.Allreduce(local, totals, op=MPI.SUM)
slowest = comm.allreduce(seconds, op=MPI.MAX)
partition = comm.allreduce(partitioned - start, op=MPI.MAX)
if rank == 0:
    print(json.dumps({"program": "mpi4py_alltoallv", "ranks": size, "rows_per_rank": rows,
                      "sent_tuples": int(totals[0]), "sent_key_sum": int(totals[1]),
                      "received_tuples": int(totals[2]), "received_key_sum": int(totals[3]),
                      "seconds": slowest, "partition_seconds": partition, "mpi": MPI.Get_library_version().splitlines()[0]}),
          flush=True)
