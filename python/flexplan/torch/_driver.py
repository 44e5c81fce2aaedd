"""The hook cursor: turns the events a module's own hooks report (a unit's
forward started or ended, a gradient reached a unit's outputs or inputs,
autograd finished) into the plan's exact hook sequence.

The plan is one flat sequence of segments per step (step_begin, then per
micro-batch pre/post_forward of each unit in forward order and pre/post
backward in reverse, then pre/post_optimizer). Module hooks do not always
fire where the plan puts a segment: a unit of two submodules ends where the
next one begins, a unit whose inputs need no grad fires no post-backward, a
frozen unit may fire no backward event at all. So an event names the
segment it reaches, and the cursor issues every segment up to it, in plan
order; segments with no op on any rank are skipped where the executor
allows it (module hooks followed by a module hook). An event for a segment
already issued in this micro-batch is a no-op; one the plan does not have
ahead is an error naming the event and what the plan expects next.
"""
import time

from ..errors import FlexplanError
from ..executor import HOOKS, _check


def _err(msg, status=3):
    return FlexplanError(status, msg)


STEP_HOOKS = ("step_begin", "pre_optimizer", "post_optimizer")


class Driver:
    def __init__(self, ex, segments, module_names):
        self.ex = ex
        self.seq = segments  # [(kind, module, micro, count)]
        self.names = module_names
        self.pos = 0
        self.issued = set()  # (kind, module) issued in the current micro-batch
        self.micro = -1
        self.in_backward = False
        self.callback_queued = False
        self.pre_opt = next(i for i, s in enumerate(segments) if s[0] == "pre_optimizer")
        self.ga = 1 + max(s[2] for s in segments)
        self.hook_calls = 0
        self.on_issue = None  # optional callable(kind, module) for tracing (tests)
        self.follow_stream = None  # NCCL: called before each hook (the plan follows torch's current stream)
        self.profile = False
        self.deferred = []  # empty module segments not called yet (the executor skips them)
        self.skipped = 0  # segments never called
        self.exec_s = 0.0  # seconds inside fp_exec_hook (profile)
        self.exec_s_in_callbacks = 0.0  # of those, inside module/autograd callbacks
        self.recomputing = set()  # units whose recomputed forward the executor has open
        self.recomputes = 0  # recomputed forwards reported to the executor
        self._fp_hook = ex._lib.fp_exec_hook if hasattr(ex, "_lib") else None

    def _label(self, i):
        k, m, mb, _ = self.seq[i]
        return f"{k}({self.names[m]})" if m >= 0 else k

    def _call(self, i):
        k, m, _, _ = self.seq[i]
        if k == "post_backward" and m in self.recomputing:
            # checkpoint's early stop: the recompute ended without the unit's
            # last forward hook; close it before the backward ends
            self.recomputing.discard(m)
            self._hook("post_forward", m)
        self._hook(k, m)
        if self.on_issue:
            self.on_issue(k, m)

    def _hook(self, k, m):
        if self.follow_stream is not None:
            self.follow_stream()
        if self.profile:
            t0 = time.thread_time()
            self._raw_hook(k, m)
            dt = time.thread_time() - t0
            self.exec_s += dt
            if k not in ("pre_optimizer", "post_optimizer"):
                self.exec_s_in_callbacks += dt
        else:
            self._raw_hook(k, m)
        self.hook_calls += 1

    def _raw_hook(self, k, m):
        """fp_exec_hook straight through ctypes (Executor.hook's name and
        module lookups are for people; the cursor has the numbers)."""
        ex = self.ex
        if self._fp_hook is None:  # an executor stand-in (tests)
            ex.hook(k, m)
            return
        st = self._fp_hook(ex._x, HOOKS[k], m)
        if st != 0:
            _check(ex._lib, st, ex._x, "hook")

    def _issue_through(self, j):
        """Issue segments pos..j in plan order. A module segment with no op
        (compute placeholders aside) is not called: the executor skips it
        when the next module hook is called (its skip rule); before a step
        hook (which the executor never skips to) the deferred ones are
        called in order."""
        for i in range(self.pos, j + 1):
            k, m, mb, count = self.seq[i]
            if mb != self.micro:
                self.micro = mb
                self.issued = set()
            self.issued.add((k, m))
            if m >= 0 and count == 0:
                self.deferred.append(i)
                self.skipped += 1
                continue
            if m < 0:
                for d in self.deferred:
                    self._call(d)
                self.skipped -= len(self.deferred)
            self.deferred = []
            self._call(i)
        self.pos = j + 1
        if self.pos == len(self.seq):
            self.pos = 0
            self.micro = -1
            self.issued = set()

    def event(self, kind, m):
        """A module hook reached segment (kind, m) of the current micro-batch.

        Forward events never go back: a pre_forward passes the units before
        it that the forward skipped (issuing their segments in plan order, so
        every rank makes the plan's collectives whatever its data routed), a
        post_forward only step_begin, empty segments and the post_forward of a
        unit already open; so a forward that runs a unit the cursor has passed
        is an error, never a unit computing on weights the plan has not
        gathered. Backward events may pass anything of this micro-batch's
        backward (autograd's order is the graph's; units that fire no event are
        issued in plan order), and repeat (one event per output tensor)."""
        fwd = kind in ("pre_forward", "post_forward")
        if kind == "pre_forward" and self.micro >= 0 and ("pre_forward", m) in self.issued and \
                ("post_forward", m) not in self.issued and self.pos < self.pre_opt:
            return  # another submodule of a unit still open
        if self.pos < self.pre_opt:
            mb = self.seq[self.pos][2]
            for j in range(self.pos, self.pre_opt):
                k, mm, jmb, count = self.seq[j]
                if jmb != mb:
                    break
                if k == kind and mm == m:
                    self._issue_through(j)
                    return
                if kind == "pre_forward":
                    # a unit's forward may pass units the forward skipped (a
                    # branch not taken, an expert no token was routed to):
                    # their segments run in plan order with nothing computed
                    # (the gather and free; in backward their grads are zero)
                    if k in ("pre_backward", "post_backward"):
                        break
                elif fwd and not (k == "step_begin" or count == 0 or
                                  (k == "post_forward" and ("pre_forward", mm) in self.issued
                                   and self.micro == mb)):
                    break
        if (kind, m) in self.issued and self.micro >= 0 and (
                not fwd or (kind == "post_forward" and self.pos < self.pre_opt)):
            return
        raise _err(self._mismatch(f"{kind}({self.names[m]})", passed=fwd and (kind, m) in self.issued
                                  and self.micro >= 0 and self.pos < self.pre_opt))

    def _mismatch(self, what, passed=False):
        if passed:
            return (f"the module reached {what}, but the plan's forward already passed it (a unit the forward "
                    f"skipped cannot run later in the same forward; the plan expects {self._label(self.pos)} next, "
                    f"segment {self.pos} of {len(self.seq)}): the model's forward does not follow the plan's order")
        if self.pos == self.pre_opt:
            return (f"the module reached {what}, but the plan's {self.ga} micro-batch(es) of this step are "
                    f"done: call the optimizer step (flexplan.torch.optimizer or Sharded.step) first")
        return f"the module reached {what}, but the plan expects {self._label(self.pos)} next " \
               f"(segment {self.pos} of {len(self.seq)}): the model's forward does not follow the plan's order"

    def recompute_begin(self, m):
        """Unit m's forward runs again inside backward (activation
        checkpointing recomputes it): the executor is told, inside m's
        backward window (its weights are gathered there; a plan that does not
        recompute m refuses, naming the spec's `recompute`). A recompute that
        comes before m's pre_backward event first issues it, so the weights are
        in place; one anywhere else in the plan is an error."""
        if ("pre_backward", m) not in self.issued or self.micro < 0:
            self.event("pre_backward", m)
        k, mm, _, _ = self.seq[self.pos]
        if (k, mm) != ("post_backward", m) or m in self.recomputing:
            raise _err(self._mismatch(f"a recomputed forward of {self.names[m]} (activation checkpointing)"))
        # module segments deferred before it are skipped by the executor (its skip rule)
        self.deferred = []
        self._hook("pre_forward", m)
        self.recomputing.add(m)
        self.recomputes += 1
        if self.on_issue:
            self.on_issue("recompute", m)

    def recompute_end(self, m):
        """Unit m's recomputed forward reached its last forward hook."""
        if m in self.recomputing:
            self.recomputing.discard(m)
            self._hook("post_forward", m)

    def finish_backward(self):
        """Autograd is done with this micro-batch: issue what is left of its
        backward (units whose backward fired no event)."""
        self.in_backward = False
        self.callback_queued = False
        if self.pos == 0 or self.pos >= self.pre_opt:
            return
        mb = self.seq[self.pos][2]
        j = self.pos
        while j + 1 < self.pre_opt and self.seq[j + 1][2] == mb:
            j += 1
        if self.seq[j][0] not in ("pre_backward", "post_backward"):
            raise _err(f"backward finished, but the plan expects {self._label(self.pos)} next")
        self._issue_through(j)

    def pre_optimizer(self):
        if self.pos == self.pre_opt + 1:
            return  # already issued
        if self.pos != self.pre_opt:
            raise _err(
                f"optimizer step before the plan's step is through its backward: the plan expects "
                f"{self._label(self.pos)} next (grad_accumulation = {self.ga}: run {self.ga} forward/backward "
                f"micro-batch(es) per optimizer step)")
        self._issue_through(self.pre_opt)

    def post_optimizer(self):
        if self.pos != self.pre_opt + 1:
            raise _err(f"post_optimizer out of order: the plan expects {self._label(self.pos)} next")
        self._issue_through(self.pre_opt + 1)

    @property
    def at_optimizer(self):
        return self.pos in (self.pre_opt, self.pre_opt + 1)
