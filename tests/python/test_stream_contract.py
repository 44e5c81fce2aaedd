"""The stream contract on the Python side (docs/torch.md, "Streams"), where
there is no GPU: what python/flexplan hands the C library for torch's
default stream, a side stream and a stream that changes between steps, with
torch's CUDA calls replaced by a fake. The C side's resolution of those
configs runs on the simulated device (ctest -L simdev, simdev_parity_stream_*)."""
import ctypes

import pytest

from flexplan import _lib
from flexplan.torch.shard import StreamFollower
from flexplan.torch._driver import Driver


def test_stream_default_is_legacy_not_null():
    # torch's default stream is handle 0: CUDA's legacy default stream, never "no stream" (NULL)
    assert _lib.cuda_stream_arg(0) == _lib.FP_CUDA_STREAM_LEGACY == 1
    assert ctypes.c_void_p(_lib.cuda_stream_arg(0)).value == 1
    # no stream given: NULL, the executor makes its own
    assert _lib.cuda_stream_arg(None) is None
    # a side stream is passed as it is
    assert _lib.cuda_stream_arg(0x7F00DEAD0000) == 0x7F00DEAD0000
    for bad in ("0", 1.5, True):
        with pytest.raises(TypeError):
            _lib.cuda_stream_arg(bad)


class FakeExecutor:
    def __init__(self):
        self.calls = []
        self.hooks = []

    def set_cuda_stream(self, s):
        self.calls.append(s)

    def hook(self, k, m):
        self.hooks.append((k, m))


def test_stream_follower_hands_over_changes():
    ex = FakeExecutor()
    torch_stream = [0]  # torch on its default stream at setup
    f = StreamFollower(ex, 0, current=lambda: torch_stream[0])
    f()
    assert ex.calls == []  # unchanged: nothing handed over
    torch_stream[0] = 0x5000  # `with torch.cuda.stream(side):`
    f()
    f()
    assert ex.calls == [0x5000]
    torch_stream[0] = 0  # back on the default stream
    f()
    assert ex.calls == [0x5000, 0]


def test_stream_follower_runs_before_every_hook():
    ex = FakeExecutor()
    torch_stream = [0]
    segs = [("step_begin", -1, 0, 1), ("pre_forward", 0, 0, 1), ("pre_optimizer", -1, 0, 1),
            ("post_optimizer", -1, 0, 1)]
    d = Driver(ex, segs, ["fc"])
    order = []
    ex.set_cuda_stream = lambda s: order.append(("stream", s))
    ex.hook = lambda k, m: order.append(("hook", k))
    d.follow_stream = StreamFollower(ex, 0, current=lambda: torch_stream[0])
    d._hook("step_begin", -1)
    torch_stream[0] = 0x77
    d._hook("pre_forward", 0)
    assert order == [("hook", "step_begin"), ("stream", 0x77), ("hook", "pre_forward")]
