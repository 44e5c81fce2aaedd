"""flexplan._torchdist - the external backend's transport over torch.distributed.

``TorchTransport()`` fills the C table ``fp_transport`` (include/flexplan.h)
with ctypes callbacks that run each communication op of the plan as a
torch.distributed async op on CPU tensors made over the executor's arena
(``torch.frombuffer``: no copy), so a trainer launched by ``torchrun`` (gloo
on CPU) runs a plan with no MPI at all. ``Executor(plan, backend="torch")``
makes one; flexplan.torch picks that backend when torch.distributed is
initialized (docs/torch.md, "Launching with torchrun").

- Groups: ``new_group(size, stride)`` makes one process group per instance
  of the plan communicator (``dist.new_group``, every instance on every rank,
  in the executor's order, which is the same everywhere) and returns this
  rank's; the executor asks for one per (communicator, stream) and one for
  the world, so the plan's ops never match the trainer's own collectives.
- Ops: sums (the executor divides averages). A request finishes when every
  Work it holds ``is_completed()`` (``wait()`` then raises what failed), so
  the executor polls and never blocks in the transport. Where gloo's Work
  does not say so before ``wait()`` (reduce-scatter; send and recv, measured
  on torch 2.15), the op is made of ones that do or waited for elsewhere:
  a reduce-scatter (and ``_v``) is an all-reduce of a copy of the span it
  reads, this rank's piece copied out when done (twice the bytes of a
  reduce-scatter); send and recv are waited for by one waiter thread (gloo
  moves their bytes on its own threads meanwhile). ``all_gather_v`` is one
  broadcast per member from its piece (gloo's all_gather wants equal
  sizes); a reduce off its root reduces a copy of src (dist.reduce may use
  its tensor as scratch).
- Store: torch.distributed's default store (the TCPStore torchrun's
  rendezvous made), for the executor's agreement and the watchdog's reports.

Every callback catches what it raises: the message is kept for ``error``
and the call returns -1 (the executor then fails with it)."""
import ctypes
import time

from . import _lib
from .errors import FlexplanError

__all__ = ["TorchTransport"]


class TorchTransport:
    """The fp_transport of one executor over torch.distributed (initialized)."""

    def __init__(self):
        import torch  # pylint: disable=import-outside-toplevel
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        if not dist.is_available() or not dist.is_initialized():
            raise FlexplanError(_lib.FP_ERR_ARG, "backend 'torch' needs torch.distributed initialized "
                                "(dist.init_process_group, e.g. under torchrun)")
        self._torch, self._dist = torch, dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self._store = dist.distributed_c10d._get_default_store()  # pylint: disable=protected-access
        self._groups = []  # handle -> (process group, its global ranks)
        self._reqs = {}    # request -> [Work, ...] (and the tensors they use)
        self._next = 0
        self._err = ""
        self._views = {}   # (address, count, dtype) -> tensor over the arena
        self._waiter = self._wq = None  # the thread that waits for send/recv Works
        self._dtypes = {k: _lib.torch_dtype(v[0], torch.uint8) for k, v in _lib.ELEMS.items()}
        for k in (_lib.FP_ELEM_E4M3, _lib.FP_ELEM_E8M0):
            self._dtypes[k] = torch.uint8  # moved, never reduced
        self._fns = (_lib.TRANSPORT_NEW_GROUP(self._guard(self._new_group)),
                     _lib.TRANSPORT_START(self._guard(self._start)),
                     _lib.TRANSPORT_TEST(self._guard(self._test)),
                     _lib.TRANSPORT_STORE_SET(self._guard(self._store_set)),
                     _lib.TRANSPORT_STORE_GET(self._guard(self._store_get)),
                     _lib.TRANSPORT_ERROR(self._error))
        self.table = _lib.fp_transport(None, *self._fns)

    def address(self):
        """The address of the fp_transport table (fp_exec_config.transport)."""
        return ctypes.addressof(self.table)

    @property
    def pending(self):
        """Requests started and not seen finished (after a watchdog: kept, with their tensors)."""
        return len(self._reqs)

    # ---- callbacks ------------------------------------------------------------
    def _guard(self, f):
        def call(*args):
            try:
                return f(*args)
            except BaseException as e:  # pylint: disable=broad-except
                self._err = f"{type(e).__name__}: {e}"
                return -1
        return call

    def _error(self, _ctx, buf, cap):
        b = self._err.encode("utf-8", "replace")[:max(int(cap) - 1, 0)] + b"\0"
        ctypes.memmove(buf, b, len(b))

    def _new_group(self, _ctx, size, stride, out):
        size, stride, W = int(size), int(stride), self.world
        if size < 1 or stride < 1 or W % size or size * stride > W:
            self._err = f"new_group: size {size}, stride {stride} do not tile {W} ranks"
            return -1
        mine = None
        for base in range(W):
            if (base // stride) % size:
                continue
            ranks = [base + j * stride for j in range(size)]
            pg = self._dist.new_group(ranks)
            if self.rank in ranks:
                mine = (pg, ranks)
        self._groups.append(mine)
        out[0] = len(self._groups) - 1
        return 0

    def _tensor(self, addr, count, elem, f64=False):
        key = (addr, count, -1 if f64 else elem)
        t = self._views.get(key)
        if t is None:
            torch = self._torch
            dt = torch.float64 if f64 else self._dtypes[elem]
            nbytes = count * (8 if f64 else _lib.ELEMS[elem][1])
            if nbytes == 0:
                t = torch.empty(0, dtype=dt)
            else:
                import warnings  # pylint: disable=import-outside-toplevel
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the arena is writable
                    t = torch.frombuffer((ctypes.c_char * nbytes).from_address(addr), dtype=dt, count=count)
            self._views[key] = t
        return t

    def _start(self, _ctx, argp, out):
        a = argp.contents
        dist, SUM = self._dist, self._dist.ReduceOp.SUM
        pg, ranks = self._groups[a.group]
        c, n, G, g, e = int(a.coll), int(a.count), int(a.size), int(a.index), int(a.dtype)
        esz = 8 if c == _lib.FP_COLL_ALL_REDUCE_F64 else _lib.ELEMS[e][1]
        src, dst = a.src or 0, a.dst or 0
        T = self._tensor
        keep, post, box = [], None, None
        if c == _lib.FP_COLL_ALL_GATHER:
            inp = T(src, n, e)
            if dst <= src < dst + G * n * esz:
                inp = inp.clone()  # in place: the input is this rank's piece of the output
                keep.append(inp)
            works = [dist.all_gather_into_tensor(T(dst, G * n, e), inp, group=pg, async_op=True)]
        elif c == _lib.FP_COLL_ALL_GATHER_V:
            counts = [int(a.counts[j]) for j in range(G)]
            displs = [int(a.displs[j]) for j in range(G)]
            mine = T(dst + displs[g] * esz, counts[g], e)
            if src != dst + displs[g] * esz and counts[g]:
                mine.copy_(T(src, counts[g], e))
            works = [dist.broadcast(T(dst + displs[j] * esz, counts[j], e), src=ranks[j], group=pg, async_op=True)
                     for j in range(G) if counts[j]]
        elif c in (_lib.FP_COLL_REDUCE_SCATTER, _lib.FP_COLL_REDUCE_SCATTER_V):
            # gloo's reduce-scatter Work never reports is_completed() before wait(): an all-reduce
            # of a copy of the span instead, this rank's piece copied out when it is done
            if c == _lib.FP_COLL_REDUCE_SCATTER:
                lo, hi, at = 0, G * n, g * n
            else:
                counts = [int(a.counts[j]) for j in range(G)]
                displs = [int(a.displs[j]) for j in range(G)]
                lo = min(d for d, k in zip(displs, counts) if k) if any(counts) else 0
                hi = max(d + k for d, k in zip(displs, counts)) if any(counts) else 0
                at, n = displs[g], counts[g]
            scratch = T(src + lo * esz, hi - lo, e).clone()
            out_t = T(dst, n, e)
            keep.append(scratch)
            post = (out_t, scratch[at - lo:at - lo + n])
            works = [dist.all_reduce(scratch, op=SUM, group=pg, async_op=True)]
        elif c in (_lib.FP_COLL_ALL_REDUCE, _lib.FP_COLL_ALL_REDUCE_F64):
            f64 = c == _lib.FP_COLL_ALL_REDUCE_F64
            t = T(dst, n, e, f64)
            if src != dst:
                t.copy_(T(src, n, e, f64))
            works = [dist.all_reduce(t, op=SUM, group=pg, async_op=True)]
        elif c == _lib.FP_COLL_BROADCAST:
            works = [dist.broadcast(T(dst, n, e), src=ranks[int(a.root)], group=pg, async_op=True)]
        elif c == _lib.FP_COLL_REDUCE:
            root = int(a.root)
            if g == root:
                t = T(dst, n, e)
                if src != dst:
                    t.copy_(T(src, n, e))
            else:
                t = T(src, n, e).clone()  # scratch off the root: src stays as it was
                keep.append(t)
            works = [dist.reduce(t, dst=ranks[root], op=SUM, group=pg, async_op=True)]
        elif c in (_lib.FP_COLL_SEND, _lib.FP_COLL_RECV):
            # gloo's send/recv Works report is_completed() only through wait(): a waiter thread
            # waits for them (gloo moves the bytes on its own threads meanwhile)
            peer = ranks[int(a.root)]
            w = dist.isend(T(src, n, e), dst=peer, group=pg) if c == _lib.FP_COLL_SEND else \
                dist.irecv(T(dst, n, e), src=peer, group=pg)
            box = self._waited([w])
            works = []
        else:
            self._err = f"unknown op {c}"
            return -1
        self._next += 1
        self._reqs[self._next] = (works, keep, post, box)
        out[0] = self._next
        return 0

    def _test(self, _ctx, req, done):
        works, _, post, box = self._reqs[int(req)]
        if not all(w.is_completed() for w in works) or (box is not None and not box[0]):
            done[0] = 0
            return 0
        del self._reqs[int(req)]
        for w in works:
            w.wait()  # finished: raises what failed
        if box is not None and box[1] is not None:
            raise box[1]
        if post is not None:
            post[0].copy_(post[1])
        done[0] = 1
        return 0

    def _waited(self, works):
        """[done, error]: set by the waiter thread once every Work of works finished."""
        import queue  # pylint: disable=import-outside-toplevel
        import threading  # pylint: disable=import-outside-toplevel
        if self._waiter is None:
            self._wq = queue.SimpleQueue()

            def loop(q):
                while True:
                    ws, b = q.get()
                    try:
                        for w in ws:
                            w.wait()
                    except BaseException as e:  # pylint: disable=broad-except
                        b[1] = e
                    b[0] = True
            self._waiter = threading.Thread(target=loop, args=(self._wq,), daemon=True, name="flexplan-p2p")
            self._waiter.start()
        box = [False, None]
        self._wq.put((works, box))
        return box

    def _store_set(self, _ctx, key, value, length):
        self._store.set(key.decode(), ctypes.string_at(value, int(length)) if length else b"")
        return 0

    def _store_get(self, _ctx, key, value, cap, wait_s):
        k = key.decode()
        t0 = time.monotonic()
        while not self._store.check([k]):
            if 0 <= wait_s <= time.monotonic() - t0:
                return 1
            time.sleep(0.001)
        v = self._store.get(k)[:int(cap)]
        ctypes.memmove(value, v, len(v))
        return 0
