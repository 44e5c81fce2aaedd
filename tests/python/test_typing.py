"""test_typing.py - the public Python API is annotated whole (issue 42).

The package ships py.typed (PEP 561), so a caller's type checker reads its
annotations. Every public function and every public method and property
of a public class (the names in __all__ of flexplan, flexplan.executor,
flexplan.torch and flexplan.torch.checkpoint) must annotate each parameter
(but self and cls) and its return. That the annotations are right is
mypy's part: the ctest python_mypy runs it (pinned in
python/requirements-test.txt, configured in python/pyproject.toml).
"""
import importlib
import inspect

import pytest

PUBLIC = ("flexplan", "flexplan.executor", "flexplan.torch", "flexplan.torch.checkpoint")


def _members(obj, qual):
    """(qualified name, function) of a public function, or of a class's
    public methods, properties and __init__"""
    if inspect.isclass(obj):
        for name, v in vars(obj).items():
            if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
                continue
            if isinstance(v, property):
                yield f"{qual}.{name}", v.fget
            elif isinstance(v, (staticmethod, classmethod)):
                yield f"{qual}.{name}", v.__func__
            elif inspect.isfunction(v):
                yield f"{qual}.{name}", v
    elif inspect.isfunction(obj):
        yield qual, obj


def public_functions():
    seen, out = set(), []
    for modname in PUBLIC:
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ != "flexplan.errors":
                continue
            out.extend(_members(obj, f"{obj.__module__}.{obj.__qualname__}"))
    return out


def missing_annotations(fn):
    sig = inspect.signature(fn)
    bad = [p.name for i, p in enumerate(sig.parameters.values())
           if p.annotation is inspect.Parameter.empty and not (i == 0 and p.name in ("self", "cls"))]
    if sig.return_annotation is inspect.Signature.empty:
        bad.append("return")
    return bad


def test_the_walk_finds_the_api():
    names = {q for q, _ in public_functions()}
    for want in ("flexplan.plan.compile", "flexplan.plan.Plan.save", "flexplan.executor.Executor.step_begin",
                 "flexplan.torch._shard.shard", "flexplan.torch.checkpoint.state_dict",
                 "flexplan.torch._describe.describe", "flexplan.executor.ParamView.tensor"):
        assert want in names, sorted(names)


def test_a_missing_annotation_is_found():
    def half(a: int, b) -> int:
        return a

    def none(a: int):
        return a
    assert missing_annotations(half) == ["b"]
    assert missing_annotations(none) == ["return"]


@pytest.mark.parametrize("qual,fn", public_functions(), ids=[q for q, _ in public_functions()])
def test_public_function_is_annotated(qual, fn):
    assert not missing_annotations(fn), f"{qual}: no annotation for {', '.join(missing_annotations(fn))}"
