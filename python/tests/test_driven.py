from conftest import run_cluster


def test_driven_shuffle_with_a_python_mover(transport):
    run = run_cluster("driven.py", 40000, nodes=2, transport=transport)
    assert run.code == 0, run.all()
    assert "py-driven: 80000 of 80000 rows, key sum 3199960000 of 3199960000: exactly once; " \
           "mover moved 3840000 bytes" in run.out, run.all()
    for rank in range(2):
        assert f"rank {rank} driven push_to: 40000 rows, each where it was sent" in run.out, run.all()
