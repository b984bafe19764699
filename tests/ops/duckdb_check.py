#!/usr/bin/env python3
"""DFI's joins and aggregations cross-checked against DuckDB on small generated data (issue 11).

Usage: duckdb_check.py DFI_BINARY

For each transport (shm, tcp) it runs on a 4-rank `dfi cluster run`:
  - `dfi join --dump DIR` with the radix, grace, grace + Bloom and rrj algorithms (duplicate keys,
    probe keys without partners), and has DuckDB join DIR/build.csv with DIR/probe.csv: the
    multiset of (build payload, probe payload) pairs must equal the pairs DFI's join threads
    found (DIR/pairs-*.csv), the match count DFI's result; with the Bloom filter, every probe tuple
    with a partner must have been shipped (no false negatives) and at most all of them;
  - `dfi agg --dump DIR` with the rdma and hierarchical algorithms, and has DuckDB compute
    SUM/COUNT/MIN/MAX/AVG of value by key over DIR/input.csv: every group must equal DFI's
    (DIR/groups-*.csv), AVG to 1e-12 relative, the group count DFI's result.
DFI's own reference check (--verify yes) runs too. Exit status 0: all agree; 1: a difference
(printed); 77: DuckDB is not installed in this interpreter (the test is skipped, saying why).
"""
import pathlib
import subprocess
import sys
import tempfile

try:
    import duckdb
except ImportError:
    print("duckdb check not run: this Python has no duckdb module "
          "(python/requirements-dev.txt; scripts/dev installs it into build/venv)")
    sys.exit(77)

RANKS = 4
failures = []


def fail(what):
    print("FAILED: " + what)
    failures.append(what)


def cluster(dfi, transport, args):
    command = [dfi, "cluster", "run", "--nodes", str(RANKS), "--transport", transport, "--timeout", "120",
               "--", dfi, *args]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        fail(" ".join(command) + " exited with " + str(run.returncode) + "\n" + run.stdout + run.stderr)
        return False
    return True


def run_dumped(dfi, transport, args, dump):
    """Runs `dfi ARGS --dump DUMP` on the cluster; a DuckDB connection to check it, or None."""
    if not cluster(dfi, transport, [*args, "--verify", "yes", "--threads", "2", "--dump", str(dump)]):
        return None
    return duckdb.connect()


def csv(path):
    return "read_csv('" + str(path) + "', header = true)"


def check_join(dfi, transport, algorithm, bloom, dump):
    name = algorithm + ("-bloom" if bloom else "")
    args = ["join", "--algorithm", algorithm, "--build-tuples", "3000", "--probe-tuples", "9000",
            "--duplicates", "3", "--selectivity", "0.3", "--name", name] + (["--bloom"] if bloom else [])
    db = run_dumped(dfi, transport, args, dump)
    if db is None:
        return
    what = transport + " " + name
    before = len(failures)
    db.execute("CREATE TABLE expected AS SELECT b.payload AS build_payload, p.payload AS probe_payload "
               "FROM " + csv(dump / "build.csv") + " b JOIN " + csv(dump / "probe.csv") + " p ON b.key = p.key")
    db.execute("CREATE TABLE got AS SELECT build_payload, probe_payload FROM " + csv(dump / "pairs-*.csv"))
    (expected,) = db.execute("SELECT count(*) FROM expected").fetchone()
    (missing,) = db.execute("SELECT count(*) FROM (SELECT * FROM expected EXCEPT ALL SELECT * FROM got)").fetchone()
    (extra,) = db.execute("SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM expected)").fetchone()
    matches, shipped, probes = db.execute(
        "SELECT matches, shipped_probe_tuples, probe_tuples FROM " + csv(dump / "result.csv")).fetchone()
    if expected == 0:
        fail(what + ": the generated join has no pairs (the check would be empty)")
    if missing or extra:
        fail(what + f": DFI's pairs differ from DuckDB's: {missing} missing, {extra} extra of {expected}")
    if matches != expected:
        fail(what + f": DFI reports {matches} matches, DuckDB finds {expected}")
    if bloom:
        (with_partner,) = db.execute("SELECT count(*) FROM " + csv(dump / "probe.csv") + " WHERE key IN "
                                     "(SELECT key FROM " + csv(dump / "build.csv") + ")").fetchone()
        if not with_partner <= shipped <= 9000 or probes != shipped:
            fail(what + f": {shipped} probe tuples shipped, {probes} probed; {with_partner} have a partner")
    if len(failures) == before:
        print(f"{what}: {expected} pairs, as DuckDB finds them; {shipped} of 9000 probe tuples shipped")


def check_agg(dfi, transport, algorithm, dump):
    args = ["agg", "--algorithm", algorithm, "--tuples", "20000", "--groups", "700", "--zipf", "0.8",
            "--name", "agg-" + algorithm]
    db = run_dumped(dfi, transport, args, dump)
    if db is None:
        return
    what = transport + " agg " + algorithm
    before = len(failures)
    db.execute("CREATE TABLE expected AS SELECT key, sum(value) AS s, count(*) AS c, min(value) AS lo, "
               "max(value) AS hi, avg(value) AS a FROM " + csv(dump / "input.csv") + " GROUP BY key")
    db.execute("CREATE TABLE got AS SELECT key, sum_value AS s, count AS c, min_value AS lo, max_value AS hi, "
               "avg_value AS a FROM " + csv(dump / "groups-*.csv"))
    (expected,) = db.execute("SELECT count(*) FROM expected").fetchone()
    (got,) = db.execute("SELECT count(*) FROM got").fetchone()
    (groups,) = db.execute("SELECT groups FROM " + csv(dump / "result.csv")).fetchone()
    differ = db.execute(
        "SELECT count(*), any_value(coalesce(e.key, g.key)) FROM expected e FULL OUTER JOIN got g ON e.key = g.key "
        "WHERE e.key IS NULL OR g.key IS NULL OR e.s != g.s OR e.c != g.c OR e.lo != g.lo OR e.hi != g.hi "
        "OR abs(e.a - g.a) > 1e-12 * greatest(1, abs(e.a))").fetchone()
    if differ[0]:
        fail(what + f": {differ[0]} groups differ from DuckDB's (e.g. key {differ[1]})")
    if got != expected or groups != expected:
        fail(what + f": DFI has {got} result rows and reports {groups} groups, DuckDB finds {expected}")
    if len(failures) == before:
        print(f"{what}: {expected} groups of sum/count/min/max/avg, as DuckDB computes them")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    dfi = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="dfi-duckdb-") as tmp:
        root = pathlib.Path(tmp)
        for transport in ("shm", "tcp"):
            for algorithm, bloom in (("radix", False), ("grace", False), ("grace", True), ("rrj", False)):
                check_join(dfi, transport, algorithm, bloom,
                           root / f"{transport}-{algorithm}{'-bloom' if bloom else ''}")
            for algorithm in ("rdma", "hierarchical"):
                check_agg(dfi, transport, algorithm, root / f"{transport}-agg-{algorithm}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("duckdb check: DFI and DuckDB agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
