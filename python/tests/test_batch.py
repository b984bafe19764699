import re

from conftest import run_cluster


def test_columns_arrow_target_arrays_and_column_copies(transport):
    run = run_cluster("batch_numpy.py", 60000, nodes=3, transport=transport)
    assert run.code == 0, run.all()
    assert "py-cols: 180000 of 180000 rows, key sum 16199910000 of 16199910000: exactly once" \
        in run.out, run.all()
    for rank in range(3):
        assert re.search(rf"rank {rank} py-routed: \d+ rows, exactly those addressed here", run.out), run.all()
    for check, parts in {"target-range": ["invalid_argument", "flow 'py-routed'", "row 1", "target 3"],
                         "targets-length": ["invalid_argument", "3 values for 2 rows"],
                         "column-dtype": ["invalid_argument", "column 'key'", "uint64", "int64"]}.items():
        lines = [l for l in run.out.splitlines() if f"ok {check}:" in l]
        assert len(lines) == 3, (check, run.all())
        for part in parts:
            assert part in lines[0], (check, part, lines[0])
