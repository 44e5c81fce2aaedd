"""MPI worker: flexplan.torch's whole-step capture contract (docs/torch.md,
"One graph per step") on the NCCL backend running on the simulated CUDA
device, where the CPU can check it. Run under ``mpirun -n N python
torch_capture_worker.py`` with FLEXPLAN_LIBRARY = libflexplan_simdev.so and
FP_SIMDEV_HOST_VISIBLE=1 (torch_simdev_worker.py says how torch's kernels
stand for the device's).

What stands for ``torch.cuda.graph(g)``: the worker switches torch's current
stream to a capture stream of its own and begins a global-mode capture on it
(the simulator's cudaStreamBeginCapture, as torch does), and
``StepCapture.capturing`` asks the simulator whether that stream is
capturing. Torch's own kernels run on the CPU at capture time (here they
cannot be captured): what is checked is flexplan's side of the contract.

Checks (rank 0 prints PASS/FAIL per check; exit 1 on a failure):
- a captured training step (forward, backward, AdamW step, zero_grad) after
  one uncaptured step: no error, and the capture ends joined and valid - the
  simulator invalidates a capture on any host synchronization or allocation
  from any thread, and refuses to end one with a stream not joined back - so
  flexplan.torch neither synchronized nor allocated on the device inside it;
  one live graph; the graph replays (instantiate, launch twice, synchronize)
  with no hook called (the driver's hook count does not move) and no Python
  callback (the graph's nodes are the executor's kernels, copies, NCCL
  calls and events: the replay completes from C); between replays an
  evaluation forward runs, and a refit (st.load) and load_state_dict (the
  rank's state_dict copies, scaled) write new values into the same
  addresses (the main views do not move, full_state_dict reads the new
  values back), and the graph replays after them;
- close() with the graph live is an error naming it; release_graph(), then
  close() works;
- refused at capture start, with a FlexplanError naming step_begin and the
  reason, nothing issued (the uncaptured step after it matches): cuda_mode
  "graph"; a capture before any uncaptured step;
- clip_grad_norm_: its device path (the one a capture takes) gives the
  host path's total norm and clipped grads bit for bit (2-norm scaling and
  not, inf-norm), uncaptured; inside the capture a step with clipping ends
  joined and valid (no host wait: the all-reduce is captured on the capture
  stream) and its graph replays;
- ending the capture mid-step (after the backward, the plan's streams not
  joined back) makes the next call fail with the executor's account of it."""
import ctypes
import os
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch_simdev_worker as sw  # noqa: E402  (the simulated device's stand-ins for torch.cuda)

import safetensors.torch  # noqa: E402
import torch  # noqa: E402

import flexplan.torch as fpt  # noqa: E402
from flexplan.errors import FlexplanError  # noqa: E402
from flexplan.executor import mpi_abort, mpi_finalize, mpi_init  # noqa: E402
import importlib  # noqa: E402

fcap = importlib.import_module("flexplan.torch._capture")

import torch_models as tm  # noqa: E402
import torch_worker as tw  # noqa: E402

LIB, CURRENT = sw.LIB, sw.CURRENT
_vp = ctypes.c_void_p
LIB.cudaStreamBeginCapture.argtypes = [_vp, ctypes.c_int]
LIB.cudaStreamEndCapture.argtypes = [_vp, ctypes.POINTER(_vp)]
LIB.cudaStreamIsCapturing.argtypes = [_vp, ctypes.POINTER(ctypes.c_int)]
LIB.cudaGraphInstantiate.argtypes = [ctypes.POINTER(_vp), _vp, ctypes.c_ulonglong]
LIB.cudaGraphLaunch.argtypes = [_vp, _vp]
LIB.cudaGraphExecDestroy.argtypes = [_vp]
LIB.cudaGraphDestroy.argtypes = [_vp]
LIB.cudaMalloc.argtypes = [ctypes.POINTER(_vp), ctypes.c_size_t]
GLOBAL = 0  # cudaStreamCaptureModeGlobal: torch.cuda.graph's default


def capturing():
    s = ctypes.c_int(0)
    return LIB.cudaStreamIsCapturing(_vp(CURRENT[0] or None), ctypes.byref(s)) == 0 and s.value != 0


fcap.StepCapture.capturing = staticmethod(capturing)
foptim = importlib.import_module("flexplan.torch._optim")
KEEP = []  # the simulated device buffers handed to torch (kept alive)


def sim_reduce_buffer(device):
    """clip_grad_norm_device's device double in the simulated device's memory
    (host visible), as a torch tensor: what torch.zeros(device="cuda") is on a GPU"""
    p = _vp()
    rc = LIB.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(8))
    assert rc == 0, f"cudaMalloc: {rc}"
    arr = (ctypes.c_double * 1).from_address(p.value)
    arr[0] = 0.0
    KEEP.append(arr)
    return torch.frombuffer(arr, dtype=torch.float64)


foptim.MainShards.reduce_buffer = staticmethod(sim_reduce_buffer)


class DeviceOrder(sw.DeviceOrder):
    """sw.DeviceOrder, except inside a capture: a kernel launched there is
    captured, not run, so nothing waits (here it runs on the CPU)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if capturing():
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


RESULTS = []
TMP = [None]


def check(rank, what, ok, detail=""):
    RESULTS.append(ok)
    if rank == 0:
        print(f"{'PASS' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)


# configurations of this test beyond torch_worker.CONFIGS: (kind, strategy, spec extra, opts)
CAPTURE_CONFIGS = {
    # the two middle layers gathered as MXFP8 (quantized, gathered, dequantized to bf16 by the plan)
    "mlp_mxfp8_gather": ("mlp", "full_shard", {"buckets": [
        {"name": "mx", "params": ["layers.1.*", "layers.2.*"], "gather_dtype": "mxfp8"}]}, {"bf16": True, "world": 2}),
}


def config(name):
    return CAPTURE_CONFIGS.get(name) or tw.CONFIGS[name]


def make_model(kind, frozen):
    """a fresh model, its frozen units frozen (as describe saw them)"""
    return tw.freeze(tw.make_model(kind), frozen)


def step(st, opt, kind, rank, world, t, clip=False, ga=1):
    """one training step: ga micro-batches (forward, backward), then clipping,
    the optimizer step and zero_grad"""
    total = 0.0
    for k in range(ga):
        inp, tgt = tm.batch(kind, t * world * ga + rank * ga + k)
        loss = tm.loss_fn(kind, st.module, inp, tgt)
        loss.backward()
        total += float(loss.detach())
    if clip:
        st.clip_grad_norm_(1.0)
    opt.step()
    opt.zero_grad()
    return total


def begin(stream):
    CURRENT[0] = stream
    rc = LIB.cudaStreamBeginCapture(_vp(stream), GLOBAL)
    assert rc == 0, f"cudaStreamBeginCapture: {rc}"


def end(stream):
    g = _vp()
    rc = LIB.cudaStreamEndCapture(_vp(stream), ctypes.byref(g))
    return rc, g


def raises(fn, *texts):
    try:
        fn()
    except FlexplanError as e:
        return all(t in str(e) for t in texts), str(e)
    return False, "no error"


def run(rank, world, plan, kind, a, b, ga=1, frozen=()):
    model = make_model(kind, frozen)
    # --- the captured step ---
    st = fpt.shard(model, plan, backend="nccl", rank=rank, world_size=world, cuda_mode="capture_safe")
    opt = fpt.optimizer(st, tm.adamw)
    with DeviceOrder():
        CURRENT[0] = a
        step(st, opt, kind, rank, world, 0, ga=ga)  # uncaptured: NCCL's warm-up
        begin(b)
        err = ""
        try:
            step(st, opt, kind, rank, world, 1, ga=ga)
        except FlexplanError as e:
            err = str(e)
        rc, g = end(b)
        check(rank, "a whole step captured inside the capture, no error", not err, err)
        check(rank, "the capture ended joined and valid (no host synchronization, allocation or unjoined stream)",
              rc == 0 and bool(g.value), f"cudaStreamEndCapture returned {rc}")
        check(rank, "one live graph", st.graphs_live() == 1, f"graphs_live() = {st.graphs_live()}")
        hooks = int(st.driver.state.hooks)
        ge = _vp()
        rcs = [LIB.cudaGraphInstantiate(ctypes.byref(ge), g, 0)]
        rcs += [LIB.cudaGraphLaunch(ge, _vp(b)) for _ in range(2)]
        rcs.append(LIB.cudaStreamSynchronize(_vp(b)))
        check(rank, "two replays from C, no hook called", rcs == [0, 0, 0, 0] and int(st.driver.state.hooks) == hooks,
              f"return codes {rcs}, hooks {hooks} -> {int(st.driver.state.hooks)}")
        # between replays: an evaluation forward, and a refit into the same addresses
        CURRENT[0] = a
        inp, _ = tm.batch(kind, 99)
        err = ""
        try:
            with torch.no_grad():
                st.module(inp)
            sd = st.full_state_dict()
            sd = {k: (v * 0.5).contiguous() for k, v in sd.items()}
            path = os.path.join(TMP[0], "refit.safetensors")
            safetensors.torch.save_file(sd, path)
            ptrs = [p.data_ptr() for _, p in st.named_main_params()]
            st.load(path)
            moved = ptrs != [p.data_ptr() for _, p in st.named_main_params()]
            after = st.full_state_dict()
            wrong = [k for k in sd if not torch.equal(after[k].to(sd[k].dtype), sd[k])]
            # and load_state_dict: this rank's staging copies (state_dict), each scaled once (a tied
            # alias is the same tensor), put back into the same views
            sd2, seen = fpt.state_dict(st), set()
            for v in sd2.values():
                if id(v) not in seen and v.is_floating_point():
                    seen.add(id(v))
                    v.mul_(0.25)
            fpt.load_state_dict(st, sd2)
            moved = moved or ptrs != [p.data_ptr() for _, p in st.named_main_params()]
            want = {k: v * 0.25 for k, v in after.items()}
            after = st.full_state_dict()
            wrong += [k for k in want if not torch.equal(after[k].to(want[k].dtype), want[k])]
        except FlexplanError as e:
            err, moved, wrong = str(e), False, []
        CURRENT[0] = b
        rc2 = [LIB.cudaGraphLaunch(ge, _vp(b)), LIB.cudaStreamSynchronize(_vp(b))]
        check(rank, "an evaluation forward, a refit (load) and load_state_dict between replays, then a replay",
              not err and not moved and not wrong and rc2 == [0, 0],
              err or f"views moved {moved}, values wrong after the refit or load_state_dict for {wrong}, "
                     f"replay {rc2}")
        ok, msg = raises(st.close, "close()", "1 CUDA graph(s)", "release_graph()")
        check(rank, "close() with a live graph is an error", ok, msg)
        LIB.cudaGraphExecDestroy(ge)
        LIB.cudaGraphDestroy(g)
        st.release_graph()
        CURRENT[0] = a
        step(st, opt, kind, rank, world, 2, ga=ga)  # an uncaptured step after the replays (back on a)
        ok, msg = raises(st.release_graph, "no graph captured")
        check(rank, "release_graph() with none live is an error", ok, msg)
    st.close()
    check(rank, "close() after release_graph()", True)

    # --- refused at capture start: nothing issued, the executor usable ---
    for mode, warm, texts in (("graph", True, ("step_begin", "cuda_mode 'graph' cannot be captured")),
                              ("capture_safe", False, ("step_begin", "before any uncaptured step"))):
        model = make_model(kind, frozen)
        st = fpt.shard(model, plan, backend="nccl", rank=rank, world_size=world, cuda_mode=mode)
        opt = fpt.optimizer(st, tm.adamw)
        with DeviceOrder():
            CURRENT[0] = a
            if warm:
                step(st, opt, kind, rank, world, 0, ga=ga)
            begin(b)
            ok, msg = raises(lambda: step(st, opt, kind, rank, world, 1, ga=ga), *texts)
            rc, g = end(b)
            if g.value:
                LIB.cudaGraphDestroy(g)
            check(rank, f"refused at capture start ({mode}{'' if warm else ', no warm-up'})", ok, msg)
            CURRENT[0] = a
            opt.zero_grad()
            err = ""
            try:
                step(st, opt, kind, rank, world, 1, ga=ga)
            except FlexplanError as e:
                err = str(e)
            check(rank, f"usable after the refusal ({mode})", not err, err)
        st.close()

    # --- clip_grad_norm_: the device path against the host path; inside the capture ---
    model = make_model(kind, frozen)
    st = fpt.shard(model, plan, backend="nccl", rank=rank, world_size=world, cuda_mode="capture_safe")
    opt = fpt.optimizer(st, tm.adamw)
    with DeviceOrder():
        CURRENT[0] = a
        step(st, opt, kind, rank, world, 0, ga=ga)
        # the same grads clipped both ways (uncaptured: the device path's all-reduce and torch's
        # kernels run in stream order here), by a norm that scales them and by one that does not
        for k in range(ga):
            inp, tgt = tm.batch(kind, (world + rank) * ga + k)
            tm.loss_fn(kind, st.module, inp, tgt).backward()
        st.pre_optimizer()
        grads = [gt.clone() for _, gt, _, _ in st._shards.main]
        same, detail = True, []
        for max_norm, p in ((1e-3, 2.0), (1e3, 2.0), (1e-3, float("inf"))):
            for (_, gt, _, _), g0 in zip(st._shards.main, grads):
                gt.copy_(g0)
            t_host = st._shards.clip_grad_norm_(max_norm, p, rank, world)
            host = [gt.clone() for _, gt, _, _ in st._shards.main]
            for (_, gt, _, _), g0 in zip(st._shards.main, grads):
                gt.copy_(g0)
            t_dev = st._shards.clip_grad_norm_device(max_norm, p)
            dev = [gt.clone() for _, gt, _, _ in st._shards.main]
            ok = float(t_dev) == float(torch.tensor(t_host, dtype=torch.float32)) and \
                all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(host, dev))
            same = same and ok
            detail.append(f"max_norm {max_norm} p {p}: total {t_host!r} vs {float(t_dev)!r}, grads "
                          f"{'equal' if ok else 'differ'}")
        check(rank, "clip_grad_norm_'s device path gives the host path's norm and grads bit for bit", same,
              "; ".join(detail))
        opt.step()  # the step those grads belong to ends (post_optimizer)
        opt.zero_grad()
        begin(b)
        err = ""
        try:
            step(st, opt, kind, rank, world, 1, clip=True, ga=ga)
        except FlexplanError as e:
            err = str(e)
        rc, g = end(b)
        check(rank, "clip_grad_norm_ inside the capture: no error, the capture ends joined and valid",
              not err and rc == 0 and bool(g.value), err or f"cudaStreamEndCapture returned {rc}")
        ge = _vp()
        rcs = [LIB.cudaGraphInstantiate(ctypes.byref(ge), g, 0), LIB.cudaGraphLaunch(ge, _vp(b)),
               LIB.cudaStreamSynchronize(_vp(b))] if g.value else [-1]
        check(rank, "the graph with the device all-reduce replays", rcs == [0, 0, 0], f"return codes {rcs}")
        if g.value:
            LIB.cudaGraphExecDestroy(ge)
            LIB.cudaGraphDestroy(g)
        st.release_graph()
    st.close()

    # --- the capture ended mid-step ---
    model = make_model(kind, frozen)
    st = fpt.shard(model, plan, backend="nccl", rank=rank, world_size=world, cuda_mode="capture_safe")
    opt = fpt.optimizer(st, tm.adamw)
    with DeviceOrder():
        CURRENT[0] = a
        step(st, opt, kind, rank, world, 0, ga=ga)
        begin(b)
        inp, tgt = tm.batch(kind, world + rank)
        tm.loss_fn(kind, st.module, inp, tgt).backward()  # no optimizer step: the capture ends mid-step
        rc, g = end(b)  # the plan's streams were never joined back
        CURRENT[0] = a
        ok, msg = raises(st.sync, "ended without fp_exec_capture_end")
        check(rank, "a capture ended mid-step is reported at the next call", ok and rc != 0,
              f"cudaStreamEndCapture {rc}; {msg}")
    st.close()


def main():
    rank, world = mpi_init()
    LIB.cudaSetDevice(rank)
    a, b = ctypes.c_void_p(), ctypes.c_void_p()
    LIB.cudaStreamCreateWithFlags(ctypes.byref(a), 1)  # cudaStreamNonBlocking
    LIB.cudaStreamCreateWithFlags(ctypes.byref(b), 1)
    with tempfile.TemporaryDirectory(prefix=f"fp-capture-torch-{rank}-") as tmp:
        TMP[0] = tmp
        for name in sys.argv[1:]:
            try:
                kind, strategy, extra, opts = config(name)
                if opts.get("world", 1) > world:
                    if rank == 0:
                        print(f"SKIP {name} np={world}: needs {opts['world']} ranks", flush=True)
                    continue
                frozen = opts.get("frozen", [])
                model_js = tw.describe_model(kind, tw.make_model(kind), frozen)
                spec = tw.spec_for(strategy, extra, world, dict(opts, kind=kind))
                plan = tw.compile_plan(model_js, spec, os.path.join(tmp, f"{name}.plan.json"))
                if rank == 0:
                    print(f"-- {name} np={world}", flush=True)
                run(rank, world, plan, kind, a.value, b.value, extra.get("grad_accumulation", 1), frozen)
            except Exception as e:  # a rank failing ends every rank (no hang)
                sys.stdout.write(f"FAIL {name} np={world} rank {rank}: {type(e).__name__}: {e}\n")
                traceback.print_exc()
                sys.stdout.flush()
                mpi_abort(1)
    mpi_finalize()
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
