"""The optimizer's side of a sharded module: this rank's main-weight shards
as ``nn.Parameter``s (``fp_param_view.main``, ``.grad`` the main-grad
shard), the optimizer state the plan holds in its arena, the padding kept
at zero, and clip_grad_norm_ over the shards (docs/torch.md, "Optimizer")."""
import math

import torch
from torch import nn

from .. import _lib
from ..errors import error_maker, FlexplanError

__all__ = ["MainShards", "PLAN_OPTIMIZERS"]

# the torch optimizers whose element-wise state a plan's optimizer holds:
# plan optimizer -> (optimizer classes, state keys in the plan's order)
PLAN_OPTIMIZERS = {
    "adamw": (lambda: (torch.optim.Adam, torch.optim.AdamW), ("exp_avg", "exp_avg_sq")),
    "sgd": (lambda: (torch.optim.SGD,), ("momentum_buffer",)),
}


def _global_numel(p):
    n = 1
    for s in getattr(p, "global_shape", p.shape):
        n *= int(s)
    return n


_err = error_maker(_lib.FP_ERR_PLAN)  # the package's one error helper (flexplan.errors)


class MainShards:
    """This rank's main-weight shards of one executor, and how many ranks
    hold each param's elements (``repl``: hybrid replicas, no_shard,
    replicate; counted once in norms and gathers)."""

    def __init__(self, ex):
        self.ex = ex
        self.main = []  # (Parameter over main shard, grad tensor, ParamView, pad mask or None)
        self.held_idx = {}  # param name -> indices of the held elements of its main shard (padded shards)
        self._red = None  # clip_grad_norm_device's reduction buffer
        held = []
        for p in ex.params:
            held.append(float(p.shard.held))
            if not p.requires_grad:
                continue
            mt, gt = p.tensor("main"), p.tensor("grad")
            mp = ex._hand_out(nn.Parameter(mt, requires_grad=True))  # emptied by destroy()
            if gt.numel() and gt.dtype != mt.dtype:
                raise _err(f"param {p.name!r}: main-grad dtype {p.grad.dtype} differs from the main "
                           f"dtype {p.main.dtype}; torch optimizers need them equal")
            mask = None
            if mt.numel() and p.shard.held != mt.numel():
                mask = torch.zeros(mt.numel(), dtype=torch.bool, device=mt.device)
                for s, _, n in p.shard.pairs():
                    mask[s:s + n] = True
                # the held elements' indices, in order: g[held] selects what g[mask] does without
                # asking the device how many there are (a host wait a captured graph cannot hold)
                self.held_idx[p.name] = mask.nonzero().flatten()
            mp.grad = gt if gt.numel() == mt.numel() else None
            mp._flexplan_name = p.name
            self.main.append((mp, gt, p, mask))
        # one collective at setup
        total = ex.all_reduce_f64(held) if held else []
        # per global element (a tp-sharded param's slices are distinct elements of it; a param
        # replicated over tp is held by every tp rank)
        self.repl = {p.name: (total[i] / _global_numel(p) if p.numel else 1.0) for i, p in enumerate(ex.params)}
        self.views = None  # optimizer-state views adopted by the optimizer

    def params(self):
        return [mp for mp, _, _, _ in self.main]

    def named(self):
        return [(p.name, mp) for mp, _, p, _ in self.main]

    def attach_grads(self):
        for mp, gt, _, _ in self.main:
            if gt.numel() == mp.numel():
                mp.grad = gt  # optimizer.zero_grad() may have set None

    def zero_padding(self):
        """Elements outside this rank's extents back to zero (an optimizer
        that moves a zero weight with a zero grad must not leak into the
        padding all-gathers ship)."""
        with torch.no_grad():
            for mp, _, _, mask in self.main:
                if mask is not None:
                    mp.masked_fill_(~mask, 0)

    def adopt_state(self, opt):
        """Make opt's per-param state the plan's optimizer-state views
        (flexplan.torch.optimizer)."""
        kind = self.ex.optimizer
        if kind == "none":
            return
        classes, keys = PLAN_OPTIMIZERS[kind]
        if not isinstance(opt, classes()):
            raise _err(f"the plan holds {kind} optimizer state but the optimizer is {type(opt).__name__}: "
                       f"compile with \"optimizer\": {{\"type\": ...}} for it (\"none\" leaves the state to "
                       f"the optimizer)")
        for g in opt.param_groups:
            if kind == "adamw" and g.get("amsgrad"):
                raise _err("amsgrad keeps a third state (max_exp_avg_sq) the plan does not hold: compile with "
                           "\"optimizer\": {\"type\": \"none\"} to let torch allocate it")
            if kind == "sgd" and not g.get("momentum"):
                raise _err("SGD without momentum keeps no state but the plan holds a momentum buffer: compile "
                           "with \"optimizer\": {\"type\": \"none\"}")
        views = {}
        for mp, _, p, _ in self.main:
            ts = [p.tensor(f"optim{k}") for k in range(len(keys))] if len(p.optim) == len(keys) else None
            if ts is None or any(t.numel() != mp.numel() for t in ts):
                raise _err(f"param {p.name!r}: the plan's {kind} state does not match its main shard")
            if ts[0].dtype != mp.dtype:
                raise _err(f"param {p.name!r}: the plan holds {kind} state in {p.optim[0].dtype} but torch keeps "
                           f"it in the main weights' dtype {p.main.dtype}: compile with \"optimizer\": "
                           f"{{\"type\": \"{kind}\", \"state_dtype\": \"{p.main.dtype}\"}}")
            views[mp] = dict(zip(keys, ts))
        if kind == "adamw":
            from torch.optim.optimizer import _get_scalar_dtype  # pylint: disable=import-outside-toplevel
            for g in opt.param_groups:
                dev_step = g.get("capturable") or g.get("fused")
                for mp in g["params"]:
                    step = torch.zeros((), dtype=_get_scalar_dtype(is_fused=bool(g.get("fused"))),
                                       device=mp.device if dev_step else "cpu")
                    opt.state[mp] = dict(views[mp], step=step)

        def adopt(o, *_):
            # after torch made or loaded state tensors of its own: copy them
            # into the plan's views and keep the views
            with torch.no_grad():
                for mp, kv in views.items():
                    s = o.state.get(mp)
                    if not s:
                        continue
                    for k, t in kv.items():
                        cur = s.get(k)
                        if cur is not None and cur is not t:
                            t.copy_(cur)
                            s[k] = t

        if kind == "sgd":
            opt.register_step_post_hook(adopt)
        opt.register_load_state_dict_post_hook(adopt)
        self.views = views

    # the device double clip_grad_norm_device reduces in (a test on the
    # simulated device stands its own device memory in)
    reduce_buffer = staticmethod(lambda device: torch.zeros(1, dtype=torch.float64, device=device))

    def _held_grads(self):
        """(fp32 grads of the held elements, replication count) per param
        with a main-grad shard, in order"""
        for _, gt, p, mask in self.main:
            if gt.numel() == 0:
                continue
            g = gt.float() if mask is None else gt.float()[self.held_idx[p.name]]
            yield g, self.repl[p.name]

    def clip_grad_norm_(self, max_norm, norm_type, rank, world_size):
        """torch.nn.utils.clip_grad_norm_ over the main-grad shards; one
        all-reduce. Returns the total norm (a float)."""
        local = 0.0
        with torch.no_grad():
            for g, r in self._held_grads():
                if math.isinf(norm_type):
                    local = max(local, float(g.abs().max()))
                else:
                    local += float(g.abs().pow(norm_type).sum(dtype=torch.float64)) / r
        if math.isinf(norm_type):
            # max over ranks via a sum of one-hot is not possible; gather all
            vals = [0.0] * world_size
            vals[rank] = local
            total = max(self.ex.all_reduce_f64(vals))
        else:
            total = self.ex.all_reduce_f64([local])[0]
            total = math.sqrt(total) if norm_type == 2 else total ** (1.0 / norm_type)
        coef = min(float(max_norm) / (total + 1e-6), 1.0)
        if coef < 1.0:
            with torch.no_grad():
                for _, gt, _, _ in self.main:
                    if gt.numel():
                        gt.mul_(coef)
        return total

    def clip_grad_norm_device(self, max_norm, norm_type):
        """clip_grad_norm_ with no host wait, so that a captured graph holds
        it (one graph per step): the partial sums, the all-reduce
        (fp_exec_all_reduce_f64_dev, on the compute stream) and the scaling
        stay on the device. The same operations as clip_grad_norm_, in its
        order, so the same bits: float64 partial sums added in param order
        (0 + x is x), the sum (or, for the inf norm, the maximum) over the
        ranks by NCCL as there, sqrt for the 2-norm (correctly rounded on
        both sides; another p takes the device's pow, which may differ from
        the host's in the last place), the coefficient in float64 and the
        grads scaled by it rounded to fp32 (bf16 grads through fp32, as the
        host's scalar multiply does) - by 1.0 when it is not below 1, which
        changes no value. Returns the total norm as a 0-dim fp32 tensor on
        the device."""
        inf = math.isinf(norm_type)
        device = self.main[0][1].device if self.main else torch.device("cuda")
        with torch.no_grad():
            local = torch.zeros((), dtype=torch.float64, device=device)
            for g, r in self._held_grads():
                if inf:
                    local = torch.maximum(local, g.abs().max().double())
                else:
                    local = local + g.abs().pow(norm_type).sum(dtype=torch.float64) / r
            if self._red is None:  # the reduction's device double, made once (the first time: in the graph's pool)
                self._red = type(self).reduce_buffer(device)
            buf = self._red
            buf.copy_(local.reshape(1))
            self.ex.all_reduce_f64_device(buf.data_ptr(), 1, op_max=inf)
            total = buf[0].clone()
            if not inf:
                total = total.sqrt() if norm_type == 2 else total.pow(1.0 / norm_type)
            coef = (float(max_norm) / (total + 1e-6)).clamp(max=1.0).float()
            for _, gt, _, _ in self.main:
                if not gt.numel():
                    continue
                if gt.dtype == torch.float32:
                    gt.mul_(coef)
                else:
                    gt.copy_(gt.float().mul_(coef))
        return total.float()
