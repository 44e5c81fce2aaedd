/* base.c - arena, diagnostics, dtype table, hashing: the pieces every stage
 * of flexplan shares (see base.h). */
#define _GNU_SOURCE /* MAP_ANONYMOUS and mremap, for the arena's big chunks */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

void fpi_internal_error(const char *file, int line, const char *cond) {
  fflush(stdout);
  fprintf(stderr, "%s:%d: internal error: assertion failed: %s\n", file, line, cond);
  exit(70);
}

/* ---- arena ----------------------------------------------------------------- */
/* A chunk of FP_MAP_MIN bytes or more is an anonymous mapping of its own:
 * the kernel hands out zeroed pages and only the pages written are ever
 * touched, so a big array's unused capacity costs neither zeroing nor
 * memory, and a growing one moves with mremap instead of a copy (2.2M ops'
 * array doubled to room for 4M is 608 MB, of which 334 MB are used).
 * Under AddressSanitizer every chunk stays on malloc: LeakSanitizer looks
 * for pointers in malloc'd memory, not in anonymous mappings. */
#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define FP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang */
#define FP_ASAN 1
#endif
#endif
#ifdef FP_ASAN
#define FP_MAP_MIN SIZE_MAX
#else
#define FP_MAP_MIN ((size_t)32 << 20)
#endif

typedef struct fp_chunk {
  struct fp_chunk *next;
  size_t used, cap;
  bool mapped; /* an anonymous mapping (munmap), else malloc'd (free) */
  _Alignas(16) unsigned char data[];
} fp_chunk;

struct fp_arena {
  fp_chunk *head;
};

/* a chunk with room for cap bytes; a mapped one is all zeros */
static fp_chunk *chunk_new(size_t cap) {
  fp_chunk *c;
  if (cap >= FP_MAP_MIN) {
    void *m = mmap(NULL, sizeof *c + cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FP_ASSERT(m != MAP_FAILED);
    c = m;
    c->mapped = true;
  } else {
    c = malloc(sizeof *c + cap);
    FP_ASSERT(c);
    c->mapped = false;
  }
  c->used = 0;
  c->cap = cap;
  return c;
}

static void chunk_free(fp_chunk *c) {
  if (c->mapped) munmap(c, sizeof *c + c->cap);
  else free(c);
}

fp_arena *fpi_arena_new(void) {
  fp_arena *a = calloc(1, sizeof *a);
  FP_ASSERT(a);
  return a;
}

void fpi_arena_free(fp_arena *a) {
  if (!a) return;
  for (fp_chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    chunk_free(c);
  }
  free(a);
}

static void *alloc_in(fp_arena *a, size_t bytes, bool zero) {
  size_t need = (bytes + 15) & ~(size_t)15;
  if (need < bytes) fpi_internal_error(__FILE__, __LINE__, "allocation size overflow");
  fp_chunk *c = a->head;
  if (!c || c->cap - c->used < need) {
    c = chunk_new(need > 65536 ? need : 65536);
    /* keep a partially used head first when the new chunk is a big one-off */
    if (a->head && need > 65536) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += need;
  if (zero && !c->mapped) memset(p, 0, bytes); /* a mapping's bytes are never handed out twice: still zero */
  return p;
}

void *fpi_alloc(fp_arena *a, size_t bytes) { return alloc_in(a, bytes, true); }

void *fpi_memdup(fp_arena *a, const void *src, size_t bytes) {
  void *p = alloc_in(a, bytes ? bytes : 1, false);
  if (bytes) memcpy(p, src, bytes);
  return p;
}

void *fpi_alloc_array(fp_arena *a, size_t n, size_t elem) {
  size_t bytes;
  if (__builtin_mul_overflow(n, elem, &bytes)) fpi_internal_error(__FILE__, __LINE__, "array size overflow");
  return fpi_alloc(a, bytes ? bytes : 1);
}

void *fpi_alloc_array_raw(fp_arena *a, size_t n, size_t elem) {
  size_t bytes;
  if (__builtin_mul_overflow(n, elem, &bytes)) fpi_internal_error(__FILE__, __LINE__, "array size overflow");
  return alloc_in(a, bytes ? bytes : 1, false);
}

char *fpi_strndup(fp_arena *a, const char *s, size_t n) {
  char *d = fpi_alloc(a, n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *fpi_strdup(fp_arena *a, const char *s) { return fpi_strndup(a, s, strlen(s)); }

char *fpi_strjoin(fp_arena *a, const char *x, const char *sep, const char *y) {
  size_t nx = strlen(x), ns = strlen(sep), ny = strlen(y);
  char *d = fpi_alloc(a, nx + ns + ny + 1);
  memcpy(d, x, nx);
  memcpy(d + nx, sep, ns);
  memcpy(d + nx + ns, y, ny + 1);
  return d;
}

char *fpi_strjoin_i64(fp_arena *a, const char *x, const char *sep, int64_t i) {
  char digits[24], *e = digits + sizeof digits, *q = e;
  *--q = 0;
  uint64_t u = i < 0 ? 0 - (uint64_t)i : (uint64_t)i;
  do *--q = (char)('0' + u % 10); while ((u /= 10) != 0);
  if (i < 0) *--q = '-';
  return fpi_strjoin(a, x, sep, q);
}

char *fpi_sprintf(fp_arena *a, const char *fmt, ...) {
  va_list ap, aq;
  va_start(ap, fmt);
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  FP_ASSERT(n >= 0);
  char *s = fpi_alloc(a, (size_t)n + 1);
  vsnprintf(s, (size_t)n + 1, fmt, aq);
  va_end(aq);
  return s;
}

static void *grow_in(fp_arena *a, void *base, int64_t *cap, int64_t need, size_t elem, bool zero) {
  if (need <= *cap) return base;
  int64_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  size_t ob = (size_t)*cap * elem, nbytes;
  if (__builtin_mul_overflow((size_t)nc, elem, &nbytes) || nbytes > SIZE_MAX - sizeof(fp_chunk) - 15)
    fpi_internal_error(__FILE__, __LINE__, "array size overflow");
  /* an array that has a chunk of its own (one over 64 KiB) grows in place:
   * the old copy is not left behind (pointers into it were stale anyway) */
  if (base && *cap && ob > 65536)
    for (fp_chunk **pc = &a->head; *pc; pc = &(*pc)->next) {
      fp_chunk *c = *pc;
      if (c->data != base || c->used != ((ob + 15) & ~(size_t)15)) continue;
      size_t need = (nbytes + 15) & ~(size_t)15;
      fp_chunk *g;
      if (c->mapped) { /* the new pages are zero */
        g = mremap(c, sizeof *c + c->cap, sizeof *g + need, MREMAP_MAYMOVE);
        FP_ASSERT(g != MAP_FAILED);
      } else if (need >= FP_MAP_MIN) {
        g = chunk_new(need);
        memcpy(g->data, c->data, ob);
        g->next = c->next;
        free(c);
      } else {
        g = realloc(c, sizeof *g + need);
        FP_ASSERT(g);
        if (zero) memset(g->data + ob, 0, nbytes - ob);
      }
      g->used = g->cap = need;
      *pc = g;
      *cap = nc;
      return g->data;
    }
  void *nb = alloc_in(a, nbytes ? nbytes : 1, zero);
  if (base && *cap) memcpy(nb, base, ob);
  *cap = nc;
  return nb;
}

void *fpi_grow(fp_arena *a, void *base, int64_t *cap, int64_t need, size_t elem) {
  return grow_in(a, base, cap, need, elem, true);
}

void *fpi_grow_raw(fp_arena *a, void *base, int64_t *cap, int64_t need, size_t elem) {
  return grow_in(a, base, cap, need, elem, false);
}

void fpi_arena_release(fp_arena *a, void *p) {
  if (!p) return;
  for (fp_chunk **pc = &a->head; *pc; pc = &(*pc)->next) {
    fp_chunk *c = *pc;
    if (c->data != p) continue;
    if (c->cap <= 65536) return; /* a shared chunk: other allocations may live in it */
    *pc = c->next;
    chunk_free(c);
    return;
  }
}

/* ---- names to indices (fp_namemap) ---------------------------------------- */
/* eight bytes a step (the names are long: "layers.125.feed_forward.w3.weight";
 * FNV-1a's byte steps here were 1% of the llama3-405b compile by callgrind);
 * only lookups depend on it */
static uint64_t name_hash(const char *s, size_t len) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ len, w;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    memcpy(&w, s + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  w = 0;
  memcpy(&w, s + i, len - i);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

void fpi_namemap_init(fp_namemap *m, fp_arena *a, int64_t n) {
  int64_t cap = 16;
  while (cap < 2 * n + 2) cap *= 2;
  FP_ASSERT(cap <= (int64_t)1 << 32); /* the slots' 32 bits of hash place a name */
  m->a = a;
  m->cap = cap;
  m->count = 0;
  m->slots = fpi_alloc_array(a, (size_t)cap, sizeof *m->slots);
  m->keys = fpi_alloc_array(a, (size_t)cap, sizeof *m->keys);
}

/* the slot of name (hash h): where it is, or the empty slot where it would go */
static int64_t namemap_slot(const fp_namemap *m, const char *name, size_t len, uint64_t h) {
  int64_t i = (int64_t)(h & (uint64_t)(m->cap - 1));
  while (m->slots[i].val3 &&
         !(m->slots[i].hash == (uint32_t)h && !strncmp(m->keys[i], name, len) && !m->keys[i][len]))
    i = (i + 1) & (m->cap - 1);
  return i;
}

/* a new name into empty slot i; grows when half full */
static void namemap_fill(fp_namemap *m, int64_t i, const char *name, uint64_t h, int32_t v) {
  FP_ASSERT(v >= FP_NAMEMAP_DUP && v <= INT32_MAX - 3);
  m->slots[i] = (struct fp_namemap_slot){(uint32_t)h, v + 3};
  m->keys[i] = name;
  if (++m->count * 2 <= m->cap) return;
  fp_namemap old = *m; /* rehash into twice the room */
  fpi_namemap_init(m, old.a, old.count);
  for (int64_t j = 0; j < old.cap; j++) {
    if (!old.slots[j].val3) continue;
    int64_t k = (int64_t)(old.slots[j].hash & (uint64_t)(m->cap - 1));
    while (m->slots[k].val3) k = (k + 1) & (m->cap - 1);
    m->slots[k] = old.slots[j];
    m->keys[k] = old.keys[j];
    m->count++;
  }
}

void fpi_namemap_put(fp_namemap *m, const char *name, int32_t v) {
  size_t len = strlen(name);
  uint64_t h = name_hash(name, len);
  int64_t i = namemap_slot(m, name, len, h);
  if (m->slots[i].val3) m->slots[i].val3 = FP_NAMEMAP_DUP + 3;
  else namemap_fill(m, i, name, h, v);
}

int32_t fpi_namemap_add(fp_namemap *m, const char *name, int32_t v) {
  size_t len = strlen(name);
  uint64_t h = name_hash(name, len);
  int64_t i = namemap_slot(m, name, len, h);
  if (m->slots[i].val3) return m->slots[i].val3 - 3;
  namemap_fill(m, i, name, h, v);
  return -1;
}

int32_t fpi_namemap_get(const fp_namemap *m, const char *name, size_t len) {
  int64_t i = namemap_slot(m, name, len, name_hash(name, len));
  return m->slots[i].val3 ? m->slots[i].val3 - 3 : -1;
}

void fpi_name_firsts(const char *(*name)(const void *ctx, int32_t i), const void *ctx, int32_t n, int32_t *first) {
  uint64_t *key = malloc(((size_t)n + 1) * sizeof *key);
  int32_t *idx = malloc(((size_t)n + 1) * sizeof *idx), m = 0;
  FP_ASSERT(key && idx);
  for (int32_t i = 0; i < n; i++) {
    const char *s = name(ctx, i);
    first[i] = -1;
    if (!s) continue;
    key[m] = name_hash(s, strlen(s)) >> 32; /* 32 bits: two radix passes; equal ones compare text */
    idx[m++] = i;
  }
  fpi_sort_u64(key, idx, m); /* stable: equal hashes keep their indices ascending */
  for (int32_t a = 0, b; a < m; a = b) {
    for (b = a + 1; b < m && key[b] == key[a]; b++) {
      /* the first of the run's earlier names (each the first of its text) it equals */
      const char *s = name(ctx, idx[b]);
      for (int32_t q = a; q < b; q++)
        if (first[idx[q]] < 0 && !strcmp(name(ctx, idx[q]), s)) {
          first[idx[b]] = idx[q];
          break;
        }
    }
  }
  free(key);
  free(idx);
}

/* ---- sorting --------------------------------------------------------------- */
void fpi_sort_u64(uint64_t *key, int32_t *val, int64_t n) {
  if (n < 2) return;
  /* digits of 16 bits for big inputs, of 8 for small ones (the counts are
   * cleared every pass) */
  const int bits = n >= 65536 ? 16 : 8;
  const size_t radix = (size_t)1 << bits, mask = radix - 1;
  uint64_t all_or = 0, all_and = ~(uint64_t)0;
  for (int64_t i = 0; i < n; i++) all_or |= key[i], all_and &= key[i];
  uint64_t *k2 = malloc((size_t)n * sizeof *k2);
  int32_t *v2 = val ? malloc((size_t)n * sizeof *v2) : NULL;
  size_t *cnt = malloc(radix * sizeof *cnt);
  FP_ASSERT(k2 && (v2 || !val) && cnt);
  /* each pass scatters from one pair of arrays into the other (no copy
   * back after every pass); the caller's get the result at the end */
  uint64_t *kin = key, *kout = k2;
  int32_t *vin = val, *vout = v2;
  for (int shift = 0; shift < 64; shift += bits) {
    if (!(((all_or ^ all_and) >> shift) & mask)) continue; /* one digit everywhere: already in order */
    memset(cnt, 0, radix * sizeof *cnt);
    for (int64_t i = 0; i < n; i++) cnt[kin[i] >> shift & mask]++;
    size_t sum = 0;
    for (size_t d = 0; d < radix; d++) {
      size_t c = cnt[d];
      cnt[d] = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; i++) {
      size_t at = cnt[kin[i] >> shift & mask]++;
      kout[at] = kin[i];
      if (val) vout[at] = vin[i];
    }
    uint64_t *kt = kin;
    kin = kout, kout = kt;
    int32_t *vt = vin;
    vin = vout, vout = vt;
  }
  if (kin != key) {
    memcpy(key, kin, (size_t)n * sizeof *key);
    if (val) memcpy(val, vin, (size_t)n * sizeof *val);
  }
  free(k2);
  free(v2);
  free(cnt);
}

void fpi_sort_records(void *recs, size_t elem, int64_t n, int nkeys, uint64_t (*key)(const void *rec, int k)) {
  if (n < 2) return;
  FP_ASSERT(n <= INT32_MAX);
  unsigned char *r = recs;
  /* already in order (a list built in order): nothing to move */
  bool sorted = true;
  for (int64_t i = 1; i < n && sorted; i++)
    for (int k = 0; k < nkeys; k++) {
      uint64_t x = key(r + (size_t)(i - 1) * elem, k), y = key(r + (size_t)i * elem, k);
      if (x != y) {
        sorted = x < y;
        break;
      }
    }
  if (sorted) return;
  uint64_t *kv = malloc((size_t)n * sizeof *kv);
  int32_t *ord = malloc((size_t)n * sizeof *ord);
  unsigned char *one = malloc(elem);
  FP_ASSERT(kv && ord && one);
  for (int64_t i = 0; i < n; i++) ord[i] = (int32_t)i;
  for (int k = nkeys - 1; k >= 0; k--) {
    for (int64_t i = 0; i < n; i++) kv[i] = key(r + (size_t)ord[i] * elem, k);
    fpi_sort_u64(kv, ord, n);
  }
  free(kv);
  /* the gather in place, one cycle of the permutation at a time (slot i
   * takes record ord[i]): no second array of the records */
  for (int64_t i = 0; i < n; i++) {
    if (ord[i] == i) continue;
    memcpy(one, r + (size_t)i * elem, elem);
    int64_t j = i;
    while (ord[j] != i) {
      int64_t from = ord[j];
      memcpy(r + (size_t)j * elem, r + (size_t)from * elem, elem);
      ord[j] = (int32_t)j;
      j = from;
    }
    memcpy(r + (size_t)j * elem, one, elem);
    ord[j] = (int32_t)j;
  }
  free(ord);
  free(one);
}

/* ---- growable strings ------------------------------------------------------------ */
void fpi_sb_grow(fp_sbuf *b, size_t n) {
  size_t nc = b->cap ? b->cap : 4096;
  while (nc < b->len + n + 1) nc *= 2;
  b->p = realloc(b->p, nc);
  FP_ASSERT(b->p);
  b->cap = nc;
}

/* ---- sources ----------------------------------------------------------------- */
bool fpi_src_read(fp_arena *a, fp_diag *d, const char *path, fp_src *out) {
  /* O_NONBLOCK: opening a FIFO with no writer must not hang; only regular
   * files are read (a device like /dev/zero never ends), up to a stated size */
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    fpi_diag_errorf(d, path, "cannot open: %s", strerror(errno));
    return false;
  }
  struct stat sb;
  const char *why = NULL;
  if (fstat(fd, &sb) != 0)
    why = fpi_sprintf(a, "cannot stat: %s", strerror(errno));
  else if (S_ISDIR(sb.st_mode))
    why = "is a directory";
  else if (!S_ISREG(sb.st_mode))
    why = "not a regular file";
  else if (sb.st_size > FP_SRC_MAX_BYTES)
    why = fpi_sprintf(a, "file of %lld bytes exceeds the input limit of %lld bytes", (long long)sb.st_size,
                     (long long)FP_SRC_MAX_BYTES);
  if (why) {
    fpi_diag_errorf(d, path, "%s", why);
    close(fd);
    return false;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    fpi_diag_errorf(d, path, "cannot open: %s", strerror(errno));
    close(fd);
    return false;
  }
  /* read straight into the arena, sized by fstat (one pass over the
   * bytes); a file that grows while it is read moves to a growing heap
   * buffer and is copied in at the end */
  size_t cap = (size_t)sb.st_size + 2, len = 0;
  char *buf = fpi_alloc_array_raw(a, cap, 1), *heap = NULL; /* buf[len] = 0 ends what was read */
  bool too_big = false;
  for (;;) {
    if (len + 1 >= cap) {
      char *nb = realloc(heap, cap * 2);
      FP_ASSERT(nb);
      if (!heap) memcpy(nb, buf, len);
      heap = buf = nb;
      cap *= 2;
    }
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
    if (len > (size_t)FP_SRC_MAX_BYTES) { /* a file that grows while we read */
      too_big = true;
      break;
    }
  }
  bool err = ferror(f);
  fclose(f);
  if (too_big || err) {
    free(heap);
    if (too_big) fpi_diag_errorf(d, path, "file exceeds the input limit of %lld bytes", (long long)FP_SRC_MAX_BYTES);
    else fpi_diag_errorf(d, path, "read error");
    return false;
  }
  out->path = fpi_strdup(a, path);
  if (!heap) buf[len] = 0;
  out->text = heap ? fpi_strndup(a, heap, len) : buf;
  out->len = len;
  free(heap);
  if (memchr(out->text, 0, len)) {
    size_t at = (size_t)((const char *)memchr(out->text, 0, len) - out->text), k = 0;
    while (k < at && (out->text[k] == ' ' || out->text[k] == '\t' || out->text[k] == '\n' || out->text[k] == '\r')) k++;
    if (k < at && (out->text[k] == '{' || out->text[k] == '[')) /* a JSON text: the value it is in */
      fpi_diag_at(d, out, at, "%s: unexpected NUL byte", fpi_json_path_at(a, out, at));
    else
      fpi_diag_at(d, out, at, "unexpected NUL byte");
    return false;
  }
  return true;
}

void fpi_src_linecol(const fp_src *s, size_t off, int *line, int *col) {
  int l = 1, c = 1;
  if (off > s->len) off = s->len;
  for (size_t i = 0; i < off; i++) {
    if (s->text[i] == '\n') {
      l++;
      c = 1;
    } else {
      c++;
    }
  }
  *line = l;
  *col = c;
}

/* ---- diagnostics -------------------------------------------------------------- */
void fpi_diag_init(fp_diag *d, FILE *echo) {
  memset(d, 0, sizeof *d);
  d->echo = echo;
  d->max_errors = 50;
}

void fpi_diag_free(fp_diag *d) {
  free(d->buf);
  d->buf = NULL;
  d->len = d->cap = 0;
}

static void diag_append(fp_diag *d, const char *s) {
  d->nerrors++;
  if (d->max_errors > 0 && d->nerrors > d->max_errors) return;
  fp_sbuf b = {d->buf, d->len, d->cap};
  fpi_sb_puts(&b, s);
  d->buf = b.p;
  d->len = b.len;
  d->cap = b.cap;
  if (d->echo) {
    fputs(s, d->echo);
    fflush(d->echo);
  }
}

static void diag_emit(fp_diag *d, const char *prefix, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  FP_ASSERT(n >= 0);
  size_t pl = strlen(prefix);
  char *s = malloc(pl + (size_t)n + 2);
  FP_ASSERT(s);
  memcpy(s, prefix, pl);
  vsnprintf(s + pl, (size_t)n + 1, fmt, aq);
  va_end(aq);
  s[pl + (size_t)n] = 0;
  /* names in messages come from the input: a key with an escaped newline or
   * ESC must not forge a line or reach the terminal, so control characters
   * (C0, DEL and UTF-8 C1) are written as escapes */
  fp_sbuf b = {0};
  for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
    if (*q == '\n') fpi_sb_puts(&b, "\\n");
    else if (*q == '\t') fpi_sb_puts(&b, "\\t");
    else if (*q == '\r') fpi_sb_puts(&b, "\\r");
    else if (*q < 0x20 || *q == 0x7f || (*q == 0xc2 && q[1] >= 0x80 && q[1] <= 0x9f)) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", *q == 0xc2 ? *++q : *q);
      fpi_sb_puts(&b, e);
    } else {
      fpi_sb_putc(&b, (char)*q);
    }
  }
  fpi_sb_putc(&b, '\n');
  free(s);
  diag_append(d, b.p);
  free(b.p);
}

void fpi_diag_errorf(fp_diag *d, const char *where, const char *fmt, ...) {
  char prefix[1100];
  snprintf(prefix, sizeof prefix, "%s: error: ", where);
  va_list ap;
  va_start(ap, fmt);
  diag_emit(d, prefix, fmt, ap);
  va_end(ap);
}

void fpi_diag_at(fp_diag *d, const fp_src *s, size_t off, const char *fmt, ...) {
  int line, col;
  fpi_src_linecol(s, off, &line, &col);
  char prefix[1100];
  snprintf(prefix, sizeof prefix, "%.1000s:%d:%d: error: ", s->path, line, col);
  va_list ap;
  va_start(ap, fmt);
  diag_emit(d, prefix, fmt, ap);
  va_end(ap);
}

void fpi_diag_vjson(fp_diag *d, const fp_src *s, const char *ptr, const char *fmt, va_list ap) {
  char prefix[2200];
  if (s) {
    bool exact;
    int line, col;
    fpi_src_linecol(s, fpi_json_locate(s, ptr, &exact), &line, &col);
    snprintf(prefix, sizeof prefix, "%.1000s:%d:%d: error: %.1000s: ", s->path, line, col,
             ptr[0] ? ptr : "/");
  } else {
    snprintf(prefix, sizeof prefix, "<defaults>: error: %.1000s: ", ptr[0] ? ptr : "/");
  }
  diag_emit(d, prefix, fmt, ap);
}

void fpi_diag_json(fp_diag *d, const fp_src *s, const char *ptr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fpi_diag_vjson(d, s, ptr, fmt, ap);
  va_end(ap);
}

/* ---- dtypes ------------------------------------------------------------------ */
static const struct {
  const char *name;
  int size, reducible;
} dtypes[] = {
#define X(e, s, n, r) {s, n, r},
    FP_DTYPES(X)
#undef X
};

const char *fpi_dtype_name(fp_dtype t) {
  FP_ASSERT((unsigned)t < FP_NDTYPES);
  return dtypes[t].name;
}
int fpi_dtype_size(fp_dtype t) {
  FP_ASSERT((unsigned)t < FP_NDTYPES);
  return dtypes[t].size;
}
bool fpi_dtype_reducible(fp_dtype t) {
  FP_ASSERT((unsigned)t < FP_NDTYPES);
  return dtypes[t].reducible;
}
int fpi_dtype_parse(const char *s) {
  for (int i = 0; i < FP_NDTYPES; i++)
    if (!strcmp(s, dtypes[i].name)) return i;
  return -1;
}
bool fpi_dtype_is_user_float(fp_dtype t) { return t == FP_F32 || t == FP_BF16 || t == FP_F16; }

uint64_t fpi_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t fpi_fnv_str_words(uint64_t h, const char *s) {
  if (!s) return fpi_fnv_word(h, ~0ull);
  size_t n = strlen(s);
  h = fpi_fnv_word(h, n);
  for (size_t k = 0; k < n; k += 8) {
    uint64_t u = 0;
    memcpy(&u, s + k, n - k < 8 ? n - k : 8);
    h = fpi_fnv_word(h, u);
  }
  return h;
}

/* ---- "did you mean" ------------------------------------------------------ */
/* optimal string alignment distance of a and b, ASCII case ignored; stops
 * early (returns cap + 1) once every entry of a row exceeds cap */
static size_t edit_distance(const char *a, const char *b, size_t cap) {
  size_t n = strlen(a), m = strlen(b);
  if ((n > m ? n - m : m - n) > cap || m > 256) return cap + 1;
  size_t rows[3][257], *pp = rows[0], *p = rows[1], *c = rows[2];
  for (size_t j = 0; j <= m; j++) p[j] = j;
  for (size_t i = 1; i <= n; i++) {
    c[0] = i;
    size_t best = c[0];
    for (size_t j = 1; j <= m; j++) {
      int ca = a[i - 1] | (a[i - 1] >= 'A' && a[i - 1] <= 'Z' ? 0x20 : 0);
      int cb = b[j - 1] | (b[j - 1] >= 'A' && b[j - 1] <= 'Z' ? 0x20 : 0);
      size_t v = p[j - 1] + (ca != cb);
      if (p[j] + 1 < v) v = p[j] + 1;
      if (c[j - 1] + 1 < v) v = c[j - 1] + 1;
      if (i > 1 && j > 1 && ca == (b[j - 2] | (b[j - 2] >= 'A' && b[j - 2] <= 'Z' ? 0x20 : 0)) &&
          cb == (a[i - 2] | (a[i - 2] >= 'A' && a[i - 2] <= 'Z' ? 0x20 : 0)) && pp[j - 2] + 1 < v)
        v = pp[j - 2] + 1;
      c[j] = v;
      if (v < best) best = v;
    }
    if (best > cap) return cap + 1;
    size_t *t = pp;
    pp = p, p = c, c = t;
  }
  return p[m];
}

/* ---- names from the input, as messages print them ----------------------------------- */
/* a byte that needs an escape: C0, DEL, '"', '\\', and the lead byte of a UTF-8 C1 (0xc2 0x80-0x9f) */
static bool name_unsafe(const unsigned char *q) {
  return *q < 0x20 || *q == 0x7f || *q == '"' || *q == '\\' || (*q == 0xc2 && q[1] >= 0x80 && q[1] <= 0x9f);
}

static void sb_name(fp_sbuf *b, const char *s, bool always) {
  if (!s) s = "?";
  bool bare = *s != 0 && !always;
  for (const unsigned char *q = (const unsigned char *)s; *q && bare; q++) bare = *q != ' ' && !name_unsafe(q);
  if (bare) {
    fpi_sb_puts(b, s);
    return;
  }
  fpi_sb_putc(b, '"');
  for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
    if (!name_unsafe(q)) {
      fpi_sb_putc(b, (char)*q);
      continue;
    }
    char e[8];
    switch (*q) {
      case '"': fpi_sb_puts(b, "\\\""); break;
      case '\\': fpi_sb_puts(b, "\\\\"); break;
      case '\n': fpi_sb_puts(b, "\\n"); break;
      case '\t': fpi_sb_puts(b, "\\t"); break;
      case '\r': fpi_sb_puts(b, "\\r"); break;
      default:
        snprintf(e, sizeof e, "\\u%04x", *q == 0xc2 ? *++q : *q);
        fpi_sb_puts(b, e);
    }
  }
  fpi_sb_putc(b, '"');
}

void fpi_sb_name(fp_sbuf *b, const char *s) { sb_name(b, s, false); }

void fpi_fput_quoted(FILE *f, const char *s) {
  fp_sbuf b = {0};
  sb_name(&b, s ? s : "", true);
  fwrite(b.p, 1, b.len, f);
  free(b.p);
}

const char *fpi_quote(char *buf, size_t cap, const char *s) {
  FP_ASSERT(cap >= 16);
  fp_sbuf b = {0};
  fpi_sb_name(&b, s);
  if (b.len < cap) {
    memcpy(buf, b.p, b.len + 1);
  } else { /* cut on a whole escape or UTF-8 character, then ..." */
    size_t n = cap - 5;
    while (n > 0 && ((b.p[n] & 0xc0) == 0x80)) n--;
    for (size_t k = n; k > 0 && k + 6 > n; k--) /* never inside a \u00hh or \x */
      if (b.p[k - 1] == '\\') {
        size_t run = 0;
        while (run < k && b.p[k - 1 - run] == '\\') run++;
        if (run % 2) n = k - 1;
        break;
      }
    memcpy(buf, b.p, n);
    memcpy(buf + n, b.p[0] == '"' ? "...\"" : "...", b.p[0] == '"' ? 5 : 4);
  }
  free(b.p);
  return buf;
}

void fpi_fput_name(FILE *f, const char *s) {
  fp_sbuf b = {0};
  fpi_sb_name(&b, s);
  fwrite(b.p, 1, b.len, f);
  free(b.p);
}

const char *fpi_closest_name(const char *got, const char *const *names) {
  if (!got || !*got || !names) return NULL;
  size_t glen = strlen(got);
  const char *prefixed = NULL, *suffixed = NULL;
  int nprefixed = 0, nsuffixed = 0;
  for (int k = 0; names[k]; k++) {
    size_t n = strlen(names[k]);
    if (n > glen && !strncmp(names[k], got, glen)) prefixed = names[k], nprefixed++;
    if (n > glen && glen >= 3 && !strcmp(names[k] + n - glen, got)) suffixed = names[k], nsuffixed++;
  }
  if (nprefixed == 1) return prefixed;
  if (nsuffixed == 1) return suffixed;
  size_t cap = glen / 4 > 1 ? glen / 4 : 1;
  const char *best = NULL;
  size_t bestd = cap + 1;
  for (int k = 0; names[k]; k++) {
    size_t dist = edit_distance(got, names[k], cap);
    if (dist < bestd) best = names[k], bestd = dist;
  }
  return best;
}

/* ---- outputs ----------------------------------------------------------- */
/* The temporaries being written, for fpi_out_unlink_all: a signal handler
 * (the CLI's, on SIGTERM, SIGINT, SIGHUP) removes them, so a killed write
 * leaves no PATH.tmp.XXXXXX behind. A fixed table of pointers, read with
 * only async-signal-safe calls (unlink). */
#define TMP_NAME_MAX 255 /* NAME_MAX of Linux file systems */
#define OUT_TRACKED 8
static char *volatile out_live[OUT_TRACKED];

static void out_track(char *tmp) {
  for (int k = 0; k < OUT_TRACKED; k++)
    if (!out_live[k]) {
      out_live[k] = tmp;
      return;
    }
}
static void out_untrack(const char *tmp) {
  for (int k = 0; k < OUT_TRACKED; k++)
    if (out_live[k] == tmp) out_live[k] = NULL;
}

void fpi_out_unlink_all(void) {
  for (int k = 0; k < OUT_TRACKED; k++) {
    char *t = out_live[k];
    if (t) unlink(t);
  }
}

bool fpi_out_open(fp_out *o, const char *path) {
  memset(o, 0, sizeof *o);
  o->path = path;
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) {
      errno = EISDIR;
      return false;
    }
    o->f = fopen(path, "w"); /* a device or a FIFO: in place */
    return o->f != NULL;
  }
  /* PATH.tmp.XXXXXX, its last component cut to fit NAME_MAX (a 255-byte
   * name has no room for the 11-byte suffix): the temporary is renamed, so
   * its name matters only while it exists */
  size_t n = strlen(path) + 16;
  o->tmp = malloc(n);
  if (!o->tmp) return false;
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  size_t keep = strlen(base);
  if (keep > TMP_NAME_MAX - 11) keep = TMP_NAME_MAX - 11;
  snprintf(o->tmp, n, "%.*s%.*s.tmp.XXXXXX", (int)(base - path), path, (int)keep, base);
  int fd = mkstemp(o->tmp);
  if (fd < 0) goto fail;
  out_track(o->tmp);
  /* mkstemp makes the file 0600; give it the mode a plain create would */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0 || !(o->f = fdopen(fd, "w"))) {
    int e = errno;
    close(fd);
    out_untrack(o->tmp);
    unlink(o->tmp);
    errno = e;
    goto fail;
  }
  return true;
fail:
  free(o->tmp);
  o->tmp = NULL;
  return false;
}

bool fpi_out_commit(fp_out *o) {
  bool ok = fflush(o->f) == 0 && !ferror(o->f);
  int e = ok ? 0 : (errno ? errno : EIO);
  if (fclose(o->f) != 0 && ok) ok = false, e = errno;
  o->f = NULL;
  if (ok && o->tmp && rename(o->tmp, o->path) != 0) ok = false, e = errno;
  if (!ok && o->tmp) unlink(o->tmp);
  if (o->tmp) out_untrack(o->tmp);
  free(o->tmp);
  o->tmp = NULL;
  errno = e;
  return ok;
}

void fpi_out_abort(fp_out *o) {
  if (o->f) fclose(o->f);
  o->f = NULL;
  if (o->tmp) unlink(o->tmp), out_untrack(o->tmp);
  free(o->tmp);
  o->tmp = NULL;
}
