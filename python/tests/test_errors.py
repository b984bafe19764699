import re

import pytest

from conftest import run_cluster


def test_dfi_errors_become_exceptions_with_code_and_message():
    run = run_cluster("errors.py", nodes=1)
    assert run.code == 0, run.all()
    lines = {m.group(1): (m.group(2), m.group(3))
             for m in re.finditer(r"ok (\S+): (\w+): (.*)", run.out)}
    expected = {
        "bad-key": ("invalid_argument", ["flow 'e-bad-0'", "nokey"]),
        "bad-type": ("invalid_argument", ["flow 'e-type-0'", "broadcast"]),
        "bad-dtype": ("invalid_argument", ["flow 'e-dt-0'", "column 'c'", "complex128"]),
        "exists": ("already_exists", ["e-0"]),
        "no-flow": ("not_found", ["nosuchflow"]),
        "no-source": ("invalid_argument", ["e-0"]),
        "wrong-flow-type": ("invalid_argument", ["e-0"]),
        "column-type": ("invalid_argument", ["flow 'e-0'", "column 'value'", "float64", "float32"]),
        "column-offset": ("invalid_argument", ["flow 'e-0'", "column 'key'", "byte 0"]),
        "column-missing": ("invalid_argument", ["flow 'e-0'", "column 'value' is missing"]),
        "column-extra": ("invalid_argument", ["flow 'e-0'", "field 'x'"]),
        "not-contiguous": ("invalid_argument", ["flow 'e-0'", "contiguous"]),
        "not-structured": ("invalid_argument", ["flow 'e-0'", "no fields"]),
        "into-readonly": ("invalid_argument", ["flow 'e-0'", "writable"]),
        "into-dtype": ("invalid_argument", ["flow 'e-0'", "column 'value'", "int64"]),
        "timeout": ("timeout", ["e-0"]),
    }
    for name, (code, parts) in expected.items():
        assert name in lines, f"check {name} did not run\n{run.all()}"
        assert lines[name][0] == code, (name, lines[name])
        for part in parts:
            assert part in lines[name][1], (name, part, lines[name])
    assert "ok errors-done" in run.out, run.all()


def test_killed_peer_raises_peer_failed_within_two_seconds(transport):
    run = run_cluster("kill_peer.py", transport=transport, grace=15)
    assert run.code != 0, "rank 1 was killed, so the cluster run must fail\n" + run.all()
    found = re.search(r"peer_failed after (\d+\.\d+) s", run.out)
    assert found, run.all()
    assert float(found.group(1)) < 2.0, run.all()
    assert "then flow_failed in 0.0" in run.out, run.all()


def test_node_outside_a_cluster_raises_invalid_argument():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DFI_", "OMPI_", "PMIX_", "SLURM_"))}
    code = ("import dfi\ntry:\n    dfi.Node()\nexcept dfi.Error as e:\n"
            "    print(e.code.name, '|', e.message)\n")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("invalid_argument | cannot determine rank"), run.stdout
