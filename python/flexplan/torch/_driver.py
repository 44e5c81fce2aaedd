"""The hook driver: the plan's exact hook sequence from the events a
module's own hooks report, run by the C library (``fp_driver_*``,
include/flexplan.h "the hook driver"): which segments an event passes, the
units a forward skipped, the empty segments left to the executor's skip
rule, activation checkpointing's recompute window, the optimizer events.
Python keeps no copy of that state machine: ``Driver.state`` is the C
``fp_driver_state``, read in place.
"""
import ctypes

from .. import _lib
from ..errors import FlexplanError

__all__ = ["Driver"]


class Driver:
    """One fp_driver over an Executor. ``event(e, m)`` reports an event
    (``_lib.FP_EVENT_*``; m the plan module, -1 for none) and raises
    FlexplanError with the driver's status and message. ``follow_stream``
    (NCCL backend) is called before every event, so the executor computes on
    torch's current stream (docs/torch.md, "GPUs")."""

    __slots__ = ("_h", "_ev", "_msg", "_free", "state", "segments", "names", "follow_stream")

    def __init__(self, handle, event_fn, errmsg_fn, free_fn, state, segments, names):
        self._h = handle
        self._ev = event_fn
        self._msg = errmsg_fn
        self._free = free_fn
        self.state = state  # fp_driver_state (pos, micro, in_backward, hooks, skipped, ...)
        self.segments = segments  # [(hook name, module, micro-batch, ops)]
        self.names = names
        self.follow_stream = None

    @classmethod
    def create(cls, ex):
        """A driver over executor ``ex`` (flexplan.executor.Executor)."""
        lib = ex._lib
        h = ctypes.c_void_p()
        st = lib.fp_driver_create(ex._x, ctypes.byref(h))
        if st != _lib.FP_OK:
            msg = _lib.text(lib.fp_driver_errmsg(h)) if h.value else "fp_driver_create failed"
            if h.value:
                lib.fp_driver_free(h)
            raise FlexplanError(st, msg)
        state = _lib.fp_driver_state.from_address(lib.fp_driver_state_of(h))
        # the hot call: a function object of its own without argtypes (ints pass as C ints and
        # the handle as a c_void_p object: no per-call conversion through argtypes)
        ev = lib["fp_driver_event"]
        ev.restype, ev.argtypes = ctypes.c_int, None
        return cls(h, ev, lib.fp_driver_errmsg, lib.fp_driver_free, state, ex.segments, ex.modules)

    def event(self, e, m=-1):
        if self.follow_stream is not None:
            self.follow_stream()
        st = self._ev(self._h, e, m)
        if st:
            self.raise_error(st)

    def raise_error(self, st):
        raise FlexplanError(st, _lib.text(self._msg(self._h)))

    def set_profile(self, on):
        if self._h is not None:
            _lib.lib().fp_driver_set_profile(self._h, bool(on))

    def label(self, i):
        """Segment i as 'pre_forward(layers.0)' (messages)."""
        k, m, _, _ = self.segments[i]
        return f"{k}({self.names[m]})" if m >= 0 else k

    @property
    def pos(self):
        return self.state.pos

    def close(self):
        """Free the driver (before the executor is destroyed)."""
        if self._h is not None:
            h, self._h = self._h, None
            self.state = _lib.fp_driver_state()  # a copy-free stand-in: the C state is gone
            self._free(h)
