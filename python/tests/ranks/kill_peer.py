"""A source killed mid-flow: rank 1 pushes and flushes, publishes the time, kills itself with
SIGKILL; rank 0's consume must raise dfi.Error(peer_failed) naming rank 1, and the next consume
flow_failed at once. Rank 0 prints how long after the kill the error came."""
import os
import signal
import time

import numpy as np

import dfi

node = dfi.Node()
row = np.dtype([("key", "i8"), ("value", "i8")], align=True)
if node.rank == 0:
    dfi.create_flow(node, "py-kill", sources=[(1, 0)], targets=[(0, 0)], schema=row, key="key",
                    stall_timeout_ms=30000)
    target = dfi.ShuffleTarget(node, "py-kill", 0)
    rows = 0
    try:
        while (batch := target.consume()) is not None:
            rows += len(batch)
        raise AssertionError(f"the flow ended normally after {rows} rows")
    except dfi.Error as e:
        raised = time.time()
        assert e.code == dfi.Errc.peer_failed, f"{e.code!r}: {e}"
        assert "rank 1" in e.message, e.message
        killed = float(node.wait_for("py-kill/killed"))
        print(f"peer_failed after {raised - killed:.3f} s ({rows} rows before): {e.message}", flush=True)
    start = time.time()
    try:
        target.consume()
    except dfi.Error as e:
        assert e.code == dfi.Errc.flow_failed, f"{e.code!r}: {e}"
        print(f"then flow_failed in {time.time() - start:.3f} s: {e.message}", flush=True)
else:
    source = dfi.ShuffleSource(node, "py-kill", 0)
    source.push(np.zeros(10000, row))
    source.flush()
    time.sleep(0.3)
    node.publish("py-kill/killed", repr(time.time()))
    time.sleep(0.1)  # the record reaches the registry before the connection drops
    os.kill(os.getpid(), signal.SIGKILL)
