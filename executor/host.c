/* host.c - the plan replayed on host memory (host.h), the part the MPI and
 * external backends share.
 *
 * Streams. The plan's three streams are emulated: each is its list of ops
 * (fp_exec.sops) replayed in order, with two counters: enq (op instances
 * the hooks have handed it, across steps) and head (instances finished).
 * A stream advances while its head op can: a local op runs (reference
 * kernels, kernels/kernels.h); a communication op is issued non-blocking
 * through the backend (with the rest of its group) and finishes when the
 * backend's test says so; a record finishes at once (everything before it
 * on its stream has); a wait finishes once the record it is tied to has
 * finished in the right step. A hook hands the segment's ops to their
 * streams and returns when the compute stream has caught up (the trainer's
 * next work reads its results); the ag and rs streams go on in the
 * background. A stream is at most one step behind its hooks: an op is not
 * handed out again before its previous instance finished.
 *
 * Progress (docs/executor.md, "Streams and progress", has the figures).
 * FP_PROGRESS_POLL: only the hooks drive the streams, so the background
 * streams stand still while the trainer computes. FP_PROGRESS_THREAD: a
 * progress thread drives them between hooks too; a hook takes the streams
 * over (one mutex) and drives them itself, so handing work over costs no
 * thread wake-up; the thread lets go after every sweep and sleeps when no
 * stream has work. Idle waits poll SPINS times, then yield the core between
 * polls.
 *
 * Averages. Backends sum; an op with red=avg divides its result (dst, on
 * the root only for reduce) by G with fpk_div once the collective is done,
 * before anything after it on the stream runs. */
#include "host.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "kernels/kernels.h"

#define SPINS 256 /* idle polls before a wait yields the core (docs/executor.md) */

int64_t fpx_host_align(int64_t v) { return (v + FPX_HOST_ALIGN - 1) / FPX_HOST_ALIGN * FPX_HOST_ALIGN; }

static bool is_comm(const fp_xop *o) { return fpi_op_class(o->code) == FP_OPC_COMM; }

fp_status fpx_host_prepare(fp_exec *x, fpx_host *h, const fpx_host_ops *ops, fp_progress mode, int64_t staging,
                           char **stage) {
  h->ops = ops;
  h->mode = mode;
  x->stats.progress = mode;
  int64_t dev = fpx_host_align(x->prog->arena_bytes), host = fpx_host_align(x->prog->host_bytes), total;
  if (!fpi_add64(dev, host, &total) || !fpi_add64(total, staging, &total) || total > (int64_t)(SIZE_MAX / 2))
    return fpx_fail(x, FP_ERR_PLAN, "the arena (%" PRId64 " + %" PRId64 " bytes) is too large", dev, host);
  void *mem = NULL;
  x->stats.allocations++;
  if (posix_memalign(&mem, FPX_HOST_ALIGN, total > 0 ? (size_t)total : FPX_HOST_ALIGN))
    return fpx_fail(x, FP_ERR_NOMEM, "cannot allocate the arena: %" PRId64 " bytes", total);
  memset(mem, 0, total > 0 ? (size_t)total : FPX_HOST_ALIGN);
  h->mem = mem;
  x->dev = h->mem;
  x->host = h->mem + dev;
  *stage = h->mem + dev + host;
  x->stats.arena_bytes = total;
  h->sums = fpx_alloc(x, (size_t)x->prog->nsegs, sizeof *h->sums);
  if (!h->sums) return fpx_fail(x, FP_ERR_NOMEM, "out of memory");
  for (int32_t j = 0, seg = 0; j < x->nxops; j++) {
    const fp_xop *o = &x->xops[j];
    while (o->index >= x->prog->segs[seg].first + x->prog->segs[seg].nops) seg++;
    if (!is_comm(o)) {
      h->sums[seg].local += fpi_op_class(o->code) == FP_OPC_LOCAL;
      continue;
    }
    h->sums[seg].coll++;
    h->sums[seg].bytes += fpx_send_bytes(o);
  }
  for (int s = 0; s < FP_NSTREAMS; s++) {
    h->st[s].ops = x->sops[s];
    h->st[s].len = x->slen[s];
  }
  return FP_OK;
}

/* ---- running ops ------------------------------------------------------------------------- */
static void run_local(const fp_xop *o) {
  int64_t sz = fpi_dtype_size(o->dtype);
  switch (o->code) {
    case FP_OP_CAST: fpk_cast(o->dst, o->dtype, o->src, o->sdtype, o->n); break;
    case FP_OP_COPY:
      for (int64_t r = 0; r < o->rows; r++) memcpy(o->dst + r * o->dpitch, o->src + r * o->spitch, (size_t)(o->n * sz));
      break;
    case FP_OP_SPLIT_COPY:
    case FP_OP_CHUNK_CAT: {
      /* region j: rows of tab_cnt[j] elements between the table side (at
       * tab_off[j], rows packed) and the rows side (column p, pitched) */
      bool split = o->code == FP_OP_SPLIT_COPY;
      int64_t ed = fpi_dtype_size(o->dtype), es = fpi_dtype_size(o->sdtype), col = 0;
      for (int64_t j = 0; j < o->ntab; j++) {
        int64_t c = o->tab_cnt[j];
        for (int64_t r = 0; r < o->rows; r++) {
          char *d = split ? o->dst + (o->tab_off[j] + r * c) * ed : o->dst + r * o->dpitch + col * ed;
          const char *s = split ? o->src + r * o->spitch + col * es : o->src + (o->tab_off[j] + r * c) * es;
          if (o->dtype == o->sdtype) memcpy(d, s, (size_t)(c * ed));
          else fpk_cast(d, o->dtype, s, o->sdtype, c);
        }
        col += c;
      }
      break;
    }
    case FP_OP_ADD: fpk_add(o->dst, o->dtype, o->src, o->sdtype, o->n); break;
    case FP_OP_SCALE: fpk_scale(o->dst, o->dtype, o->alpha, o->n); break;
    case FP_OP_MEMSET: fpk_memset0(o->dst, o->n * sz); break;
    case FP_OP_QUANTIZE_MXFP8: fpk_quantize_mxfp8((uint8_t *)o->dst, (uint8_t *)o->aux, o->src, o->sdtype, o->n); break;
    case FP_OP_DEQUANTIZE_MXFP8:
      fpk_dequantize_mxfp8(o->dst, o->dtype, (const uint8_t *)o->src, (const uint8_t *)o->aux, o->n);
      break;
    case FP_OP_H2D:
    case FP_OP_D2H: memcpy(o->dst, o->src, (size_t)o->n); break;
    default: FP_ASSERT(!"not a local op");
  }
}

/* record the first backend failure (from whichever thread drives the streams) */
static void stream_fail(fp_exec *x, fpx_host *h, const fp_xop *o, const char *what, int rc) {
  if (h->failed) return;
  char s[512];
  h->ops->errstr(x, rc, s, sizeof s);
  snprintf(h->fail_msg, sizeof h->fail_msg, "%s: %s of op %" PRId32 " (%s) failed: %s", h->ops->name, what, o->index,
           fpi_op_name(o->code), s);
  h->failed = true;
}

/* Advance one stream as far as it goes without blocking; true when anything
 * finished or started. */
static bool advance(fp_exec *x, fpx_host *h, fpx_hstream *s) {
  bool moved = false;
  int64_t enq = s->enq, head = s->head;
  while (head < enq) {
    if (s->issued == head) { /* nothing in flight: start the head op */
      fp_xop *o = s->ops[head % s->len];
      int64_t step = head / s->len;
      switch (fpi_op_class(o->code)) {
        case FP_OPC_SYNC:
          fpx_time_op(x, o, step, false);
          if (o->code == FP_OP_RECORD) {
            o->done_step = step;
          } else if (o->rec) {
            int64_t need = o->rec_prev ? step - 1 : step;
            if (need >= 0 && o->rec->done_step < need) goto out;
          }
          fpx_time_op(x, o, step, true);
          break;
        case FP_OPC_LOCAL:
          fpx_time_op(x, o, step, false);
          run_local(o);
          fpx_time_op(x, o, step, true);
          break;
        case FP_OPC_COMM: {
          /* the op and the rest of its group (contiguous on this stream,
           * inside one segment, hence inside one step) */
          int64_t k = head;
          do {
            fp_xop *p = s->ops[k % s->len];
            fpx_time_op(x, p, k / s->len, false);
            int rc = h->ops->issue(x, p);
            if (rc != 0) {
              stream_fail(x, h, p, "issue", rc);
              goto out;
            }
            k++;
          } while (o->group >= 0 && k < enq && k % s->len != 0 && s->ops[k % s->len]->group == o->group);
          s->issued = k;
          moved = true;
          goto test;
        }
        default: FP_ASSERT(!"compute ops are not resolved");
      }
      s->issued = ++head;
      moved = true;
      continue;
    }
  test: /* finish what is in flight, in order */
    while (head < s->issued) {
      fp_xop *o = s->ops[head % s->len];
      int flag = 0, rc = h->ops->test(x, o, &flag);
      if (rc != 0) {
        stream_fail(x, h, o, "completion", rc);
        goto out;
      }
      if (!flag) goto out;
      if (h->ops->finish) h->ops->finish(x, o);
      if (o->red == FP_RED_AVG && (o->code != FP_OP_REDUCE || o->g == o->root)) fpk_div(o->dst, o->dtype, (double)o->G, o->n);
      fpx_time_op(x, o, head / s->len, true);
      head++;
      moved = true;
    }
  }
out:
  s->head = head;
  return moved;
}

static bool advance_all(fp_exec *x, fpx_host *h) {
  bool moved = false;
  for (int s = 0; s < FP_NSTREAMS; s++) moved |= advance(x, h, &h->st[s]);
  return moved;
}

bool fpx_host_poll(fp_exec *x, fpx_host *h) { return !h->failed && advance_all(x, h); }

static bool drained(const fpx_hstream *s) { return s->head == s->enq; }

static bool all_drained(const fpx_host *h) {
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (!drained(&h->st[s])) return false;
  return true;
}

/* The progress thread drives the streams while the trainer computes; it
 * lets go of the streams after every sweep, so a hook takes over at once,
 * and sleeps while no stream has work. */
static void *progress_main(void *arg) {
  fp_exec *x = arg;
  fpx_host *h = (fpx_host *)x->bks; /* every host backend's state starts with its fpx_host */
  pthread_mutex_lock(&h->mu);
  while (!h->stop) {
    if (h->failed || all_drained(h)) {
      pthread_cond_wait(&h->cv, &h->mu);
      continue;
    }
    bool moved = advance_all(x, h);
    pthread_mutex_unlock(&h->mu);
    if (!moved) sched_yield(); /* waiting on the backend or on another stream: let the trainer run */
    while (atomic_load_explicit(&h->hooks_waiting, memory_order_acquire)) sched_yield(); /* a hook goes first */
    pthread_mutex_lock(&h->mu);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

fp_status fpx_host_start(fp_exec *x, fpx_host *h) {
  if (h->mode != FP_PROGRESS_THREAD) return FP_OK;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  if (pthread_create(&h->th, NULL, progress_main, x)) {
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    return fpx_fail(x, FP_ERR_BACKEND, "cannot start the progress thread");
  }
  h->th_live = true;
  return FP_OK;
}

void fpx_host_stop(fpx_host *h) {
  if (!h->th_live) return;
  pthread_mutex_lock(&h->mu);
  h->stop = true;
  pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->th, NULL);
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
  h->th_live = false;
}

void fpx_host_free(fpx_host *h) {
  if (!h->timed_out) free(h->mem);
  else fpx_keep_for_mpi(h->mem);
  h->mem = NULL;
  fpx_free(h->sums);
  h->sums = NULL;
}

/* ---- the watchdog ------------------------------------------------------------------------ */
void fpx_rank_list(char *buf, size_t cap, const int64_t *ranks, int n) {
  size_t k = strlen(buf);
  for (int i = 0; i < n && i < 8 && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : " ", ranks[i]);
  if (n > 8 && k < cap) snprintf(buf + k, cap - k, " and %d more", n - 8);
}

void fpx_host_report(fp_exec *x, const fp_xop *o, int64_t step, const int64_t *rep, char *msg, size_t cap) {
  const fp_ir_comm *pc = &x->prog->comms[o->comm];
  int G = (int)pc->size;
  int64_t g = fpi_comm_index(pc, x->rank), base = x->rank - g * pc->stride;
  int64_t same[64], other[64], gone[64];
  int ns = 0, no = 0, ng = 0;
  int64_t o_step = 0, o_op = 0;
  for (int j = 0; j < G; j++) {
    if (j == g) continue;
    int64_t peer = base + j * pc->stride;
    const int64_t *in = rep + 2 * j;
    if (in[0] == -2) {
      if (ng < 64) gone[ng] = peer;
      ng++;
    } else if (in[0] == step && in[1] == o->index) {
      if (ns < 64) same[ns] = peer;
      ns++;
    } else {
      if (no < 64) other[no] = peer;
      if (no++ == 0) o_step = in[0], o_op = in[1];
    }
  }
  int k = (int)strlen(msg);
  if (ng && k < (int)cap) {
    snprintf(msg + k, cap - (size_t)k, "; did not arrive (no report within %g s):", x->timeout_s);
    fpx_rank_list(msg, cap, gone, ng);
    k = (int)strlen(msg);
  }
  if (ns && k < (int)cap) {
    snprintf(msg + k, cap - (size_t)k, "; waiting at the same op:");
    fpx_rank_list(msg, cap, same, ns);
    k = (int)strlen(msg);
  }
  if (no && k < (int)cap) {
    snprintf(msg + k, cap - (size_t)k, "; waiting elsewhere (the first at op %" PRId64 " of step %" PRId64 "):", o_op,
             o_step);
    fpx_rank_list(msg, cap, other, no);
  }
}

/* ---- the agreement's verdict ------------------------------------------------------------- */
fp_status fpx_agree_status(fp_exec *x, const fpx_agreement *a_, fp_status local) {
  const fpx_agreement a = *a_;
  if (a.verdict == FPX_AV_NO_ROOT)
    return local != FP_OK ? local
                          : fpx_fail(x, FP_ERR_TIMEOUT,
                                     "watchdog: fp_exec_create: the ranks' agreement on the plan got no answer from "
                                     "rank 0 within %g s (timeout %g s): rank 0 did not join; no collective of the "
                                     "plan was issued", a.waited_s, x->timeout_s);
  if (a.verdict == FPX_AV_TIMEOUT) {
    char list[160];
    fpx_agree_list(&a, list, sizeof list);
    char why[FPX_MSG_CAP];
    snprintf(why, sizeof why, "%s", local != FP_OK ? x->msg : "");
    return fpx_fail(x, FP_ERR_TIMEOUT,
                    "watchdog: fp_exec_create: %" PRId64 " rank(s) did not join the ranks' agreement on the plan "
                    "within %g s (timeout): did not join: %s; no collective of the plan was issued%s%.900s",
                    a.missing, x->timeout_s, list, local != FP_OK ? "; this rank's setup failed too: " : "", why);
  }
  if (local != FP_OK) return local;
  if (a.verdict == FPX_AV_FAILED)
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "rank %" PRId64 " failed its executor setup (its message says why); no collective of the plan was "
                    "issued", a.rank);
  if (a.verdict == FPX_AV_MISMATCH)
    return fpx_fail(x, FP_ERR_MISMATCH,
                    "plan hash mismatch: rank 0 has fnv1a64:%016" PRIx64 ", rank %" PRId64 " has fnv1a64:%016" PRIx64
                    "; every rank must load the same plan; no collective of the plan was issued",
                    a.root_hash, a.rank, a.other_hash);
  return FP_OK;
}

/* No op moved for waited_s seconds: find the op this rank waits for (a
 * communication op in flight, else the head of a stream), name it, then let
 * the backend ask the other ranks of its communicator instance where they
 * are (ops->peers). The executor is broken from here on; what the backend
 * still holds (requests on the plan's groups, the arena they write into)
 * is left alone at destroy. */
static fp_status watchdog(fp_exec *x, fpx_host *h, double waited_s) {
  const fp_xop *o = NULL;
  int64_t step = -1;
  for (int s = 0; s < FP_NSTREAMS && !o; s++)
    if (h->st[s].head < h->st[s].issued) o = h->st[s].ops[h->st[s].head % h->st[s].len], step = h->st[s].head / h->st[s].len;
  for (int s = 0; s < FP_NSTREAMS && !o; s++)
    if (h->st[s].head < h->st[s].enq) o = h->st[s].ops[h->st[s].head % h->st[s].len], step = h->st[s].head / h->st[s].len;
  char where[160], msg[1024];
  if (x->in_hook) {
    char lab[128];
    snprintf(where, sizeof where, "hook %s", fpx_seg_label(x, x->cursor, lab, sizeof lab));
  } else {
    snprintf(where, sizeof where, "fp_exec_sync");
  }
  int k = snprintf(msg, sizeof msg, "watchdog: %s: no op of the plan moved for %.1f s (timeout %g s)", where, waited_s,
                   x->timeout_s);
  const fp_ir_comm *pc = o && o->comm >= 0 && o->comm < x->prog->ncomms ? &x->prog->comms[o->comm] : NULL;
  if (o)
    k += snprintf(msg + k, sizeof msg - (size_t)k, "; rank %" PRId64 " waits for op %" PRId32 " (%s %s%s%s%s, stream %s) of step %" PRId64,
                  x->rank, o->index, fpi_op_name(o->code), fpi_dtype_name(o->dtype), pc ? " on communicator '" : "",
                  pc ? pc->name : "", pc ? "'" : "", fpi_stream_name(o->stream), step);
  if (pc && h->ops->peers && k < (int)sizeof msg) h->ops->peers(x, o, step, msg, sizeof msg);
  snprintf(h->fail_msg, sizeof h->fail_msg, "%s", msg);
  h->failed = h->timed_out = true;
  return fpx_fail(x, FP_ERR_TIMEOUT, "%s", msg);
}

/* Drive the streams until done() holds (the caller holds mu in thread
 * mode). An idle wait polls SPINS times, then yields the core at each poll:
 * short waits cost no system call, long ones leave the core to the other
 * ranks and threads. With a timeout (x->timeout_s), a wait in which no op
 * starts or finishes for that long ends in the watchdog: the clock is read
 * only once the wait yields, every 64 polls. */
static fp_status drive_until(fp_exec *x, fpx_host *h, bool (*done)(fpx_host *h, const void *arg), const void *arg) {
  int idle = 0;
  double since = 0;
  while (!h->failed && !done(h, arg)) {
    if (advance_all(x, h)) {
      idle = 0;
      since = 0;
    } else if (++idle > SPINS) {
      sched_yield();
      if (x->timeout_s > 0 && idle % 64 == 0) {
        double now = fpx_now_us();
        if (since == 0) since = now;
        else if (now - since > x->timeout_s * 1e6) return watchdog(x, h, (now - since) / 1e6);
      }
    }
  }
  return h->failed ? fpx_fail(x, h->timed_out ? FP_ERR_TIMEOUT : FP_ERR_BACKEND, "%s", h->fail_msg) : FP_OK;
}

static bool room_for(fpx_host *h, const void *arg) { /* no op handed out twice at once */
  const int64_t *want = arg;
  for (int s = 0; s < FP_NSTREAMS; s++)
    if (h->st[s].head < want[s] - h->st[s].len) return false;
  return true;
}
static bool compute_done(fpx_host *h, const void *arg) {
  (void)arg;
  return drained(&h->st[FP_STREAM_COMPUTE]);
}
static bool everything_done(fpx_host *h, const void *arg) {
  (void)arg;
  return all_drained(h);
}

/* the hook side: take the streams over from the progress thread, hand them
 * the segment, drive them until the compute stream caught up, then give
 * them back (waking the thread if anything is left) */
void fpx_host_take(fpx_host *h) {
  if (!h->th_live) return;
  atomic_fetch_add_explicit(&h->hooks_waiting, 1, memory_order_acq_rel);
  pthread_mutex_lock(&h->mu);
  atomic_fetch_sub_explicit(&h->hooks_waiting, 1, memory_order_acq_rel);
}
void fpx_host_give(fpx_host *h) {
  if (!h->th_live) return;
  if (!all_drained(h)) pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

fp_status fpx_host_run_segment(fp_exec *x, fpx_host *h, int32_t seg) {
  int64_t want[FP_NSTREAMS];
  for (int s = 0; s < FP_NSTREAMS; s++) want[s] = x->stats.steps * h->st[s].len + x->seg_end[seg][s];
  fpx_host_take(h);
  fp_status st = drive_until(x, h, room_for, want);
  if (st == FP_OK) {
    for (int s = 0; s < FP_NSTREAMS; s++) h->st[s].enq = want[s];
    st = drive_until(x, h, compute_done, NULL);
  }
  if (st == FP_OK) advance_all(x, h); /* start what the other streams can */
  fpx_host_give(h);
  FPX_CHECK(st);
  x->stats.local_ops += h->sums[seg].local;
  x->stats.collectives += h->sums[seg].coll;
  x->stats.bytes_moved += h->sums[seg].bytes;
  return FP_OK;
}

fp_status fpx_host_sync(fp_exec *x, fpx_host *h) {
  fpx_host_take(h);
  fp_status st = drive_until(x, h, everything_done, NULL);
  fpx_host_give(h);
  return st;
}

fp_status fpx_host_time_out(fp_exec *x, fpx_host *h, const char *msg) {
  fpx_host_take(h); /* the progress thread reads these under mu */
  if (!h->failed) snprintf(h->fail_msg, sizeof h->fail_msg, "%s", msg);
  h->failed = h->timed_out = true;
  fpx_host_give(h);
  return fpx_fail(x, FP_ERR_TIMEOUT, "%s", msg);
}
