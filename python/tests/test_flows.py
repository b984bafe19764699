from conftest import run_cluster


def test_replicate_combiner_and_barrier(transport):
    run = run_cluster("flows.py", transport=transport)
    assert run.code == 0, run.all()
    for line in ["rank 0 replicate: 30000 rows in order", "rank 1 replicate: 30000 rows in order",
                 "combiner: 97 groups match NumPy", "rank 0 push_to: 30000 rows, each where it was sent",
                 "rank 1 push_to: 30000 rows, each where it was sent", "rank 0 barrier: 3 rounds",
                 "rank 1 barrier: 3 rounds"]:
        assert line in run.out, run.all()
