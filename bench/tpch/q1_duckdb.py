#!/usr/bin/env python3
"""TPC-H Q1 over a lineitem.tbl that tpchgen-cli wrote, in DuckDB: the reference `dfi bench
tpch-q1` checks its consumers' merged result against.

    build/venv/bin/python bench/tpch/q1_duckdb.py build/release/bench/tpch/sf0.1/lineitem.tbl

Prints one JSON object: {"rows": N, "groups": [...]}, N the rows of the file, one group per
(l_returnflag, l_linestatus) in Q1's order. The sums are exact integers in the units DFI's tuples
carry (sum_qty and sum_base_price in hundredths, sum_disc_price in 1e-4, sum_charge in 1e-6;
DuckDB computes them as exact DECIMALs), written as strings so no float touches them; the
averages are DuckDB's doubles.
"""

import json
import sys
from decimal import Decimal

import duckdb

QUERY = """
SELECT l_returnflag, l_linestatus,
       sum(l_quantity) AS sum_qty,
       sum(l_extendedprice) AS sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
       avg(l_quantity) AS avg_qty,
       avg(l_extendedprice) AS avg_price,
       avg(l_discount) AS avg_disc,
       count(*) AS count_order
FROM lineitem
WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL 90 DAY
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus
"""

COLUMNS = {
    "l_orderkey": "BIGINT", "l_partkey": "BIGINT", "l_suppkey": "BIGINT", "l_linenumber": "INTEGER",
    "l_quantity": "DECIMAL(15,2)", "l_extendedprice": "DECIMAL(15,2)", "l_discount": "DECIMAL(15,2)",
    "l_tax": "DECIMAL(15,2)", "l_returnflag": "VARCHAR", "l_linestatus": "VARCHAR",
    "l_shipdate": "DATE", "l_commitdate": "DATE", "l_receiptdate": "DATE",
    "l_shipinstruct": "VARCHAR", "l_shipmode": "VARCHAR", "l_comment": "VARCHAR",
    "l_end": "VARCHAR",  # every .tbl line ends with '|': an empty last field
}


def scaled(value, digits):
    """An exact DECIMAL as the integer count of 10^-digits units (a string)."""
    exact = Decimal(value) * (Decimal(10) ** digits)
    if exact != exact.to_integral_value():
        raise SystemExit(f"q1_duckdb: {value} has more than {digits} decimals")
    return str(int(exact))


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: q1_duckdb.py LINEITEM_TBL")
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    columns = ", ".join(f"'{name}': '{kind}'" for name, kind in COLUMNS.items())
    path = sys.argv[1].replace("'", "''")
    con.execute(
        f"CREATE VIEW lineitem AS SELECT * FROM read_csv('{path}', delim='|', header=false, "
        f"columns={{{columns}}})"
    )
    rows = con.execute("SELECT count(*) FROM lineitem").fetchone()[0]
    groups = []
    for r in con.execute(QUERY).fetchall():
        groups.append({
            "returnflag": r[0], "linestatus": r[1],
            "sum_qty": scaled(r[2], 2), "sum_base_price": scaled(r[3], 2),
            "sum_disc_price": scaled(r[4], 4), "sum_charge": scaled(r[5], 6),
            "avg_qty": float(r[6]), "avg_price": float(r[7]), "avg_disc": float(r[8]),
            "count": int(r[9]),
        })
    print(json.dumps({"rows": rows, "groups": groups}))


if __name__ == "__main__":
    main()
