"""The executor from Python: one rank's replay of a compiled plan.

``Executor`` wraps ``fp_exec`` of ``include/flexplan.h`` over ctypes. It owns
the arena every buffer of the plan lives in; its views (``ParamView``) are the
arena's own memory, never a copy, and keep their addresses for the
executor's life (refits included):

- without torch, as ``memoryview`` objects (``ParamView.buffer("weight")``)
  or raw ``(address, dtype, numel)`` triples;
- with torch, as tensors: on the MPI and torch backends ``torch.frombuffer``
  over host memory; on the NCCL backend ``torch.as_tensor`` over an object exposing
  ``__cuda_array_interface__`` (device memory; GPU runs: docs/run-record.md).

Hooks (``step_begin``, ``pre_forward(m)``, ...) run the plan's next segment;
a hook out of plan order raises ``FlexplanError`` with the executor's
message and changes nothing. ``flexplan.torch.shard`` drives them from a
``torch.nn.Module``'s own hooks; this class is the layer under it.

MPI: ``mpi_init()`` / ``mpi_finalize()`` / ``mpi_abort()`` wrap the library's
``fp_mpi_*`` helpers, so a trainer started by ``mpirun`` needs no mpi4py.

Lifetime: ``destroy()`` frees the arena. Every later call of the executor or
of a ParamView raises ``FlexplanError`` saying the executor is closed, and
every memoryview and tensor it handed out (``buffer()``, ``tensor()``) is
emptied first (memoryviews released, tensors set to an empty storage), so
none of them reads or writes the freed memory. Tensors a caller derived
from those by slicing or ``view`` share the arena memory and must not
outlive ``destroy()``.
"""
import ctypes
import os
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

from . import _lib as _libmod
from .errors import error_maker, FlexplanError

if TYPE_CHECKING:  # annotations only
    from .plan import Plan


_err = error_maker(_libmod.FP_ERR_ARG)  # the package's one error helper (flexplan.errors)


def _vote(ex: "Executor", why: Optional[str], what: str) -> Optional[str]:
    """Every rank's verdict on a step each rank tried on its own (reading
    files, checking a module): None when every rank succeeded, else this
    rank's message (why), or, on a rank that succeeded, one naming the rank
    that failed or how many did ("could not <what>"). Collective: every rank
    calls it (fp_exec_all_reduce_f64)."""
    ok = why is None
    if ex.world_size == 1:
        return why
    v = ex.all_reduce_f64([0.0 if ok else 1.0, 0.0 if ok else float(ex.rank)])
    if v[0] == 0:
        return None
    if not ok:
        return why
    if v[0] == 1:
        return f"rank {v[1]:.0f} could not {what} (its message says why)"
    return f"{v[0]:.0f} ranks could not {what} (their messages say why)"


def safetensors_names(path: Union[str, "os.PathLike[str]"]) -> List[str]:
    """The tensor names of a safetensors file, read by the library's own
    reader (fp_safetensors_open: the checks the refit makes); FlexplanError
    (FP_ERR_WEIGHTS, "path: ...") for a file that is not one."""
    lib = _L()
    h = ctypes.c_void_p()
    st = lib.fp_safetensors_open(_libmod.fsencode(path, "path"), ctypes.byref(h))
    try:
        if st != 0:
            msg = lib.fp_safetensors_errmsg(h).decode() if h.value else ""
            raise FlexplanError(st, msg or f"{os.fspath(path)}: {lib.fp_status_name(st).decode()}")
        return [lib.fp_safetensors_name(h, i).decode() for i in range(lib.fp_safetensors_count(h))]
    finally:
        if h.value:
            lib.fp_safetensors_close(h)


def _closed_err(what: str) -> FlexplanError:
    return FlexplanError(_libmod.FP_ERR_ARG, f"{what}: the executor is closed (destroy() freed its arena): its "
                                             f"views and tensors are gone; create a new Executor")


__all__ = ["Executor", "ParamView", "Extent", "mpi_init", "mpi_finalize", "mpi_abort",
           "HOOKS", "BACKENDS"]

# the enums (include/flexplan.h), defined once in flexplan._lib
HOOKS, HOOK_NAMES, BACKENDS = _libmod.HOOKS, _libmod.HOOK_NAMES, _libmod.BACKENDS
PROGRESS, CUDA_MODES, ELEMS = _libmod.PROGRESS, _libmod.CUDA_MODES, _libmod.ELEMS
FP_ALL_REDUCE_MAX = _libmod.FP_ALL_REDUCE_MAX


def _L() -> Any:
    return _libmod.lib()


class Extent:
    """Where this rank's shard elements sit in the full (row-major, flattened)
    param: for k in range(runs), shard elements [k*shard_stride, +n_k) are full
    elements [full_off + k*full_stride, +n_k), n_k = len but for the last run,
    last_len (shorter only on the rank holding a block-cyclic layout's short
    last block). runs == 0: nothing held."""
    __slots__ = ("runs", "len", "shard_stride", "full_off", "full_stride", "last_len")

    def __init__(self, e: Any) -> None:
        self.runs, self.len = int(e.runs), int(e.len)
        self.shard_stride, self.full_off, self.full_stride = int(e.shard_stride), int(e.full_off), int(e.full_stride)
        self.last_len = int(e.last_len)

    def pairs(self) -> List[Tuple[int, int, int]]:
        """[(shard_start, full_start, length), ...] one per run."""
        return [(k * self.shard_stride, self.full_off + k * self.full_stride,
                 self.last_len if k == self.runs - 1 else self.len) for k in range(self.runs)]

    @property
    def held(self) -> int:
        """elements of the full param this rank holds"""
        return (self.runs - 1) * self.len + self.last_len if self.runs > 0 else 0

    def __repr__(self) -> str:
        return (f"Extent(runs={self.runs}, len={self.len}, shard_stride={self.shard_stride}, "
                f"full_off={self.full_off}, full_stride={self.full_stride}, last_len={self.last_len})")


class _Buf:
    """One fp_tensor: an address in the arena, its dtype and element count."""
    __slots__ = ("ptr", "dtype", "numel")

    def __init__(self, t: Any) -> None:
        self.ptr = int(t.data or 0)
        self.dtype = ELEMS.get(int(t.dtype), ("?", 0, None))[0]
        self.numel = int(t.numel)

    @property
    def nbytes(self) -> int:
        return self.numel * _libmod.elem_size(self.dtype)


class ParamView:
    """The plan's views of one param on this rank (fp_param_view): ``weight``
    (unsharded compute weight, param dtype), ``ugrad`` (unsharded grad the
    backward accumulates into), ``main`` and ``grad`` (this rank's shard of the
    main weights and main grads, padding included), ``shard`` (an Extent),
    ``optim`` (the optimizer state the plan holds for this shard: a list of
    as many views as the plan's optimizer has states, AdamW's exp_avg and
    exp_avg_sq, SGD's momentum_buffer; empty for a frozen param).

    An MXFP8 param (``mxfp8`` True: a frozen replicated bucket with
    ``param_dtype: "mxfp8"``) keeps one copy of its weights: ``weight`` and
    ``main`` are the same e4m3 bytes (numel elements, row-major), and
    ``scales`` holds its e8m0 block scales, one per 32 consecutive elements of
    the flat param (ceil(numel / 32)); element e is worth
    e4m3(weight[e]) * 2**(scales[e // 32] - 127). For every other param
    ``scales`` is empty."""

    def __init__(self, ex: "Executor", index: int, v: Any) -> None:
        self._ex = ex
        self.index = index
        self.name = v.name.decode()
        self.module = int(v.module)
        self.shape = tuple(int(v.shape[i]) for i in range(v.ndim))
        self.numel = int(v.numel)
        self.requires_grad = bool(v.requires_grad)
        self.weight, self.ugrad = _Buf(v.weight), _Buf(v.ugrad)
        self.main, self.grad = _Buf(v.main), _Buf(v.grad)
        self.shard = Extent(v.shard)
        self.optim = [_Buf(v.optim[k]) for k in range(ex.optim_states)] if self.requires_grad else []
        self.reduce_dtype = ELEMS.get(int(v.reduce_dtype), ("?",))[0]
        self.scales = _Buf(v.scales)
        # tensor parallelism (the Executor sets them): the dim of the global
        # tensor split over the tp ranks (None: whole on every tp rank), and
        # the global shape (shape with that dim times tp)
        self.tp_dim: Optional[int] = None
        self.global_shape = self.shape
        # whether the plan keeps the compute weight between steps (the Executor
        # sets it, from fp_plan_param_weight_persistent): code that writes the
        # main weights itself refreshes such a weight from them too
        self.weight_persistent = False

    @property
    def mxfp8(self) -> bool:
        """True for an MXFP8 param (e4m3 weight plus e8m0 ``scales``)."""
        return self.scales.numel > 0

    def buffer(self, which: str) -> memoryview:
        """A memoryview over one view's bytes ('weight', 'ugrad', 'main',
        'grad', 'scales'), typed where Python's struct module has the type
        (fp32 'f', fp16 'e'; bf16 as raw 16-bit 'H'; e4m3 and e8m0 as bytes
        'B'). Empty when this rank holds none."""
        self._ex._live(f"ParamView({self.name!r}).buffer")
        b = getattr(self, which)
        if b.ptr == 0 or b.numel == 0:
            return memoryview(b"")
        raw = (ctypes.c_char * b.nbytes).from_address(b.ptr)
        fmt = _libmod.ELEM_BY_NAME.get(b.dtype, (None, 1, "B"))[2]
        return self._ex._hand_out(memoryview(raw).cast("B").cast(fmt))  # type: ignore[call-overload]  # fmt from ELEMS

    def tensor(self, which: str, shaped: Optional[bool] = None) -> Any:
        """A torch tensor over one view (no copy). shaped: the full shape for
        'weight' and 'ugrad' (default), flat for 'main' and 'grad'. which may
        also be 'optim0' / 'optim1': optimizer state k (flat, like 'main'), or
        'scales' (flat). e4m3 views are torch.float8_e4m3fn and e8m0 views
        torch.float8_e8m0fnu where this torch has them, else torch.uint8."""
        self._ex._live(f"ParamView({self.name!r}).tensor")
        b = self.optim[int(which[5:])] if which.startswith("optim") else getattr(self, which)
        return self._ex._tensor(b, self.shape if (
            shaped if shaped is not None else which in ("weight", "ugrad")) else None)

    def __repr__(self) -> str:
        return f"ParamView({self.name!r}, shape={self.shape}, module={self.module}, shard={self.shard})"


def _check(lib: Any, st: int, x: Any, what: str) -> None:
    if st != 0:
        msg = lib.fp_exec_errmsg(x).decode() if x else ""
        name = lib.fp_status_name(st).decode()
        raise FlexplanError(st, msg if msg else f"{what}: {name}")


def mpi_init() -> Tuple[int, int]:
    """MPI_Init_thread (MPI_THREAD_MULTIPLE) unless already initialized;
    returns (rank, world_size) of MPI_COMM_WORLD."""
    lib = _L()
    r, w = ctypes.c_int(0), ctypes.c_int(0)
    st = lib.fp_mpi_init(ctypes.byref(r), ctypes.byref(w))
    if st != 0:
        raise FlexplanError(st, f"fp_mpi_init: {lib.fp_status_name(st).decode()}")
    return r.value, w.value


def nccl_get_id() -> bytes:
    """A new NCCL unique id (bytes) for Executor(..., nccl_id=...): made on
    rank 0, shipped to every rank by the trainer (e.g. torch.distributed)."""
    lib = _L()
    out = _libmod.fp_nccl_id()
    st = lib.fp_nccl_get_id(ctypes.byref(out))
    if st != 0:
        raise FlexplanError(st, "fp_nccl_get_id failed (flexplan built without CUDA/NCCL, or NCCL failed)")
    return bytes(out.bytes)


def mpi_finalize() -> None:
    """MPI_Finalize (a no-op when MPI is not initialized or finalized already)."""
    lib = _L()
    lib.fp_mpi_finalize()


def mpi_abort(code: int = 1) -> None:
    """MPI_Abort(MPI_COMM_WORLD, code): ends every rank of the job. Never returns."""
    lib = _L()
    lib.fp_mpi_abort(int(code))


class Executor:
    """One rank's executor of a plan.

    Executor(plan, rank=None, world_size=None, backend="mpi", progress="default",
             cuda_stream=None, cuda_mode="graph")

    plan: a ``flexplan.Plan`` or a plan.json path. backend: "mpi", "nccl", or
    "torch" (host memory, the plan's collectives on torch.distributed process
    groups: flexplan._torchdist; torch.distributed must be initialized). rank /
    world_size default to torch.distributed's for "torch", else to MPI's
    (``mpi_init()``). NCCL backend: cuda_stream (an int cudaStream_t, e.g.
    ``torch.cuda.current_stream().cuda_stream``) becomes the plan's compute
    stream; nccl_id (bytes from ``nccl_get_id()`` on rank 0, shipped by the
    caller's own channel) bootstraps NCCL (FP_NCCL_BOOT_ID), else the
    executor's default (MPI when initialized, else NCCL_COMM_ID). Collective: every rank creates its executor with
    the same plan. Use as a context manager or call ``destroy()`` (also
    collective) before ``mpi_finalize()``.
    """

    def __init__(self, plan: Union["Plan", str, "os.PathLike[str]"], rank: Optional[int] = None,
                 world_size: Optional[int] = None, backend: str = "mpi", progress: str = "default",
                 cuda_stream: Optional[int] = None, cuda_mode: str = "graph", nccl_id: Optional[bytes] = None) -> None:
        self._x = None
        self._lib = lib = _L()
        self._handed: Dict[int, Any] = {}  # id -> weakref of every memoryview / tensor over the arena handed out
        if backend not in BACKENDS:
            raise _err(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
        self.backend = backend
        self.plan = plan
        self._plan_handle = _plan_handle(plan)
        try:
            self._init_rest(lib, rank, world_size, progress, cuda_mode, cuda_stream, nccl_id)
        except BaseException:
            self.destroy()  # frees the plan handle this executor loaded, if any
            raise

    def _init_rest(self, lib, rank, world_size, progress, cuda_mode, cuda_stream, nccl_id):
        self._transport = None
        if self.backend == "torch":
            # the external backend over torch.distributed (flexplan._torchdist): no MPI
            from ._torchdist import TorchTransport  # pylint: disable=import-outside-toplevel
            self._transport = TorchTransport()
            rank = self._transport.rank if rank is None else rank
            world_size = self._transport.world if world_size is None else world_size
        if rank is None or world_size is None:
            r, w = mpi_init()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.rank, self.world_size = int(rank), int(world_size)
        S = _libmod
        cfg = S.fp_exec_config()
        cfg.backend = BACKENDS[self.backend]
        cfg.rank, cfg.world_size = self.rank, self.world_size
        cfg.bootstrap = None
        cfg.progress = PROGRESS[progress]
        cfg.cuda_mode = CUDA_MODES[cuda_mode]
        # torch's default stream is handle 0, CUDA's legacy default stream: never NULL ("no stream")
        cfg.cuda_stream = ctypes.c_void_p(_libmod.cuda_stream_arg(cuda_stream))
        if nccl_id is not None:
            if len(nccl_id) != ctypes.sizeof(S.fp_nccl_id):
                raise _err(f"nccl_id must be {ctypes.sizeof(S.fp_nccl_id)} bytes, got {len(nccl_id)}")
            cfg.nccl_boot = S.FP_NCCL_BOOT_ID
            ctypes.memmove(ctypes.byref(cfg.nccl_id), bytes(nccl_id), len(nccl_id))
        if self._transport is not None:
            cfg.transport = self._transport.address()
        x = ctypes.c_void_p()
        st = lib.fp_exec_create(self._plan_handle, ctypes.byref(cfg), ctypes.byref(x))
        self._x = x if x.value else None
        if st != 0:
            msg = lib.fp_exec_errmsg(self._x).decode() if self._x else ""
            raise FlexplanError(st, f"executor setup failed: {msg or lib.fp_status_name(st).decode()}")
        info = S.fp_plan_info()
        lib.fp_plan_get_info(self._plan_handle, ctypes.byref(info))
        self.nparams, self.nmodules = int(info.nparams), int(info.nmodules)
        self.grad_accumulation = int(info.grad_accumulation)
        # the optimizer whose state the plan holds ("none", "sgd", "adamw")
        self.optimizer = (info.optimizer or b"none").decode()
        self.optim_states = int(info.optim_states)
        # the mesh's tensor-parallel size: params are this rank's tp-local slices
        self.tp = int(info.tp_size) or 1
        self.tp_rank = self.rank % self.tp
        self.modules = [lib.fp_plan_module_name(self._plan_handle, m).decode() for m in range(self.nmodules)]
        self.params = []
        for i in range(self.nparams):
            v = S.fp_param_view()
            _check(lib, lib.fp_exec_param_at(self._x, i, ctypes.byref(v)), self._x, "fp_exec_param_at")
            pv = ParamView(self, i, v)
            d = int(lib.fp_plan_param_tp_dim(self._plan_handle, i))
            pv.tp_dim = d if d >= 0 else None
            pv.global_shape = tuple(s * self.tp if k == d else s for k, s in enumerate(pv.shape))
            pv.weight_persistent = lib.fp_plan_param_weight_persistent(self._plan_handle, i) == 1
            self.params.append(pv)
        self._by_name = {p.name: p for p in self.params}
        # (kind, module, micro-batch, ops): ops not counting compute placeholders,
        # which the executor drops (a segment of only those is empty to it),
        # from the library (fp_plan_segment_at), not from plan.json
        self.segments = plan_segments(lib, self._plan_handle, int(info.nsegments))

    # -- lifetime --------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once destroy() ran (or setup failed)."""
        return self._x is None

    def _live(self, what):
        """FlexplanError naming `what` when the executor is closed."""
        if self._x is None:
            raise _closed_err(what)

    def _hand_out(self, obj):
        """obj (a memoryview or tensor over the arena), remembered weakly so
        destroy() can empty it before the arena is freed."""
        k = id(obj)
        handed = self._handed
        handed[k] = weakref.ref(obj, lambda _r, k=k, h=handed: h.pop(k, None))
        return obj

    def _empty_handed(self):
        """Before the arena is freed: every memoryview handed out released,
        every tensor set to an empty storage (reads see no elements)."""
        refs, self._handed = list(self._handed.values()), {}
        torch = None
        for r in refs:
            o = r()
            if o is None:
                continue
            if isinstance(o, memoryview):
                try:
                    o.release()
                except (BufferError, ValueError):
                    pass
                continue
            if torch is None:
                import torch
            with torch.no_grad():
                o.grad = None
                o.set_()

    def destroy(self) -> None:
        """Wait for all issued work and free the executor (collective). Every
        view and tensor handed out is emptied first (module docstring)."""
        if self._x is not None:
            self._empty_handed()
            self._lib.fp_exec_destroy(self._x)
            self._x = None
        h = getattr(self, "_plan_handle", None)
        if isinstance(h, _OwnedPlan) and h.value:
            self._lib.fp_plan_free(h)
            h.value = None

    close = destroy

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.destroy()
        return False

    def __del__(self) -> None:
        # never collective from the garbage collector: a rank destroying here
        # while others do not would hang; destroy() explicitly.
        pass

    # -- hooks -----------------------------------------------------------
    def hook(self, hook: Union[str, int], module: Union[str, int] = -1) -> None:
        """Run the plan's next segment: hook is a name ('pre_forward', ...) or
        an fp_hook value; module a module index or name (-1 for step hooks)."""
        self._live("hook")
        h = HOOKS[hook] if isinstance(hook, str) else int(hook)
        m = self.module_index(module) if isinstance(module, str) else int(module)
        st = self._lib.fp_exec_hook(self._x, h, m)
        if st != 0:
            _check(self._lib, st, self._x, "hook")

    def step_begin(self) -> None:
        self.hook(0, -1)

    def pre_forward(self, m: Union[str, int]) -> None:
        self.hook(1, m)

    def post_forward(self, m: Union[str, int]) -> None:
        self.hook(2, m)

    def pre_backward(self, m: Union[str, int]) -> None:
        self.hook(3, m)

    def post_backward(self, m: Union[str, int]) -> None:
        self.hook(4, m)

    def pre_optimizer(self) -> None:
        self.hook(5, -1)

    def post_optimizer(self) -> None:
        self.hook(6, -1)

    def sync(self) -> None:
        """Wait for every piece of work issued so far, on every stream."""
        self._live("sync")
        _check(self._lib, self._lib.fp_exec_sync(self._x), self._x, "sync")

    def all_reduce_f64(self, values: Sequence[float]) -> List[float]:
        """Sum a list of floats across every rank (collective, in place
        semantics: returns the sums). Chunked by FP_ALL_REDUCE_MAX."""
        self._live("all_reduce_f64")
        vals = [float(v) for v in values]
        out: List[float] = []
        for i in range(0, max(len(vals), 1), FP_ALL_REDUCE_MAX):
            chunk = vals[i:i + FP_ALL_REDUCE_MAX]
            if not chunk:
                break
            arr = (ctypes.c_double * len(chunk))(*chunk)
            _check(self._lib, self._lib.fp_exec_all_reduce_f64(self._x, arr, len(chunk)), self._x,
                   "all_reduce_f64")
            out.extend(arr)
        return out

    def all_reduce_f64_buffer(self, addr: int, n: int) -> None:
        """Sum n doubles at a raw address (e.g. a float64 tensor's data_ptr())
        across every rank, in place, in chunks of FP_ALL_REDUCE_MAX."""
        self._live("all_reduce_f64_buffer")
        for i in range(0, n, FP_ALL_REDUCE_MAX):
            k = min(FP_ALL_REDUCE_MAX, n - i)
            p = ctypes.cast(ctypes.c_void_p(addr + 8 * i), ctypes.POINTER(ctypes.c_double))
            _check(self._lib, self._lib.fp_exec_all_reduce_f64(self._x, p, k), self._x, "all_reduce_f64")

    def all_reduce_f64_device(self, addr: int, n: int, op_max: bool = False) -> None:
        """Sum (or with op_max, the maximum) n doubles of device memory at
        addr across every rank, in place, enqueued on the trainer's compute
        stream and not waited for (fp_exec_all_reduce_f64_dev: it can be
        captured into a graph); the NCCL backend only."""
        self._live("all_reduce_f64_device")
        _check(self._lib, self._lib.fp_exec_all_reduce_f64_dev(self._x, ctypes.c_void_p(addr), int(n), int(bool(op_max))),
               self._x, "all_reduce_f64_device")

    # -- views, weights, stats --------------------------------------------
    def module_index(self, name: str) -> int:
        self._live("module_index")
        m = self._lib.fp_plan_module_index(self._plan_handle, _libmod.cstr(name, "name", allow_none=False))
        if m < 0:
            raise _err(f"the plan has no module {name!r}")
        return m

    def param(self, name: str) -> ParamView:
        """The ParamView of a param by name (FlexplanError if the plan has none)."""
        self._live(f"param({name!r})")
        try:
            return self._by_name[name]
        except KeyError:
            raise _err(f"the plan has no param {name!r}") from None

    def load_weights(self, paths: Union[Union[str, "os.PathLike[str]"], Sequence[Union[str, "os.PathLike[str]"]]]) -> None:
        """Refit from safetensors files of full tensors (between steps): every
        param of the plan exactly once, exact shape, F32/BF16/F16. Each rank
        reads only what it stores; a failed refit changes nothing."""
        self._live("load_weights")
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        enc = [_libmod.fsencode(p, "paths") for p in paths]
        arr = (ctypes.c_char_p * len(enc))(*enc)
        _check(self._lib, self._lib.fp_exec_load_weights(self._x, arr, len(enc)), self._x, "load_weights")

    def stats(self) -> Dict[str, Union[int, float]]:
        """fp_exec_get_stats as a dict."""
        self._live("stats")
        s = _libmod.fp_exec_stats()
        _check(self._lib, self._lib.fp_exec_get_stats(self._x, ctypes.byref(s)), self._x, "stats")
        return {k: (int(getattr(s, k)) if not isinstance(getattr(s, k), float) else getattr(s, k))
                for k in (f[0] for f in s._fields_)}

    def timing_start(self, steps: int) -> None:
        """Opt-in measured timing: record when each hook and op of the next
        `steps` steps ran on this rank (between steps; MPI backend)."""
        self._live("timing_start")
        f = _timing_fn("fp_exec_timing_start", [ctypes.c_void_p, ctypes.c_int32])
        _check(self._lib, f(self._x, int(steps)), self._x, "timing_start")

    def timing_write(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write the recorded steps (flexplan.timing.v1 JSON; draw them with
        `flexplan viz PLAN --measured FILE...`)."""
        self._live("timing_write")
        f = _timing_fn("fp_exec_timing_write", [ctypes.c_void_p, ctypes.c_char_p])
        _check(self._lib, f(self._x, _libmod.fsencode(path, "path")), self._x, "timing_write")

    def set_cuda_stream(self, stream: int) -> None:
        """NCCL backend: the trainer now computes on ``stream`` (an int
        cudaStream_t; 0 is CUDA's legacy default stream, torch's default). From
        the next hook on it is the plan's compute stream, ordered after
        everything issued on the old one (fp_exec_set_cuda_stream)."""
        self._live("set_cuda_stream")
        if stream is None:
            raise TypeError("set_cuda_stream: stream is a cudaStream_t (0: the legacy default stream), not None")
        arg = _libmod.cuda_stream_arg(stream)
        _check(self._lib, self._lib.fp_exec_set_cuda_stream(self._x, ctypes.c_void_p(arg)), self._x,
               "set_cuda_stream")

    def cuda_stream(self) -> Optional[int]:
        """NCCL backend: the compute stream (a cudaStream_t as an int); None for MPI."""
        self._live("cuda_stream")
        p = self._lib.fp_exec_cuda_stream(self._x)
        return int(p) if p else None

    # -- torch -----------------------------------------------------------
    def _tensor(self, buf, shape):
        self._live("tensor")
        import torch
        dt = _libmod.torch_dtype(buf.dtype, torch.uint8)
        # the NCCL backend's arena is CUDA memory; where torch has no CUDA device and the
        # executor still made one (the simulated device of docs/simdev.md, whose device
        # memory the host may address), views are CPU tensors as for the MPI backend
        on_host = self.backend in ("mpi", "torch") or not torch.cuda.is_available()
        if buf.ptr == 0 or buf.numel == 0:
            t = torch.empty(0, dtype=dt, device="cpu" if on_host else "cuda")
            return t.view(shape) if shape is not None and buf.numel == 0 and _numel(shape) == 0 else t
        if on_host:
            raw = (ctypes.c_char * buf.nbytes).from_address(buf.ptr)
            import warnings
            with warnings.catch_warnings():
                # the arena is writable; torch warns about buffers it thinks are not
                warnings.simplefilter("ignore")
                t = torch.frombuffer(raw, dtype=dt, count=buf.numel)
        else:
            # bf16 has no __cuda_array_interface__ typestr: exposed as int16, viewed back
            t = torch.as_tensor(_CudaArray(buf, dt), device="cuda")
            if t.dtype != dt:
                t = t.view(dt)
        return self._hand_out(t.view(shape) if shape is not None else t)


def _timing_fn(name, argtypes):
    f = getattr(_L(), name, None)
    if f is None:
        raise _err(f"this libflexplan has no {name} (measured timing)")
    f.argtypes, f.restype = argtypes, ctypes.c_int
    return f


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class _CudaArray:
    """Exposes device memory of the NCCL arena to torch.as_tensor
    (__cuda_array_interface__ v3; stream None: the caller orders with the
    executor's compute stream). GPU runs: docs/run-record.md."""

    def __init__(self, buf, torch_dtype):
        typestr = _libmod.ELEM_BY_NAME.get(buf.dtype, (None, 1, "B", "|u1"))[3]
        self._buf = buf
        self.__cuda_array_interface__ = {"shape": (buf.numel,), "typestr": typestr,
                                         "data": (buf.ptr, False), "version": 3, "strides": None,
                                         "stream": None}
        self._dtype = torch_dtype


def plan_segments(lib, handle, n):
    """The plan's step as [(hook name, module, micro-batch, ops)]
    (fp_plan_segment_at)."""
    seg = _libmod.fp_plan_segment()
    out = []
    for i in range(n):
        _check_plan(lib, lib.fp_plan_segment_at(handle, i, ctypes.byref(seg)), handle, "fp_plan_segment_at")
        out.append((HOOK_NAMES[seg.hook], int(seg.module), int(seg.micro), int(seg.ops)))
    return out


def _check_plan(lib, st, handle, what):
    if st != 0:
        raise FlexplanError(st, f"{what} failed")


def _plan_handle(plan):
    """The fp_plan* of a flexplan.Plan or a path (the step's segments come
    from the library, fp_plan_segment_at)."""
    lib = _L()
    if isinstance(plan, (str, os.PathLike)):
        path = os.fspath(plan)
        h = ctypes.c_void_p()
        st = lib.fp_plan_load(_libmod.fsencode(path, "plan"), ctypes.byref(h))
        if st != 0:
            msg = lib.fp_plan_errmsg(h).decode() if h.value else ""
            if h.value:
                lib.fp_plan_free(h)
            raise FlexplanError(st, msg or f"cannot load {path}")
        return _OwnedPlan(h.value)
    return _plan_obj_handle(plan)


class _OwnedPlan(ctypes.c_void_p):
    """A plan handle the executor loaded itself from a path: freed by
    Executor.destroy(), after the executor (a plan must outlive its
    executors)."""


def _plan_obj_handle(plan):
    for attr in ("_handle", "handle", "_h"):
        h = getattr(plan, attr, None)
        if h is not None:
            return h
    raise _err("not a plan: pass a flexplan.Plan or a plan.json path")
