/* test_exec_external.c - the external backend (FP_BACKEND_EXTERNAL) through
 * its public transport table, with a fake transport: every rank is a thread
 * of this process, and the transport runs each collective once all members
 * of its group have started it, reading and writing the members' arenas
 * directly (fp32 sums, byte moves). No MPI, no torch: the C side of what
 * flexplan.torch's torch.distributed transport does, under ASan and UBSan in
 * the asan preset (the Python tests cannot run there).
 *
 * Checks, against values computed here from the views' extents (not by the
 * library): the compute weights each rank gathers equal every rank's main
 * shards put together; the main grads after the backward equal the average
 * over ranks of what each rank wrote into its unsharded grads (full_shard
 * on 2 and 3 ranks, hybrid_shard 2 x 2: replica all-reduces);
 * fp_exec_all_reduce_f64 sums; a plan-hash mismatch fails every rank
 * (FP_ERR_MISMATCH naming both hashes); a transport that fails its start
 * fails the hook, one that fails its groups or its store fails the
 * create (FP_ERR_BACKEND with the transport's message); a rank that
 * stops calling hooks ends the other's hook in the watchdog (FP_ERR_TIMEOUT
 * naming the op and the rank that did not arrive); a missing transport is
 * FP_ERR_ARG.
 *
 * usage: test_exec_external MODEL.json */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flexplan.h"
#include "flexplan_compile.h"

static int failures;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      pthread_mutex_lock(&out_mu);                                                     \
      failures++;                                                                      \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);         \
      fprintf(stderr, __VA_ARGS__);                                                    \
      fputc('\n', stderr);                                                             \
      pthread_mutex_unlock(&out_mu);                                                   \
    }                                                                                  \
  } while (0)

/* ---- the fake transport: one world of W threads ------------------------------------ */
#define MAXW 8
#define MAXG 64   /* group instances */
#define SLOTS 4096 /* ops per group (the test's steps stay below) */

typedef struct slot {
  fp_coll_args a[MAXW]; /* by member index */
  int posted;
  int done;
} slot;

typedef struct group {
  int64_t call, base, size, stride; /* the call number on each rank that made it */
  int64_t next[MAXW];               /* each member's next op number */
  slot *slots;
} group;

typedef struct kv {
  char key[96];
  int64_t v[32];
  int64_t len;
} kv;

typedef struct world {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int W;
  group groups[MAXG];
  int ngroups;
  kv store[512];
  int nkv;
} world;

typedef struct rank_ctx {
  world *w;
  int rank;
  int64_t calls;        /* new_group calls so far */
  int64_t mine[MAXG];   /* this rank's group per handle */
  int fail_start;       /* inject: start fails */
  int fail_group;       /* inject: new_group fails */
  int fail_store;       /* inject: store_set fails */
  char err[128];
} rank_ctx;

static int64_t index_in(const group *g, int rank) { return (rank - g->base) / g->stride; }

static int t_new_group(void *ctx, int64_t size, int64_t stride, int64_t *out) {
  rank_ctx *c = ctx;
  world *w = c->w;
  if (c->fail_group) {
    snprintf(c->err, sizeof c->err, "injected group failure");
    return -3;
  }
  int64_t gi = (c->rank / stride) % size, base = c->rank - gi * stride, call = c->calls++;
  pthread_mutex_lock(&w->mu);
  int k = 0;
  while (k < w->ngroups && !(w->groups[k].call == call && w->groups[k].base == base)) k++;
  if (k == w->ngroups) {
    if (k == MAXG) {
      pthread_mutex_unlock(&w->mu);
      snprintf(c->err, sizeof c->err, "too many groups");
      return -1;
    }
    w->groups[k] = (group){.call = call, .base = base, .size = size, .stride = stride};
    w->groups[k].slots = calloc(SLOTS, sizeof(slot));
    w->ngroups++;
  }
  pthread_mutex_unlock(&w->mu);
  c->mine[call] = k;
  *out = call;
  return 0;
}

static float *F(const void *p) { return (float *)(uintptr_t)p; }

/* every member posted op s: run it (under the world's lock) */
static void run(group *g, slot *s, int esz) {
  int G = (int)g->size;
  const fp_coll_args *a0 = &s->a[0];
  int64_t n = a0->count;
  switch (a0->coll) {
    case FP_COLL_ALL_GATHER:
      for (int i = 0; i < G; i++)
        for (int j = 0; j < G; j++)
          if ((char *)s->a[i].dst + j * n * esz != (const char *)s->a[j].src || i != j)
            memmove((char *)s->a[i].dst + j * n * esz, s->a[j].src, (size_t)(n * esz));
      break;
    case FP_COLL_ALL_GATHER_V:
      for (int i = 0; i < G; i++)
        for (int j = 0; j < G; j++)
          memmove((char *)s->a[i].dst + a0->displs[j] * esz, s->a[j].src, (size_t)(a0->counts[j] * esz));
      break;
    case FP_COLL_REDUCE_SCATTER:
    case FP_COLL_REDUCE_SCATTER_V:
      for (int i = 0; i < G; i++) {
        int64_t off = a0->coll == FP_COLL_REDUCE_SCATTER ? i * n : a0->displs[i];
        int64_t cnt = a0->coll == FP_COLL_REDUCE_SCATTER ? n : a0->counts[i];
        for (int64_t e = 0; e < cnt; e++) {
          float sum = 0;
          for (int j = 0; j < G; j++) sum += F(s->a[j].src)[off + e];
          F(s->a[i].dst)[e] = sum;
        }
      }
      break;
    case FP_COLL_ALL_REDUCE:
    case FP_COLL_ALL_REDUCE_F64: {
      bool f64 = a0->coll == FP_COLL_ALL_REDUCE_F64;
      double *sum = calloc((size_t)n + 1, sizeof *sum);
      for (int j = 0; j < G; j++)
        for (int64_t e = 0; e < n; e++) sum[e] += f64 ? ((const double *)s->a[j].src)[e] : F(s->a[j].src)[e];
      for (int i = 0; i < G; i++)
        for (int64_t e = 0; e < n; e++) {
          if (f64) ((double *)s->a[i].dst)[e] = sum[e];
          else F(s->a[i].dst)[e] = (float)sum[e];
        }
      free(sum);
      break;
    }
    case FP_COLL_BROADCAST:
      for (int i = 0; i < G; i++)
        if (i != a0->root) memcpy(s->a[i].dst, s->a[a0->root].dst, (size_t)(n * esz));
      break;
    case FP_COLL_REDUCE: {
      float *sum = calloc((size_t)n + 1, sizeof *sum);
      for (int j = 0; j < G; j++)
        for (int64_t e = 0; e < n; e++) sum[e] += F(s->a[j].src)[e];
      memcpy(s->a[a0->root].dst, sum, (size_t)n * sizeof *sum);
      free(sum);
      break;
    }
    default: break; /* send/recv: the plans here have none */
  }
  s->done = 1;
}

static int t_start(void *ctx, const fp_coll_args *a, int64_t *req) {
  rank_ctx *c = ctx;
  if (c->fail_start) {
    snprintf(c->err, sizeof c->err, "injected start failure");
    return -7;
  }
  world *w = c->w;
  group *g = &w->groups[c->mine[a->group]];
  int64_t me = index_in(g, c->rank);
  if (a->index != me || a->size != g->size || (a->dtype != FP_ELEM_FP32 && a->coll != FP_COLL_ALL_REDUCE_F64 &&
                                               a->coll != FP_COLL_ALL_GATHER && a->coll != FP_COLL_BROADCAST)) {
    snprintf(c->err, sizeof c->err, "unexpected op %d (index %" PRId64 " of %" PRId64 ", dtype %d)", (int)a->coll,
             a->index, a->size, (int)a->dtype);
    return -1;
  }
  /* the table's contract: a reduce-scatter's dst never overlaps its src (the
   * executor stages an in-place one) */
  if (a->coll == FP_COLL_REDUCE_SCATTER || a->coll == FP_COLL_REDUCE_SCATTER_V) {
    const char *s0 = a->src, *d0 = a->dst;
    int64_t span = a->coll == FP_COLL_REDUCE_SCATTER ? a->size * a->count : a->displs[a->size - 1] + a->counts[a->size - 1];
    if (d0 + a->count * 4 > s0 && d0 < s0 + span * 4) {
      snprintf(c->err, sizeof c->err, "reduce-scatter: dst overlaps src");
      return -1;
    }
  }
  pthread_mutex_lock(&w->mu);
  int64_t k = g->next[me]++;
  slot *s = &g->slots[k % SLOTS];
  s->a[me] = *a;
  if (++s->posted == g->size) run(g, s, a->coll == FP_COLL_ALL_REDUCE_F64 ? 8 : fp_elem_size(a->dtype));
  pthread_mutex_unlock(&w->mu);
  *req = (int64_t)(g - w->groups) * SLOTS + k % SLOTS;
  return 0;
}

static int t_test(void *ctx, int64_t req, int *done) {
  rank_ctx *c = ctx;
  pthread_mutex_lock(&c->w->mu);
  *done = c->w->groups[req / SLOTS].slots[req % SLOTS].done;
  pthread_mutex_unlock(&c->w->mu);
  return 0;
}

static int t_store_set(void *ctx, const char *key, const void *v, int64_t len) {
  rank_ctx *c = ctx;
  world *w = c->w;
  if (c->fail_store || len > (int64_t)sizeof w->store[0].v) {
    snprintf(c->err, sizeof c->err, "injected store failure");
    return -5;
  }
  pthread_mutex_lock(&w->mu);
  kv *e = &w->store[w->nkv++];
  snprintf(e->key, sizeof e->key, "%s", key);
  memcpy(e->v, v, (size_t)len);
  e->len = len;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int t_store_get(void *ctx, const char *key, void *v, int64_t cap, double wait_s) {
  rank_ctx *c = ctx;
  world *w = c->w;
  double t0 = now_s();
  pthread_mutex_lock(&w->mu);
  for (;;) {
    for (int k = 0; k < w->nkv; k++)
      if (!strcmp(w->store[k].key, key)) {
        memcpy(v, w->store[k].v, (size_t)(w->store[k].len < cap ? w->store[k].len : cap));
        pthread_mutex_unlock(&w->mu);
        return 0;
      }
    if (wait_s >= 0 && now_s() - t0 >= wait_s) break;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 2000000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&w->cv, &w->mu, &until);
  }
  pthread_mutex_unlock(&w->mu);
  return 1;
}

static void t_error(void *ctx, char *buf, int64_t cap) { snprintf(buf, (size_t)cap, "%s", ((rank_ctx *)ctx)->err); }

/* ---- the ranks ------------------------------------------------------------------------- */
typedef struct job {
  world *w;
  const fp_plan *plan;
  int rank;
  const char *mode; /* "train", "mismatch", "fail", "watchdog" */
  fp_status st;
  char msg[1024];
  pthread_barrier_t *bar;
} job;

static float main_value(int step, int64_t p, int64_t e) { return (float)(p + 1) * 0.5f + (float)e * 0.001f + (float)step; }
static float grad_value(int rank, int64_t p, int64_t e) { return (float)(rank + 1) + (float)(p * 7 + e) * 0.01f; }

/* the view's shard elements (runs) -> the full param's */
static void each_held(const fp_param_view *v, void (*f)(void *arg, int64_t shard_i, int64_t full_i), void *arg) {
  for (int64_t k = 0; k < v->shard.runs; k++)
    for (int64_t i = 0; i < v->shard.len; i++)
      f(arg, k * v->shard.shard_stride + i, v->shard.full_off + k * v->shard.full_stride + i);
}

typedef struct fill_arg {
  float *t;
  int64_t p;
  int step;
  int W, rank;
  float worst;
} fill_arg;
static void put_main(void *a_, int64_t s, int64_t f) {
  fill_arg *a = a_;
  a->t[s] = main_value(a->step, a->p, f);
}
static void check_grad(void *a_, int64_t s, int64_t f) {
  fill_arg *a = a_;
  double avg = 0;
  for (int r = 0; r < a->W; r++) avg += grad_value(r, a->p, f);
  avg /= a->W;
  float d = fabsf(a->t[s] - (float)avg);
  if (d > a->worst) a->worst = d;
}

static void *rank_main(void *arg) {
  job *j = arg;
  rank_ctx c = {.w = j->w, .rank = j->rank, .fail_group = !strcmp(j->mode, "fail_group"),
               .fail_store = !strcmp(j->mode, "fail_store")};
  fp_transport t = {&c, t_new_group, t_start, t_test, t_store_set, t_store_get, t_error};
  fp_plan_info info;
  fp_plan_get_info(j->plan, &info);
  fp_exec_config cfg = {.backend = FP_BACKEND_EXTERNAL, .rank = j->rank, .world_size = (int)info.world_size,
                        .transport = &t,
                        .timeout_s = !strcmp(j->mode, "watchdog") || !strcmp(j->mode, "fail_store") ? 1.0 : -1};
  fp_exec *x = NULL;
  j->st = fp_exec_create(j->plan, &cfg, &x);
  snprintf(j->msg, sizeof j->msg, "%s", fp_exec_errmsg(x));
  if (j->st != FP_OK) goto out;
  if (!strcmp(j->mode, "fail")) c.fail_start = 1;
  int W = (int)info.world_size;
  for (int step = 0; step < 3 && j->st == FP_OK; step++) {
    if (!strcmp(j->mode, "watchdog") && step == 1 && j->rank == 1) break; /* stops calling hooks */
    for (int32_t p = 0; p < info.nparams; p++) { /* new main weights every step */
      fp_param_view v;
      fp_exec_param_at(x, p, &v);
      fill_arg a = {.t = v.main.data, .p = p, .step = step};
      if (v.main.data) each_held(&v, put_main, &a);
    }
    for (int32_t k = 0; k < info.nsegments && j->st == FP_OK; k++) {
      fp_plan_segment sg;
      fp_plan_segment_at(j->plan, k, &sg);
      if (sg.hook == FP_HOOK_POST_BACKWARD) /* the backward wrote the unsharded grads of the module */
        for (int32_t p = 0; p < info.nparams; p++) {
          fp_param_view v;
          fp_exec_param_at(x, p, &v);
          if (v.module != sg.module || !v.ugrad.data) continue;
          for (int64_t e = 0; e < v.numel; e++) ((float *)v.ugrad.data)[e] = grad_value(j->rank, p, e);
        }
      j->st = fp_exec_hook(x, sg.hook, sg.module);
      if (j->st != FP_OK) break;
      if (sg.hook == FP_HOOK_PRE_FORWARD) /* the module's weights are gathered */
        for (int32_t p = 0; p < info.nparams; p++) {
          fp_param_view v;
          fp_exec_param_at(x, p, &v);
          if (v.module != sg.module) continue;
          float worst = 0;
          for (int64_t e = 0; e < v.numel; e++) worst = fmaxf(worst, fabsf(((float *)v.weight.data)[e] - main_value(step, p, e)));
          EXPECT(worst == 0, "rank %d step %d: %s gathered wrong (max |diff| %g)", j->rank, step, v.name, worst);
        }
      if (sg.hook == FP_HOOK_PRE_OPTIMIZER) /* main grads: the average over ranks */
        for (int32_t p = 0; p < info.nparams; p++) {
          fp_param_view v;
          fp_exec_param_at(x, p, &v);
          fill_arg a = {.t = v.grad.data, .p = p, .W = W, .rank = j->rank};
          if (v.grad.data) each_held(&v, check_grad, &a);
          EXPECT(a.worst <= 1e-5f, "rank %d step %d: %s main grad off by %g", j->rank, step, v.name, a.worst);
        }
    }
    if (j->st == FP_OK) {
      double vals[2] = {j->rank, 1.0};
      j->st = fp_exec_all_reduce_f64(x, vals, 2);
      EXPECT(j->st != FP_OK || (vals[0] == W * (W - 1) / 2.0 && vals[1] == W), "rank %d: all_reduce_f64 %g %g",
             j->rank, vals[0], vals[1]);
    }
  }
  snprintf(j->msg, sizeof j->msg, "%s", fp_exec_errmsg(x));
  if (!strcmp(j->mode, "watchdog")) pthread_barrier_wait(j->bar); /* rank 1 stays until rank 0 reported */
out:
  fp_exec_destroy(x);
  return NULL;
}

static void run_world(const fp_plan *plans[], int W, const char *mode, job *jobs) {
  world *w = calloc(1, sizeof *w);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->W = W;
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)W);
  pthread_t th[MAXW];
  for (int r = 0; r < W; r++) {
    jobs[r] = (job){.w = w, .plan = plans[r], .rank = r, .mode = mode, .bar = &bar};
    pthread_create(&th[r], NULL, rank_main, &jobs[r]);
  }
  for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&bar);
  for (int k = 0; k < w->ngroups; k++) free(w->groups[k].slots);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static fp_plan *compile(const char *model, const char *spec, const char *policy) {
  fp_compile_options o = {.model_path = model, .spec_text = spec, .policy = policy};
  fp_plan *p = NULL;
  fp_status st = fp_plan_compile(&o, &p);
  if (st != FP_OK) {
    fprintf(stderr, "compile failed: %s\n", fp_plan_errmsg(p));
    exit(1);
  }
  return p;
}

#define MP0 "\"defaults\": {\"mixed_precision\": {\"param_dtype\": \"fp32\", \"reduce_dtype\": \"fp32\", \"main_grad_dtype\": \"fp32\"}"
#define MP MP0 "}"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_exec_external MODEL.json\n");
    return 2;
  }
  alarm(120); /* a hang fails the test */
  char spec[512];
  job jobs[MAXW];
  /* training: full_shard on 2 and 3 ranks (padded shards), hybrid 2 x 2; the
   * fsdp2 policy's plan (averages: reduce-scatters with red=avg, divided by
   * the executor after the transport's sum); one flat bucket on 3 ranks */
  const struct { int W; const char *extra, *policy, *dflt; } cases[] = {
      {2, "\"strategy\": \"full_shard\"", NULL, NULL},
      {3, "\"strategy\": \"full_shard\"", NULL, NULL},
      {4, "\"strategy\": \"hybrid_shard\", \"hybrid_shard\": {\"intra_node_size\": 2}", NULL, NULL},
      {2, "\"strategy\": \"full_shard\"", "fsdp2", NULL},
      {3, "\"strategy\": \"full_shard\", \"buckets\": [{\"name\": \"all\", \"params\": [\"*\"]}]", NULL,
       ", \"collectives\": \"flat\""},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    snprintf(spec, sizeof spec, "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": %d%s}, %s, " MP0 "%s}}",
             cases[k].W, cases[k].W == 4 ? ", \"ranks_per_node\": 2" : "", cases[k].extra,
             cases[k].dflt ? cases[k].dflt : "");
    fp_plan *p = compile(argv[1], spec, cases[k].policy);
    const fp_plan *plans[MAXW];
    for (int r = 0; r < cases[k].W; r++) plans[r] = p;
    run_world(plans, cases[k].W, "train", jobs);
    for (int r = 0; r < cases[k].W; r++) EXPECT(jobs[r].st == FP_OK, "train W=%d rank %d: %s", cases[k].W, r, jobs[r].msg);
    /* a failing transport: the hook fails with its message */
    run_world(plans, cases[k].W, "fail", jobs);
    for (int r = 0; r < cases[k].W; r++)
      EXPECT(jobs[r].st == FP_ERR_BACKEND && strstr(jobs[r].msg, "transport") && strstr(jobs[r].msg, "injected start failure"),
             "fail W=%d rank %d: %s %s", cases[k].W, r, fp_status_name(jobs[r].st), jobs[r].msg);
    fp_plan_free(p);
  }
  /* a plan-hash mismatch: every rank refuses, naming both hashes */
  snprintf(spec, sizeof spec, "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 2}, \"strategy\": \"full_shard\", " MP "}");
  fp_plan *a = compile(argv[1], spec, NULL);
  snprintf(spec, sizeof spec, "{\"format\": \"flexplan.spec.v1\", \"mesh\": {\"world_size\": 2}, \"strategy\": \"full_shard\", "
           "\"grad_accumulation\": 2, " MP "}");
  fp_plan *b = compile(argv[1], spec, NULL);
  const fp_plan *mixed[2] = {a, b}, *same[2] = {a, a};
  run_world(mixed, 2, "train", jobs);
  for (int r = 0; r < 2; r++)
    EXPECT(jobs[r].st == FP_ERR_MISMATCH && strstr(jobs[r].msg, "plan hash mismatch") && strstr(jobs[r].msg, "rank 1 has"),
           "mismatch rank %d: %s %s", r, fp_status_name(jobs[r].st), jobs[r].msg);
  /* the watchdog: rank 1 stops calling hooks after step 0 */
  run_world(same, 2, "watchdog", jobs);
  EXPECT(jobs[0].st == FP_ERR_TIMEOUT && strstr(jobs[0].msg, "waits for op") && strstr(jobs[0].msg, "did not arrive") &&
             strstr(jobs[0].msg, ": 1"),
         "watchdog rank 0: %s %s", fp_status_name(jobs[0].st), jobs[0].msg);
  EXPECT(jobs[1].st == FP_OK, "watchdog rank 1: %s", jobs[1].msg);
  /* a transport whose groups or store fail: every rank's create fails with its message */
  run_world(same, 2, "fail_group", jobs);
  for (int r = 0; r < 2; r++)
    EXPECT(jobs[r].st == FP_ERR_BACKEND && strstr(jobs[r].msg, "transport: new_group failed") &&
               strstr(jobs[r].msg, "injected group failure"),
           "fail_group rank %d: %s %s", r, fp_status_name(jobs[r].st), jobs[r].msg);
  run_world(same, 2, "fail_store", jobs);
  for (int r = 0; r < 2; r++)
    EXPECT(jobs[r].st == FP_ERR_BACKEND && strstr(jobs[r].msg, "the store failed in the executor's agreement") &&
               strstr(jobs[r].msg, "injected store failure"),
           "fail_store rank %d: %s %s", r, fp_status_name(jobs[r].st), jobs[r].msg);
  /* no transport: FP_ERR_ARG naming it */
  fp_exec_config cfg = {.backend = FP_BACKEND_EXTERNAL, .rank = 0, .world_size = 2};
  fp_exec *x = NULL;
  fp_status st = fp_exec_create(a, &cfg, &x);
  EXPECT(st == FP_ERR_ARG && strstr(fp_exec_errmsg(x), "needs fp_exec_config.transport"), "%s", fp_exec_errmsg(x));
  fp_exec_destroy(x);
  fp_plan_free(a);
  fp_plan_free(b);
  printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
