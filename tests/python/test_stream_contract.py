"""The stream contract on the Python side (docs/torch.md, "Streams"), where
there is no GPU: what python/flexplan hands the C library for torch's
default stream, a side stream and a stream that changes between steps, with
torch's CUDA calls replaced by a fake. The C side's resolution of those
configs runs on the simulated device (ctest -L simdev, simdev_parity_stream_*)."""
import ctypes

import pytest

from flexplan import _lib
from flexplan.torch._hooks import StreamFollower
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


def test_stream_follower_runs_before_every_event():
    # the driver (the C library's fp_driver, here a recording stand-in) hands
    # torch's current stream over before each event, so every hook the event
    # issues runs on it
    torch_stream = [0]
    order = []
    ex = FakeExecutor()
    ex.set_cuda_stream = lambda s: order.append(("stream", s))
    d = Driver(1, lambda h, e, m: order.append(("event", e)) or 0, lambda h: b"", lambda h: None,
               _lib.fp_driver_state(), [("step_begin", -1, 0, 1)], ["fc"])
    d.follow_stream = StreamFollower(ex, 0, current=lambda: torch_stream[0])
    d.event(_lib.FP_EVENT_PRE_FORWARD, 0)
    torch_stream[0] = 0x77
    d.event(_lib.FP_EVENT_POST_FORWARD, 0)
    assert order == [("event", _lib.FP_EVENT_PRE_FORWARD), ("stream", 0x77), ("event", _lib.FP_EVENT_POST_FORWARD)]
