"""The `python3 -m flexplan` command line.

Subcommands:
  describe PKG.MODULE:FACTORY [--units PATTERN ...] [--input-shape B,T]
           [--name N] [--model-version {1,2}] [-o model.json]
      write the model.json of the torch.nn.Module that FACTORY() returns
      (docs/describe.md).

Exit status as the C CLI's (docs/cli.md): 0 ok, 1 input error, 2 usage
error. Messages go to standard error as `flexplan: error: ...`; nothing is
written on failure.
"""
import argparse
import importlib
import json
import os
import sys
import tempfile

PROG = "python3 -m flexplan"


class _Usage(Exception):
    """A usage error (exit 2)."""


class _Input(Exception):
    """An input error (exit 1)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Usage("%s (see %s --help)" % (message, self.prog))


# ---------------------------------------------------------------------------
# a compact, deterministic JSON printer: a value that fits in the line stays
# on one line (one param per line in model.json)


def _dump(v, indent, width=160):
    flat = json.dumps(v, separators=(", ", ": "))
    if not isinstance(v, (dict, list)) or not v or len(flat) + indent <= width:
        return flat
    pad = " " * (indent + 1)
    if isinstance(v, list):
        items = [pad + _dump(x, indent + 1, width) for x in v]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    items = [pad + json.dumps(k) + ": " + _dump(x, indent + 1, width) for k, x in v.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def dumps(v):
    """JSON text of `v` as the describe subcommand writes it."""
    return _dump(v, 0) + "\n"


def _write(path, text):
    """Writes `text` to `path` ("-": standard output) all at once: a failed
    write leaves no partial file."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if os.path.isdir(path):
        raise _Input("-o %s: Is a directory" % path)
    if os.path.exists(path) and not os.path.isfile(path):
        # a device (/dev/null) or a FIFO: written in place; a temporary
        # renamed over it would replace the device itself
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            raise _Input("-o %s: %s" % (path, e.strerror or e)) from e
        return
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".describe-", suffix=".tmp", dir=d)
    except OSError as e:
        raise _Input("-o %s: %s" % (path, e.strerror or e)) from e
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise _Input("-o %s: %s" % (path, e.strerror or e)) from e


# ---------------------------------------------------------------------------
# describe


def _input_shape(text):
    parts = text.split(",")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise _Usage("--input-shape: expected positive integers separated by commas (B,T), got '%s'"
                     % text)
    return shape


def _factory(target):
    """The callable that PKG.MODULE:FACTORY names (FACTORY may be dotted)."""
    mod_name, sep, attr = target.partition(":")
    if not sep or not mod_name or not attr:
        raise _Usage("describe: expected PKG.MODULE:FACTORY (e.g. mymodels.llama:build), got '%s'"
                     % target)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(mod_name)
    except Exception as e:  # pylint: disable=broad-except
        raise _Input("describe: cannot import module '%s': %s: %s" % (mod_name, type(e).__name__, e)) from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _Input("describe: module '%s' has no attribute '%s' (FACTORY of '%s')"
                         % (mod_name, attr, target))
        obj = getattr(obj, part)
    if not callable(obj):
        raise _Input("describe: '%s' is not callable (FACTORY must be a function or class returning a "
                     "torch.nn.Module)" % target)
    return obj


def _describe(args):
    fn = _factory(args.target)
    shape = _input_shape(args.input_shape) if args.input_shape is not None else None
    import torch  # pylint: disable=import-outside-toplevel
    from flexplan.torch import describe  # pylint: disable=import-outside-toplevel
    try:
        with torch.device("meta"):
            made = fn()
    except Exception as e:  # pylint: disable=broad-except
        raise _Input("describe: %s() raised %s: %s" % (args.target, type(e).__name__, e)) from e
    inputs = None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        made, inputs = made
    if not isinstance(made, torch.nn.Module):
        raise _Input("describe: %s() returned %s, expected a torch.nn.Module (or a pair (module, "
                     "example_inputs))" % (args.target, type(made).__name__))
    model = describe(made, inputs, units=args.units, name=args.name, input_shape=shape,
                     version=args.model_version)
    _write(args.output, dumps(model))
    return 0


def _parser():
    p = _Parser(prog=PROG, description="flexplan from Python.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    d = sub.add_parser("describe", help="write the model.json of a torch.nn.Module",
                       description="Write the model.json of the torch.nn.Module that FACTORY() returns "
                       "(called under torch.device('meta'); it may return (module, example_inputs)).")
    d.add_argument("target", metavar="PKG.MODULE:FACTORY")
    d.add_argument("--units", nargs="+", action="extend", metavar="PATTERN",
                   help="the units: module names or fnmatch patterns; A+B groups modules into one unit "
                   "(default: each repeated block, the embeddings, the final norm with the head)")
    d.add_argument("--input-shape", metavar="B,T",
                   help="shape of the example input (input_ids of a causal LM; default 1,128)")
    d.add_argument("--name", help="the model's name (default: the module's class name)")
    d.add_argument("--model-version", type=int, choices=(1, 2), metavar="{1,2}",
                   help="write flexplan.model.v1 or v2 (v2 adds activation_bytes_checkpointed; "
                   "default: v1 unless tied params need v2)")
    d.add_argument("-o", "--output", default="-", metavar="FILE", help="output file (default: stdout)")
    d.set_defaults(run=_describe)
    return p


def main(argv=None):
    """Runs the command line; returns the exit status."""
    from flexplan.errors import FlexplanError  # pylint: disable=import-outside-toplevel
    p = _parser()
    try:
        args = p.parse_args(argv)
        if not getattr(args, "run", None):
            raise _Usage("expected a command: describe (see %s --help)" % PROG)
        return args.run(args)
    except _Usage as e:
        print("flexplan: error: %s" % e, file=sys.stderr)
        return 2
    except (_Input, FlexplanError) as e:
        print("flexplan: error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
