"""DFI errors as Python exceptions, on one or more ranks: each check prints 'ok <name>: <code>:
<message>' (the test compares codes and looks for the names the messages must contain)."""
import numpy as np

import dfi

node = dfi.Node()
row = np.dtype([("key", "i8"), ("value", "f8")], align=True)
mine = [(node.rank, 0)]


def expect(name, code, call):
    try:
        call()
    except dfi.Error as e:
        assert e.code == code, f"{name}: {e.code!r} instead of {code!r}: {e}"
        assert str(e) == e.message and e.message, name
        print(f"ok {name}: {e.code.name}: {e.message}", flush=True)
        return e
    raise AssertionError(f"{name}: no dfi.Error raised")


# Setup errors thrown by the C++ API (dfi::Error), code and message unchanged.
expect("bad-key", dfi.Errc.invalid_argument, lambda: dfi.create_flow(
    node, f"e-bad-{node.rank}", sources=mine, targets=mine, schema=row, key="nokey"))
expect("bad-type", dfi.Errc.invalid_argument, lambda: dfi.create_flow(
    node, f"e-type-{node.rank}", sources=mine, targets=mine, schema=row, type="broadcast"))
expect("bad-dtype", dfi.Errc.invalid_argument, lambda: dfi.create_flow(
    node, f"e-dt-{node.rank}", sources=mine, targets=mine, schema=[("key", "i8"), ("c", "c16")]))
flow = f"e-{node.rank}"
dfi.create_flow(node, flow, sources=mine, targets=mine, schema=row, key="key", stall_timeout_ms=200)
expect("exists", dfi.Errc.already_exists, lambda: dfi.create_flow(
    node, flow, sources=mine, targets=mine, schema=row, key="key"))
expect("no-flow", dfi.Errc.not_found, lambda: dfi.ShuffleTarget(node, "nosuchflow", 0, open_timeout_ms=300))
expect("no-source", dfi.Errc.invalid_argument, lambda: dfi.ShuffleSource(node, flow, thread=7))
expect("wrong-flow-type", dfi.Errc.invalid_argument, lambda: dfi.ReplicateTarget(node, flow, 0))

target = dfi.ShuffleTarget(node, flow, 0)
source = dfi.ShuffleSource(node, flow, 0)
# Arrays whose layout is not the flow's: named flow and column, nothing pushed.
expect("column-type", dfi.Errc.invalid_argument,
       lambda: source.push(np.zeros(4, [("key", "i8"), ("value", "f4")])))
expect("column-offset", dfi.Errc.invalid_argument,
       lambda: source.push(np.zeros(4, np.dtype([("value", "f8"), ("key", "i8")]))))
expect("column-missing", dfi.Errc.invalid_argument, lambda: source.push(np.zeros(4, [("key", "i8")])))
expect("column-extra", dfi.Errc.invalid_argument,
       lambda: source.push(np.zeros(4, [("key", "i8"), ("value", "f8"), ("x", "i1")])))
expect("not-contiguous", dfi.Errc.invalid_argument, lambda: source.push(np.zeros(8, row)[::2]))
expect("not-structured", dfi.Errc.invalid_argument, lambda: source.push(np.zeros(8)))
readonly = np.zeros(4, row)
readonly.flags.writeable = False
expect("into-readonly", dfi.Errc.invalid_argument, lambda: target.consume_into(readonly))
expect("into-dtype", dfi.Errc.invalid_argument,
       lambda: target.consume_into(np.zeros(4, [("key", "i8"), ("value", "i8")])))
# A data-path Status: nothing arrives within the timeout.
expect("timeout", dfi.Errc.timeout, lambda: target.consume(timeout_ms=100))
source.push(np.array([(1, 2.0), (3, 4.0)], row))
source.close()
batch = target.consume()
assert batch is not None and list(batch["key"]) == [1, 3], batch
assert target.consume() is None and target.end
print("ok errors-done", flush=True)
node.finish()
