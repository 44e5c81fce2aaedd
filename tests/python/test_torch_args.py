"""Argument errors of flexplan.torch's public functions: a wrong type is a
TypeError, a value outside the choices a ValueError, each naming the
argument (and each also a FlexplanError with status FP_ERR_ARG, as these
functions raised before: flexplan.errors.ArgumentTypeError /
ArgumentValueError). All raised before anything collective, so no MPI here;
Sharded's methods are checked on a live state in torch_errors.py."""
import os
import re

import pytest
import torch

import flexplan
import flexplan.torch as fpt
from conftest import SOURCE_DIR

EX = os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json")


@pytest.fixture(scope="module")
def plan():
    return flexplan.compile(EX)


def _raises(exc, arg, fn):
    with pytest.raises(exc, match=r"^" + re.escape(arg) + r":") as e:
        fn()
    assert isinstance(e.value, flexplan.FlexplanError) and e.value.status_name == "FP_ERR_ARG"


@pytest.mark.parametrize("kw,value,exc", [
    ("backend", "gloo", ValueError), ("backend", 1, TypeError),
    ("rank", "0", TypeError), ("rank", True, TypeError), ("rank", -1, ValueError),
    ("world_size", 1.0, TypeError), ("world_size", 0, ValueError),
    ("progress", "busy", ValueError), ("progress", None, TypeError),
    ("cuda_mode", "graphs", ValueError), ("cuda_mode", 0, TypeError),
    ("init", 3, TypeError), ("init", ["a.safetensors", 3], TypeError),
])
def test_shard_arguments(plan, kw, value, exc):
    _raises(exc, kw, lambda: fpt.shard(torch.nn.Linear(2, 2), plan, **{kw: value}))


def test_shard_module_and_plan(plan):
    _raises(TypeError, "module", lambda: fpt.shard("not a module", plan))
    _raises(TypeError, "plan", lambda: fpt.shard(torch.nn.Linear(2, 2), {"format": "flexplan.plan.v1"}))


def test_state_and_functions_of_a_non_module():
    for fn in (lambda: fpt.state(3), lambda: fpt.clip_grad_norm_([1], 1.0),
               lambda: fpt.optimizer(None, torch.optim.SGD, lr=0.1)):
        _raises(TypeError, "model_or_state", fn)
    for fn in (lambda: fpt.state_dict("st"), lambda: fpt.load_state_dict(3, {}), lambda: fpt.load_in_place(3, "ckpt")):
        _raises(TypeError, "st", fn)


@pytest.mark.parametrize("kw,value,exc", [
    ("name", 3, TypeError), ("name", "", ValueError), ("version", 3, ValueError), ("version", "2", TypeError),
    ("units", 3, TypeError), ("units", [], ValueError), ("units", [3], TypeError),
    ("input_shape", "1x8", TypeError), ("input_shape", (1, 0), ValueError), ("input_shape", (1, 2.0), TypeError),
])
def test_describe_arguments(kw, value, exc):
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    inputs = None if kw == "input_shape" else (torch.zeros(1, 4),)
    _raises(exc, kw, lambda: fpt.describe(mlp, inputs, **{kw: value}))


def test_describe_module():
    _raises(TypeError, "module", lambda: fpt.describe("not a module"))


def test_argument_errors_pickle():
    e = flexplan.errors.ArgumentValueError("rank: must be >= 0, got -1")
    import pickle
    f = pickle.loads(pickle.dumps(e))
    assert isinstance(f, ValueError) and f.status == e.status and str(f) == str(e)
