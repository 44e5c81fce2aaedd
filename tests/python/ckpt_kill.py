"""MPI worker for tests/python/test_torch_ckpt_safety.py (issue 40: nothing
lost, nothing silently wrong): ``mpiexec -n 2 python ckpt_kill.py PHASE DIR``.

PHASE save-old: train one step of the MLP, save_checkpoint into DIR/ckpt,
  rank 0 writes DIR/old.pt (the full tensors, gathered from the arena).
PHASE save-new: the same module trained two steps (other values), rank 0
  writes DIR/new.pt, then save_checkpoint into DIR/ckpt (overwrite=True):
  FLEXPLAN_CKPT_KILL="rank:point" ends that rank at that point of the save.
PHASE load: a fresh module (other values), then load_in_place and
  load_checkpoint of DIR/ckpt; rank 0 reports per path ``LOADED old``,
  ``LOADED new`` (bit for bit one of the two saves), ``MIXED`` (anything
  else: the failure the test looks for) or ``REFUSED <message>``, and for a
  refusal whether the module kept its values (``UNCHANGED`` / ``CHANGED``).
PHASE corrupt: save_checkpoint into DIR/a and DIR/b (two trainings), then
  (1) a bit flipped inside a float of one .distcp file of DIR/a, (2) DIR/b's
  rank-1 file copied over DIR/a2's (a torn overwrite: old metadata, a file of
  another save of the same size); each loaded both ways: ``REFUSED`` naming
  the file, the tensor and the byte range, ``UNCHANGED``.
Reports go to DIR/report.RANK, one line each (and to stdout for the log).
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

torch.set_num_threads(1)

import flexplan.torch as fpt  # noqa: E402
from flexplan import FlexplanError  # noqa: E402
from flexplan.executor import mpi_init, mpi_finalize  # noqa: E402
from flexplan.torch import checkpoint as ck  # noqa: E402

import torch_models as tm  # noqa: E402
from torch_worker import compile_plan, spec_for  # noqa: E402


def setup(d, seed):
    rank, world = mpi_init()
    m = tm.mlp(seed)
    plan = compile_plan(tm.model_json(m, tm.MLP_UNITS, name="mlp"), spec_for("full_shard", {}, world, {}),
                        os.path.join(d, f"plan.{rank}.json"))
    st = fpt.shard(m, plan)
    ck.init_process_group(st)
    return m, st, fpt.optimizer(st, torch.optim.AdamW, lr=1e-2), rank, world


def train(m, opt, rank, world, steps):
    for s in range(steps):
        x, t = tm.batch("mlp", s * world + rank)
        tm.loss_fn("mlp", m, x, t).backward()
        opt.step()


def out(rank, *a):
    if rank == 0:
        print(*a, flush=True)


def report(rank, d, line):
    """A result line the test reads: appended to DIR/report.RANK (the ranks'
    stdout reaches mpiexec through a pty, where two ranks' lines can be cut
    into each other) and printed for the log."""
    with open(os.path.join(d, f"report.{rank}"), "a") as f:
        f.write(line + "\n")
    print(line, flush=True)


def try_load(st, rank, d, name, fn, refs):
    before = st.full_state_dict()
    try:
        fn()
    except FlexplanError as e:
        after = st.full_state_dict()
        same = all(torch.equal(before[k], after[k]) for k in before)
        report(rank, d, f"{name} REFUSED {'UNCHANGED' if same else 'CHANGED'} [rank {rank}] {str(e)[:400]}")
        return
    now = st.full_state_dict()
    for tag, ref in refs.items():
        if all(torch.equal(now[k], ref[k]) for k in ref):
            if rank == 0:
                report(rank, d, f"{name} LOADED {tag}")
            return
    if rank == 0:
        report(rank, d, f"{name} MIXED")


def main():
    phase, d = sys.argv[1], sys.argv[2]
    ckpt = os.path.join(d, "ckpt")
    if phase in ("load", "corrupt"):
        rank, _ = mpi_init()
        if os.path.exists(os.path.join(d, f"report.{rank}")):
            os.remove(os.path.join(d, f"report.{rank}"))
    if phase in ("save-old", "save-new"):
        m, st, opt, rank, world = setup(d, 0)
        train(m, opt, rank, world, 1 if phase == "save-old" else 2)
        full = st.full_state_dict()
        if rank == 0:
            torch.save(full, os.path.join(d, "old.pt" if phase == "save-old" else "new.pt"))
        ck.save_checkpoint(st, ckpt, overwrite=phase == "save-new")
        out(rank, "SAVED")
    elif phase == "load":
        m, st, opt, rank, world = setup(d, 7)
        refs = {t: torch.load(os.path.join(d, f"{t}.pt")) for t in ("old", "new")
                if os.path.exists(os.path.join(d, f"{t}.pt"))}
        try_load(st, rank, d, "load_in_place", lambda: fpt.load_in_place(st, ckpt), refs)
        try_load(st, rank, d, "load_checkpoint", lambda: ck.load_checkpoint(st, ckpt), refs)
    elif phase == "corrupt":
        m, st, opt, rank, world = setup(d, 0)
        train(m, opt, rank, world, 1)
        a, a2, b = (os.path.join(d, n) for n in ("a", "a2", "b"))
        ck.save_checkpoint(st, a)
        ck.save_checkpoint(st, a2)
        train(m, opt, rank, world, 1)
        ck.save_checkpoint(st, b)
        if rank == 0:
            doc = json.load(open(os.path.join(a, ck.CHECKSUMS)))
            it = max((i for i in doc["items"] if i["key"] == "layers.1.weight"), key=lambda i: i["length"])
            p = os.path.join(a, it["file"])
            with open(p, "r+b") as f:  # one bit of a float in the middle of the chunk
                f.seek(it["offset"] + it["length"] // 2 + 1)
                byte = f.read(1)[0]
                f.seek(-1, 1)
                f.write(bytes([byte ^ 0x10]))
            files = sorted(n for n in os.listdir(a2) if n.endswith(".distcp"))
            shutil.copyfile(os.path.join(b, files[-1]), os.path.join(a2, files[-1]))
            print(f"CORRUPTED {it['file']} {it['key']}; TORN {files[-1]}", flush=True)
        st.ex.all_reduce_f64([0.0])
        for tag, where in (("flipped", a), ("torn", a2)):
            try_load(st, rank, d, f"{tag} load_in_place", lambda w=where: fpt.load_in_place(st, w), {})
            try_load(st, rank, d, f"{tag} load_checkpoint", lambda w=where: ck.load_checkpoint(st, w), {})
    st.close()
    mpi_finalize()


if __name__ == "__main__":
    main()
