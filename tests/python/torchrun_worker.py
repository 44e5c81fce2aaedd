"""Worker for test_torchrun.py: flexplan.torch in a script launched by
``torchrun --nproc-per-node N torchrun_worker.py MODE[:TIMEOUT],...``
(torch.distributed on gloo, no MPI), for what goes wrong across ranks; the
modes run in order in one launch (FLEXPLAN_TIMEOUT set to TIMEOUT for a
mode, unset without). Each rank prints ``OK <mode> r<rank>: ...`` when what
it checks held, ``BAD <mode> r<rank>: ...`` otherwise; the test reads those
lines. watchdog and join leave rank 1 behind (an executor mid-step, one
executor fewer): they come last.

Modes:
- nompi: shard() with no backend, rank or world picks "torch"; two AdamW
  steps; a DCP round trip on the default group (save, perturb every main
  weight, load back: bit for bit); MPI was never initialized in this
  process (MPI_Initialized, through the library's own MPI, still says 0);
- mismatch: rank 1 loads a plan of another spec (another hash): every rank's
  shard() raises FP_ERR_MISMATCH naming both hashes (with FLEXPLAN_TIMEOUT
  the agreement is the store's watched one, without it the same store keys
  waited for without a limit);
- cbfail: torch.distributed raises inside the transport (an all-gather):
  every rank's hook fails with FP_ERR_BACKEND and the exception's text;
- watchdog: one step on every rank, then rank 1 stops calling hooks (sleeps,
  alive): rank 0's next step fails with FP_ERR_TIMEOUT naming the op it
  waits for and rank 1 as not arrived (FLEXPLAN_TIMEOUT set by the test);
- join: rank 1 never creates its executor: rank 0's shard() fails with
  FP_ERR_TIMEOUT naming rank 1 as not joining the agreement.
"""
import ctypes
import os
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.set_num_threads(1)

import flexplan  # noqa: E402
import flexplan.torch as fpt  # noqa: E402

import torch_models as tm  # noqa: E402
from torch_worker import compile_plan, spec_for  # noqa: E402


def plan(rank, world, tmp, extra=None, tag="p"):
    """the MLP and its plan; every rank has compiled its plan when this returns (so a short
    FLEXPLAN_TIMEOUT measures what the test means, not one rank's slower compile)"""
    model = tm.mlp()
    js = tm.model_json(model, tm.MLP_UNITS, name="mlp")
    p = compile_plan(js, spec_for("full_shard", extra or {}, world, {"kind": "mlp"}),
                     os.path.join(tmp, f"{tag}.r{rank}.plan.json"))
    dist.barrier()
    return model, p


def step(model, opt, rank, world, k):
    inp, tgt = tm.batch("mlp", k * world + rank)
    loss = tm.loss_fn("mlp", model, inp, tgt)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss)


def _store():
    return dist.distributed_c10d._get_default_store()  # pylint: disable=protected-access


def wait_done(mode):
    """rank 1 of watchdog / join: alive (not calling flexplan) until rank 0 has its error"""
    import datetime
    _store().wait([f"fp-test/done/{mode}"], datetime.timedelta(seconds=120))


def mode_nompi(rank, world, tmp):
    model, p = plan(rank, world, tmp)
    st = fpt.shard(model, p)
    if st.backend != "torch" or st.rank != rank or st.world_size != world:
        return f"BAD: backend {st.backend!r}, rank {st.rank} of {st.world_size}"
    opt = fpt.optimizer(st, tm.adamw)
    losses = [step(model, opt, rank, world, k) for k in range(2)]
    import torch.distributed.checkpoint as dcp
    box = [os.path.join(tmp, "dcp") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    dcp.save(fpt.state_dict(st, opt), checkpoint_id=box[0])
    before = {n: p.detach().clone() for n, p in st.named_main_params()}
    with torch.no_grad():
        for _, p in st.named_main_params():
            p.add_(1.0)
    sd = fpt.state_dict(st, opt)
    dcp.load(sd, checkpoint_id=box[0])
    fpt.load_state_dict(st, sd, opt)
    for n, p in st.named_main_params():
        if not torch.equal(p, before[n]):
            return f"BAD: {n} differs after the DCP round trip"
    flag = ctypes.c_int(-1)
    ctypes.CDLL(None).MPI_Initialized(ctypes.byref(flag))  # the library's MPI, loaded globally
    if flag.value != 0:
        return f"BAD: MPI_Initialized says {flag.value}"
    st.close()
    return f"OK: backend torch, losses {losses}, DCP saved on the default group, MPI never initialized"


def mode_mismatch(rank, world, tmp):
    model, p = plan(rank, world, tmp, {"grad_accumulation": 2} if rank == 1 else {})
    try:
        fpt.shard(model, p)
    except flexplan.FlexplanError as e:
        ok = e.status_name == "FP_ERR_MISMATCH" and "plan hash mismatch" in str(e) and "rank 1 has" in str(e)
        return ("OK: " if ok else "BAD: ") + f"{e.status_name}: {e}"
    return "BAD: no error"


def mode_cbfail(rank, world, tmp):
    """torch.distributed raising inside the transport's callback: the hook fails with
    FP_ERR_BACKEND carrying the exception's message (every rank, no hang)"""
    model, p = plan(rank, world, tmp)
    st = fpt.shard(model, p)
    opt = fpt.optimizer(st, tm.adamw)
    orig = dist.all_gather_into_tensor

    def boom(*args, **kwargs):
        raise RuntimeError("injected all_gather failure")
    dist.all_gather_into_tensor = boom
    try:
        step(model, opt, rank, world, 0)
    except flexplan.FlexplanError as e:
        s = str(e)
        ok = e.status_name == "FP_ERR_BACKEND" and "transport: issue of op" in s and \
            "RuntimeError: injected all_gather failure" in s
        return ("OK: " if ok else "BAD: ") + f"{e.status_name}: {s}"
    finally:
        dist.all_gather_into_tensor = orig
    return "BAD: no error"


def mode_watchdog(rank, world, tmp):
    model, p = plan(rank, world, tmp)
    st = fpt.shard(model, p)
    opt = fpt.optimizer(st, tm.adamw)
    step(model, opt, rank, world, 0)
    if rank == 1:  # stops calling hooks, stays alive until rank 0 has reported
        wait_done("watchdog")
        return "OK: stopped"
    t0 = time.time()
    try:
        step(model, opt, rank, world, 1)
    except flexplan.FlexplanError as e:
        s = str(e)
        ok = (e.status_name == "FP_ERR_TIMEOUT" and "watchdog" in s and "waits for op" in s and
              "did not arrive" in s and s.rstrip().endswith(": 1"))
        return ("OK: " if ok else "BAD: ") + f"after {time.time() - t0:.1f} s: {e.status_name}: {s}"
    return "BAD: no error"


def mode_join(rank, world, tmp):
    model, p = plan(rank, world, tmp)
    if rank == 1:
        wait_done("join")
        return "OK: never joined"
    try:
        fpt.shard(model, p)
    except flexplan.FlexplanError as e:
        s = str(e)
        ok = e.status_name == "FP_ERR_TIMEOUT" and "did not join: 1" in s and "no collective" in s
        return ("OK: " if ok else "BAD: ") + f"{e.status_name}: {s}"
    return "BAD: no error"


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for item in sys.argv[1].split(","):
        mode, _, timeout = item.partition(":")
        os.environ["FLEXPLAN_TIMEOUT"] = timeout
        with tempfile.TemporaryDirectory(prefix=f"fp-torchrun-{rank}-") as tmp:
            try:
                verdict = globals()["mode_" + mode](rank, world, tmp)
            except Exception:  # noqa: BLE001
                verdict = "BAD: " + traceback.format_exc()
        word, _, rest = verdict.partition(": ")
        # one write of the whole line: both ranks share the launcher's pipe, and print's text and newline
        # as two writes let the other rank's line land between them (seen once in CI)
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), f"{word} {item} r{rank}: {rest}\n".encode())
        if rank == 0:
            _store().set(f"fp-test/done/{mode}", "1")
    # after a watchdog the process group still holds ops that never finish: leave without
    # tearing it down (torchrun's job ends with the processes)
    os._exit(0)


if __name__ == "__main__":
    main()
