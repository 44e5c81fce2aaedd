"""Choosing the units (model.json "modules") of a torch.nn.Module for describe().

A unit is what FSDP wraps with one fully_shard call: one module, or a group
of modules wrapped together (the final norm with the LM head). This module
only picks units; describe.py assigns their params and traces the forward.
The rules are written down in docs/describe.md.
"""
import fnmatch

import torch.nn as nn

from ._describe_errors import error, type_error, value_error


class Unit:
    """One unit: its model.json name and its member modules [(fqn, module)]."""

    def __init__(self, name, members):
        self.name = name
        self.members = members

    @property
    def group(self):
        """True when several modules form this one unit (e.g. norm + head)."""
        return len(self.members) > 1

    def __repr__(self):
        return "Unit(%r)" % self.name


def _has_params(mod):
    return next(mod.parameters(), None) is not None


def _join(prefix, name):
    return prefix + "." + name if prefix else name


def _inside(name, ancestors):
    """True when module name `name` is one of `ancestors` or below one."""
    return any(name == a or name.startswith(a + ".") for a in ancestors if a != "")


# ---------------------------------------------------------------------------
# the default: repeated blocks, embeddings, final norm + head (torchtitan's
# wrapping: tok_embeddings, each transformer block, [norm, output], root)


def _is_block_container(mod):
    """A stack of repeated blocks: a ModuleList or ModuleDict whose
    param-holding children (at least one) are all of one class, or an
    nn.Sequential with at least two such children."""
    if not isinstance(mod, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
        return False
    kids = [c for _, c in mod.named_children() if _has_params(c)]
    least = 2 if isinstance(mod, nn.Sequential) else 1
    return len(kids) >= least and len({type(c) for c in kids}) == 1


def _find_containers(root):
    """The outermost block containers, in registration order: [(fqn, module)]."""
    found = []
    for name, mod in root.named_modules():
        if _inside(name, [f for f, _ in found]):
            continue
        if _is_block_container(mod):
            found.append((name, mod))
    return found


def _hf_module(root, getter):
    """root.get_input_embeddings() / get_output_embeddings() when the module
    has them (Hugging Face models) and they return a submodule."""
    fn = getattr(root, getter, None)
    if not callable(fn):
        return None
    try:
        m = fn()
    except Exception:  # pylint: disable=broad-except
        return None
    return m if isinstance(m, nn.Module) and m is not root else None


def _name_of(root, target):
    for name, mod in root.named_modules():
        if mod is target:
            return name
    return None


def default_units(root):
    """The default units of `root` (see docs/describe.md):

    - each param-holding child of every outermost repeated-block container;
    - the input embeddings (get_input_embeddings() of a Hugging Face model, else
      every nn.Embedding outside the blocks);
    - the final norm together with the head (get_output_embeddings(), else the
      last nn.Linear registered after the blocks in their parent or in the
      root), the norm being the last *Norm* module after the blocks in the
      blocks' parent;
    - without any block container: each param-holding direct child of root.
    """
    containers = _find_containers(root)
    units = []
    if not containers:
        for cname, child in root.named_children():
            if _has_params(child):
                units.append(Unit(cname, [(cname, child)]))
        return units
    cnames = [c for c, _ in containers]
    taken = set(cnames)

    emb = _hf_module(root, "get_input_embeddings")
    embs = []
    if emb is not None:
        n = _name_of(root, emb)
        if n is not None and not _inside(n, cnames):
            embs.append((n, emb))
    else:
        for n, m in root.named_modules():
            if isinstance(m, nn.Embedding) and not _inside(n, cnames) and not _inside(n, [e for e, _ in embs]):
                embs.append((n, m))
    for n, m in embs:
        if _has_params(m):
            units.append(Unit(n, [(n, m)]))
            taken.add(n)

    for cname, cont in containers:
        for child, mod in cont.named_children():
            if _has_params(mod):
                n = _join(cname, child)
                units.append(Unit(n, [(n, mod)]))

    # siblings registered after the (first) container in its parent
    first = cnames[0]
    parent_name = first.rpartition(".")[0] if "." in first else ""
    parent = root.get_submodule(parent_name)
    after, seen = [], False
    for child, mod in parent.named_children():
        n = _join(parent_name, child)
        if n == first:
            seen = True
        elif seen:
            after.append((n, mod))
    head = _hf_module(root, "get_output_embeddings")
    head_name = _name_of(root, head) if head is not None else None
    if head is None:
        cands = [(n, m) for n, m in after if isinstance(m, nn.Linear)]
        if parent_name != "":
            cands += [(n, m) for n, m in root.named_children() if isinstance(m, nn.Linear)]
        cands = [(n, m) for n, m in cands if n not in taken]
        if cands:
            head_name, head = cands[-1]
    if head is not None and head_name is not None and not _inside(head_name, list(taken)):
        norms = [(n, m) for n, m in after if "norm" in type(m).__name__.lower() and _has_params(m)
                 and n != head_name]
        members = ([norms[-1]] if norms else []) + [(head_name, head)]
        units.append(Unit("+".join(n for n, _ in members), members))
    return units


# ---------------------------------------------------------------------------
# explicit units: names, fnmatch patterns, groups, predicates


def _match(root, pattern):
    """The outermost modules whose name matches the fnmatch pattern."""
    out = []
    for name, mod in root.named_modules():
        if name == "" or _inside(name, [n for n, _ in out]):
            continue
        if fnmatch.fnmatchcase(name, pattern):
            out.append((name, mod))
    return out


def _describe_entry(entry):
    return repr(entry) if not callable(entry) else getattr(entry, "__name__", "predicate")


def explicit_units(root, spec):
    """Units from the `units=` argument: a string (a module name or fnmatch
    pattern; "A+B" groups), a tuple/list of strings inside the list (a group),
    a predicate(name, module) -> bool, or a list of those."""
    if isinstance(spec, str) or callable(spec):
        spec = [spec]
    if not isinstance(spec, (list, tuple)) or not spec:
        raise (type_error if not isinstance(spec, (list, tuple)) else value_error)(
            "units: expected a non-empty list of module names, fnmatch patterns, groups or a "
            "predicate(name, module), got %r" % (spec,))
    units, used = [], set()
    for entry in spec:
        if callable(entry):
            found = []
            for name, mod in root.named_modules():
                if name == "":
                    continue
                try:
                    ok = entry(name, mod)
                except Exception as e:  # pylint: disable=broad-except
                    raise error("units: the predicate %s raised %s: %s on module '%s'"
                                % (_describe_entry(entry), type(e).__name__, e, name)) from e
                if ok:
                    found.append([(name, mod)])
        elif isinstance(entry, str) or (isinstance(entry, (tuple, list)) and entry
                                        and all(isinstance(x, str) for x in entry)):
            parts = entry.split("+") if isinstance(entry, str) else list(entry)
            if any(not p for p in parts):
                raise error("units: empty module name or pattern in %r" % (entry,))
            matched = []
            for p in parts:
                m = _match(root, p)
                if not m:
                    raise error("units: %r matches no module (module names look like %s)"
                                % (p, _examples(root)))
                matched.append(m)
            if len(parts) == 1:
                found = [[x] for x in matched[0]]
            else:
                found = [[x for m in matched for x in m]]
        else:
            raise type_error("units: expected a module name, an fnmatch pattern, a group (tuple of names) or a "
                             "predicate(name, module), got %r" % (entry,))
        if not found:
            raise error("units: the predicate %s selects no module" % _describe_entry(entry))
        kept = 0
        for members in found:
            members = [(n, m) for n, m in members if n not in used]
            if not members or not any(_has_params(m) for _, m in members):
                continue
            used.update(n for n, _ in members)
            units.append(Unit("+".join(n for n, _ in members), members))
            kept += 1
        if not kept:
            raise error("units: %s selects only modules without parameters (or modules already chosen)"
                        % _describe_entry(entry))
    return units


def _examples(root):
    names = [n for n, _ in root.named_modules() if n][:3]
    return ", ".join("'%s'" % n for n in names) if names else "(the module has no submodules)"
