from conftest import run_cluster


def test_arrow_record_batches_round_trip(transport):
    run = run_cluster("arrow_roundtrip.py", transport=transport)
    assert run.code == 0, run.all()
    assert "py-arrow: 100000 of 100000 rows, key sum 4999950000 of 4999950000; " \
           "one column: exactly once" in run.out, run.all()
    assert run.out.count("ok arrow-mismatch") == 2, run.all()
