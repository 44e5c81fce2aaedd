"""One CUDA graph per training step (docs/torch.md, "One graph per step"):
flexplan.torch inside PyTorch's own whole-network capture
(``with torch.cuda.graph(g):`` around forward, loss, backward and the
optimizer step), through the executor's capture API (include/flexplan.h,
``fp_exec_capture_begin`` / ``_end`` / ``_release`` / ``_live``).

``StepCapture`` is what the Sharded state calls at two points of a step:

- ``step_begin()``, at the step's first training forward (before the
  step_begin hook is issued): when torch's current stream is capturing, the
  step is about to be captured. What cannot be captured is refused here,
  before anything is issued, with a FlexplanError naming the hook
  (step_begin) and the reason: another backend than NCCL, a cuda_mode other
  than "capture_safe", no uncaptured step yet (NCCL's warm-up), a capture
  begun and not ended. Then torch's capture stream is handed to the executor
  (the stream follower; the executor orders it after the old one with an
  external wait) and ``fp_exec_capture_begin`` joins the capture;
- ``step_end()``, after post_optimizer: ``fp_exec_capture_end`` joins the
  plan's side streams back into torch's capture stream, so torch can end the
  capture; one live graph is counted.

Inside the capture the hooks issue the plan's work as in any step (no host
synchronization, no allocation, no host callback: the executor's
capture-safe mode), so ``g.replay()`` replays it with no Python. Between
steps ``live()`` counts the graphs captured and not released
(``Sharded.release_graph()`` after ``g.reset()`` / ``del g``); close() with
one live is an error. clip_grad_norm_ inside the capture reduces on the
device (``in_capture``: fp_exec_all_reduce_f64_dev on the capture stream,
the norm and the scale as device tensors: _optim.py); host reductions
(full_state_dict, refits) are refused inside it by the executor
(fp_exec_all_reduce_f64 and refits while the compute stream is being
captured: FP_ERR_ORDER).

``capturing`` is torch's ``torch.cuda.is_current_stream_capturing`` (an
attribute, so a test on the simulated device can stand its own in)."""
import torch

from .. import _lib
from ..errors import FlexplanError

__all__ = ["StepCapture"]


def _torch_capturing():
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class StepCapture:
    """The capture protocol of one Sharded state (st: its ``ex``, ``driver``,
    ``backend``, ``cuda_mode``)."""

    capturing = staticmethod(_torch_capturing)

    def __init__(self, st, cuda_mode):
        self.st = st
        self.cuda_mode = cuda_mode
        self.active = False  # inside a capture fp_exec_capture_begin joined

    def _fail(self, status, hook, why):
        raise FlexplanError(status, f"flexplan.torch: {hook} inside a CUDA graph capture (torch.cuda.graph): {why}")

    def step_begin(self):
        """The step's first training forward (module docstring)."""
        if self.st.backend != "nccl" or not type(self).capturing():
            return
        if self.active:
            self._fail(_lib.FP_ERR_ORDER, "step_begin", "the previous captured step did not reach post_optimizer "
                       "(capture whole steps: forward, backward and the optimizer step)")
        if self.cuda_mode != "capture_safe":
            self._fail(_lib.FP_ERR_ARG, "step_begin", f"cuda_mode {self.cuda_mode!r} cannot be captured: shard(..., "
                       "cuda_mode=\"capture_safe\") (graph mode captures per-hook graphs of its own and synchronizes "
                       "once to do it; eager hooks refuse captures)")
        ex = self.st.ex
        f = self.st.driver.follow_stream
        if f is not None:
            f()  # torch's capture stream becomes the plan's compute stream
        lib = ex._lib
        s = lib.fp_exec_capture_begin(ex._x)
        if s:
            self._fail(s, "step_begin", _lib.text(lib.fp_exec_errmsg(ex._x)))
        self.active = True

    def step_end(self):
        """After post_optimizer: the plan's streams joined back, one live graph."""
        if not self.active:
            return
        ex = self.st.ex
        lib = ex._lib
        s = lib.fp_exec_capture_end(ex._x)
        self.active = False
        if s:
            self._fail(s, "post_optimizer", _lib.text(lib.fp_exec_errmsg(ex._x)))

    def in_capture(self):
        """Whether this step is being captured: clip_grad_norm_ then takes
        its device path (no host wait, the same bits)."""
        return self.active or (self.st.backend == "nccl" and type(self).capturing())

    def live(self):
        ex = self.st.ex
        return int(ex._lib.fp_exec_capture_live(ex._x)) if ex._x else 0

    def release(self):
        ex = self.st.ex
        lib = ex._lib
        s = lib.fp_exec_capture_release(ex._x)
        if s:
            raise FlexplanError(s, _lib.text(lib.fp_exec_errmsg(ex._x)))
