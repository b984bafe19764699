"""Runs rank scripts (python/tests/ranks/) on local clusters started by `dfi cluster run`, the
way users run Python ranks. The dfi binary comes from DFI_BIN (ctest sets it to the build's),
else from PATH; the ranks use this interpreter and inherit PYTHONPATH."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

RANKS = Path(__file__).parent / "ranks"


def dfi_binary():
    path = os.environ.get("DFI_BIN") or shutil.which("dfi")
    if not path:
        pytest.fail("no dfi binary: set DFI_BIN or put dfi on PATH")
    return path


class Run:
    def __init__(self, process):
        self.code = process.returncode
        self.out = process.stdout
        self.err = process.stderr

    def all(self):
        return f"--- exit {self.code}\n--- stdout\n{self.out}--- stderr\n{self.err}"


def run_cluster(script, *args, nodes=2, transport="shm", timeout=90, grace=3):
    """Runs ranks/<script> on `nodes` ranks over `transport`; returns its exit code and output."""
    command = [dfi_binary(), "cluster", "run", "--nodes", str(nodes), "--transport", transport,
               "--timeout", str(timeout), "--grace", str(grace), "--",
               sys.executable, str(RANKS / script), *map(str, args)]
    process = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30)
    return Run(process)


@pytest.fixture(params=["shm", "tcp"])
def transport(request):
    return request.param
