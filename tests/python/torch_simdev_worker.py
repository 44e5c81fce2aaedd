"""MPI worker: flexplan.torch on the NCCL backend running on the simulated
CUDA device (tests/simdev/, docs/simdev.md) against the MPI backend, with
torch's CPU kernels standing for the device's. Run under
``mpirun -n N python torch_simdev_worker.py STREAM CONFIG...`` with
FLEXPLAN_LIBRARY = libflexplan_simdev.so and FP_SIMDEV_HOST_VISIBLE=1.

What stands for torch's CUDA runtime here (the device is the simulator):
- ``torch.cuda.current_stream()`` returns a stream whose ``cuda_stream`` is
  CURRENT[0]: 0 (torch's default stream, CUDA's legacy default stream) or a
  stream made in the simulator;
- every ATen op first waits for the work queued on that stream, as a kernel
  launched there would (a TorchDispatchMode calling the simulator's
  cudaStreamSynchronize: for the legacy stream that includes every blocking
  stream, never a non-blocking one - the rule the first H200 run broke).

STREAM: legacy (torch on its default stream), side (on a stream of its own,
non-blocking), switch (the default stream and a side stream in turn, one
per step), untold (a planted bug: torch on its default stream, but the
executor told nothing - it makes its own stream - and not following torch:
the H200 run's bug; the runs must then differ).

Each CONFIG trains a tiny model (tests/python/torch_worker.py's configs) for
STEPS steps of AdamW on both backends, in the same process (MPI first), and
compares every step's loss and the final main weights: equal at 1 and 2
ranks, 1e-5 relative at 3 and more (MPI and the simulated NCCL may sum three
ranks in different orders). Rank 0 prints PASS/FAIL lines (DIFF for the
planted bug); exit 1 on a failure."""
import ctypes
import os
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

torch.set_num_threads(1)

import flexplan.torch as fpt  # noqa: E402
import importlib  # noqa: E402

fsetup = importlib.import_module("flexplan.torch._setup")
from flexplan.executor import mpi_abort, mpi_finalize, mpi_init  # noqa: E402

import torch_models as tm  # noqa: E402
import torch_worker as tw  # noqa: E402

STEPS = 6
LIB = ctypes.CDLL(os.environ["FLEXPLAN_LIBRARY"])  # the library flexplan loaded (dlopen: the same one)
LIB.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
LIB.cudaStreamCreateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
LIB.cudaSetDevice.argtypes = [ctypes.c_int]
CURRENT = [0]


class _Stream:
    def __init__(self, h):
        self.cuda_stream = h


torch.cuda.current_stream = lambda device=None: _Stream(CURRENT[0])


class DeviceOrder(TorchDispatchMode):
    """torch's kernels as kernels on its current stream of the simulated device"""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        rc = LIB.cudaStreamSynchronize(ctypes.c_void_p(CURRENT[0] or None))
        if rc != 0:
            raise RuntimeError(f"the simulated device failed (cudaError {rc})")
        return func(*args, **(kwargs or {}))


def train(name, backend, rank, world, plan, stream_mode, side):
    kind, strategy, extra, opts = tw.CONFIGS[name]
    ga = extra.get("grad_accumulation", 1)
    model = tw.make_model(kind)
    CURRENT[0] = side if stream_mode == "side" else 0
    kw = {}
    if backend == "nccl":
        kw = {"backend": "nccl", "rank": rank, "world_size": world}
    st = fpt.shard(model, plan, **kw)
    if backend == "nccl" and stream_mode == "untold":
        st.driver.follow_stream = None  # the planted bug: the executor's own stream, never torch's
    opt = fpt.optimizer(st, tm.adamw)
    losses = []
    with DeviceOrder() if backend == "nccl" else _nothing():
        for step in range(STEPS):
            if stream_mode == "switch":
                CURRENT[0] = side if step % 2 else 0
            total = 0.0
            for k in range(ga):
                g = step * world * ga + rank * ga + k
                inp, tgt = tm.batch(kind, g)
                loss = tm.loss_fn(kind, model, inp, tgt)
                loss.backward()
                total += float(loss.detach())
            opt.step()
            opt.zero_grad()
            losses.append(total)
        CURRENT[0] = 0
        mains = {n: p.detach().clone() for n, p in st.named_main_params()}
    st.close()
    return losses, mains


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main():
    stream_mode, names = sys.argv[1], sys.argv[2:]
    rank, world = mpi_init()
    LIB.cudaSetDevice(rank)  # one simulated device per rank (NCCL refuses two ranks on one)
    side = ctypes.c_void_p()
    LIB.cudaStreamCreateWithFlags(ctypes.byref(side), 1)  # cudaStreamNonBlocking
    failed = 0
    real_setup = fsetup.nccl_setup
    if stream_mode == "untold":
        fsetup.nccl_setup = lambda r, w: (r, w, None, None)
    with tempfile.TemporaryDirectory(prefix=f"fp-simdev-torch-{rank}-") as tmp:
        for name in names:
            try:
                kind, strategy, extra, opts = tw.CONFIGS[name]
                model_js = tw.describe_model(kind, tw.make_model(kind), [])
                spec = tw.spec_for(strategy, extra, world, dict(opts, kind=kind))
                plan = tw.compile_plan(model_js, spec, os.path.join(tmp, f"{name}.plan.json"))
                ref_losses, ref_mains = train(name, "mpi", rank, world, plan, "legacy", side.value)
                losses, mains = train(name, "nccl", rank, world, plan, stream_mode, side.value)
                tol = 0.0 if world <= 2 else 1e-5
                worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(ref_losses, losses))
                wm = max(float(((mains[n] - ref_mains[n]).abs() / ref_mains[n].abs().clamp_min(1e-6)).max())
                         if mains[n].numel() else 0.0 for n in ref_mains)
                ok = worst <= tol and wm <= (tol or 0.0) * 10
                verdict = "PASS" if ok else ("DIFF" if stream_mode == "untold" else "FAIL")
                failed += verdict == "FAIL"
                if rank == 0:
                    print(f"{verdict} {name} np={world} stream={stream_mode}: losses (nccl on the simulated device) "
                          f"{['%.6f' % x for x in losses]}, mpi {['%.6f' % x for x in ref_losses]}; "
                          f"max rel loss diff {worst:.3g}, main weights {wm:.3g}", flush=True)
            except Exception as e:  # a rank failing ends every rank (no hang)
                sys.stdout.write(f"FAIL {name} np={world} rank {rank}: {type(e).__name__}: {e}\n")
                traceback.print_exc()
                sys.stdout.flush()
                mpi_abort(1)
    fsetup.nccl_setup = real_setup
    mpi_finalize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
