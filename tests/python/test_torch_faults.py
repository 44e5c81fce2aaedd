"""Faults: a rank raising mid-step ends every rank with an error, never a
hang (the launch has a timeout); a plan for another model is refused with a
message naming the first mismatched param."""
from torch_mpi import run_mpi


def test_rank_raising_mid_step_ends_every_rank():
    rc, out = run_mpi(3, "torch_fault.py", "raise", timeout=120)
    assert rc != 0, out[-3000:]
    assert "injected failure on rank 1 in step 2" in out, out[-3000:]
    assert "aborting every rank" in out, out[-3000:]
    # the ranks trained before the fault, and none finished the step it hit
    assert "rank 0 step 0 done" in out and "rank 2 step 0 done" in out, out[-3000:]
    assert "step 2 done" not in out and "step 4 done" not in out, out[-3000:]


def test_plan_of_another_model_is_refused():
    rc, out = run_mpi(2, "torch_fault.py", "other", timeout=120)
    assert rc == 0, out[-3000:]
    # each rank's refusal, found by its text: mpirun may join two ranks' lines
    assert "NOT REFUSED" not in out and out.count("REFUSED rank ") == 2, out[-3000:]
    for r in range(2):
        assert (f"REFUSED rank {r}: the plan is not for this module: param 'layers.1.weight' has shape [24, 24] "
                "in the module but [25, 24] in the plan") in out, out[-3000:]
