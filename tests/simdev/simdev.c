/* simdev.c - a simulated CUDA device on the host: the runtime API of
 * include/cuda_runtime_api.h (memory, streams, events, stream capture and
 * graphs) with CUDA's ordering semantics and an adversarial scheduler, so
 * that flexplan's NCCL backend (executor/nccl.c), compiled unchanged against
 * these headers, runs on a CPU and its ordering bugs show up as wrong bytes.
 * docs/simdev.md is the design; in short:
 *
 *  - Device memory is one heap per process, a memfd mapped twice: the
 *    addresses handed out are a PROT_NONE view (a host read or write of
 *    device bytes faults, and the fault handler names the allocation), and
 *    device work reaches the bytes through a second, read-write view. Peers
 *    (simnccl.c) map the same memfd through /proc/<pid>/fd. Pinned host
 *    memory (cudaHostAlloc) is host memory device work may touch; anything
 *    else a kernel or copy touches is an illegal address (a sticky error).
 *  - Streams hold queues of items (a kernel or copy as a host function over
 *    a copied argument block, an event record, a wait, a graph launch, an
 *    NCCL task). An item runs when it heads its stream and what it waits for
 *    has completed: events (cudaStreamWaitEvent takes the event's record at
 *    call time), the legacy default stream's implicit ordering with blocking
 *    streams (never with cudaStreamNonBlocking ones), peers (NCCL).
 *  - The scheduler is lazy and seeded: queued work runs only when the host
 *    forces it (a synchronize, a blocking copy, a query that polls), at API
 *    calls the seeded policy picks, or when the host has left the device
 *    alone for a while (a device thread, so peers waiting in a collective
 *    always progress); among runnable items it picks in seeded random order.
 *    FP_SIMDEV_SEED=N replays a run; the seed is printed at start, and at
 *    exit a hash of the order the items ran in (distinct orders, distinct
 *    hashes).
 *  - Stream capture records items as graph nodes with their dependencies
 *    (forks and joins through events, external event nodes); a launch runs
 *    the nodes in a seeded topological order. A launch records the events
 *    of its external record nodes where it stands in its stream's order
 *    (a wait issued after the launch waits for that node), and its external
 *    wait nodes wait for the records made before it. What the runtime refuses
 *    during a capture (synchronizing, querying a capturing stream,
 *    allocating, the legacy stream in global mode, unjoined forks) is
 *    refused with CUDA's error codes, and the capture is invalidated.
 *
 * Not simulated: timing, occupancy, multiple devices in one process, memory
 * beyond FP_SIMDEV_MEM bytes per process (default 1 GiB, sparse). */
#define _GNU_SOURCE
#include "simdev.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAGIC_STREAM 0x53545245u
#define MAGIC_EVENT 0x45564e54u
#define MAGIC_GRAPH 0x47524150u
#define MAGIC_EXEC 0x47455845u
#define ALIGN 256

/* ---- the lock, the seed, the policy ------------------------------------------------------------------ */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t rng_state, seed;
static uint64_t order_hash = 1469598103934665603ull, steps_run;
static double last_api_s;
static double hang_s = 300;
static int ndevices = 8;
static __thread int cur_device;
static cudaError_t sticky = cudaSuccess;
static __thread cudaError_t last_error = cudaSuccess;

double sd_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

uint64_t sd_rand(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void sd_init(void);
void sd_lock(void) {
  pthread_once(&once, sd_init);
  pthread_mutex_lock(&mu);
}
void sd_unlock(void) {
  last_api_s = sd_now_s();
  pthread_mutex_unlock(&mu);
}

void sd_fail(cudaError_t e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "simdev: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (seed %llu: FP_SIMDEV_SEED=%llu replays)\n", (unsigned long long)seed, (unsigned long long)seed);
  va_end(ap);
  if (sticky == cudaSuccess) sticky = e;
}

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

int sd_device(void) { return cur_device; }

/* ---- memory -------------------------------------------------------------------------------------------- */
typedef struct alloc {
  size_t off, size;
} alloc;
static int heap_fd = -1;
static size_t heap_size;
static char *dev_base; /* PROT_NONE: the addresses handed out */
static char *rw_base;  /* the same bytes, for device work */
static alloc *allocs;  /* live, sorted by off */
static int nallocs, cap_allocs;
typedef struct pinned {
  char *p;
  size_t size;
} pinned;
static pinned *pins;
static int npins, cap_pins;

static void segv(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  char *a = si->si_addr;
  if (dev_base && a >= dev_base && a < dev_base + heap_size) {
    char msg[256];
    int n = snprintf(msg, sizeof msg, "simdev: error: the host touched device memory at %p (heap offset %zu): "
                     "device bytes are read with cudaMemcpy, not through a host pointer (seed %llu)\n",
                     (void *)a, (size_t)(a - dev_base), (unsigned long long)seed);
    if (write(2, msg, (size_t)n) < 0) _exit(70);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void heap_init(void) {
  const char *m = getenv("FP_SIMDEV_MEM");
  heap_size = m && *m ? (size_t)strtoull(m, NULL, 10) : ((size_t)1 << 30);
  heap_size = (heap_size + 4095) & ~(size_t)4095;
  heap_fd = memfd_create("fp-simdev-heap", 0);
  if (heap_fd < 0 || ftruncate(heap_fd, (off_t)heap_size) != 0) {
    perror("simdev: memfd_create");
    abort();
  }
  /* FP_SIMDEV_HOST_VISIBLE=1 (the Python tests: torch's CPU kernels stand for
   * the device's, on tensors over device memory): the host may touch it */
  const char *hv = getenv("FP_SIMDEV_HOST_VISIBLE");
  int prot = hv && !strcmp(hv, "1") ? PROT_READ | PROT_WRITE : PROT_NONE;
  dev_base = mmap(NULL, heap_size, prot, MAP_SHARED, heap_fd, 0);
  rw_base = mmap(NULL, heap_size, PROT_READ | PROT_WRITE, MAP_SHARED, heap_fd, 0);
  if (dev_base == MAP_FAILED || rw_base == MAP_FAILED) {
    perror("simdev: mmap");
    abort();
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
}

void sd_heap_info(int *fd, size_t *size, char **rw) {
  *fd = heap_fd;
  *size = heap_size;
  *rw = rw_base;
}

bool sd_is_dev(const void *p) { return dev_base && (const char *)p >= dev_base && (const char *)p < dev_base + heap_size; }

static int find_alloc(size_t off) { /* the allocation holding heap offset off, or -1 */
  int lo = 0, hi = nallocs - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (off < allocs[mid].off) hi = mid - 1;
    else if (off >= allocs[mid].off + (allocs[mid].size ? allocs[mid].size : 1)) lo = mid + 1;
    else return mid;
  }
  return -1;
}

int64_t sd_dev_offset(const void *p, size_t bytes) {
  if (!sd_is_dev(p)) return -1;
  size_t off = (size_t)((const char *)p - dev_base);
  int k = find_alloc(off);
  if (k < 0 || off + bytes > allocs[k].off + allocs[k].size) return -1;
  return (int64_t)off;
}

static int find_pin(const char *p, size_t bytes) {
  for (int k = 0; k < npins; k++)
    if (p >= pins[k].p && p + bytes <= pins[k].p + pins[k].size) return k;
  return -1;
}

void *sd_dev(const void *p, size_t bytes) {
  if (bytes == 0) return (void *)p;
  if (sd_is_dev(p)) {
    int64_t off = sd_dev_offset(p, bytes);
    if (off >= 0) return rw_base + off;
    sd_fail(cudaErrorIllegalAddress, "device work touched %zu bytes at %p, outside every device allocation", bytes, p);
    return NULL;
  }
  if (p && find_pin(p, bytes) >= 0) return (void *)p;
  sd_fail(cudaErrorIllegalAddress, "device work touched %zu bytes at %p: neither device memory nor pinned host memory",
          bytes, p);
  return NULL;
}

cudaError_t sd_alloc(void **p, size_t bytes, const char *what) {
  (void)what;
  size_t need = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  if (need == 0) need = ALIGN;
  size_t at = 0;
  int k = 0;
  for (; k < nallocs; k++) {
    if (allocs[k].off >= at + need) break;
    at = allocs[k].off + (allocs[k].size + ALIGN - 1) / ALIGN * ALIGN;
  }
  if (at + need > heap_size) return cudaErrorMemoryAllocation;
  if (nallocs == cap_allocs) {
    cap_allocs = cap_allocs ? 2 * cap_allocs : 64;
    allocs = realloc(allocs, (size_t)cap_allocs * sizeof *allocs);
  }
  memmove(allocs + k + 1, allocs + k, (size_t)(nallocs - k) * sizeof *allocs);
  allocs[k] = (alloc){at, need};
  nallocs++;
  /* new memory holds garbage, as cudaMalloc's does: a reader that relies on zeros is wrong */
  memset(rw_base + at, 0xA5, need);
  *p = dev_base + at;
  return cudaSuccess;
}

cudaError_t sd_free(void *p) {
  if (!p) return cudaSuccess;
  if (!sd_is_dev(p)) return cudaErrorInvalidValue;
  size_t off = (size_t)((char *)p - dev_base);
  int k = find_alloc(off);
  if (k < 0 || allocs[k].off != off) return cudaErrorInvalidValue;
  /* released bytes are poisoned: work still queued on them reads garbage */
  memset(rw_base + off, 0x5A, allocs[k].size);
  memmove(allocs + k, allocs + k + 1, (size_t)(nallocs - k - 1) * sizeof *allocs);
  nallocs--;
  return cudaSuccess;
}

/* ---- streams, items, events, captures ---------------------------------------------------------------------- */
struct sd_run;
typedef struct sd_dep { /* item seq of stream s; or, with run, node `node` of that graph launch (item seq) */
  struct CUstream_st *s;
  uint64_t seq;
  struct sd_run *run; /* alive while s->done < seq (freed when its item completes) */
  int node;
} sd_dep;

enum {
  K_FN,    /* a kernel or copy: fn(arg) */
  K_MARK,  /* an event record, or a wait whose deps say what it waits for */
  K_GRAPH, /* a graph launch: its nodes, in a seeded topological order */
  K_NCCL   /* an NCCL task (simnccl.c) */
};
enum {
  N_FN,     /* a kernel or copy */
  N_NCCL,   /* an NCCL task, bound to its communicators' order at each launch */
  N_EVREC,  /* an external event record (cudaEventRecordWithFlags External) */
  N_EVWAIT, /* an external event wait (cudaStreamWaitEvent External): the event's record at launch */
  N_EMPTY   /* a join point */
};

typedef struct sd_node {
  int kind;
  sd_fn fn;
  void *arg;
  size_t len;
  sd_ntask *task;
  struct CUevent_st *ev;
  int *pred, npred;
} sd_node;

struct CUgraph_st {
  uint32_t magic;
  sd_node *nodes;
  int n, cap;
};
struct CUgraphExec_st {
  uint32_t magic;
  struct CUgraph_st g; /* a deep copy */
  int inflight;
  bool dead;
};

typedef struct sd_run {
  struct CUgraphExec_st *x;
  unsigned char *done;
  sd_ntask **tasks;
  sd_dep *wsnap; /* N_EVWAIT: the event's record when launched */
  int ndone;
} sd_run;

typedef struct sd_item {
  struct sd_item *next;
  uint64_t seq;
  int kind;
  sd_dep *deps;
  int ndeps;
  sd_fn fn;
  void *arg;
  sd_run *run;
  sd_ntask *task;
} sd_item;

typedef struct sd_capture {
  unsigned long long id;
  int mode;
  pthread_t thread;
  struct CUgraph_st *g;
  struct CUstream_st *origin;
  bool invalid;
  struct CUstream_st *streams[64];
  int nstreams;
} sd_capture;

struct CUstream_st {
  uint32_t magic;
  int id;
  unsigned flags;
  int prio;
  bool legacy, destroyed;
  sd_item *head, *tail;
  uint64_t nseq, done;
  sd_capture *cap;
  int *front, nfront, cap_front;
  uint32_t weight; /* the scheduler's (seeded) preference for this stream: 1 (starved) .. 256 (eager) */
  bool lazy;       /* (seeded) its work runs only when something needs it, or nothing else can run */
};

struct CUevent_st {
  uint32_t magic;
  unsigned flags;
  int state; /* 0: never recorded, 1: (s, seq[, run, node]), 2: in capture */
  struct CUstream_st *s;
  uint64_t seq;
  struct sd_run *run; /* recorded by an external record node of a graph launch: that launch's run, */
  int node;           /* and the node (the launch records it: CUDA's stream order, at the launch) */
  sd_capture *cap;
  int *front, nfront;
};

static struct CUstream_st legacy_stream = {.magic = MAGIC_STREAM, .id = 0, .legacy = true, .weight = 16};
static struct CUstream_st **streams; /* every stream ever made (destroyed ones drain, then stay inert) */
static int nstreams, cap_streams;
static __thread struct CUstream_st *per_thread;
static sd_capture *captures[64];
static int ncaptures;
static unsigned long long next_capture_id = 1;

static void add_stream(struct CUstream_st *s) {
  if (nstreams == cap_streams) {
    cap_streams = cap_streams ? 2 * cap_streams : 16;
    streams = realloc(streams, (size_t)cap_streams * sizeof *streams);
  }
  streams[nstreams++] = s;
}

static struct CUstream_st *new_stream(unsigned flags, int prio) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  s->magic = MAGIC_STREAM;
  s->id = nstreams + 1;
  s->flags = flags;
  s->prio = prio;
  s->weight = 1u << (sd_rand() % 9);
  s->lazy = sd_rand() % 2 == 0;
  add_stream(s);
  return s;
}

/* a stream handle to its stream (NULL: not a stream) */
static struct CUstream_st *S(cudaStream_t h) {
  if (h == NULL || h == cudaStreamLegacy) return &legacy_stream;
  if (h == cudaStreamPerThread) {
    if (!per_thread) per_thread = new_stream(cudaStreamDefault, 0);
    return per_thread;
  }
  for (int k = 0; k < nstreams; k++)
    if (streams[k] == h) return h->destroyed ? NULL : h;
  return NULL;
}

static struct CUevent_st **events;
static int nevents, cap_events;
static struct CUevent_st *E(cudaEvent_t e) {
  for (int k = 0; k < nevents; k++)
    if (events[k] == e) return e;
  return NULL;
}

/* a graph node's record is done when its node is, or (the run freed) its launch completed */
static bool dep_done(const sd_dep *d) {
  return !d->s || d->s->done >= d->seq || (d->run && d->run->done[d->node]);
}
static bool pending(const struct CUstream_st *s) { return s->done < s->nseq; }

static bool event_done(const struct CUevent_st *e) {
  return e->state != 1 || dep_done(&(sd_dep){e->s, e->seq, e->run, e->node});
}

/* ---- captures ---- */
static void node_free(sd_node *n) {
  free(n->arg);
  free(n->pred);
  if (n->task) sd_ntask_free(n->task);
}

static void graph_free(struct CUgraph_st *g) {
  for (int k = 0; k < g->n; k++) node_free(&g->nodes[k]);
  free(g->nodes);
  g->nodes = NULL;
  g->n = g->cap = 0;
}

static void leave_capture(sd_capture *c) {
  for (int k = 0; k < c->nstreams; k++) {
    c->streams[k]->cap = NULL;
    c->streams[k]->nfront = 0;
  }
  for (int k = 0; k < nevents; k++)
    if (events[k]->state == 2 && events[k]->cap == c) events[k]->state = 0, free(events[k]->front), events[k]->front = NULL;
  for (int k = 0; k < ncaptures; k++)
    if (captures[k] == c) captures[k] = captures[--ncaptures];
}

static void invalidate(sd_capture *c, const char *why) {
  if (!c->invalid) fprintf(stderr, "simdev: capture %llu invalidated: %s\n", c->id, why);
  c->invalid = true;
}

cudaError_t sd_capture_forbids(const char *what) {
  cudaError_t e = cudaSuccess;
  for (int k = 0; k < ncaptures; k++) {
    sd_capture *c = captures[k];
    if (c->mode == cudaStreamCaptureModeGlobal ||
        (c->mode == cudaStreamCaptureModeThreadLocal && pthread_equal(c->thread, pthread_self()))) {
      char why[160];
      snprintf(why, sizeof why, "%s during the capture", what);
      invalidate(c, why);
      e = cudaErrorStreamCaptureUnsupported;
    }
  }
  return e;
}

static void set_front(struct CUstream_st *s, const int *f, int n) {
  if (n > s->cap_front) {
    s->cap_front = n + 8;
    s->front = realloc(s->front, (size_t)s->cap_front * sizeof *s->front);
  }
  if (n) memcpy(s->front, f, (size_t)n * sizeof *f);
  s->nfront = n;
}

static void join_front(struct CUstream_st *s, const int *f, int n) {
  for (int k = 0; k < n; k++) {
    bool have = false;
    for (int j = 0; j < s->nfront && !have; j++) have = s->front[j] == f[k];
    if (have) continue;
    if (s->nfront == s->cap_front) {
      s->cap_front = 2 * s->cap_front + 8;
      s->front = realloc(s->front, (size_t)s->cap_front * sizeof *s->front);
    }
    s->front[s->nfront++] = f[k];
  }
}

/* a node after s's frontier; s's frontier becomes that node */
static sd_node *cap_node(struct CUstream_st *s, int kind) {
  struct CUgraph_st *g = s->cap->g;
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 32;
    g->nodes = realloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
  }
  sd_node *n = &g->nodes[g->n];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->npred = s->nfront;
  n->pred = s->nfront ? malloc((size_t)s->nfront * sizeof *n->pred) : NULL;
  if (s->nfront) memcpy(n->pred, s->front, (size_t)s->nfront * sizeof *n->pred);
  int me = g->n++;
  set_front(s, &me, 1);
  return n;
}

/* ---- items ---- */
static sd_item *new_item(struct CUstream_st *s, int kind) {
  sd_item *it = calloc(1, sizeof *it);
  it->kind = kind;
  /* the legacy stream's implicit ordering with blocking streams */
  if (s->legacy) {
    for (int k = 0; k < nstreams; k++)
      if (!(streams[k]->flags & cudaStreamNonBlocking) && pending(streams[k])) {
        it->deps = realloc(it->deps, (size_t)(it->ndeps + 1) * sizeof *it->deps);
        it->deps[it->ndeps++] = (sd_dep){.s = streams[k], .seq = streams[k]->nseq};
      }
  } else if (!(s->flags & cudaStreamNonBlocking) && pending(&legacy_stream)) {
    it->deps = malloc(sizeof *it->deps);
    it->deps[it->ndeps++] = (sd_dep){.s = &legacy_stream, .seq = legacy_stream.nseq};
  }
  return it;
}

static void push(struct CUstream_st *s, sd_item *it) {
  it->seq = ++s->nseq;
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  pthread_cond_signal(&wake);
}

static void add_dep(sd_item *it, struct CUstream_st *s, uint64_t seq) {
  it->deps = realloc(it->deps, (size_t)(it->ndeps + 1) * sizeof *it->deps);
  it->deps[it->ndeps++] = (sd_dep){.s = s, .seq = seq};
}

/* the legacy stream while a capture forbids it */
static cudaError_t legacy_check(struct CUstream_st *s) {
  if (!s->legacy) return cudaSuccess;
  for (int k = 0; k < ncaptures; k++) {
    sd_capture *c = captures[k];
    if (c->mode == cudaStreamCaptureModeGlobal ||
        (c->mode == cudaStreamCaptureModeThreadLocal && pthread_equal(c->thread, pthread_self()))) {
      invalidate(c, "the legacy default stream was used during the capture");
      return cudaErrorStreamCaptureImplicit;
    }
  }
  return cudaSuccess;
}

cudaError_t sd_launch(cudaStream_t h, sd_fn fn, const void *arg, size_t len) {
  struct CUstream_st *s = S(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  cudaError_t e = legacy_check(s);
  if (e != cudaSuccess) return e;
  void *a = malloc(len ? len : 1);
  if (len) memcpy(a, arg, len);
  if (s->cap) {
    if (s->cap->invalid) {
      free(a);
      return cudaErrorStreamCaptureInvalidated;
    }
    sd_node *n = cap_node(s, N_FN);
    n->fn = fn, n->arg = a, n->len = len;
    return cudaSuccess;
  }
  sd_item *it = new_item(s, K_FN);
  it->fn = fn, it->arg = a;
  push(s, it);
  return cudaSuccess;
}

cudaError_t sd_launch_nccl(cudaStream_t h, sd_ntask *t) {
  struct CUstream_st *s = S(h);
  if (!s) {
    sd_ntask_free(t);
    return cudaErrorInvalidResourceHandle;
  }
  cudaError_t e = legacy_check(s);
  if (e != cudaSuccess) {
    sd_ntask_free(t);
    return e;
  }
  if (s->cap) {
    if (s->cap->invalid) {
      sd_ntask_free(t);
      return cudaErrorStreamCaptureInvalidated;
    }
    cap_node(s, N_NCCL)->task = t;
    return cudaSuccess;
  }
  sd_ntask_bind(t);
  sd_item *it = new_item(s, K_NCCL);
  it->task = t;
  push(s, it);
  return cudaSuccess;
}

/* ---- the scheduler ---- */
static void note(uint64_t a, uint64_t b) {
  order_hash = (order_hash ^ (a * 0x100000001b3ull + b)) * 0x100000001b3ull;
  steps_run++;
}

static void run_free(sd_run *r) {
  struct CUgraphExec_st *x = r->x;
  for (int k = 0; k < x->g.n; k++)
    if (r->tasks[k]) sd_ntask_free(r->tasks[k]);
  free(r->done), free(r->tasks), free(r->wsnap), free(r);
  x->inflight--;
  if (x->dead && x->inflight == 0) {
    graph_free(&x->g);
    x->magic = 0;
    free(x);
  }
}

static void complete(struct CUstream_st *s) {
  sd_item *it = s->head;
  s->head = it->next;
  if (!s->head) s->tail = NULL;
  s->done = it->seq;
  note((uint64_t)s->id, it->seq);
  free(it->deps);
  free(it->arg);
  if (it->task) sd_ntask_free(it->task);
  if (it->run) run_free(it->run);
  free(it);
}

/* one node of a running graph; 1: progress */
static int graph_step(struct CUstream_st *s, sd_run *r) {
  struct CUgraph_st *g = &r->x->g;
  if (r->ndone == g->n) return 2;
  int start = (int)(sd_rand() % (uint64_t)g->n);
  for (int q = 0; q < g->n; q++) {
    int k = (start + q) % g->n;
    if (r->done[k]) continue;
    sd_node *n = &g->nodes[k];
    bool ready = true;
    for (int p = 0; p < n->npred && ready; p++) ready = r->done[n->pred[p]];
    if (!ready) continue;
    int adv = 1;
    switch (n->kind) {
      case N_FN: n->fn(n->arg); break;
      case N_EVREC: break; /* the launch recorded the event (it points at this node) */
      case N_EVWAIT: adv = dep_done(&r->wsnap[k]) ? 1 : 0; break;
      case N_NCCL: adv = sd_ntask_advance(r->tasks[k]); break;
      default: break;
    }
    if (adv == 0) continue;
    if (adv == 1 && n->kind == N_NCCL) return 1;
    r->done[k] = 1;
    r->ndone++;
    note((uint64_t)s->id << 20 | 0xfffff, (uint64_t)k);
    return 1;
  }
  return 0;
}

/* advance stream s's head; 1 progress */
static int advance(struct CUstream_st *s) {
  sd_item *it = s->head;
  if (!it) return 0;
  for (int k = 0; k < it->ndeps; k++)
    if (!dep_done(&it->deps[k])) return 0;
  int r = 2;
  switch (it->kind) {
    case K_FN: it->fn(it->arg); break;
    case K_MARK: break;
    case K_NCCL: r = sd_ntask_advance(it->task); break;
    case K_GRAPH:
      r = graph_step(s, it->run);
      if (r == 1 && it->run->ndone == it->run->x->g.n) r = 2;
      break;
  }
  if (r == 2) complete(s);
  return r != 0;
}

/* is lazy stream l needed: the host waits for it, or queued work waits on it */
static bool demanded(const struct CUstream_st *l, const struct CUstream_st *target) {
  if (l == target) return true;
  for (int k = -1; k < nstreams; k++) {
    const struct CUstream_st *s = k < 0 ? &legacy_stream : streams[k];
    const sd_item *it = s->head;
    if (!it) continue;
    for (int d = 0; d < it->ndeps; d++)
      if (it->deps[d].s == l && !dep_done(&it->deps[d])) return true;
    if (it->kind == K_GRAPH)
      for (int n = 0; n < it->run->x->g.n; n++)
        if (it->run->wsnap[n].s == l && !dep_done(&it->run->wsnap[n])) return true;
  }
  return false;
}

/* one scheduling step: a stream picked with probability by its seeded
 * weight (a starved stream lags far behind the others, as a slow one would
 * on a device), the next one if it cannot move. everything == false leaves
 * out the lazy streams nothing needs (target: the stream the host waits on) */
static int step_at(const struct CUstream_st *target, bool everything) {
  struct CUstream_st *cand[1024];
  int n = 0;
  if (legacy_stream.head) cand[n++] = &legacy_stream;
  for (int k = 0; k < nstreams && n < 1024; k++)
    if (streams[k]->head && (everything || !streams[k]->lazy || demanded(streams[k], target))) cand[n++] = streams[k];
  while (n > 0) {
    uint64_t total = 0;
    for (int k = 0; k < n; k++) total += cand[k]->weight;
    uint64_t r = sd_rand() % total;
    int k = 0;
    while (r >= cand[k]->weight) r -= cand[k++]->weight;
    if (advance(cand[k])) return 1;
    cand[k] = cand[--n];
  }
  return 0;
}
static int step(void) { return step_at(NULL, false); }

static bool any_work(void) {
  if (legacy_stream.head) return true;
  for (int k = 0; k < nstreams; k++)
    if (streams[k]->head) return true;
  return false;
}

static void dump_state(const char *what) {
  fprintf(stderr, "simdev: %s: no device work could run for %.0f s (seed %llu); streams:\n", what, hang_s,
          (unsigned long long)seed);
  for (int k = -1; k < nstreams; k++) {
    struct CUstream_st *s = k < 0 ? &legacy_stream : streams[k];
    if (!s->head) continue;
    sd_item *it = s->head;
    fprintf(stderr, "  stream %d: %llu/%llu done; head: %s%s\n", s->id, (unsigned long long)s->done,
            (unsigned long long)s->nseq,
            it->kind == K_FN ? "kernel" : it->kind == K_MARK ? "record/wait" : it->kind == K_GRAPH ? "graph" : "nccl ",
            it->kind == K_NCCL ? sd_ntask_name(it->task) : "");
    if (it->kind == K_NCCL) sd_ntask_dump(it->task, stderr);
  }
}

/* the host waits until done(arg): runs work, sleeps while only peers can help */
void sd_drive(bool (*done)(void *), void *arg, struct CUstream_st *target, const char *what) {
  double t0 = sd_now_s();
  long nap = 2000;
  while (!done(arg)) {
    /* what the wait needs first (a device-wide wait: everything); the rest
     * only once that is stuck for 2 ms, then a burst of it */
    if (step_at(target, target == NULL)) {
      t0 = sd_now_s();
      nap = 2000;
      continue;
    }
    if (sd_now_s() - t0 > 0.002 && step_at(target, true)) {
      for (int k = 0; k < 16 && !done(arg) && step_at(target, true); k++) {
      }
      t0 = sd_now_s();
      nap = 2000;
      continue;
    }
    pthread_mutex_unlock(&mu);
    struct timespec ts = {0, nap};
    nanosleep(&ts, NULL);
    if (nap < 200000) nap *= 2;
    pthread_mutex_lock(&mu);
    if (sd_now_s() - t0 > hang_s) {
      dump_state(what);
      abort();
    }
  }
}

void sd_enter(void) {
  sd_lock();
  uint64_t r = sd_rand();
  if ((r & 7) < 2) /* a quarter of the calls run a few items first */
    for (int k = (int)((r >> 8) % 4); k >= 0; k--)
      if (!step()) break;
}

/* the device thread: runs queued work when the host has left the device alone */
static void *device_thread(void *unused) {
  (void)unused;
  pthread_mutex_lock(&mu);
  for (;;) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 2000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&wake, &mu, &ts);
    double idle = sd_now_s() - last_api_s;
    if (idle < 0.005) continue;
    for (int k = 0; k < 4096 && any_work(); k++) /* lazy streams too once the host has been away long */
      if (!step_at(NULL, idle > 0.05)) break;
  }
  return NULL;
}

static void at_exit(void) {
  fprintf(stderr, "simdev: seed %llu: %llu device steps, order hash %016llx\n", (unsigned long long)seed,
          (unsigned long long)steps_run, (unsigned long long)order_hash);
}

static void sd_init(void) {
  const char *s = getenv("FP_SIMDEV_SEED");
  if (s && *s) seed = strtoull(s, NULL, 10);
  else {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    seed = ((uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 20)) % 1000000007ull;
  }
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  uint64_t rank = r && *r ? strtoull(r, NULL, 10) : 0;
  rng_state = seed * 0x9e3779b97f4a7c15ull + rank * 0xd1b54a32d192ed03ull + 1;
  const char *d = getenv("FP_SIMDEV_DEVICES");
  if (d && *d) ndevices = atoi(d);
  const char *h = getenv("FP_SIMDEV_HANG_S");
  if (h && *h) hang_s = atof(h);
  heap_init();
  fprintf(stderr, "simdev: seed %llu (rank %llu; FP_SIMDEV_SEED=%llu replays)\n", (unsigned long long)seed,
          (unsigned long long)rank, (unsigned long long)seed);
  atexit(at_exit);
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_create(&th, &at, device_thread, NULL);
  pthread_attr_destroy(&at);
}

/* ================================ the runtime API ================================ */
#define ENTER() sd_enter()
#define LEAVE(e)     \
  do {               \
    cudaError_t r_ = (e); \
    sd_unlock();     \
    return ret(r_);  \
  } while (0)

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define N(x) case x: return #x;
    N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorNoDevice)
    N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorNotReady) N(cudaErrorIllegalAddress)
    N(cudaErrorNotSupported) N(cudaErrorStreamCaptureUnsupported) N(cudaErrorStreamCaptureInvalidated)
    N(cudaErrorStreamCaptureUnmatched) N(cudaErrorStreamCaptureUnjoined) N(cudaErrorStreamCaptureIsolation)
    N(cudaErrorStreamCaptureImplicit) N(cudaErrorCapturedEvent) N(cudaErrorStreamCaptureWrongThread)
    N(cudaErrorUnknown)
#undef N
  }
  return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "the capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing "
                                                "blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another "
                                                   "thread";
    default: return "unknown error";
  }
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaGetDeviceCount(int *n) {
  if (!n) return ret(cudaErrorInvalidValue);
  pthread_once(&once, sd_init);
  *n = ndevices;
  return ret(ndevices > 0 ? cudaSuccess : cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int *d) {
  pthread_once(&once, sd_init);
  if (!d) return ret(cudaErrorInvalidValue);
  if (ndevices < 1) return ret(cudaErrorNoDevice);
  *d = cur_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  pthread_once(&once, sd_init);
  if (ndevices < 1) return ret(cudaErrorNoDevice);
  if (d < 0 || d >= ndevices) return ret(cudaErrorInvalidDevice);
  cur_device = d;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  if (v) *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  if (v) *v = CUDART_VERSION;
  return cudaSuccess;
}

static bool all_done(void *unused) {
  (void)unused;
  return !any_work();
}
cudaError_t cudaDeviceSynchronize(void) {
  ENTER();
  cudaError_t e = sd_capture_forbids("cudaDeviceSynchronize");
  if (e == cudaSuccess) sd_drive(all_done, NULL, NULL, "cudaDeviceSynchronize");
  if (e == cudaSuccess) e = sticky;
  LEAVE(e);
}

/* ---- memory ---- */
cudaError_t cudaMalloc(void **p, size_t bytes) {
  ENTER();
  if (!p) LEAVE(cudaErrorInvalidValue);
  cudaError_t e = sd_capture_forbids("cudaMalloc");
  if (e == cudaSuccess) e = sd_alloc(p, bytes, "cudaMalloc");
  LEAVE(e);
}
cudaError_t cudaFree(void *p) {
  ENTER();
  cudaError_t e = sd_capture_forbids("cudaFree");
  if (e == cudaSuccess) {
    sd_drive(all_done, NULL, NULL, "cudaFree"); /* cudaFree synchronizes the device */
    e = sd_free(p);
  }
  LEAVE(e);
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  ENTER();
  if (!p) LEAVE(cudaErrorInvalidValue);
  cudaError_t e = sd_capture_forbids("cudaHostAlloc");
  if (e != cudaSuccess) LEAVE(e);
  size_t need = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  void *m = NULL;
  if (posix_memalign(&m, ALIGN, need ? need : ALIGN) != 0) LEAVE(cudaErrorMemoryAllocation);
  if (npins == cap_pins) {
    cap_pins = cap_pins ? 2 * cap_pins : 16;
    pins = realloc(pins, (size_t)cap_pins * sizeof *pins);
  }
  pins[npins++] = (pinned){m, need ? need : ALIGN};
  *p = m;
  LEAVE(cudaSuccess);
}
cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t cudaFreeHost(void *p) {
  ENTER();
  if (!p) LEAVE(cudaSuccess);
  for (int k = 0; k < npins; k++)
    if (pins[k].p == p) {
      sd_drive(all_done, NULL, NULL, "cudaFreeHost");
      free(p);
      pins[k] = pins[--npins];
      LEAVE(cudaSuccess);
    }
  LEAVE(cudaErrorInvalidValue);
}

/* a copy's arguments: rows of width bytes; src_snap: the pageable source's bytes, taken when queued */
typedef struct cp_arg {
  char *dst;
  const char *src;
  size_t dpitch, spitch, width, rows;
  int value;         /* memset: >= 0 */
  bool snap;         /* src is the pageable source's bytes taken when queued (cp_run frees them) */
  bool dst_pageable; /* dst is pageable host memory (the host waits for such a copy) */
} cp_arg;

static void cp_run(void *a) {
  cp_arg *c = a;
  size_t dspan = c->rows ? (c->rows - 1) * c->dpitch + c->width : 0;
  char *d = c->dst_pageable ? c->dst : sd_dev(c->dst, dspan);
  if (!d && dspan) return;
  if (c->value >= 0) {
    for (size_t r = 0; r < c->rows; r++) memset(d + r * c->dpitch, c->value, c->width);
    return;
  }
  size_t sspan = c->rows ? (c->rows - 1) * c->spitch + c->width : 0;
  const char *s = c->snap ? c->src : sd_dev(c->src, sspan);
  if (!s && sspan) return;
  for (size_t r = 0; r < c->rows; r++) memmove(d + r * c->dpitch, s + r * c->spitch, c->width);
  if (c->snap) {
    free((void *)c->src);
    c->src = NULL, c->snap = false, c->rows = 0;
  }
}

/* where a pointer of a copy lives: 0 pageable host, 1 pinned host, 2 device */
static int where(const void *p, size_t bytes) {
  if (sd_is_dev(p)) return 2;
  return find_pin(p, bytes ? bytes : 1) >= 0 ? 1 : 0;
}

static bool stream_idle(void *a) { return !pending((struct CUstream_st *)a); }
static bool legacy_idle(void *unused) { /* the legacy stream waits for every blocking stream too */
  (void)unused;
  if (pending(&legacy_stream)) return false;
  for (int k = 0; k < nstreams; k++)
    if (!(streams[k]->flags & cudaStreamNonBlocking) && pending(streams[k])) return false;
  return true;
}

typedef struct until {
  struct CUstream_st *s;
  uint64_t seq;
} until;
static bool reached(void *a) {
  until *u = a;
  return u->s->done >= u->seq;
}

/* a copy (or memset: value >= 0) on stream h. synchronous: cudaMemcpy or
 * cudaMemset (not the Async forms), whose host waits follow CUDA's "API
 * synchronization behavior": from pageable host memory to the device, a sync
 * of the stream, then the host's bytes staged and no wait for the copy; from
 * pinned host memory, to host memory, or between host buffers, the host waits
 * for the copy; device to device and memset of device memory, no wait. Either
 * form waits when the destination is pageable host memory. */
static cudaError_t copy(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                        enum cudaMemcpyKind kind, int value, cudaStream_t h, bool synchronous) {
  struct CUstream_st *s = S(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  if ((!dst || (value < 0 && !src)) && width && rows) return cudaErrorInvalidValue;
  if (rows > 1 && (dpitch < width || (value < 0 && spitch < width))) return cudaErrorInvalidValue;
  size_t dspan = rows ? (rows - 1) * dpitch + width : 0, sspan = rows ? (rows - 1) * spitch + width : 0;
  int wd = where(dst, dspan), ws = value >= 0 ? 2 : where(src, sspan);
  if (value >= 0 && wd != 2) return cudaErrorInvalidValue; /* cudaMemset: device memory only */
  if (wd == 2 && sd_dev_offset(dst, dspan) < 0 && dspan) return cudaErrorInvalidValue;
  if (value < 0 && ws == 2 && sd_dev_offset(src, sspan) < 0 && sspan) return cudaErrorInvalidValue;
  /* an explicit kind must say where the pointers are */
  if (value < 0 && kind != cudaMemcpyDefault) {
    bool dd = wd == 2, sdv = ws == 2;
    bool ok = (kind == cudaMemcpyHostToDevice && dd && !sdv) || (kind == cudaMemcpyDeviceToHost && !dd && sdv) ||
              (kind == cudaMemcpyDeviceToDevice && dd && sdv) || (kind == cudaMemcpyHostToHost && !dd && !sdv);
    if (!ok) return cudaErrorInvalidValue;
  }
  cudaError_t e = legacy_check(s);
  if (e != cudaSuccess) return e;
  cp_arg c = {.dst = dst, .src = src, .dpitch = rows > 1 ? dpitch : width, .spitch = rows > 1 ? spitch : width,
              .width = width, .rows = rows, .value = value};
  bool pageable_src = value < 0 && ws == 0, pageable_dst = wd == 0;
  if (s->cap && (pageable_src || pageable_dst)) {
    invalidate(s->cap, "a copy from or to pageable host memory during the capture");
    return cudaErrorStreamCaptureUnsupported;
  }
  if (synchronous) {
    e = sd_capture_forbids("a synchronous copy or memset");
    if (e != cudaSuccess) return e;
  }
  /* the host waits for the copy: a synchronous one that is not pageable -> device, device -> device or a
   * memset; any copy to pageable host memory */
  bool sync = (synchronous && value < 0 && !(wd == 2 && ws != 1)) || pageable_dst;
  if (synchronous && pageable_src && wd == 2) /* CUDA: "a stream sync is performed before the copy is initiated" */
    sd_drive(s->legacy ? legacy_idle : stream_idle, s, s, "a synchronous copy from pageable memory");
  if (pageable_src && width && rows) { /* staged: the host's bytes are taken now */
    char *snap = malloc(sspan);
    memcpy(snap, src, sspan);
    c.src = snap;
    c.snap = true;
  }
  c.dst_pageable = pageable_dst;
  if (s->cap) {
    if (s->cap->invalid) return cudaErrorStreamCaptureInvalidated;
    sd_node *n = cap_node(s, N_FN);
    n->fn = cp_run, n->arg = malloc(sizeof c), n->len = sizeof c;
    memcpy(n->arg, &c, sizeof c);
    return cudaSuccess;
  }
  sd_item *it = new_item(s, K_FN);
  it->fn = cp_run;
  it->arg = malloc(sizeof c);
  memcpy(it->arg, &c, sizeof c);
  push(s, it);
  if (sync) {
    until u = {s, it->seq};
    sd_drive(reached, &u, s, "a synchronous copy");
  }
  return sync ? sticky : cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  ENTER();
  LEAVE(copy(dst, bytes, src, bytes, bytes, 1, kind, -1, cudaStreamLegacy, true));
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s) {
  ENTER();
  LEAVE(copy(dst, bytes, src, bytes, bytes, 1, kind, -1, s, false));
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s) {
  ENTER();
  LEAVE(copy(dst, dpitch, src, spitch, width, height, kind, -1, s, false));
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  ENTER();
  LEAVE(copy(p, bytes, NULL, 0, bytes, 1, cudaMemcpyDefault, value & 0xff, cudaStreamLegacy, true));
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
  ENTER();
  LEAVE(copy(p, bytes, NULL, 0, bytes, 1, cudaMemcpyDefault, value & 0xff, s, false));
}

/* ---- streams ---- */
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority) {
  ENTER();
  if (!s || (flags & ~1u)) LEAVE(cudaErrorInvalidValue);
  if (priority > 0) priority = 0;
  if (priority < -5) priority = -5;
  *s = new_stream(flags, priority);
  LEAVE(cudaSuccess);
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s || s->legacy || h == cudaStreamPerThread) LEAVE(cudaErrorInvalidResourceHandle);
  if (s->cap) {
    invalidate(s->cap, "a capturing stream was destroyed");
    LEAVE(cudaErrorStreamCaptureUnsupported);
  }
  s->destroyed = true; /* its queued work still runs (CUDA's rule) */
  LEAVE(cudaSuccess);
}
cudaError_t cudaStreamGetPriority(cudaStream_t h, int *priority) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s || !priority) LEAVE(cudaErrorInvalidValue);
  *priority = s->prio;
  LEAVE(cudaSuccess);
}
cudaError_t cudaStreamGetFlags(cudaStream_t h, unsigned *flags) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s || !flags) LEAVE(cudaErrorInvalidValue);
  *flags = s->flags;
  LEAVE(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s) LEAVE(cudaErrorInvalidResourceHandle);
  if (s->cap) {
    invalidate(s->cap, "cudaStreamSynchronize on a capturing stream");
    LEAVE(cudaErrorStreamCaptureUnsupported);
  }
  cudaError_t e = legacy_check(s);
  if (e != cudaSuccess) LEAVE(e);
  if (s->legacy) sd_drive(legacy_idle, NULL, s, "cudaStreamSynchronize (legacy stream)");
  else sd_drive(stream_idle, s, s, "cudaStreamSynchronize");
  LEAVE(sticky);
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s) LEAVE(cudaErrorInvalidResourceHandle);
  if (s->cap) {
    invalidate(s->cap, "cudaStreamQuery on a capturing stream");
    LEAVE(cudaErrorStreamCaptureUnsupported);
  }
  /* a poll moves the device on a little (seeded): a polling host must see progress */
  for (int k = (int)(sd_rand() % 3); k > 0 && pending(s); k--)
    if (!step_at(s, false) && (sd_rand() % 4 || !step_at(s, true))) /* what the polled stream needs first */
      break;
  if (sticky != cudaSuccess) LEAVE(sticky);
  LEAVE(pending(s) ? cudaErrorNotReady : cudaSuccess);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned flags) {
  ENTER();
  struct CUstream_st *s = S(h);
  struct CUevent_st *e = E(ev);
  if (!s || !e) LEAVE(cudaErrorInvalidResourceHandle);
  cudaError_t le = legacy_check(s);
  if (le != cudaSuccess) LEAVE(le);
  if (e->state == 2) { /* recorded inside a capture: s joins it (fork) or merges its frontier (join) */
    if (s->cap && s->cap != e->cap) {
      invalidate(s->cap, "a wait on an event of another capture");
      LEAVE(cudaErrorStreamCaptureIsolation);
    }
    if (e->cap->invalid) LEAVE(cudaErrorStreamCaptureInvalidated);
    if (!s->cap) {
      if (e->cap->nstreams == 64) LEAVE(cudaErrorNotSupported);
      s->cap = e->cap;
      e->cap->streams[e->cap->nstreams++] = s;
      set_front(s, e->front, e->nfront);
    } else {
      join_front(s, e->front, e->nfront);
    }
    LEAVE(cudaSuccess);
  }
  if (s->cap) { /* a capturing stream waits on work outside the capture */
    if (s->cap->invalid) LEAVE(cudaErrorStreamCaptureInvalidated);
    if (!(flags & cudaEventWaitExternal)) {
      invalidate(s->cap, "a wait on an event recorded outside the capture");
      LEAVE(cudaErrorStreamCaptureIsolation);
    }
    cap_node(s, N_EVWAIT)->ev = e;
    LEAVE(cudaSuccess);
  }
  sd_item *it = new_item(s, K_MARK);
  if (e->state == 1) {
    add_dep(it, e->s, e->seq);
    it->deps[it->ndeps - 1].run = e->run;
    it->deps[it->ndeps - 1].node = e->node;
  }
  push(s, it);
  LEAVE(cudaSuccess);
}

/* ---- events ---- */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags) {
  ENTER();
  if (!ev) LEAVE(cudaErrorInvalidValue);
  struct CUevent_st *e = calloc(1, sizeof *e);
  e->magic = MAGIC_EVENT;
  e->flags = flags;
  if (nevents == cap_events) {
    cap_events = cap_events ? 2 * cap_events : 64;
    events = realloc(events, (size_t)cap_events * sizeof *events);
  }
  events[nevents++] = e;
  *ev = e;
  LEAVE(cudaSuccess);
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  ENTER();
  for (int k = 0; k < nevents; k++)
    if (events[k] == ev) {
      free(ev->front);
      ev->magic = 0;
      free(ev);
      events[k] = events[--nevents];
      LEAVE(cudaSuccess);
    }
  LEAVE(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t h, unsigned flags) {
  ENTER();
  struct CUstream_st *s = S(h);
  struct CUevent_st *e = E(ev);
  if (!s || !e) LEAVE(cudaErrorInvalidResourceHandle);
  cudaError_t le = legacy_check(s);
  if (le != cudaSuccess) LEAVE(le);
  if (s->cap) {
    if (s->cap->invalid) LEAVE(cudaErrorStreamCaptureInvalidated);
    if (flags & cudaEventRecordExternal) { /* a record node: the event is recorded when the graph runs */
      cap_node(s, N_EVREC)->ev = e;
      LEAVE(cudaSuccess);
    }
    free(e->front);
    e->state = 2;
    e->cap = s->cap;
    e->nfront = s->nfront;
    e->front = malloc((size_t)(s->nfront + 1) * sizeof *e->front);
    if (s->nfront) memcpy(e->front, s->front, (size_t)s->nfront * sizeof *e->front);
    LEAVE(cudaSuccess);
  }
  sd_item *it = new_item(s, K_MARK);
  push(s, it);
  e->state = 1;
  e->s = s;
  e->seq = it->seq;
  e->run = NULL;
  LEAVE(cudaSuccess);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecordWithFlags(e, s, 0); }

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  ENTER();
  struct CUevent_st *e = E(ev);
  if (!e) LEAVE(cudaErrorInvalidResourceHandle);
  if (e->state == 2) LEAVE(cudaErrorCapturedEvent);
  for (int k = (int)(sd_rand() % 3); k > 0 && !event_done(e); k--)
    if (!step_at(e->s, false) && (sd_rand() % 4 || !step_at(e->s, true))) break;
  LEAVE(event_done(e) ? cudaSuccess : cudaErrorNotReady);
}
static bool ev_done(void *a) { return event_done(a); }
cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  ENTER();
  struct CUevent_st *e = E(ev);
  if (!e) LEAVE(cudaErrorInvalidResourceHandle);
  if (e->state == 2) LEAVE(cudaErrorCapturedEvent);
  sd_drive(ev_done, e, e->state == 1 ? e->s : NULL, "cudaEventSynchronize");
  LEAVE(sticky);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  (void)a, (void)b;
  if (ms) *ms = 0;
  return ret(cudaErrorNotSupported); /* no timing in the simulator */
}

/* ---- capture and graphs ---- */
cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s) LEAVE(cudaErrorInvalidResourceHandle);
  if (s->legacy) LEAVE(cudaErrorStreamCaptureUnsupported);
  if (s->cap) LEAVE(cudaErrorStreamCaptureUnsupported);
  if ((unsigned)mode > cudaStreamCaptureModeRelaxed || ncaptures == 64) LEAVE(cudaErrorInvalidValue);
  sd_capture *c = calloc(1, sizeof *c);
  c->id = next_capture_id++;
  c->mode = mode;
  c->thread = pthread_self();
  c->g = calloc(1, sizeof *c->g);
  c->g->magic = MAGIC_GRAPH;
  c->origin = s;
  c->streams[c->nstreams++] = s;
  captures[ncaptures++] = c;
  s->cap = c;
  s->nfront = 0;
  LEAVE(cudaSuccess);
}

/* every node of from[] an ancestor of (or in) the marked set */
static void mark_ancestors(const struct CUgraph_st *g, const int *f, int n, unsigned char *mark) {
  for (int k = 0; k < n; k++) {
    if (mark[f[k]]) continue;
    mark[f[k]] = 1;
    const sd_node *nd = &g->nodes[f[k]];
    mark_ancestors(g, nd->pred, nd->npred, mark);
  }
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *out) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (out) *out = NULL;
  if (!s || !out) LEAVE(cudaErrorInvalidValue);
  sd_capture *c = s->cap;
  if (!c || c->origin != s) LEAVE(cudaErrorStreamCaptureUnmatched);
  if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self()))
    LEAVE(cudaErrorStreamCaptureWrongThread);
  cudaError_t e = cudaSuccess;
  if (!c->invalid) { /* every forked stream joined back into the origin */
    unsigned char *mark = calloc((size_t)c->g->n + 1, 1);
    mark_ancestors(c->g, s->front, s->nfront, mark);
    for (int k = 0; k < c->nstreams && e == cudaSuccess; k++) {
      struct CUstream_st *t = c->streams[k];
      for (int j = 0; j < t->nfront && e == cudaSuccess; j++)
        if (!mark[t->front[j]]) e = cudaErrorStreamCaptureUnjoined;
    }
    free(mark);
    if (e != cudaSuccess) invalidate(c, "a forked stream was not joined back into the origin stream");
  }
  if (c->invalid && e == cudaSuccess) e = cudaErrorStreamCaptureInvalidated;
  leave_capture(c);
  if (e == cudaSuccess) *out = c->g;
  else {
    graph_free(c->g);
    free(c->g);
  }
  free(c);
  LEAVE(e);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *st) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s || !st) LEAVE(cudaErrorInvalidValue);
  *st = !s->cap ? cudaStreamCaptureStatusNone
        : s->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  LEAVE(cudaSuccess);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t h, enum cudaStreamCaptureStatus *st, unsigned long long *id,
                                     cudaGraph_t *graph, const cudaGraphNode_t **deps, const void **edge_data,
                                     size_t *ndeps) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!s || !st) LEAVE(cudaErrorInvalidValue);
  *st = !s->cap ? cudaStreamCaptureStatusNone
        : s->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  if (id) *id = s->cap ? s->cap->id : 0;
  if (graph) *graph = s->cap ? s->cap->g : NULL;
  if (deps) *deps = NULL;
  if (edge_data) *edge_data = NULL;
  if (ndeps) *ndeps = 0;
  LEAVE(cudaSuccess);
}

static struct CUgraph_st *G(cudaGraph_t g) { return g && g->magic == MAGIC_GRAPH ? g : NULL; }

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *out, cudaGraph_t hg, unsigned long long flags) {
  (void)flags;
  ENTER();
  struct CUgraph_st *g = G(hg);
  if (!out || !g) LEAVE(cudaErrorInvalidValue);
  struct CUgraphExec_st *x = calloc(1, sizeof *x);
  x->magic = MAGIC_EXEC;
  x->g.magic = MAGIC_GRAPH;
  x->g.n = x->g.cap = g->n;
  x->g.nodes = calloc((size_t)g->n + 1, sizeof *x->g.nodes);
  for (int k = 0; k < g->n; k++) {
    sd_node *d = &x->g.nodes[k];
    const sd_node *n = &g->nodes[k];
    *d = *n;
    d->arg = n->arg ? malloc(n->len ? n->len : 1) : NULL;
    if (n->arg && n->len) memcpy(d->arg, n->arg, n->len);
    d->pred = n->npred ? malloc((size_t)n->npred * sizeof *d->pred) : NULL;
    if (n->npred) memcpy(d->pred, n->pred, (size_t)n->npred * sizeof *d->pred);
    d->task = n->task ? sd_ntask_clone(n->task) : NULL;
  }
  *out = x;
  LEAVE(cudaSuccess);
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags) {
  return cudaGraphInstantiateWithFlags(x, g, flags);
}
cudaError_t cudaGraphUpload(cudaGraphExec_t x, cudaStream_t h) {
  ENTER();
  if (!x || x->magic != MAGIC_EXEC || !S(h)) LEAVE(cudaErrorInvalidResourceHandle);
  LEAVE(cudaSuccess);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t h) {
  ENTER();
  struct CUstream_st *s = S(h);
  if (!x || x->magic != MAGIC_EXEC || x->dead || !s) LEAVE(cudaErrorInvalidResourceHandle);
  cudaError_t le = legacy_check(s);
  if (le != cudaSuccess) LEAVE(le);
  if (s->cap) { /* a graph launched into a capture: not used by flexplan */
    invalidate(s->cap, "cudaGraphLaunch into a capture (child graphs are not simulated)");
    LEAVE(cudaErrorNotSupported);
  }
  sd_run *r = calloc(1, sizeof *r);
  int n = x->g.n;
  r->x = x;
  r->done = calloc((size_t)n + 1, 1);
  r->tasks = calloc((size_t)n + 1, sizeof *r->tasks);
  r->wsnap = calloc((size_t)n + 1, sizeof *r->wsnap);
  for (int k = 0; k < n; k++) { /* in capture order: the communicators' order of this launch */
    sd_node *nd = &x->g.nodes[k];
    if (nd->kind == N_NCCL) {
      r->tasks[k] = sd_ntask_clone(nd->task);
      sd_ntask_bind(r->tasks[k]);
    } else if (nd->kind == N_EVWAIT && nd->ev->state == 1) {
      r->wsnap[k] = (sd_dep){nd->ev->s, nd->ev->seq, nd->ev->run, nd->ev->node};
    }
  }
  x->inflight++;
  sd_item *it = new_item(s, K_GRAPH);
  it->run = r;
  push(s, it);
  /* the launch records its external record nodes' events, in stream order (a
   * wait issued after it waits for the node; the waits above took the
   * records made before it) */
  for (int k = 0; k < n; k++) {
    struct CUevent_st *ev = x->g.nodes[k].kind == N_EVREC ? x->g.nodes[k].ev : NULL;
    if (!ev || !E(ev)) continue;
    ev->state = 1;
    ev->s = s;
    ev->seq = it->seq;
    ev->run = r;
    ev->node = k;
  }
  LEAVE(cudaSuccess);
}
cudaError_t cudaGraphGetNodes(cudaGraph_t hg, cudaGraphNode_t *nodes, size_t *n) {
  ENTER();
  struct CUgraph_st *g = G(hg);
  if (!g || !n) LEAVE(cudaErrorInvalidValue);
  if (nodes) LEAVE(cudaErrorNotSupported);
  *n = (size_t)g->n;
  LEAVE(cudaSuccess);
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  ENTER();
  if (!x || x->magic != MAGIC_EXEC || x->dead) LEAVE(cudaErrorInvalidResourceHandle);
  x->dead = true;
  if (x->inflight == 0) {
    graph_free(&x->g);
    x->magic = 0;
    free(x);
  }
  LEAVE(cudaSuccess);
}
cudaError_t cudaGraphDestroy(cudaGraph_t hg) {
  ENTER();
  struct CUgraph_st *g = G(hg);
  if (!g) LEAVE(cudaErrorInvalidResourceHandle);
  graph_free(g);
  g->magic = 0;
  free(g);
  LEAVE(cudaSuccess);
}
