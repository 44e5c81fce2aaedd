"""flexplan._lib - the shared library libflexplan.so through ctypes.

Finds the library, loads it once, and declares the argument and result types
of every public function of include/flexplan.h (and of its structs), so the
rest of the package (and the Executor binding) calls C with checked types.

Where the library is looked for, in order:
  1. the FLEXPLAN_LIBRARY environment variable: the path of the library
     file (an error when it names nothing loadable; never silently skipped);
  2. next to the installed package: `cmake --install` writes the file
     `_library_path` into the package holding the library's path relative
     to the package directory (e.g. ../../../libflexplan.so.0);
  3. the source tree's build: <source>/build/libflexplan.so (running with
     PYTHONPATH=<source>/python after `cmake --build build`).

The library is loaded with RTLD_GLOBAL: Open MPI's components, loaded by MPI
itself later, resolve MPI's symbols in the global scope.
"""

import ctypes
import os
import threading

from .errors import FlexplanError

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib = None
_lib_path = None

# ---- enums (include/flexplan.h) --------------------------------------------------
# fp_status, in the enum's order (flexplan.errors names a status from this)
STATUS_NAMES = ("FP_OK", "FP_ERR_ARG", "FP_ERR_PLAN", "FP_ERR_ORDER", "FP_ERR_MISMATCH", "FP_ERR_WEIGHTS",
                "FP_ERR_BACKEND", "FP_ERR_NOMEM", "FP_ERR_INPUT", "FP_ERR_TIMEOUT")
(FP_OK, FP_ERR_ARG, FP_ERR_PLAN, FP_ERR_ORDER, FP_ERR_MISMATCH, FP_ERR_WEIGHTS, FP_ERR_BACKEND, FP_ERR_NOMEM,
 FP_ERR_INPUT, FP_ERR_TIMEOUT) = range(len(STATUS_NAMES))

FP_ELEM_FP32, FP_ELEM_BF16, FP_ELEM_FP16, FP_ELEM_E4M3, FP_ELEM_E8M0, FP_ELEM_U8 = range(6)

FP_BACKEND_MPI = 1
FP_BACKEND_NCCL = 2
FP_BACKEND_EXTERNAL = 3

# fp_coll: the ops an external transport runs
(FP_COLL_ALL_GATHER, FP_COLL_ALL_GATHER_V, FP_COLL_REDUCE_SCATTER, FP_COLL_REDUCE_SCATTER_V, FP_COLL_ALL_REDUCE,
 FP_COLL_BROADCAST, FP_COLL_REDUCE, FP_COLL_SEND, FP_COLL_RECV, FP_COLL_ALL_REDUCE_F64) = range(10)

FP_PROGRESS_DEFAULT, FP_PROGRESS_POLL, FP_PROGRESS_THREAD = range(3)
FP_CUDA_GRAPH, FP_CUDA_EAGER, FP_CUDA_CAPTURE_SAFE = range(3)
FP_NCCL_BOOT_DEFAULT, FP_NCCL_BOOT_ID, FP_NCCL_BOOT_MPI, FP_NCCL_BOOT_ENV = range(4)

(FP_HOOK_STEP_BEGIN, FP_HOOK_PRE_FORWARD, FP_HOOK_POST_FORWARD, FP_HOOK_PRE_BACKWARD, FP_HOOK_POST_BACKWARD,
 FP_HOOK_PRE_OPTIMIZER, FP_HOOK_POST_OPTIMIZER) = range(7)

(FP_EVENT_PRE_FORWARD, FP_EVENT_POST_FORWARD, FP_EVENT_PRE_BACKWARD, FP_EVENT_POST_BACKWARD, FP_EVENT_PRE_OPTIMIZER,
 FP_EVENT_POST_OPTIMIZER, FP_EVENT_BACKWARD_DONE, FP_EVENT_RECOMPUTE_BEGIN, FP_EVENT_RECOMPUTE_END) = range(1, 10)

FP_NCCL_ID_BYTES = 128
# fp_plan_load_flags flags
FP_LOAD_SEMANTIC = 1
FP_LOAD_NO_SEMANTIC = 2
FP_ALL_REDUCE_MAX = 4096

# ---- the same enums by name (the one table the package uses) -----------------------
# fp_hook values
HOOKS = {"step_begin": FP_HOOK_STEP_BEGIN, "pre_forward": FP_HOOK_PRE_FORWARD, "post_forward": FP_HOOK_POST_FORWARD,
         "pre_backward": FP_HOOK_PRE_BACKWARD, "post_backward": FP_HOOK_POST_BACKWARD,
         "pre_optimizer": FP_HOOK_PRE_OPTIMIZER, "post_optimizer": FP_HOOK_POST_OPTIMIZER}
HOOK_NAMES = tuple(sorted(HOOKS, key=lambda h: HOOKS[h]))  # by fp_hook value
# fp_backend, fp_progress, fp_cuda_mode values
# ("torch": the external backend over torch.distributed process groups, flexplan._torchdist)
BACKENDS = {"mpi": FP_BACKEND_MPI, "nccl": FP_BACKEND_NCCL, "torch": FP_BACKEND_EXTERNAL}
PROGRESS = {"default": FP_PROGRESS_DEFAULT, "poll": FP_PROGRESS_POLL, "thread": FP_PROGRESS_THREAD}
CUDA_MODES = {"graph": FP_CUDA_GRAPH, "eager": FP_CUDA_EAGER, "capture_safe": FP_CUDA_CAPTURE_SAFE}
# fp_elem values -> (name, bytes, struct format for memoryview.cast, __cuda_array_interface__ typestr,
# the torch dtype's attribute name)
ELEMS = {FP_ELEM_FP32: ("fp32", 4, "f", "<f4", "float32"), FP_ELEM_BF16: ("bf16", 2, "H", "<i2", "bfloat16"),
         FP_ELEM_FP16: ("fp16", 2, "e", "<f2", "float16"), FP_ELEM_E4M3: ("e4m3", 1, "B", "|u1", "float8_e4m3fn"),
         FP_ELEM_E8M0: ("e8m0", 1, "B", "|u1", "float8_e8m0fnu"), FP_ELEM_U8: ("u8", 1, "B", "|u1", "uint8")}
ELEM_BY_NAME = {v[0]: v for v in ELEMS.values()}
# the float dtypes a param, main weight or grad may have (model.json "dtype")
FLOAT_DTYPES = ("fp32", "bf16", "fp16")


def elem_size(name):
    """Bytes per element of a dtype name ("fp32", ...; 1 for unknown names)."""
    e = ELEM_BY_NAME.get(name)
    return e[1] if e else 1


def torch_dtype(name, default=None):
    """The torch dtype of a dtype name ("fp32" -> torch.float32, "e4m3" ->
    torch.float8_e4m3fn where this torch has it, else torch.uint8); default
    for a name that is not a dtype. Imports torch."""
    import torch  # pylint: disable=import-outside-toplevel
    e = ELEM_BY_NAME.get(name)
    if e is None:
        return default
    return getattr(torch, e[4], torch.uint8)


# ---- structs ---------------------------------------------------------------------
c_int64_p = ctypes.POINTER(ctypes.c_int64)


class fp_plan_info(ctypes.Structure):
    """struct fp_plan_info."""
    _fields_ = [
        ("model", ctypes.c_char_p),
        ("strategy", ctypes.c_char_p),
        ("world_size", ctypes.c_int64),
        ("grad_accumulation", ctypes.c_int64),
        ("arena_bytes", ctypes.c_int64),
        ("host_bytes", ctypes.c_int64),
        ("nmodules", ctypes.c_int32),
        ("nparams", ctypes.c_int32),
        ("nsegments", ctypes.c_int32),
        ("nops", ctypes.c_int32),
        ("hash", ctypes.c_uint64),
        ("optimizer", ctypes.c_char_p),
        ("optim_states", ctypes.c_int32),
        ("optim_dtype", ctypes.c_int),
        ("tp_size", ctypes.c_int64),
    ]


class fp_plan_segment(ctypes.Structure):
    """struct fp_plan_segment: one segment of the plan's step."""
    _fields_ = [("hook", ctypes.c_int), ("module", ctypes.c_int32), ("micro", ctypes.c_int32),
                ("ops", ctypes.c_int32)]


class fp_driver_state(ctypes.Structure):
    """struct fp_driver_state: where a hook driver is (read in place: fp_driver_state_of)."""
    _fields_ = [
        ("pos", ctypes.c_int32),
        ("micro", ctypes.c_int32),
        ("in_backward", ctypes.c_int32),
        ("pre_optimizer", ctypes.c_int32),
        ("hooks", ctypes.c_int64),
        ("skipped", ctypes.c_int64),
        ("recomputes", ctypes.c_int64),
        ("exec_s", ctypes.c_double),
        ("exec_step_s", ctypes.c_double),
    ]


class fp_nccl_id(ctypes.Structure):
    """struct fp_nccl_id: an ncclUniqueId's bytes."""
    _fields_ = [("bytes", ctypes.c_ubyte * FP_NCCL_ID_BYTES)]


class fp_exec_config(ctypes.Structure):
    """struct fp_exec_config."""
    _fields_ = [
        ("backend", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("bootstrap", ctypes.c_void_p),
        ("progress", ctypes.c_int),
        ("cuda_mode", ctypes.c_int),
        ("cuda_stream", ctypes.c_void_p),
        ("nccl_boot", ctypes.c_int),
        ("nccl_id", fp_nccl_id),
        ("timeout_s", ctypes.c_double),  # the watchdog (0: FLEXPLAN_TIMEOUT)
        ("transport", ctypes.c_void_p),  # const fp_transport * (FP_BACKEND_EXTERNAL)
    ]


class fp_coll_args(ctypes.Structure):
    """struct fp_coll_args: one op an external transport starts."""
    _fields_ = [
        ("coll", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("group", ctypes.c_int64),
        ("index", ctypes.c_int64),
        ("size", ctypes.c_int64),
        ("count", ctypes.c_int64),
        ("src", ctypes.c_void_p),
        ("dst", ctypes.c_void_p),
        ("root", ctypes.c_int64),
        ("counts", c_int64_p),
        ("displs", c_int64_p),
    ]


# the transport's functions (include/flexplan.h, struct fp_transport)
TRANSPORT_NEW_GROUP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, c_int64_p)
TRANSPORT_START = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(fp_coll_args), c_int64_p)
TRANSPORT_TEST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int))
TRANSPORT_STORE_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64)
TRANSPORT_STORE_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64,
                                       ctypes.c_double)
TRANSPORT_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class fp_transport(ctypes.Structure):
    """struct fp_transport: the functions of an external transport."""
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("new_group", TRANSPORT_NEW_GROUP),
        ("start", TRANSPORT_START),
        ("test", TRANSPORT_TEST),
        ("store_set", TRANSPORT_STORE_SET),
        ("store_get", TRANSPORT_STORE_GET),
        ("error", TRANSPORT_ERROR),
    ]


class fp_tensor(ctypes.Structure):
    """struct fp_tensor: a view into the executor's arena."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("numel", ctypes.c_int64)]


class fp_extent(ctypes.Structure):
    """struct fp_extent: where a shard's elements sit in the full param."""
    _fields_ = [
        ("runs", ctypes.c_int64),
        ("len", ctypes.c_int64),
        ("shard_stride", ctypes.c_int64),
        ("full_off", ctypes.c_int64),
        ("full_stride", ctypes.c_int64),
        ("last_len", ctypes.c_int64),
    ]


class fp_param_view(ctypes.Structure):
    """struct fp_param_view: one param's views on this rank."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("module", ctypes.c_int32),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 8),
        ("numel", ctypes.c_int64),
        ("requires_grad", ctypes.c_bool),
        ("weight", fp_tensor),
        ("ugrad", fp_tensor),
        ("main", fp_tensor),
        ("grad", fp_tensor),
        ("shard", fp_extent),
        ("reduce_dtype", ctypes.c_int),
        ("optim", fp_tensor * 2),
        ("scales", fp_tensor),  # MXFP8 params: the e8m0 block scales (data NULL for the others)
    ]


class fp_exec_stats(ctypes.Structure):
    """struct fp_exec_stats."""
    _fields_ = [
        ("steps", ctypes.c_int64),
        ("hooks", ctypes.c_int64),
        ("local_ops", ctypes.c_int64),
        ("collectives", ctypes.c_int64),
        ("bytes_moved", ctypes.c_int64),
        ("allocations", ctypes.c_int64),
        ("hook_allocations", ctypes.c_int64),
        ("arena_bytes", ctypes.c_int64),
        ("refits", ctypes.c_int64),
        ("refit_bytes_read", ctypes.c_int64),
        ("progress", ctypes.c_int),
        ("plan_hash", ctypes.c_uint64),
        ("cuda_mode", ctypes.c_int),
        ("graphs", ctypes.c_int64),
        ("graph_nodes", ctypes.c_int64),
        ("graph_launches", ctypes.c_int64),
        ("nccl_comms", ctypes.c_int64),
        ("skipped", ctypes.c_int64),
    ]


class fp_compile_options(ctypes.Structure):
    """struct fp_compile_options (flexplan_compile.h)."""
    _fields_ = [
        ("model_path", ctypes.c_char_p),
        ("model_text", ctypes.c_char_p),
        ("spec_path", ctypes.c_char_p),
        ("spec_text", ctypes.c_char_p),
        ("hardware", ctypes.c_char_p),
        ("policy", ctypes.c_char_p),
        ("placements", ctypes.c_void_p),  # fp_placement_set * (flexplan.placement)
    ]


class fp_piece(ctypes.Structure):
    """struct fp_piece (flexplan_compile.h): elements [begin, begin + count) of a flattened param."""
    _fields_ = [("begin", ctypes.c_int64), ("count", ctypes.c_int64)]


class fp_placement_param(ctypes.Structure):
    """struct fp_placement_param (flexplan_compile.h): what a placement plug-in is told of a param."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("module", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("numel", ctypes.c_int64),
        ("group_size", ctypes.c_int64),
        ("elem_bytes", ctypes.c_int64),
    ]


class fp_placement_layout(ctypes.Structure):
    """struct fp_placement_layout (flexplan_compile.h): alignment, unshard collective, reduction."""
    _fields_ = [("align_elems", ctypes.c_int64), ("unshard", ctypes.c_int), ("reduce", ctypes.c_int)]


# the plug-in's two functions (fp_status is an int)
PLACEMENT_DESCRIBE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(fp_placement_param),
                                         ctypes.POINTER(fp_placement_layout), ctypes.c_void_p, ctypes.c_size_t)
PLACEMENT_PIECES_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(fp_placement_param),
                                       ctypes.c_int64, ctypes.POINTER(fp_piece), ctypes.c_int64,
                                       ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p, ctypes.c_size_t)


class fp_placement_plugin(ctypes.Structure):
    """struct fp_placement_plugin (flexplan_compile.h)."""
    _fields_ = [("describe", PLACEMENT_DESCRIBE_FN), ("pieces", PLACEMENT_PIECES_FN)]


class fp_transform_param(ctypes.Structure):
    """struct fp_transform_param (flexplan.h): what a reshard transform is told of a param."""
    _fields_ = [("name", ctypes.c_char_p), ("numel", ctypes.c_int64), ("from_dtype", ctypes.c_int),
                ("to_dtype", ctypes.c_int)]


class fp_wire_tensor(ctypes.Structure):
    """struct fp_wire_tensor (flexplan.h): one wire tensor of a slice."""
    _fields_ = [("dtype", ctypes.c_int), ("count", ctypes.c_int64)]


TRANSFORM_MAX_WIRES = 8
# a reshard transform's five functions (fp_status is an int)
XF_SHOULD_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(fp_transform_param))
XF_WIRES_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(fp_transform_param), ctypes.c_int64,
                               ctypes.c_int64, ctypes.POINTER(fp_wire_tensor), ctypes.POINTER(ctypes.c_int),
                               ctypes.c_void_p, ctypes.c_size_t)
XF_SEND_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(fp_transform_param), ctypes.c_int64,
                              ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                              ctypes.c_size_t)
XF_FINALIZE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(fp_transform_param), ctypes.c_int64,
                                  ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_size_t)


class fp_reshard_transform(ctypes.Structure):
    """struct fp_reshard_transform (flexplan.h)."""
    _fields_ = [("should_transform", XF_SHOULD_FN), ("send_wires", XF_WIRES_FN), ("recv_wires", XF_WIRES_FN),
                ("prepare_send", XF_SEND_FN), ("finalize_recv", XF_FINALIZE_FN)]


class fp_xfer_info(ctypes.Structure):
    """struct fp_xfer_info (flexplan.h): a transfer's figures."""
    _fields_ = [
        ("from_world", ctypes.c_int64),
        ("to_world", ctypes.c_int64),
        ("to_offset", ctypes.c_int64),
        ("processes", ctypes.c_int64),
        ("nops", ctypes.c_int32),
        ("wire_bytes", ctypes.c_int64),
        ("lower_bound", ctypes.c_int64),
        ("local_bytes", ctypes.c_int64),
        ("max_send_bytes", ctypes.c_int64),
        ("max_recv_bytes", ctypes.c_int64),
        ("from_offset", ctypes.c_int64),
    ]


class fp_reshard_options(ctypes.Structure):
    """struct fp_reshard_options (flexplan_compile.h)."""
    _fields_ = [
        ("what", ctypes.c_char_p),
        ("to_offset", ctypes.c_int64),
        ("mxfp8", ctypes.POINTER(ctypes.c_char_p)),
        ("nmxfp8", ctypes.c_int),
        ("from_offset", ctypes.c_int64),
        ("transforms", ctypes.c_void_p),  # fp_transform_set * (flexplan.h); None: no transforms
        ("transform_rules", ctypes.POINTER(ctypes.c_char_p)),  # "PATTERN=NAME", NAME a built-in or in transforms
        ("ntransform_rules", ctypes.c_int),
    ]


FP_RENDER_PLAN, FP_RENDER_IR, FP_RENDER_EXPLAIN, FP_RENDER_SIMULATE, FP_RENDER_TRACE, FP_RENDER_HTML = range(6)
# what fp_xfer_render writes (flexplan_compile.h: 0 JSON, 1 text, 2 explain, 3 Chrome trace)
XFER_RENDER = {"json": 0, "ir": 1, "explain": 2, "trace": 3}

# every struct the header declares, by its C name (tests compare the layouts with a C compiler's)
STRUCTS = {
    "fp_plan_info": fp_plan_info,
    "fp_plan_segment": fp_plan_segment,
    "fp_driver_state": fp_driver_state,
    "fp_nccl_id": fp_nccl_id,
    "fp_exec_config": fp_exec_config,
    "fp_coll_args": fp_coll_args,
    "fp_transport": fp_transport,
    "fp_tensor": fp_tensor,
    "fp_extent": fp_extent,
    "fp_param_view": fp_param_view,
    "fp_exec_stats": fp_exec_stats,
    "fp_compile_options": fp_compile_options,
    "fp_piece": fp_piece,
    "fp_placement_param": fp_placement_param,
    "fp_placement_layout": fp_placement_layout,
    "fp_placement_plugin": fp_placement_plugin,
    "fp_xfer_info": fp_xfer_info,
    "fp_reshard_options": fp_reshard_options,
    "fp_transform_param": fp_transform_param,
    "fp_wire_tensor": fp_wire_tensor,
    "fp_reshard_transform": fp_reshard_transform,
}

# ---- functions: name -> (result type, argument types) ------------------------------
# include/flexplan.h: CUDA's legacy default stream as the C API takes it (NULL there means "no stream")
FP_CUDA_STREAM_LEGACY = 0x1


def cuda_stream_arg(stream):
    """A cudaStream_t as Python holds it (torch: ``torch.cuda.current_stream().cuda_stream``,
    0 for torch's default stream, which is CUDA's legacy default stream) -> the
    pointer the C API takes: None -> NULL (no stream: the executor makes its
    own), 0 -> FP_CUDA_STREAM_LEGACY, anything else as it is."""
    if stream is None:
        return None
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"cuda_stream must be an int cudaStream_t or None, not {type(stream).__name__}")
    return FP_CUDA_STREAM_LEGACY if stream == 0 else stream


_vp = ctypes.c_void_p
_st = ctypes.c_int  # fp_status
_cs = ctypes.c_char_p
_vpp = ctypes.POINTER(ctypes.c_void_p)
_P = ctypes.POINTER

SIGNATURES = {
    # version, names
    "fp_version": (_cs, []),
    "fp_status_name": (_cs, [ctypes.c_int]),
    "fp_elem_size": (ctypes.c_int, [ctypes.c_int]),
    "fp_elem_name": (_cs, [ctypes.c_int]),
    "fp_hook_name": (_cs, [ctypes.c_int]),
    # plans
    "fp_plan_load": (_st, [_cs, _vpp]),
    "fp_plan_load_flags": (_st, [_cs, ctypes.c_uint, _vpp]),
    "fp_plan_errmsg": (_cs, [_vp]),
    "fp_plan_free": (None, [_vp]),
    "fp_plan_get_info": (_st, [_vp, _P(fp_plan_info)]),
    "fp_plan_module_name": (_cs, [_vp, ctypes.c_int32]),
    "fp_plan_module_index": (ctypes.c_int32, [_vp, _cs]),
    "fp_plan_module_recompute": (ctypes.c_int, [_vp, ctypes.c_int32]),
    "fp_plan_param_tp_dim": (ctypes.c_int32, [_vp, ctypes.c_int32]),
    "fp_plan_param_weight_persistent": (ctypes.c_int, [_vp, ctypes.c_int32]),
    "fp_plan_module_uses": (ctypes.c_int32, [_vp, ctypes.c_int32, _P(ctypes.c_int32), ctypes.c_int32]),
    "fp_plan_segment_at": (_st, [_vp, ctypes.c_int32, _P(fp_plan_segment)]),
    # executors
    "fp_nccl_get_id": (_st, [_P(fp_nccl_id)]),
    "fp_exec_create": (_st, [_vp, _P(fp_exec_config), _vpp]),
    "fp_exec_errmsg": (_cs, [_vp]),
    "fp_exec_destroy": (None, [_vp]),
    "fp_exec_hook": (_st, [_vp, ctypes.c_int, ctypes.c_int32]),
    "fp_exec_sync": (_st, [_vp]),
    # the hook driver (events from a trainer's callbacks)
    "fp_driver_create": (_st, [_vp, _vpp]),
    "fp_driver_errmsg": (_cs, [_vp]),
    "fp_driver_free": (None, [_vp]),
    "fp_driver_event": (_st, [_vp, ctypes.c_int, ctypes.c_int32]),
    "fp_driver_state_of": (_vp, [_vp]),
    "fp_driver_set_profile": (_st, [_vp, ctypes.c_bool]),
    "fp_exec_cuda_stream": (_vp, [_vp]),
    "fp_exec_set_cuda_stream": (_st, [_vp, _vp]),
    "fp_exec_all_reduce_f64": (_st, [_vp, _P(ctypes.c_double), ctypes.c_int]),
    "fp_exec_all_reduce_f64_dev": (_st, [_vp, _vp, ctypes.c_int, ctypes.c_int]),
    # one CUDA graph per step (include/flexplan.h; flexplan.torch._capture)
    "fp_exec_capture_begin": (_st, [_vp]),
    "fp_exec_capture_end": (_st, [_vp]),
    "fp_exec_capture_release": (_st, [_vp]),
    "fp_exec_capture_live": (ctypes.c_int64, [_vp]),
    "fp_exec_timing_start": (_st, [_vp, ctypes.c_int32]),
    "fp_exec_timing_write": (_st, [_vp, _cs]),
    "fp_exec_param": (_st, [_vp, _cs, _P(fp_param_view)]),
    "fp_exec_param_at": (_st, [_vp, ctypes.c_int32, _P(fp_param_view)]),
    "fp_extent_elems": (ctypes.c_int64, [_P(fp_extent)]),
    "fp_exec_load_weights": (_st, [_vp, _P(_cs), ctypes.c_int]),
    # safetensors files, as the refit reads them
    "fp_safetensors_open": (_st, [_cs, _vpp]),
    "fp_safetensors_errmsg": (_cs, [_vp]),
    "fp_safetensors_count": (ctypes.c_int64, [_vp]),
    "fp_safetensors_name": (_cs, [_vp, ctypes.c_int64]),
    "fp_safetensors_close": (None, [_vp]),
    "fp_exec_get_stats": (_st, [_vp, _P(fp_exec_stats)]),
    # the compile API (flexplan_compile.h)
    "fp_plan_compile": (_st, [_P(fp_compile_options), _vpp]),
    "fp_plan_summary": (_st, [_vp, _vpp]),
    "fp_plan_save": (_st, [_vp, _cs]),
    "fp_plan_render": (_st, [_vp, ctypes.c_int, _cs, _vpp]),
    "fp_free": (None, [_vp]),
    # placement plug-ins (flexplan_compile.h; flexplan.placement)
    "fp_placement_set_create": (_st, [_vpp]),
    "fp_placement_set_add": (_st, [_vp, _cs, _P(fp_placement_plugin), _vp]),
    "fp_placement_set_errmsg": (_cs, [_vp]),
    "fp_placement_set_free": (None, [_vp]),
    "fp_transform_set_create": (_st, [_vpp]),
    "fp_transform_set_add": (_st, [_vp, _cs, _P(fp_reshard_transform), _vp]),
    "fp_transform_set_errmsg": (_cs, [_vp]),
    "fp_transform_set_free": (None, [_vp]),
    "fp_xfer_bind_transforms": (_st, [_vp, _vp]),
    "fp_transform_mxfp8": (_P(fp_reshard_transform), [ctypes.c_int]),
    # MPI
    "fp_mpi_init": (_st, [_P(ctypes.c_int), _P(ctypes.c_int)]),
    "fp_mpi_finalize": (_st, []),
    "fp_mpi_abort": (None, [ctypes.c_int]),
    # transfers between plans (docs/reshard.md)
    "fp_xfer_get_info": (_st, [_vp, _P(fp_xfer_info)]),
    "fp_xfer_errmsg": (_cs, [_vp]),
    "fp_xfer_free": (None, [_vp]),
    "fp_xfer_run": (_st, [_vp, _vp, _vp, _vp]),
    "fp_reshard_compile": (_st, [_vp, _vp, _P(fp_reshard_options), _vpp]),
    "fp_xfer_render": (_st, [_vp, ctypes.c_int, _vpp]),
    "fp_xfer_load": (_st, [_cs, _vpp]),
}


# ---- finding and loading ----------------------------------------------------------
def _candidates():
    """(path, how it was found) in the order they are tried."""
    env = os.environ.get("FLEXPLAN_LIBRARY")
    if env:
        return [(env, "FLEXPLAN_LIBRARY")]
    out = []
    rec = os.path.join(_PKG_DIR, "_library_path")
    if os.path.isfile(rec):
        with open(rec) as f:
            rel = f.read().strip()
        if rel:
            out.append((os.path.normpath(os.path.join(_PKG_DIR, rel)), "the install record " + rec))
    src = os.path.normpath(os.path.join(_PKG_DIR, "..", "..", "build", "libflexplan.so"))
    out.append((src, "the source tree's build"))
    return out


def library_path():
    """The path of the library this process uses (loading it if needed)."""
    lib()
    return _lib_path


def lib():
    """The loaded library (ctypes.CDLL), its functions typed; loaded once.

    Raises FlexplanError (FP_ERR_ARG) naming every place looked at when no
    library can be loaded.
    """
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, how in _candidates():
            if not os.path.exists(path):
                tried.append("%s (%s): no such file" % (path, how))
                continue
            try:
                handle = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
            except OSError as e:
                tried.append("%s (%s): %s" % (path, how, e))
                continue
            _declare(handle, path)
            _lib_path = path
            _lib = handle
            return _lib
        raise FlexplanError(
            FP_ERR_ARG,
            "cannot load libflexplan.so; tried:\n  " + "\n  ".join(tried) +
            "\nset FLEXPLAN_LIBRARY to the library's path, install flexplan (cmake --install), "
            "or build it in <source>/build")


def _declare(handle, path):
    for name, (res, args) in SIGNATURES.items():
        try:
            fn = getattr(handle, name)
        except AttributeError:
            raise FlexplanError(FP_ERR_ARG, "%s has no function %s: it is not a flexplan library of this "
                                "version (the package is %s)" % (path, name, _pkg_version())) from None
        fn.restype = res
        fn.argtypes = args


def _pkg_version():
    from ._version import __version__
    return __version__


# ---- helpers for the other modules ------------------------------------------------
def text(b):
    """A C string (bytes or None) as str ('' for NULL)."""
    return b.decode("utf-8", "replace") if b else ""


def check(status, message_fn):
    """Raise FlexplanError(status, message_fn()) unless status is FP_OK."""
    if status != FP_OK:
        raise FlexplanError(status, message_fn())


def take_string(ptr):
    """The text of a malloc'd C string the library returned (then freed with fp_free)."""
    if not ptr:
        return ""
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        lib().fp_free(ptr)


def fsencode(path, what="path"):
    """A path (str, bytes or os.PathLike) as bytes for C. TypeError for
    anything else, ValueError for a NUL byte (C would end the path there),
    each naming the argument `what`."""
    try:
        b = os.fsencode(os.fspath(path))
    except TypeError:
        raise TypeError("%s: expected a path (str, bytes or os.PathLike), got %s" % (what, type(path).__name__)) from None
    if b"\0" in b:
        raise ValueError("%s: a path must not contain a NUL byte" % what)
    return b


def cstr(value, what, allow_none=True):
    """A str argument as UTF-8 bytes for C (None stays None where allowed).
    TypeError for anything else, ValueError for a NUL byte, naming `what`."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise TypeError("%s: expected a str%s, got %s" % (what, " or None" if allow_none else "",
                                                           type(value).__name__))
    if "\0" in value:
        raise ValueError("%s: must not contain a NUL byte" % what)
    return value.encode()


def int64(value, what):
    """An integer argument for an int64_t of C: TypeError for a non-integer
    (bool included), OverflowError outside [-2**63, 2**63), naming `what`
    (ctypes would wrap it silently)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s: expected an integer, got %s" % (what, type(value).__name__))
    v = value.__index__()
    if not -(1 << 63) <= v < (1 << 63):
        raise OverflowError("%s: %d is out of range for a 64-bit integer" % (what, v))
    return v
