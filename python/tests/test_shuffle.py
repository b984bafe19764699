from conftest import run_cluster


def test_shuffle_from_numpy_delivers_every_row_exactly_once(transport):
    run = run_cluster("shuffle_numpy.py", 100000, 30000, transport=transport)
    assert run.code == 0, run.all()
    assert "py-shuffle: 200000 of 200000 rows, key sum 19999900000 of 19999900000: exactly once" \
        in run.out, run.all()
