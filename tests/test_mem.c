/* test_mem.c - the memory plan's rules attacked with mutants: rule 6
 * (persistent buffers overlap nothing; transient buffers that share arena
 * bytes are live at different times, ordered by happens-before within a
 * step and into the next) and rule 8 (no race through shared bytes), as
 * test_sem.c attacks rule 9.
 *
 * Sources: every example and the MPI tests' model and spec pairs, compiled
 * here (memplan's placements and live ranges, the sync pass's events). Each
 * mutant changes one thing of the memory plan - a transient buffer moved
 * onto another's offset or by 256 bytes, a persistent buffer moved onto
 * another buffer, a live range grown or shrunk by one op at either end,
 * dropped, or merged with the buffer's next one - and is judged twice: by
 * the verifier (rules 1-8) and by an oracle written here, independent of
 * ir/verify.c and ir/access.c, and simple rather than fast: per buffer the
 * ops that name it (operands, a compute op's uses); its live ranges (the
 * declared ones, or first..last use); vector clocks over two walks of the
 * step (streams in program order, a record snapshots its stream, a wait
 * joins the last record of its event); then every pair of ranges of two
 * buffers whose bytes meet compared use by use: disjoint, and each use of
 * the earlier one happening before each use of the later one, whose uses in
 * turn happen before the earlier one's in the next step. A use outside
 * every range of its buffer is a fault, and a persistent buffer that meets
 * any other one.
 *
 * The test fails when the oracle finds a fault the verifier accepts (a
 * plan that can corrupt memory let through), or when the verifier rejects
 * a mutant the oracle finds sound (a memory plan refused for no reason),
 * and when an original is not sound by both. The table goes to stdout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mutant_sources.h"

/* at most this many mutants per kind and source (spread over the
 * candidates); under the sanitizers a quarter */
#ifdef __SANITIZE_ADDRESS__
#define PER_KIND 40
#else
#define PER_KIND 160
#endif
#define ALIGN 256 /* memplan's placement alignment (a nudge keeps rule 2's element alignment) */

enum { M_ONTO, M_NUDGE, M_PERSIST, M_SHRINK, M_GROW, M_DROP, M_MERGE, M_UNWAIT, M_NKINDS };
static const char *kind_name[M_NKINDS] = {"moved onto another", "moved by 256 bytes", "persistent moved",
                                          "range shrunk",       "range grown",        "range dropped",
                                          "ranges merged",      "wait dropped"};

typedef struct tally {
  int n, faulty, caught, sound, accepted;
  char first[700]; /* a fault caught: the verifier's message */
} tally;
static tally T[M_NKINDS];
static int fails;
/* the faults by what the oracle found (the first it found of each mutant) */
static const char *reason_text[] = {"one is persistent", "are live together", "unordered in the step",
                                    "unordered into the next step", "outside its live ranges"};
#define NREASONS 5
static int R[NREASONS];

/* whether the verifier's messages name the fault of reason r: rule 6's
 * message for it (rule 8's races through shared bytes are reported only
 * when rule 6 finds nothing: a fault caught by rule 8 alone would mean
 * rule 6 missed it) */
static bool names_reason(const char *msgs, int r) {
  static const char *frag[NREASONS] = {"persistent buffer", "are live at the same time",
                                       "reuses the arena bytes of", "in the next step but op",
                                       "outside its live ranges"};
  for (const char *l = msgs; *l;) {
    const char *nl = strchr(l, '\n'), *e = nl ? nl : l + strlen(l);
    const char *at = strstr(l, frag[r]);
    if (at && at < e) {
      const char *nx = strstr(l, "in the next step");
      if (r != 2 || !nx || nx >= e) return true;
    }
    l = nl ? nl + 1 : e;
  }
  return false;
}

/* ---- the oracle ----------------------------------------------------------------------- */
typedef struct oracle {
  const fp_prog *p;
  int32_t n;                    /* ops */
  uint32_t (*vc)[FP_NSTREAMS];  /* op i of step s (0, 1): vc[s * n + i] */
  int32_t *ustart, *ulist;      /* buffer b's ops: ulist[ustart[b] .. ustart[b + 1]), ascending */
} oracle;

/* the buffers op names, each once: its operands, a compute op's uses */
static int named(const fp_prog *p, const fp_op *op, int32_t *out, int cap) {
  int n = 0;
  int32_t r[3] = {op->dst.buf, op->src.buf, op->aux.buf};
  int nu = op->code == FP_OP_COMPUTE ? op->nuses : 0;
  for (int k = 0; k < 3 + nu; k++) {
    int32_t b = k < 3 ? r[k] : p->uses[op->uses + k - 3];
    bool seen = b < 0;
    for (int j = 0; j < n && !seen; j++) seen = out[j] == b;
    if (!seen && n < cap) out[n++] = b;
  }
  return n;
}

static void oracle_build(oracle *o, const fp_prog *p) {
  o->p = p, o->n = p->nops;
  o->vc = calloc(2 * (size_t)p->nops + 1, sizeof *o->vc);
  int32_t maxev = 0;
  for (int32_t i = 0; i < p->nops; i++) maxev = p->ops[i].event > maxev ? p->ops[i].event : maxev;
  uint32_t(*ev)[FP_NSTREAMS] = calloc((size_t)maxev + 1, sizeof *ev);
  uint32_t cur[FP_NSTREAMS][FP_NSTREAMS] = {{0}};
  for (int step = 0; step < 2; step++)
    for (int32_t i = 0; i < p->nops; i++) {
      const fp_op *op = &p->ops[i];
      int s = op->stream;
      if (op->code == FP_OP_WAIT) /* (an event never recorded holds zeros: nothing to wait for) */
        for (int t = 0; t < FP_NSTREAMS; t++) cur[s][t] = ev[op->event][t] > cur[s][t] ? ev[op->event][t] : cur[s][t];
      cur[s][s]++;
      if (op->code == FP_OP_RECORD) memcpy(ev[op->event], cur[s], sizeof cur[s]);
      memcpy(o->vc[(int64_t)step * p->nops + i], cur[s], sizeof cur[s]);
    }
  free(ev);
  /* each buffer's ops, by a counting sort over the ops */
  o->ustart = calloc((size_t)p->nbufs + 2, sizeof *o->ustart);
  int32_t most = 3;
  for (int32_t i = 0; i < p->nops; i++) most = p->ops[i].nuses + 3 > most ? p->ops[i].nuses + 3 : most;
  int32_t *got = malloc((size_t)most * sizeof *got), *fill = calloc((size_t)p->nbufs + 1, sizeof *fill);
  for (int32_t i = 0; i < p->nops; i++)
    for (int k = 0, n = named(p, &p->ops[i], got, most); k < n; k++) o->ustart[got[k] + 1]++;
  for (int32_t b = 0; b < p->nbufs; b++) o->ustart[b + 1] += o->ustart[b];
  o->ulist = malloc(((size_t)o->ustart[p->nbufs] + 1) * sizeof *o->ulist);
  for (int32_t i = 0; i < p->nops; i++)
    for (int k = 0, n = named(p, &p->ops[i], got, most); k < n; k++) o->ulist[o->ustart[got[k]] + fill[got[k]]++] = i;
  free(got);
  free(fill);
}

static void oracle_free(oracle *o) {
  free(o->vc);
  free(o->ustart);
  free(o->ulist);
}

/* op a of step sa happens before op b of step sb */
static bool hb(const oracle *o, int32_t a, int sa, int32_t b, int sb) {
  int s = o->p->ops[a].stream;
  return o->vc[(int64_t)sa * o->n + a][s] <= o->vc[(int64_t)sb * o->n + b][s];
}

typedef struct rng {
  int32_t first, last;
} rng;

/* buffer b's live ranges in m (declared, or first..last use): how many,
 * into *r (malloc'd) */
static int ranges_of(const oracle *o, const fp_prog *m, int32_t b, rng **r) {
  int n = 0;
  *r = malloc(((size_t)m->nlives + 1) * sizeof **r);
  for (int32_t k = 0; k < m->nlives; k++)
    if (m->lives[k].buf == b) (*r)[n++] = (rng){m->lives[k].first, m->lives[k].last};
  if (n == 0 && o->ustart[b] < o->ustart[b + 1]) (*r)[n++] = (rng){o->ulist[o->ustart[b]], o->ulist[o->ustart[b + 1] - 1]};
  return n;
}

static bool meet(const fp_ir_buf *x, const fp_ir_buf *y) {
  return x->host == y->host && x->bytes > 0 && y->bytes > 0 && x->offset < y->offset + y->bytes &&
         y->offset < x->offset + x->bytes;
}

/* x's uses in range a all happen before y's in range c (step 1), and y's
 * before x's in the next step: 0, or a mask of 1 (not in step 1) and 2 (not
 * into the next step) */
static int ordered(const oracle *o, int32_t x, rng a, int32_t y, rng c) {
  int un = 0;
  for (int32_t u = o->ustart[x]; u < o->ustart[x + 1]; u++) {
    int32_t i = o->ulist[u];
    if (i < a.first || i > a.last) continue;
    for (int32_t w = o->ustart[y]; w < o->ustart[y + 1]; w++) {
      int32_t j = o->ulist[w];
      if (j < c.first || j > c.last) continue;
      un |= (hb(o, i, 0, j, 0) ? 0 : 1) | (hb(o, j, 0, i, 1) ? 0 : 2);
    }
  }
  return un;
}

/* the faults of buffer b in the mutant m: a mask of 1 << reason (0:
 * none); the first one found described in why (unless NULL) */
static int fault_of(const oracle *o, const fp_prog *m, int32_t b, char *why, size_t cap) {
  const fp_ir_buf *x = &m->bufs[b];
  int mask = 0;
#define FAULT(r, ...) (mask || !why ? 0 : snprintf(why, cap, __VA_ARGS__), mask |= 1 << (r))
  if (x->offset < 0) return 0;
  rng *ra, *rc;
  int na = ranges_of(o, m, b, &ra);
  for (int32_t c = 0; c < m->nbufs; c++) {
    const fp_ir_buf *y = &m->bufs[c];
    if (c == b || y->offset < 0 || !meet(x, y)) continue;
    if (x->kind == FP_BUF_PERSISTENT || y->kind == FP_BUF_PERSISTENT) {
      FAULT(0, "'%s' and '%s' share bytes, and one is persistent", x->name, y->name);
      continue;
    }
    int nc = ranges_of(o, m, c, &rc);
    for (int s = 0; s < na; s++)
      for (int t = 0; t < nc; t++) {
        rng a = ra[s], k = rc[t];
        if (a.first <= k.last && k.first <= a.last) {
          FAULT(1, "'%s' (ops %d..%d) and '%s' (ops %d..%d) share bytes and are live together", x->name, a.first,
                a.last, y->name, k.first, k.last);
          continue;
        }
        int un = a.last < k.first ? ordered(o, b, a, c, k) : ordered(o, c, k, b, a);
        for (int r = 0; r < 2; r++)
          if (un >> r & 1)
            FAULT(2 + r, "'%s' (ops %d..%d) and '%s' (ops %d..%d) share bytes, their uses unordered %s", x->name,
                  a.first, a.last, y->name, k.first, k.last, r ? "into the next step" : "in the step");
      }
    free(rc);
  }
  for (int32_t u = o->ustart[b]; u < o->ustart[b + 1] && x->kind == FP_BUF_TRANSIENT; u++) {
    int32_t i = o->ulist[u];
    bool in = false;
    for (int s = 0; s < na && !in; s++) in = ra[s].first <= i && i <= ra[s].last;
    if (!in) FAULT(4, "op %d uses '%s' outside its live ranges", i, x->name);
  }
#undef FAULT
  free(ra);
  return mask;
}

/* ---- the mutants ---------------------------------------------------------------------- */
static int64_t arena_of(const fp_prog *p, const fp_ir_buf *x) { return x->host ? p->host_bytes : p->arena_bytes; }

/* a live range's neighbours of its own buffer: the last end before it, the next start after it */
static void neighbours(const fp_prog *p, int32_t l, int32_t *before, int32_t *after) {
  *before = -1, *after = p->nops;
  for (int32_t k = 0; k < p->nlives; k++) {
    if (k == l || p->lives[k].buf != p->lives[l].buf) continue;
    if (p->lives[k].last < p->lives[l].first && p->lives[k].last > *before) *before = p->lives[k].last;
    if (p->lives[k].first > p->lives[l].last && p->lives[k].first < *after) *after = p->lives[k].first;
  }
}

/* the candidates of kind k: (a, b) pairs - buffer and target buffer,
 * buffer and direction, range and end, range and its next range */
typedef struct cand {
  int32_t a, b;
} cand;

static int32_t candidates(const fp_prog *p, int k, cand *c) {
  int32_t n = 0;
  switch (k) {
    case M_ONTO:
    case M_PERSIST:
      for (int32_t a = 0; a < p->nbufs; a++) {
        const fp_ir_buf *x = &p->bufs[a];
        if (x->offset < 0 || x->bytes == 0 || (x->kind == FP_BUF_PERSISTENT) != (k == M_PERSIST)) continue;
        for (int32_t b = 0; b < p->nbufs; b++) {
          const fp_ir_buf *y = &p->bufs[b];
          if (b == a || y->offset < 0 || y->bytes == 0 || y->host != x->host || y->offset == x->offset ||
              y->offset + x->bytes > arena_of(p, x) || (k == M_ONTO && y->kind != FP_BUF_TRANSIENT))
            continue;
          if (c) c[n] = (cand){a, b};
          n++;
        }
      }
      return n;
    case M_NUDGE:
      for (int32_t a = 0; a < p->nbufs; a++) {
        const fp_ir_buf *x = &p->bufs[a];
        if (x->offset < 0 || x->bytes == 0 || x->kind != FP_BUF_TRANSIENT) continue;
        for (int d = 0; d < 2; d++)
          if (d ? x->offset >= ALIGN : x->offset + ALIGN + x->bytes <= arena_of(p, x)) {
            if (c) c[n] = (cand){a, d};
            n++;
          }
      }
      return n;
    case M_SHRINK:
    case M_GROW:
      for (int32_t l = 0; l < p->nlives; l++) {
        int32_t before, after;
        neighbours(p, l, &before, &after);
        for (int d = 0; d < 2; d++) {
          const fp_ir_live *r = &p->lives[l];
          bool ok = k == M_SHRINK ? r->first < r->last : d ? r->last + 1 < after : r->first - 1 > before;
          if (ok) {
            if (c) c[n] = (cand){l, d};
            n++;
          }
        }
      }
      return n;
    case M_DROP:
      for (int32_t l = 0; l < p->nlives; l++) {
        if (c) c[n] = (cand){l, 0};
        n++;
      }
      return n;
    case M_UNWAIT:
      for (int32_t i = 0; i < p->nops; i++)
        if (p->ops[i].code == FP_OP_WAIT) {
          if (c) c[n] = (cand){i, 0};
          n++;
        }
      return n;
    case M_MERGE:
      for (int32_t l = 0; l < p->nlives; l++) {
        int32_t before, after;
        neighbours(p, l, &before, &after);
        for (int32_t k2 = 0; k2 < p->nlives; k2++)
          if (p->lives[k2].buf == p->lives[l].buf && p->lives[k2].first == after) {
            if (c) c[n] = (cand){l, k2};
            n++;
          }
      }
      return n;
  }
  return 0;
}

/* apply; the buffer whose faults the oracle looks for (-1: the ops
 * changed, every buffer) */
static int32_t mutate(fp_prog *m, int k, cand c, char *what, size_t cap) {
  switch (k) {
    case M_ONTO:
    case M_PERSIST:
      snprintf(what, cap, "'%s' [%" PRId64 ", +%" PRId64 ") moved onto '%s' at %" PRId64, m->bufs[c.a].name,
               m->bufs[c.a].offset, m->bufs[c.a].bytes, m->bufs[c.b].name, m->bufs[c.b].offset);
      m->bufs[c.a].offset = m->bufs[c.b].offset;
      return c.a;
    case M_NUDGE:
      snprintf(what, cap, "'%s' [%" PRId64 ", +%" PRId64 ") moved by %s%d", m->bufs[c.a].name, m->bufs[c.a].offset,
               m->bufs[c.a].bytes, c.b ? "-" : "+", ALIGN);
      m->bufs[c.a].offset += c.b ? -ALIGN : ALIGN;
      return c.a;
    case M_UNWAIT: { /* a record of an event nobody waits for, in its place: the op indices stay */
      fp_op *op = &m->ops[c.a];
      snprintf(what, cap, "op %d (wait for event %d on stream %s)", c.a, op->event, fpi_stream_name(op->stream));
      op->code = FP_OP_RECORD;
      op->event = m->nevents++;
      return -1;
    }
    default: break;
  }
  fp_ir_live *r = &m->lives[c.a];
  int32_t b = r->buf;
  snprintf(what, cap, "live range %d (%d..%d) of '%s'", c.a, r->first, r->last, m->bufs[b].name);
  switch (k) {
    case M_SHRINK: c.b ? r->last-- : r->first++; break;
    case M_GROW: c.b ? r->last++ : r->first--; break;
    case M_DROP:
      memmove(r, r + 1, (size_t)(m->nlives - c.a - 1) * sizeof *r);
      m->nlives--;
      break;
    case M_MERGE:
      r->last = m->lives[c.b].last;
      memmove(&m->lives[c.b], &m->lives[c.b + 1], (size_t)(m->nlives - c.b - 1) * sizeof *r);
      m->nlives--;
      break;
  }
  return b;
}

static void corpus(const char *name, const fp_prog *p, const oracle *o) {
  for (int k = 0; k < M_NKINDS; k++) {
    int32_t nc = candidates(p, k, NULL);
    cand *c = malloc(((size_t)nc + 1) * sizeof *c);
    candidates(p, k, c);
    int take = nc < PER_KIND ? nc : PER_KIND;
    for (int t = 0; t < take; t++) {
      fp_arena *a = fpi_arena_new();
      fp_prog *m = fpi_prog_fork(a, p);
      char what[400], why[600];
      int32_t b = mutate(m, k, c[(int64_t)t * nc / take], what, sizeof what);
      int fault = 0;
      if (b >= 0) {
        fault = fault_of(o, m, b, why, sizeof why);
      } else { /* the happens-before changed: every pair again */
        oracle om;
        oracle_build(&om, m);
        for (int32_t x = 0; x < m->nbufs; x++)
          if (m->bufs[x].kind == FP_BUF_TRANSIENT) fault |= fault_of(&om, m, x, fault ? NULL : why, fault ? 0 : sizeof why);
        oracle_free(&om);
      }
      fp_diag d;
      fpi_diag_init(&d, NULL);
      bool ok = fpi_ir_verify_flags(m, &d, NULL, 0);
      const char *msg = d.buf ? d.buf : "";
      int len = (int)strcspn(msg, "\n");
      T[k].n++;
      if (fault) {
        T[k].faulty++;
        bool named = false;
        for (int r = 0; r < NREASONS; r++) {
          R[r] += fault >> r & 1;
          named = named || (fault >> r & 1 && names_reason(msg, r));
        }
        if (!ok && !named && d.nerrors < 100) {
          printf("FAIL %s: %s: %s; the verifier rejects it, but not for that: %.*s\n", name, what, why, len, msg);
          fails++;
        } else if (!ok) {
          T[k].caught++;
          if (!T[k].first[0]) snprintf(T[k].first, sizeof T[k].first, "%s: %.*s", name, len, msg);
        } else {
          printf("FAIL %s: %s: the verifier accepts it, but %s\n", name, what, why);
          fails++;
        }
      } else {
        T[k].sound++;
        if (ok) {
          T[k].accepted++;
        } else if (k == M_UNWAIT) {
          /* its memory reuse is ordered, but a wait dropped may let two
           * uses of one buffer race (rule 8), which this oracle does not
           * model (test_sem's "wait removed"): no claim */
        } else {
          printf("FAIL %s: %s: sound (the oracle), but the verifier rejects it: %.*s\n", name, what, len, msg);
          fails++;
        }
      }
      fpi_diag_free(&d);
      fpi_arena_free(a);
    }
    free(c);
  }
}

static void source(const char *name, const fp_prog *p) {
  fp_diag d;
  fpi_diag_init(&d, stderr);
  bool valid = fpi_ir_verify(p, &d, NULL);
  fpi_diag_free(&d);
  if (!valid) {
    printf("FAIL %s: the original does not verify\n", name);
    fails++;
    return;
  }
  oracle o;
  oracle_build(&o, p);
  char why[600];
  for (int32_t b = 0; b < p->nbufs; b++) { /* the original, by the oracle: sound */
    if (fault_of(&o, p, b, why, sizeof why)) {
      printf("FAIL %s: the original has a fault by the oracle: %s\n", name, why);
      fails++;
      oracle_free(&o);
      return;
    }
  }
  int32_t nt = 0;
  for (int32_t b = 0; b < p->nbufs; b++) nt += p->bufs[b].kind == FP_BUF_TRANSIENT;
  printf("%-28s %6d ops %5d buffers (%4d transient) %5d live ranges: ok\n", name, p->nops, p->nbufs, nt, p->nlives);
  corpus(name, p, &o);
  oracle_free(&o);
}

int main(void) {
  fails += fp_mut_sources(source, NULL);
  printf("\n%-20s %8s %8s %8s %8s %9s\n", "mutation", "mutants", "faulty", "caught", "sound", "accepted");
  int n = 0, f = 0, c = 0, s = 0, ac = 0;
  for (int k = 0; k < M_NKINDS; k++) {
    printf("%-20s %8d %8d %8d %8d %9d\n", kind_name[k], T[k].n, T[k].faulty, T[k].caught, T[k].sound, T[k].accepted);
    n += T[k].n, f += T[k].faulty, c += T[k].caught, s += T[k].sound, ac += T[k].accepted;
    if (T[k].faulty == 0) {
      printf("FAIL: no faulty mutant of kind '%s' (the corpus does not attack it)\n", kind_name[k]);
      fails++;
    }
  }
  printf("%-20s %8d %8d %8d %8d %9d\n", "all", n, f, c, s, ac);
  printf("\nthe faulty mutants, by what the oracle found (a mutant may have several):\n");
  for (int r = 0; r < NREASONS; r++) {
    printf("  %-30s %6d\n", reason_text[r], R[r]);
    if (R[r] == 0) {
      printf("FAIL: no faulty mutant whose buffers %s\n", reason_text[r]);
      fails++;
    }
  }
  printf("\na fault of each kind, as the verifier reports it:\n");
  for (int k = 0; k < M_NKINDS; k++) printf("  %-20s %s\n", kind_name[k], T[k].first);
  return fails ? 1 : 0;
}
