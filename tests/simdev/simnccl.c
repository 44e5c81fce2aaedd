/* simnccl.c - NCCL on the simulated device (include/nccl.h): communicators
 * across processes over POSIX shared memory, collectives that read the
 * peers' simulated device memory directly (each process's heap is a memfd
 * the peers map through /proc/<pid>/fd), and the rules NCCL keeps that
 * flexplan depends on (docs/simdev.md):
 *
 *  - a communicator's operations run in the order they were issued on this
 *    rank (NCCL serializes a communicator), the k-th collective of one rank
 *    meeting the k-th of every other; the ranks' calls must agree (kind,
 *    count, dtype, op, root) or the communicator reports an asynchronous
 *    error (ncclInvalidUsage);
 *  - a collective is a task of the stream it was issued on, run by the
 *    scheduler in three steps (arrive, read every peer into a private
 *    result, write it once every peer has read), so in-place calls are
 *    exact and a stream blocked on a peer never blocks another stream;
 *  - a send completes when its receive has taken the bytes (no eager
 *    buffering), so a send/recv pair split across ungrouped calls in the
 *    wrong order deadlocks as it can on real NCCL; ncclGroupStart/End make
 *    one task of the calls between them;
 *  - sums and averages of bf16/fp16 round to the dtype after each rank's
 *    addition, in rank order; averages of floating types premultiply by
 *    1/nranks (NCCL's PreMulSum);
 *  - ncclCommInitRank(Config), ncclCommSplit and ncclCommDestroy block the
 *    host until every rank arrives; NCCL_COMM_ID: ncclGetUniqueId derives the
 *    id from the address, and rank 0 of every ncclCommInitRank binds it while
 *    the variable is set, as NCCL does: the address stays in TIME_WAIT for
 *    60 s after its communicator is up, and binding it again meanwhile fails
 *    ("Call to bind failed: Address already in use");
 *  - ncclCommAbort ends this rank's pending operations on the communicator
 *    (their results are garbage) so a watchdog can return. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "simdev.h"

#define MAXR 16
#define SLOTS 64
#define P2P 16
#define TIME_WAIT_S 60.0
#define COMM_MAGIC 0x4e43434cu

typedef struct cslot {
  _Atomic uint64_t seq; /* the collective's seq + 1 once posted */
  _Atomic int state;    /* 1 arrived, 2 read its peers, 3 wrote its result */
  int kind, dtype, red, root;
  uint64_t count;
  int64_t src_off;
} cslot;
typedef struct pslot {
  _Atomic uint64_t posted, consumed; /* seq + 1 */
  int64_t off;
  uint64_t bytes;
} pslot;
typedef struct shm_comm {
  int nranks;
  _Atomic int joined;
  struct {
    int pid, fd, device;
    uint64_t heap;
  } who[MAXR];
  cslot coll[MAXR][SLOTS];
  pslot p2p[MAXR][MAXR][P2P];
  _Atomic uint64_t split_gen[MAXR];
  int split_color[2][MAXR], split_key[2][MAXR];
} shm_comm;

struct ncclComm {
  uint32_t magic;
  int rank, nranks, device;
  uint64_t id;
  char name[64];
  shm_comm *shm;
  char *heap[MAXR];
  size_t heap_size[MAXR];
  uint64_t issued, completed, coll_seq, splits;
  uint64_t send_seq[MAXR], recv_seq[MAXR];
  ncclResult_t async;
  char last[256];
  bool aborted, destroyed;
};

static ncclComm_t *comms; /* every communicator made (aborted ones stay: queued tasks point at them) */
static int ncomms, cap_comms;
static __thread char tls_last[256];

static ncclComm_t C(ncclComm_t c) {
  for (int k = 0; k < ncomms; k++)
    if (comms[k] == c) return c->magic == COMM_MAGIC && !c->destroyed ? c : NULL;
  return NULL;
}

static void set_last(ncclComm_t c, const char *fmt, const char *a, long b) {
  char *dst = c ? c->last : tls_last;
  snprintf(dst, 256, fmt, a, b);
}

static void async_fail(ncclComm_t c, ncclResult_t r, const char *msg) {
  if (c->async == ncclSuccess) {
    c->async = r;
    snprintf(c->last, sizeof c->last, "%s", msg);
    fprintf(stderr, "simdev: NCCL: communicator '%s' rank %d: %s\n", c->name, c->rank, msg);
  }
}

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t k = 0; k < n; k++) h = (h ^ b[k]) * 0x100000001b3ull;
  return h;
}

/* ---- dtypes and reductions ---- */
static size_t esize(int t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
static bool is_float(int t) { return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64; }
static double load(const char *p, int t) {
  switch (t) {
    case ncclInt8: return (double)*(const int8_t *)p;
    case ncclUint8: return (double)*(const uint8_t *)p;
    case ncclInt32: return (double)*(const int32_t *)p;
    case ncclUint32: return (double)*(const uint32_t *)p;
    case ncclFloat16: { uint16_t h; memcpy(&h, p, 2); return fpk_f16_to_f32(h); }
    case ncclBfloat16: { uint16_t h; memcpy(&h, p, 2); return fpk_bf16_to_f32(h); }
    case ncclFloat32: { float f; memcpy(&f, p, 4); return f; }
    case ncclFloat64: { double d; memcpy(&d, p, 8); return d; }
    default: return 0;
  }
}
/* a value rounded to dtype t, stored */
static void store(char *p, int t, double v) {
  switch (t) {
    case ncclInt8: *(int8_t *)p = (int8_t)v; break;
    case ncclUint8: *(uint8_t *)p = (uint8_t)v; break;
    case ncclInt32: *(int32_t *)p = (int32_t)v; break;
    case ncclUint32: *(uint32_t *)p = (uint32_t)v; break;
    case ncclFloat16: { uint16_t h = fpk_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case ncclBfloat16: { uint16_t h = fpk_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case ncclFloat32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case ncclFloat64: memcpy(p, &v, 8); break;
    default: break;
  }
}
/* dst = reduce over n inputs (in rank order) of count elements */
static void reduce(char *dst, const char *const *in, int n, size_t count, int t, int op) {
  size_t es = esize(t);
  if (n == 1) { /* one rank: NCCL copies (no arithmetic: a NaN's payload stays) */
    memmove(dst, in[0], count * es);
    return;
  }
  if (t == ncclInt64 || t == ncclUint64) { /* exact 64-bit integers */
    for (size_t i = 0; i < count; i++) {
      uint64_t acc;
      memcpy(&acc, in[0] + i * es, 8);
      for (int r = 1; r < n; r++) {
        uint64_t v;
        memcpy(&v, in[r] + i * es, 8);
        bool s = t == ncclInt64;
        switch (op) {
          case ncclMax: acc = s ? ((int64_t)v > (int64_t)acc ? v : acc) : (v > acc ? v : acc); break;
          case ncclMin: acc = s ? ((int64_t)v < (int64_t)acc ? v : acc) : (v < acc ? v : acc); break;
          case ncclProd: acc *= v; break;
          default: acc += v; break;
        }
      }
      if (op == ncclAvg) acc = t == ncclInt64 ? (uint64_t)((int64_t)acc / n) : acc / (uint64_t)n;
      memcpy(dst + i * es, &acc, 8);
    }
    return;
  }
  double pre = op == ncclAvg && is_float(t) ? 1.0 / n : 1.0;
  char tmp[8];
  for (size_t i = 0; i < count; i++) {
    double acc = load(in[0] + i * es, t);
    if (pre != 1.0) store(tmp, t, acc * pre), acc = load(tmp, t);
    for (int r = 1; r < n; r++) {
      double v = load(in[r] + i * es, t);
      if (pre != 1.0) store(tmp, t, v * pre), v = load(tmp, t);
      switch (op) {
        case ncclMax: acc = v > acc ? v : acc; break;
        case ncclMin: acc = v < acc ? v : acc; break;
        case ncclProd: acc = acc * v; break;
        default: acc = t == ncclFloat32 ? (double)((float)acc + (float)v) : acc + v; break;
      }
      store(tmp, t, acc); /* rounded to the dtype after each rank's step */
      acc = load(tmp, t);
    }
    if (op == ncclAvg && !is_float(t)) acc = (double)((int64_t)acc / n);
    store(dst + i * es, t, acc);
  }
}

/* ---- tasks ---- */
enum { AG, RS, AR, BC, RD, SEND, RECV };
static const char *kind_name[] = {"AllGather", "ReduceScatter", "AllReduce", "Broadcast", "Reduce", "Send", "Recv"};

typedef struct sub {
  int kind, dtype, red, root, peer;
  const char *src;
  char *dst;
  size_t count;
  ncclComm_t comm;
  uint64_t ord, seq;
  bool first; /* the task's first op on its communicator: it holds the ordinal */
  int state;
  char *tmp;
} sub;

struct sd_ntask {
  int n, cap;
  sub *subs;
};

const char *sd_ntask_name(const sd_ntask *t) { return t->n ? kind_name[t->subs[0].kind] : "empty group"; }

sd_ntask *sd_ntask_clone(const sd_ntask *t) {
  sd_ntask *c = calloc(1, sizeof *c);
  c->n = c->cap = t->n;
  c->subs = calloc((size_t)t->n + 1, sizeof *c->subs);
  memcpy(c->subs, t->subs, (size_t)t->n * sizeof *c->subs);
  for (int k = 0; k < c->n; k++) c->subs[k].state = 0, c->subs[k].tmp = NULL;
  return c;
}

void sd_ntask_free(sd_ntask *t) {
  for (int k = 0; k < t->n; k++) free(t->subs[k].tmp);
  free(t->subs);
  free(t);
}

void sd_ntask_bind(sd_ntask *t) {
  for (int k = 0; k < t->n; k++) {
    sub *s = &t->subs[k];
    ncclComm_t c = s->comm;
    s->first = true;
    for (int j = 0; j < k; j++)
      if (t->subs[j].comm == c) s->first = false, s->ord = t->subs[j].ord;
    if (s->first) s->ord = ++c->issued;
    if (s->kind == SEND) s->seq = c->send_seq[s->peer]++;
    else if (s->kind == RECV) s->seq = c->recv_seq[s->peer]++;
    else s->seq = c->coll_seq++;
  }
}

/* a peer's heap, mapped once */
static char *peer_heap(ncclComm_t c, int r) {
  if (c->heap[r]) return c->heap[r];
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", c->shm->who[r].pid, c->shm->who[r].fd);
  int fd = open(path, O_RDWR);
  if (fd < 0) return NULL;
  void *m = mmap(NULL, c->shm->who[r].heap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return NULL;
  c->heap[r] = m;
  c->heap_size[r] = c->shm->who[r].heap;
  return m;
}

static size_t src_bytes(const sub *s, int n) {
  size_t es = esize(s->dtype);
  return s->kind == RS ? s->count * (size_t)n * es : s->count * es;
}
static size_t dst_bytes(const sub *s, int n) {
  size_t es = esize(s->dtype);
  return s->kind == AG ? s->count * (size_t)n * es : s->count * es;
}

/* one step of a collective; 1 progress, 0 blocked, 2 done */
static int coll_step(sub *s) {
  ncclComm_t c = s->comm;
  shm_comm *m = c->shm;
  int n = c->nranks, me = c->rank;
  cslot *mine = &m->coll[me][s->seq % SLOTS];
  if (s->state == 0) {
    bool sends = s->kind != BC || me == s->root;
    int64_t off = sends ? sd_dev_offset(s->src, src_bytes(s, n)) : -1;
    bool recvs = s->kind != RD || me == s->root;
    if ((sends && off < 0) || (recvs && sd_dev_offset(s->dst, dst_bytes(s, n)) < 0)) {
      char msg[200];
      snprintf(msg, sizeof msg, "%s #%llu: a buffer is not inside one device allocation", kind_name[s->kind],
               (unsigned long long)s->seq);
      async_fail(c, ncclInvalidArgument, msg);
      return 2;
    }
    /* the slot is this collective's once the one SLOTS before it has written
     * its result (every peer read it then): a group may hold more collectives
     * than there are slots */
    if (s->seq >= SLOTS && (atomic_load(&mine->seq) != s->seq - SLOTS + 1 || atomic_load(&mine->state) != 3)) return 0;
    mine->kind = s->kind, mine->dtype = s->dtype, mine->red = s->red, mine->root = s->root;
    mine->count = s->count, mine->src_off = off;
    atomic_store(&mine->state, 1);
    atomic_store(&mine->seq, s->seq + 1);
    s->state = 1;
    return 1;
  }
  if (s->state == 1) {
    for (int r = 0; r < n; r++) {
      cslot *p = &m->coll[r][s->seq % SLOTS];
      if (atomic_load(&p->seq) != s->seq + 1) return 0;
      if (p->kind != s->kind || p->dtype != s->dtype || p->count != s->count ||
          (s->kind != AG && s->kind != BC && p->red != s->red) || ((s->kind == BC || s->kind == RD) && p->root != s->root)) {
        char msg[240];
        snprintf(msg, sizeof msg, "collective #%llu: rank %d calls %s(count %zu, dtype %d, root %d), rank %d "
                 "calls %s(count %llu, dtype %d, root %d)", (unsigned long long)s->seq, me, kind_name[s->kind],
                 s->count, s->dtype, s->root, r, kind_name[p->kind], (unsigned long long)p->count, p->dtype,
                 p->root);
        async_fail(c, ncclInvalidUsage, msg);
        atomic_store(&mine->state, 3);
        return 2;
      }
    }
    size_t es = esize(s->dtype), cnt = s->count;
    const char *in[MAXR];
    for (int r = 0; r < n; r++) {
      cslot *p = &m->coll[r][s->seq % SLOTS];
      char *h = p->src_off >= 0 ? peer_heap(c, r) : NULL;
      in[r] = h ? h + p->src_off : NULL;
    }
    size_t out = dst_bytes(s, n);
    s->tmp = malloc(out ? out : 1);
    switch (s->kind) {
      case AG:
        for (int r = 0; r < n; r++) memcpy(s->tmp + (size_t)r * cnt * es, in[r], cnt * es);
        break;
      case RS: {
        const char *part[MAXR];
        for (int r = 0; r < n; r++) part[r] = in[r] + (size_t)me * cnt * es;
        reduce(s->tmp, part, n, cnt, s->dtype, s->red);
        break;
      }
      case AR: reduce(s->tmp, in, n, cnt, s->dtype, s->red); break;
      case BC: memcpy(s->tmp, in[s->root], cnt * es); break;
      case RD:
        if (me == s->root) reduce(s->tmp, in, n, cnt, s->dtype, s->red);
        break;
    }
    atomic_store(&mine->state, 2);
    s->state = 2;
    return 1;
  }
  /* state 2: write once every peer has read */
  for (int r = 0; r < n; r++) {
    cslot *p = &m->coll[r][s->seq % SLOTS];
    uint64_t q = atomic_load(&p->seq);
    if (q == s->seq + 1 && atomic_load(&p->state) < 2) return 0;
  }
  if (s->kind != RD || me == s->root) {
    char *d = sd_dev(s->dst, dst_bytes(s, n));
    if (d) memcpy(d, s->tmp, dst_bytes(s, n));
  }
  free(s->tmp);
  s->tmp = NULL;
  atomic_store(&mine->state, 3);
  return 2;
}

static int p2p_step(sub *s) {
  ncclComm_t c = s->comm;
  size_t bytes = s->count * esize(s->dtype);
  if (s->kind == SEND) {
    pslot *p = &c->shm->p2p[c->rank][s->peer][s->seq % P2P];
    if (s->state == 0) {
      int64_t off = sd_dev_offset(s->src, bytes);
      if (off < 0 && bytes) {
        async_fail(c, ncclInvalidArgument, "ncclSend: the buffer is not inside one device allocation");
        return 2;
      }
      /* the slot is this send's once the send P2P before it on the ring was
       * received: never earlier (still in use), and never before that send
       * posted (a later send taking the slot ahead of an earlier one of the
       * same group leaves the receiver waiting for the earlier one) */
      uint64_t prev = s->seq >= P2P ? s->seq - P2P + 1 : 0;
      if (atomic_load(&p->posted) != prev || atomic_load(&p->consumed) != prev) return 0;
      p->off = off, p->bytes = bytes;
      atomic_store(&p->posted, s->seq + 1);
      s->state = 1;
      return 1;
    }
    return atomic_load(&p->consumed) >= s->seq + 1 ? 2 : 0;
  }
  pslot *p = &c->shm->p2p[s->peer][c->rank][s->seq % P2P];
  if (atomic_load(&p->posted) != s->seq + 1) return 0;
  if (p->bytes != bytes) {
    char msg[160];
    snprintf(msg, sizeof msg, "ncclRecv of %zu bytes from rank %d met a send of %llu bytes", bytes, s->peer,
             (unsigned long long)p->bytes);
    async_fail(c, ncclInvalidUsage, msg);
  } else if (bytes) {
    char *h = peer_heap(c, s->peer), *d = sd_dev(s->dst, bytes);
    if (h && d) memcpy(d, h + p->off, bytes);
  }
  atomic_store(&p->consumed, s->seq + 1);
  return 2;
}

/* what a stuck task waits for, for the hang report: each op, its sequence
 * number, its state, and where its communicator and ring slot stand */
void sd_ntask_dump(const sd_ntask *t, FILE *f) {
  for (int k = 0; k < t->n; k++) {
    const sub *s = &t->subs[k];
    ncclComm_t c = s->comm;
    fprintf(f, "    %s '%s' rank %d/%d: ord %llu (comm completed %llu, issued %llu) seq %llu state %d", kind_name[s->kind],
            c->name, c->rank, c->nranks, (unsigned long long)s->ord, (unsigned long long)c->completed,
            (unsigned long long)c->issued, (unsigned long long)s->seq, s->state);
    if (s->kind == SEND || s->kind == RECV) {
      const pslot *p = s->kind == SEND ? &c->shm->p2p[c->rank][s->peer][s->seq % P2P]
                                       : &c->shm->p2p[s->peer][c->rank][s->seq % P2P];
      fprintf(f, " peer %d bytes %zu; slot %llu: posted %llu consumed %llu (bytes %llu)", s->peer,
              s->count * esize(s->dtype), (unsigned long long)(s->seq % P2P),
              (unsigned long long)atomic_load(&p->posted), (unsigned long long)atomic_load(&p->consumed),
              (unsigned long long)p->bytes);
    }
    fprintf(f, "%s\n", c->aborted ? " (aborted)" : "");
  }
}

int sd_ntask_advance(sd_ntask *t) {
  for (int k = 0; k < t->n; k++) { /* the communicators' earlier operations first */
    sub *s = &t->subs[k];
    if (s->first && !s->comm->aborted && s->comm->completed + 1 != s->ord) return 0;
  }
  bool progress = false, all = true;
  for (int k = 0; k < t->n; k++) {
    sub *s = &t->subs[k];
    if (s->state == 3) continue;
    int r = s->comm->aborted ? 2 : s->kind == SEND || s->kind == RECV ? p2p_step(s) : coll_step(s);
    if (r == 2) s->state = 3;
    if (r) progress = true;
    if (s->state != 3) all = false;
  }
  if (!all) return progress ? 1 : 0;
  for (int k = 0; k < t->n; k++)
    if (t->subs[k].first && t->subs[k].comm->completed < t->subs[k].ord) t->subs[k].comm->completed = t->subs[k].ord;
  return 2;
}

/* ---- groups and calls ---- */
static __thread int group_depth;
static __thread sd_ntask *group_task;
static __thread cudaStream_t group_stream;

static ncclResult_t submit(sub s, cudaStream_t st) {
  sd_lock();
  ncclComm_t c = C(s.comm);
  if (!c) {
    sd_unlock();
    return ncclInvalidArgument;
  }
  if ((s.kind == SEND || s.kind == RECV || s.kind == BC || s.kind == RD) &&
      (s.kind == SEND || s.kind == RECV ? s.peer : s.root) >= c->nranks) {
    set_last(c, "%s: peer or root out of range (%ld ranks)", kind_name[s.kind], c->nranks);
    sd_unlock();
    return ncclInvalidArgument;
  }
  if (group_depth > 0) {
    if (group_task && group_stream != st) { /* one task per stream: flexplan groups one stream's calls */
      snprintf(c->last, sizeof c->last, "%s: a group spans two streams (not simulated)", kind_name[s.kind]);
      sd_unlock();
      return ncclInvalidUsage;
    }
    if (!group_task) group_task = calloc(1, sizeof *group_task), group_stream = st;
    sd_ntask *t = group_task;
    if (t->n == t->cap) {
      t->cap = t->cap ? 2 * t->cap : 8;
      t->subs = realloc(t->subs, (size_t)t->cap * sizeof *t->subs);
    }
    t->subs[t->n++] = s;
    sd_unlock();
    return ncclSuccess;
  }
  sd_ntask *t = calloc(1, sizeof *t);
  t->subs = malloc(sizeof *t->subs);
  t->subs[0] = s;
  t->n = t->cap = 1;
  cudaError_t e = sd_launch_nccl(st, t);
  sd_unlock();
  return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0 || !group_task) return ncclSuccess;
  sd_lock();
  sd_ntask *t = group_task;
  group_task = NULL;
  cudaError_t e = sd_launch_nccl(group_stream, t);
  sd_unlock();
  return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t ncclAllGather(const void *src, void *dst, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
  return submit((sub){.kind = AG, .src = src, .dst = dst, .count = count, .dtype = t, .comm = c}, s);
}
ncclResult_t ncclReduceScatter(const void *src, void *dst, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s) {
  return submit((sub){.kind = RS, .src = src, .dst = dst, .count = count, .dtype = t, .red = op, .comm = c}, s);
}
ncclResult_t ncclAllReduce(const void *src, void *dst, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
  return submit((sub){.kind = AR, .src = src, .dst = dst, .count = count, .dtype = t, .red = op, .comm = c}, s);
}
ncclResult_t ncclBroadcast(const void *src, void *dst, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
  return submit((sub){.kind = BC, .src = src, .dst = dst, .count = count, .dtype = t, .root = root, .comm = c}, s);
}
ncclResult_t ncclReduce(const void *src, void *dst, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s) {
  return submit((sub){.kind = RD, .src = src, .dst = dst, .count = count, .dtype = t, .red = op, .root = root,
                      .comm = c}, s);
}
ncclResult_t ncclSend(const void *src, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return submit((sub){.kind = SEND, .src = src, .count = count, .dtype = t, .peer = peer, .comm = c}, s);
}
ncclResult_t ncclRecv(void *dst, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return submit((sub){.kind = RECV, .dst = dst, .count = count, .dtype = t, .peer = peer, .comm = c}, s);
}

/* ---- communicators ---- */
const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}
const char *ncclGetLastError(ncclComm_t c) {
  if (c) {
    sd_lock();
    ncclComm_t k = C(c);
    sd_unlock();
    if (k) return k->last;
  }
  return tls_last;
}
ncclResult_t ncclGetVersion(int *v) {
  if (!v) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  const char *env = getenv("NCCL_COMM_ID");
  if (env && *env) { /* every rank derives the same id from the address */
    snprintf(id->internal, sizeof id->internal, "fpsim-env:%s", env);
    return ncclSuccess;
  }
  sd_lock();
  uint64_t a = sd_rand() ^ (uint64_t)getpid() << 32, b = sd_rand();
  sd_unlock();
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  snprintf(id->internal, sizeof id->internal, "fpsim-rnd:%016llx%016llx%08lx", (unsigned long long)a,
           (unsigned long long)b, (unsigned long)t.tv_nsec);
  return ncclSuccess;
}

/* NCCL_COMM_ID's address bound by rank 0 (see the header) */
static ncclResult_t bind_address(const char *addr) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/fpsim-bind-%016llx", (unsigned long long)fnv(addr, strlen(addr), 1469598103934665603ull));
  FILE *f = fopen(path, "r");
  double then = -1e18;
  if (f) {
    if (fscanf(f, "%lf", &then) != 1) then = -1e18;
    fclose(f);
  }
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  double now = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
  if (now - then < TIME_WAIT_S) {
    snprintf(tls_last, sizeof tls_last, "Call to bind failed: Address already in use (NCCL_COMM_ID=%s was bound "
             "%.1f s ago)", addr, now - then);
    return ncclSystemError;
  }
  f = fopen(path, "w");
  if (f) {
    fprintf(f, "%.6f\n", now);
    fclose(f);
  }
  return ncclSuccess;
}

/* the blocking rendezvous of nranks processes on a segment named by id */
static ncclResult_t join(ncclComm_t *out, int nranks, uint64_t id, int rank, const char *name) {
  if (!out || nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks) {
    snprintf(tls_last, sizeof tls_last, "ncclCommInitRank: rank %d of %d (the simulator takes up to %d ranks)", rank,
             nranks, MAXR);
    return ncclInvalidArgument;
  }
  char path[64];
  snprintf(path, sizeof path, "/fpsim-comm-%016llx", (unsigned long long)id);
  int fd = shm_open(path, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, sizeof(shm_comm)) != 0) {
    if (fd >= 0) close(fd);
    snprintf(tls_last, sizeof tls_last, "shm_open %s failed", path);
    return ncclSystemError;
  }
  shm_comm *m = mmap(NULL, sizeof(shm_comm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return ncclSystemError;
  int hfd;
  size_t hsize;
  char *rw;
  sd_lock();
  sd_heap_info(&hfd, &hsize, &rw);
  int dev = sd_device();
  sd_unlock();
  m->who[rank].pid = getpid();
  m->who[rank].fd = hfd;
  m->who[rank].heap = hsize;
  m->who[rank].device = dev;
  atomic_fetch_add(&m->joined, 1);
  double t0 = sd_now_s();
  const char *hs = getenv("FP_SIMDEV_HANG_S");
  double hang = hs && *hs ? atof(hs) : 300;
  while (atomic_load(&m->joined) < nranks) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    if (sd_now_s() - t0 > hang) {
      fprintf(stderr, "simdev: NCCL: communicator '%s': %d of %d ranks arrived in %.0f s\n", name,
              atomic_load(&m->joined), nranks, hang);
      abort();
    }
  }
  if (rank == 0) shm_unlink(path);
  for (int r = 0; r < nranks; r++)
    if (r != rank && m->who[r].device == dev && dev >= 0) {
      snprintf(tls_last, sizeof tls_last, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", rank,
               r, dev);
      munmap(m, sizeof *m);
      return ncclInvalidUsage;
    }
  ncclComm_t c = calloc(1, sizeof *c);
  c->magic = COMM_MAGIC;
  c->rank = rank, c->nranks = nranks, c->id = id, c->shm = m, c->device = dev;
  snprintf(c->name, sizeof c->name, "%s", name ? name : "");
  c->heap[rank] = rw;
  sd_lock();
  if (ncomms == cap_comms) {
    cap_comms = cap_comms ? 2 * cap_comms : 16;
    comms = realloc(comms, (size_t)cap_comms * sizeof *comms);
  }
  comms[ncomms++] = c;
  sd_unlock();
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    snprintf(tls_last, sizeof tls_last, "no CUDA device");
    return ncclUnhandledCudaError;
  }
  if (strncmp(id.internal, "fpsim-", 6) != 0) {
    snprintf(tls_last, sizeof tls_last, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  const char *env = getenv("NCCL_COMM_ID");
  if (env && *env && rank == 0) { /* NCCL: rank 0 creates the bootstrap root at the address */
    ncclResult_t r = bind_address(env);
    if (r != ncclSuccess) return r;
  }
  return join(out, nranks, fnv(id.internal, sizeof id.internal, 1469598103934665603ull), rank,
              cfg && cfg->commName ? cfg->commName : "");
}
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(c, nranks, id, rank, NULL);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, ncclConfig_t *cfg) {
  sd_lock();
  ncclComm_t c = C(comm);
  sd_unlock();
  if (!c || !out) return ncclInvalidArgument;
  *out = NULL;
  shm_comm *m = c->shm;
  uint64_t gen = ++c->splits;
  int b = (int)(gen % 2);
  m->split_color[b][c->rank] = color;
  m->split_key[b][c->rank] = key;
  atomic_store(&m->split_gen[c->rank], gen);
  for (int r = 0; r < c->nranks; r++)
    while (atomic_load(&m->split_gen[r]) < gen) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  int n = 0, me = 0;
  for (int r = 0; r < c->nranks; r++) {
    if (m->split_color[b][r] != color) continue;
    if (m->split_key[b][r] < key || (m->split_key[b][r] == key && r < c->rank)) me++;
    n++;
  }
  uint64_t id = fnv(&gen, sizeof gen, fnv(&color, sizeof color, c->id));
  return join(out, n, id, me, cfg && cfg->commName ? cfg->commName : c->name);
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
  if (!c || !n) return ncclInvalidArgument;
  *n = c->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) {
  if (!c || !r) return ncclInvalidArgument;
  *r = c->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *r) {
  sd_lock();
  ncclComm_t c = C(comm);
  if (c && r) *r = c->async;
  sd_unlock();
  return c && r ? ncclSuccess : ncclInvalidArgument;
}

static bool comm_idle(void *a) {
  ncclComm_t c = a;
  return c->aborted || c->completed >= c->issued;
}

static void release(ncclComm_t c) {
  for (int r = 0; r < c->nranks; r++)
    if (r != c->rank && c->heap[r]) munmap(c->heap[r], c->heap_size[r]);
  munmap(c->shm, sizeof *c->shm);
  c->shm = NULL;
  c->destroyed = true; /* the struct stays: tasks still queued may point at it */
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  sd_lock();
  ncclComm_t c = C(comm);
  if (c) sd_drive(comm_idle, c, NULL, "ncclCommFinalize");
  sd_unlock();
  return c ? ncclSuccess : ncclInvalidArgument;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  sd_lock();
  ncclComm_t c = C(comm);
  if (c) {
    sd_drive(comm_idle, c, NULL, "ncclCommDestroy");
    release(c);
  }
  sd_unlock();
  return c ? ncclSuccess : ncclInvalidArgument;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  sd_lock();
  ncclComm_t c = C(comm);
  if (c) {
    c->aborted = true; /* this rank's pending operations end at their next step */
    release(c);
  }
  sd_unlock();
  return c ? ncclSuccess : ncclInvalidArgument;
}
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buf, size_t bytes, void **handle) {
  sd_lock();
  ncclComm_t c = C(comm);
  int64_t off = sd_dev_offset(buf, bytes);
  cudaError_t e = sd_capture_forbids("ncclCommRegister");
  sd_unlock();
  if (!c || !handle || off < 0) return ncclInvalidArgument;
  if (e != cudaSuccess) return ncclUnhandledCudaError;
  *handle = buf;
  return ncclSuccess;
}
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  (void)handle;
  sd_lock();
  ncclComm_t c = C(comm);
  sd_unlock();
  return c ? ncclSuccess : ncclInvalidArgument;
}
ncclResult_t ncclMemAlloc(void **p, size_t bytes) {
  if (!p) return ncclInvalidArgument;
  sd_lock();
  cudaError_t e = sd_capture_forbids("ncclMemAlloc");
  if (e == cudaSuccess) e = sd_alloc(p, bytes, "ncclMemAlloc");
  sd_unlock();
  return e == cudaSuccess ? ncclSuccess : e == cudaErrorMemoryAllocation ? ncclSystemError : ncclUnhandledCudaError;
}
ncclResult_t ncclMemFree(void *p) {
  sd_lock();
  cudaError_t e = sd_free(p);
  sd_unlock();
  return e == cudaSuccess ? ncclSuccess : ncclInvalidArgument;
}
