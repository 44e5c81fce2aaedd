/* safetensors.c - the strict safetensors reader and the small writer of
 * safetensors.h.
 *
 * Opening reads the 8-byte length and the header only. The header is
 * parsed by base/json.c, the strict JSON reader every input of flexplan
 * shares (fpi_json_parse_text: UTF-8 checked, single quotes, NaN, raw
 * control characters, \u0000 and members named twice - at any level, also
 * once their escapes are decoded - refused, each located at its header byte
 * with its JSON pointer). Its document is then checked member by member.
 * Every number is checked before it is used, in int64 with overflow
 * checks. The writer prints the header itself (fpi_json_put_string), byte
 * for byte what json-c printed before. The public fp_safetensors_* of
 * flexplan.h (at the end) are this reader's names, for callers that match a
 * folder of files against a plan before the refit (flexplan.torch).
 *
 * Checksums: a file whose "__metadata__" holds "flexplan.crc32" (and
 * "flexplan.crc32.block_bytes") carries the CRC-32 of every block of its
 * data buffer (flexplan.torch's Sharded.save writes them; docs/torch.md).
 * Every read checks, once per block, each block it touches, so a refit or
 * an init from a corrupt file fails, naming the bytes and the tensor, before
 * anything is written; a file without them is read unchecked. */
#include "safetensors.h"

#include "flexplan.h"

#include "base/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fp_st_file {
  int fd;
  char *path;               /* for messages */
  int n;                    /* tensors */
  fp_st_tensor *t;          /* in file order */
  const fp_st_tensor **byname; /* sorted by name */
  char *names;              /* every name, NUL-terminated, one block */
  int64_t data0;            /* file offset of the data buffer */
  /* checksums ("flexplan.crc32"; nblk == 0: none) */
  int64_t blk, nblk;        /* block bytes, blocks */
  uint32_t *crc;            /* the saved CRC-32 of each block */
  unsigned char *checked;   /* per block: verified already */
  unsigned char *buf;       /* CRC_CHUNK bytes to read a block through */
  uint32_t table[256];      /* CRC-32 (IEEE 802.3, reflected) */
};

#define CRC_KEY "flexplan.crc32"
#define CRC_BLOCK_KEY "flexplan.crc32.block_bytes"
#define CRC_CHUNK 65536

/* ---- dtypes ---------------------------------------------------------------- */
static const struct {
  const char *name;
  fp_dtype t;
} st_dtypes[] = {
    {"F32", FP_F32}, {"BF16", FP_BF16}, {"F16", FP_F16}, {"F8_E4M3", FP_E4M3}, {"F8_E8M0", FP_E8M0}, {"U8", FP_U8},
};
#define N_ST_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

const char *fpi_st_dtype_name(fp_dtype t) {
  for (int i = 0; i < N_ST_DTYPES; i++)
    if (st_dtypes[i].t == t) return st_dtypes[i].name;
  return NULL;
}

static int dtype_size(fp_dtype t) {
  switch (t) {
#define X(e, s, n, r) \
  case FP_##e: return n;
    FP_DTYPES(X)
#undef X
  default: return 0;
  }
}

/* ---- messages ----------------------------------------------------------------- */
static void seterr(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void seterr(char *err, size_t errlen, const char *path, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  int k = snprintf(err, errlen, "%s: ", path);
  if (k < 0 || (size_t)k >= errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
  va_end(ap);
}

/* A name as a JSON pointer token for messages: "/" then the name with ~ and
 * / escaped (RFC 6901), bytes outside printable ASCII as \xNN, cut at about
 * 96 bytes with "...". s need not be NUL-terminated (len bytes). */
typedef struct {
  char s[128];
} ptrbuf;
static const char *ptr_tok(ptrbuf *b, const char *s, size_t len) {
  size_t o = 0;
  b->s[o++] = '/';
  for (size_t i = 0; i < len; i++) {
    if (o > 96) {
      memcpy(b->s + o, "...", 4);
      return b->s;
    }
    unsigned char c = (unsigned char)s[i];
    if (c == '~') o += (size_t)snprintf(b->s + o, 4, "~0");
    else if (c == '/') o += (size_t)snprintf(b->s + o, 4, "~1");
    else if (c < 0x20 || c >= 0x7f || c == '\\') o += (size_t)snprintf(b->s + o, 5, "\\x%02x", c);
    else b->s[o++] = (char)c;
  }
  b->s[o] = 0;
  return b->s;
}
static const char *ptr_name(ptrbuf *b, const char *name) { return ptr_tok(b, name, strlen(name)); }

/* ---- reading helpers ---------------------------------------------------------------- */
/* pread n bytes at off; returns the bytes read (< n only at end of file) or -1 */
static int64_t pread_full(int fd, void *buf, int64_t n, int64_t off) {
  int64_t got = 0;
  while (got < n) {
    size_t want = (size_t)(n - got > (1 << 30) ? (1 << 30) : n - got);
    ssize_t r = pread(fd, (char *)buf + got, want, (off_t)(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += r;
  }
  return got;
}

/* a JSON integer >= 0 that fits int64 */
static const char *get_count(const fp_jv *o, int64_t *out) {
  if (!fpi_jv_is(o, FP_JINT)) return "must be an integer";
  if (o->big) return "is too large";
  if (o->i < 0) return "must not be negative";
  *out = o->i;
  return NULL;
}

static int by_offset(const void *a, const void *b) {
  const fp_st_tensor *x = a, *y = b;
  int64_t xb = x->offset, yb = y->offset, xe = xb + x->nbytes, ye = yb + y->nbytes;
  if (xb != yb) return xb < yb ? -1 : 1;
  if (xe != ye) return xe < ye ? -1 : 1;
  return strcmp(x->name, y->name);
}
static int by_name(const void *a, const void *b) {
  const fp_st_tensor *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

/* A tensor's dtype (a string naming one of st_dtypes): its index */
static bool entry_dtype(const char *path, const char *P, const fp_jv *jd, int *k, char *err, size_t errlen) {
  if (!fpi_jv_is(jd, FP_JSTRING)) {
    seterr(err, errlen, path, "%s/dtype: must be a string", P);
    return false;
  }
  for (*k = 0; *k < N_ST_DTYPES; ++*k)
    if (strcmp(jd->s, st_dtypes[*k].name) == 0) return true;
  ptrbuf db;
  seterr(err, errlen, path, "%s/dtype: unsupported dtype \"%s\" (supported: F32, BF16, F16, F8_E4M3, F8_E8M0, U8)",
         P, ptr_name(&db, jd->s) + 1);
  return false;
}

/* A tensor's shape (an array of at most FP_ST_MAX_DIMS counts) into T, and
 * its size in bytes */
static bool entry_shape(const char *path, const char *P, const fp_jv *js, fp_st_tensor *T, int64_t *nbytes,
                        char *err, size_t errlen) {
  if (!fpi_jv_is(js, FP_JARRAY)) {
    seterr(err, errlen, path, "%s/shape: must be an array of integers", P);
    return false;
  }
  if (js->n > FP_ST_MAX_DIMS) {
    seterr(err, errlen, path, "%s/shape: %u dimensions, at most %d supported", P, (unsigned)js->n, FP_ST_MAX_DIMS);
    return false;
  }
  T->ndim = (int)js->n;
  int64_t numel = 1;
  bool zero = false, ovf = false;
  for (uint32_t d = 0; d < js->n; d++) {
    const char *why = get_count(&js->elems[d], &T->shape[d]);
    if (why) {
      seterr(err, errlen, path, "%s/shape/%u: a dimension %s", P, (unsigned)d, why);
      return false;
    }
    if (T->shape[d] == 0) zero = true;
    else if (!ovf && !fpi_mul64(numel, T->shape[d], &numel)) ovf = true;
  }
  *nbytes = 0;
  if (!zero && (ovf || !fpi_mul64(numel, dtype_size(T->dtype), nbytes))) {
    seterr(err, errlen, path, "%s/shape: the tensor's size overflows int64", P);
    return false;
  }
  return true;
}

/* A tensor's data_offsets ([begin, end] in the data buffer, nbytes apart) */
static bool entry_offsets(const char *path, const char *P, const fp_jv *jo, int64_t datalen, int64_t nbytes,
                          const char *dname, int64_t *begin, char *err, size_t errlen) {
  if (!fpi_jv_is(jo, FP_JARRAY) || jo->n != 2) {
    seterr(err, errlen, path, "%s/data_offsets: must be an array of two integers [begin, end]", P);
    return false;
  }
  int64_t b, e;
  const char *why = get_count(&jo->elems[0], &b);
  if (why) {
    seterr(err, errlen, path, "%s/data_offsets/0: begin %s", P, why);
    return false;
  }
  why = get_count(&jo->elems[1], &e);
  if (why) {
    seterr(err, errlen, path, "%s/data_offsets/1: end %s", P, why);
    return false;
  }
  if (e < b) {
    seterr(err, errlen, path, "%s/data_offsets: end %lld is before begin %lld", P, (long long)e, (long long)b);
    return false;
  }
  if (e > datalen) {
    seterr(err, errlen, path, "%s/data_offsets: end %lld is past the data buffer (%lld bytes)", P, (long long)e,
           (long long)datalen);
    return false;
  }
  if (e - b != nbytes) {
    seterr(err, errlen, path, "%s/data_offsets: [%lld, %lld) is %lld bytes, but the shape and dtype %s need %lld", P,
           (long long)b, (long long)e, (long long)(e - b), dname, (long long)nbytes);
    return false;
  }
  *begin = b;
  return true;
}

/* One tensor entry (an object; names are unique at every level, the parser
 * saw to it): fills T's dtype, shape, nbytes and offset (relative to the
 * data buffer). P is the entry's JSON pointer for messages. */
static bool tensor_entry(const char *path, const char *P, const fp_jv *val, int64_t datalen, fp_st_tensor *T,
                         char *err, size_t errlen) {
  const fp_jv *jv[3] = {NULL, NULL, NULL}; /* dtype, shape, data_offsets (null counts as given) */
  static const char *const names[3] = {"dtype", "shape", "data_offsets"};
  for (uint32_t m = 0; m < val->n; m++) {
    int k = 0;
    while (k < 3 && strcmp(val->mems[m].key, names[k]) != 0) k++;
    if (k == 3) {
      ptrbuf pb2;
      seterr(err, errlen, path, "%s%s: unknown member (a tensor has dtype, shape, data_offsets)", P,
             ptr_name(&pb2, val->mems[m].key));
      return false;
    }
    jv[k] = &val->mems[m].val;
  }
  for (int k = 0; k < 3; k++)
    if (!jv[k]) {
      seterr(err, errlen, path, "%s: missing \"%s\"", P, names[k]);
      return false;
    }
  int k;
  int64_t nbytes;
  if (!entry_dtype(path, P, jv[0], &k, err, errlen)) return false;
  T->dtype = st_dtypes[k].t;
  if (!entry_shape(path, P, jv[1], T, &nbytes, err, errlen)) return false;
  if (!entry_offsets(path, P, jv[2], datalen, nbytes, st_dtypes[k].name, &T->offset, err, errlen)) return false;
  T->nbytes = nbytes; /* the offset is relative; fpi_st_open makes it absolute */
  return true;
}

/* ---- open ------------------------------------------------------------------------------ */
/* path opened read-only: a regular file, *size bytes; -1 after the message */
static int open_file(const char *path, int64_t *size, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* O_NONBLOCK: a FIFO must not hang us */
  if (fd < 0) {
    seterr(err, errlen, path, "cannot open: %s", strerror(errno));
    return -1;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    seterr(err, errlen, path, "cannot stat: %s", strerror(errno));
  } else if (!S_ISREG(sb.st_mode)) {
    seterr(err, errlen, path, "not a regular file");
  } else {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *size = (int64_t)sb.st_size;
    return fd;
  }
  close(fd);
  return -1;
}

/* the header's length (checked against the file's size) */
static bool header_length(int fd, const char *path, int64_t size, int64_t *N, char *err, size_t errlen) {
  unsigned char lb[8];
  if (size < 8) {
    seterr(err, errlen, path, "file is %lld bytes, too short for the 8-byte header length", (long long)size);
    return false;
  }
  errno = 0;
  if (pread_full(fd, lb, 8, 0) != 8) {
    seterr(err, errlen, path, "cannot read the header length: %s", errno ? strerror(errno) : "file ended");
    return false;
  }
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | lb[i];
  if (hl > (uint64_t)FP_ST_MAX_HEADER) {
    seterr(err, errlen, path, "header length %llu exceeds the %d-byte limit", (unsigned long long)hl,
           FP_ST_MAX_HEADER);
    return false;
  }
  if ((int64_t)hl > size - 8) {
    seterr(err, errlen, path, "header length %llu runs past the end of the file (%lld bytes after the length)",
           (unsigned long long)hl, (long long)(size - 8));
    return false;
  }
  *N = (int64_t)hl;
  if (*N < 2) {
    seterr(err, errlen, path, "header length %lld is too short for a JSON object", (long long)*N);
    return false;
  }
  return true;
}

/* the header's text (malloc'd, NUL-terminated, *N bytes): an object with
 * no NUL byte; NULL after the message */
static char *read_header(int fd, const char *path, int64_t size, int64_t *N, char *err, size_t errlen) {
  if (!header_length(fd, path, size, N, err, errlen)) return NULL;
  char *hdr = malloc((size_t)*N + 1);
  if (!hdr) {
    seterr(err, errlen, path, "out of memory for a %lld-byte header", (long long)*N);
    return NULL;
  }
  errno = 0;
  const char *nul;
  if (pread_full(fd, hdr, *N, 8) != *N)
    seterr(err, errlen, path, "cannot read the header: %s", errno ? strerror(errno) : "file ended");
  else if (hdr[0] != '{')
    seterr(err, errlen, path, "header does not start with '{'");
  else if ((nul = memchr(hdr, 0, (size_t)*N)) != NULL)
    seterr(err, errlen, path, "header holds a NUL byte at header byte %lld", (long long)(nul - hdr));
  else {
    hdr[*N] = 0;
    return hdr;
  }
  free(hdr);
  return NULL;
}

/* The header's members: the tensors into t (room for all), *nt of them,
 * their names' bytes (NULs included) in *namebytes; "__metadata__" must be
 * an object of strings */
static bool header_tensors(const char *path, const fp_jv *root, int64_t datalen, fp_st_tensor *t, int *nt,
                           size_t *namebytes, char *err, size_t errlen) {
  ptrbuf pb, pb2;
  *nt = 0;
  *namebytes = 0;
  for (uint32_t i = 0; i < root->n; i++) {
    const char *key = root->mems[i].key;
    const fp_jv *val = &root->mems[i].val;
    bool is_obj = fpi_jv_is(val, FP_JOBJECT);
    if (strcmp(key, "__metadata__") == 0) {
      if (!is_obj) {
        seterr(err, errlen, path, "/__metadata__: must be an object of strings");
        return false;
      }
      for (uint32_t m = 0; m < val->n; m++)
        if (!fpi_jv_is(&val->mems[m].val, FP_JSTRING)) {
          seterr(err, errlen, path, "/__metadata__%s: must be a string", ptr_name(&pb2, val->mems[m].key));
          return false;
        }
      continue;
    }
    const char *P = ptr_name(&pb, key);
    if (!is_obj) {
      seterr(err, errlen, path, "%s: a tensor entry must be an object", P);
      return false;
    }
    fp_st_tensor *T = &t[*nt];
    T->name = key; /* the document's copy until the file's pool is built */
    if (!tensor_entry(path, P, val, datalen, T, err, errlen)) return false;
    *namebytes += root->mems[i].klen + 1;
    ++*nt;
  }
  return true;
}

/* the tensors must tile the data buffer: no overlap, no hole, nothing after
 * (sorts t by offset) */
static bool tile_check(const char *path, fp_st_tensor *t, int nt, int64_t datalen, char *err, size_t errlen) {
  ptrbuf pb, pb2;
  qsort(t, (size_t)nt, sizeof *t, by_offset);
  int64_t pos = 0;
  for (int j = 0; j < nt; j++) {
    if (t[j].offset < pos) {
      seterr(err, errlen, path, "%s/data_offsets: [%lld, %lld) overlaps %s", ptr_name(&pb, t[j].name),
             (long long)t[j].offset, (long long)(t[j].offset + t[j].nbytes), ptr_name(&pb2, t[j - 1].name));
      return false;
    }
    if (t[j].offset > pos) {
      seterr(err, errlen, path, "data bytes [%lld, %lld) belong to no tensor (before %s); the format allows no holes",
             (long long)pos, (long long)t[j].offset, ptr_name(&pb, t[j].name));
      return false;
    }
    pos = t[j].offset + t[j].nbytes;
  }
  if (pos != datalen) {
    seterr(err, errlen, path, "%lld bytes after the last tensor's data belong to no tensor",
           (long long)(datalen - pos));
    return false;
  }
  return true;
}

/* the file handle over fd and t (both its own from now on, also when it
 * fails): the names copied into one block, the offsets made absolute, the
 * index by name */
static fp_st_file *make_file(int fd, const char *path, fp_st_tensor *t, int nt, size_t namebytes, int64_t data0,
                             char *err, size_t errlen) {
  fp_st_file *f = calloc(1, sizeof *f);
  if (f) {
    f->fd = fd;
    f->n = nt;
    f->t = t;
    f->path = strdup(path);
    f->names = malloc(namebytes ? namebytes : 1);
    f->byname = malloc((size_t)(nt ? nt : 1) * sizeof *f->byname);
  }
  if (!f || !f->path || !f->names || !f->byname) {
    seterr(err, errlen, path, "out of memory");
    if (f) {
      free(f->path);
      free(f->names);
      free(f->byname);
      free(f);
    }
    free(t);
    close(fd);
    return NULL;
  }
  char *q = f->names;
  for (int j = 0; j < nt; j++) {
    size_t l = strlen(t[j].name) + 1;
    memcpy(q, t[j].name, l);
    t[j].name = q;
    q += l;
    t[j].offset += data0;
    f->byname[j] = &t[j];
  }
  f->data0 = data0;
  qsort(f->byname, (size_t)nt, sizeof *f->byname, by_name); /* names are unique: the parser refuses a repeat */
  return f;
}

/* "__metadata__"'s checksums into *f (none: f->nblk stays 0); false after
 * the message */
static bool crc_meta(const char *path, const fp_jv *root, int64_t datalen, fp_st_file *f, char *err, size_t errlen) {
  const fp_jv *md = NULL;
  for (uint32_t i = 0; i < root->n; i++)
    if (!strcmp(root->mems[i].key, "__metadata__")) md = &root->mems[i].val;
  const char *hex = NULL, *bs = NULL;
  for (uint32_t m = 0; md && m < md->n; m++) {
    if (!strcmp(md->mems[m].key, CRC_KEY)) hex = fpi_jv_str(&md->mems[m].val);
    if (!strcmp(md->mems[m].key, CRC_BLOCK_KEY)) bs = fpi_jv_str(&md->mems[m].val);
  }
  if (!hex && !bs) return true;
  char *end = NULL;
  long long b = bs ? strtoll(bs, &end, 10) : 0;
  if (!bs || !hex || !*bs || *end || b < 4096 || b > (1LL << 30)) {
    seterr(err, errlen, path, "/__metadata__/%s: %s", hex ? CRC_BLOCK_KEY : CRC_KEY,
           hex ? "expected the block size of the checksums, 4096 .. 2^30 bytes in decimal" : "missing beside "
           CRC_BLOCK_KEY);
    return false;
  }
  int64_t n = (datalen + b - 1) / b;
  if ((int64_t)strlen(hex) != 8 * n) {
    seterr(err, errlen, path, "/__metadata__/" CRC_KEY ": holds %zu hex digits; %lld blocks of %lld bytes need %lld",
           strlen(hex), (long long)n, b, (long long)(8 * n));
    return false;
  }
  f->crc = malloc((size_t)(n ? n : 1) * sizeof *f->crc);
  f->checked = calloc((size_t)(n ? n : 1), 1);
  f->buf = malloc(CRC_CHUNK);
  if (!f->crc || !f->checked || !f->buf) {
    seterr(err, errlen, path, "out of memory for %lld checksums", (long long)n);
    return false;
  }
  for (int64_t k = 0; k < n; k++) {
    uint32_t v = 0;
    for (int d = 0; d < 8; d++) {
      char c = hex[8 * k + d];
      int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (x < 0) {
        seterr(err, errlen, path, "/__metadata__/" CRC_KEY ": '%c' at digit %lld is not a lowercase hex digit", c,
               (long long)(8 * k + d));
        return false;
      }
      v = v << 4 | (uint32_t)x;
    }
    f->crc[k] = v;
  }
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int j = 0; j < 8; j++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    f->table[i] = c;
  }
  f->blk = b, f->nblk = n;
  return true;
}

fp_st_file *fpi_st_open(const char *path, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  int64_t size = 0, N = 0;
  int fd = open_file(path, &size, err, errlen);
  if (fd < 0) return NULL;
  char *hdr = read_header(fd, path, size, &N, err, errlen);
  if (!hdr) {
    close(fd);
    return NULL;
  }
  /* strict JSON (base/json.c): its errors located at their header byte */
  fp_arena *a = fpi_arena_new();
  fp_src src = {path, hdr, (size_t)N};
  fp_jerr je;
  const fp_jv *root = fpi_json_parse_text(a, &src, &je);
  fp_st_tensor *t = NULL;
  int nt = 0;
  size_t namebytes = 0;
  int64_t data0 = 8 + N, datalen = size - data0;
  bool ok = false;
  if (!root)
    seterr(err, errlen, path, "header rejected at header byte %zu: %s", je.off, je.msg);
  else if (!fpi_jv_is(root, FP_JOBJECT)) /* (it starts with '{') */
    seterr(err, errlen, path, "the header must be a JSON object");
  else if (!(t = calloc(root->n ? root->n : 1, sizeof *t)))
    seterr(err, errlen, path, "out of memory");
  else
    ok = header_tensors(path, root, datalen, t, &nt, &namebytes, err, errlen) &&
         tile_check(path, t, nt, datalen, err, errlen);
  fp_st_file *f = NULL;
  if (ok) f = make_file(fd, path, t, nt, namebytes, data0, err, errlen); /* (names copied out of the arena) */
  if (f && !crc_meta(path, root, datalen, f, err, errlen)) {
    fpi_st_close(f);
    f = NULL;
  }
  fpi_arena_free(a);
  free(hdr);
  if (!ok) {
    free(t);
    close(fd);
  }
  return f;
}

int fpi_st_count(const fp_st_file *f) { return f ? f->n : 0; }

const fp_st_tensor *fpi_st_get(const fp_st_file *f, int i) {
  return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

static int find_cmp(const void *key, const void *elem) {
  const fp_st_tensor *const *t = elem;
  return strcmp((const char *)key, (*t)->name);
}

const fp_st_tensor *fpi_st_find(const fp_st_file *f, const char *name) {
  if (!f || !name || f->n == 0) return NULL;
  const fp_st_tensor *const *r = bsearch(name, f->byname, (size_t)f->n, sizeof *f->byname, find_cmp);
  return r ? *r : NULL;
}

/* the blocks of data bytes [lo, hi) not checked yet, against their saved
 * CRC-32 (t names the tensor in the message) */
static bool crc_check(fp_st_file *f, const fp_st_tensor *t, int64_t lo, int64_t hi, char *err, size_t errlen) {
  ptrbuf pb;
  for (int64_t k = lo / f->blk; k < f->nblk && k * f->blk < hi; k++) {
    if (f->checked[k]) continue;
    uint32_t c = 0xFFFFFFFFu;
    int64_t b0 = k * f->blk, n = f->blk, got = 0;
    while (got < n) {
      int64_t want = n - got < CRC_CHUNK ? n - got : CRC_CHUNK;
      errno = 0;
      int64_t r = pread_full(f->fd, f->buf, want, f->data0 + b0 + got);
      if (r < 0) {
        seterr(err, errlen, f->path, "%s: read failed: %s", ptr_name(&pb, t->name), strerror(errno));
        return false;
      }
      for (int64_t i = 0; i < r; i++) c = f->table[(c ^ f->buf[i]) & 0xFF] ^ (c >> 8);
      got += r;
      if (r < want) break; /* the last block ends with the file */
    }
    c ^= 0xFFFFFFFFu;
    if (c != f->crc[k]) {
      seterr(err, errlen, f->path, "%s: bytes [%lld, %lld) of the data buffer fail their checksum (crc32 %08x, "
             "saved %08x): the file is corrupt", ptr_name(&pb, t->name), (long long)b0, (long long)(b0 + got), c,
             f->crc[k]);
      return false;
    }
    f->checked[k] = 1;
  }
  return true;
}

bool fpi_st_read(fp_st_file *f, const fp_st_tensor *t, int64_t at, void *dst, int64_t nbytes, char *err,
                size_t errlen) {
  ptrbuf pb;
  if (!f) {
    if (err && errlen) snprintf(err, errlen, "fpi_st_read: no file");
    return false;
  }
  uintptr_t lo = (uintptr_t)f->t, hi = (uintptr_t)(f->t + f->n), p = (uintptr_t)t;
  if (!t || p < lo || p >= hi || (p - lo) % sizeof *t != 0) {
    seterr(err, errlen, f->path, "fpi_st_read: the tensor is not one of this file's");
    return false;
  }
  if (at < 0 || nbytes < 0 || at > t->nbytes || nbytes > t->nbytes - at) {
    seterr(err, errlen, f->path, "%s: cannot read %lld bytes at byte %lld: the tensor has %lld",
           ptr_name(&pb, t->name), (long long)nbytes, (long long)at, (long long)t->nbytes);
    return false;
  }
  if (nbytes == 0) return true;
  if (f->nblk && !crc_check(f, t, t->offset - f->data0 + at, t->offset - f->data0 + at + nbytes, err, errlen))
    return false;
  errno = 0;
  int64_t got = pread_full(f->fd, dst, nbytes, t->offset + at);
  if (got != nbytes) {
    if (got < 0)
      seterr(err, errlen, f->path, "%s: read failed: %s", ptr_name(&pb, t->name), strerror(errno));
    else
      seterr(err, errlen, f->path, "%s: short read: the file ends %lld bytes into the %lld asked for (truncated?)",
             ptr_name(&pb, t->name), (long long)got, (long long)nbytes);
    return false;
  }
  return true;
}

void fpi_st_close(fp_st_file *f) {
  if (!f) return;
  free(f->crc);
  free(f->checked);
  free(f->buf);
  close(f->fd);
  free(f->t);
  free(f->byname);
  free(f->names);
  free(f->path);
  free(f);
}

/* ---- write ------------------------------------------------------------------------------- */
static bool write_full(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t r = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= (size_t)r;
  }
  return true;
}

static int name_ptr_cmp(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  return strcmp(*x, *y);
}

static void sb_i64(fp_sbuf *b, int64_t v) {
  char t[24];
  fpi_sb_putn(b, t, (size_t)snprintf(t, sizeof t, "%lld", (long long)v));
}

/* tensor T's shape, checked, into the header; *numel its elements (0 when
 * a dimension is 0; *ovf when the product overflows) */
static bool put_shape(const char *path, const char *P, const fp_st_tensor *T, fp_sbuf *h, int64_t *numel,
                      bool *zero, bool *ovf, char *err, size_t errlen) {
  *numel = 1;
  *zero = *ovf = false;
  for (int d = 0; d < T->ndim; d++) {
    if (T->shape[d] < 0) {
      seterr(err, errlen, path, "%s/shape/%d: dimension %lld is negative", P, d, (long long)T->shape[d]);
      return false;
    }
    if (T->shape[d] == 0) *zero = true;
    else if (!*ovf && !fpi_mul64(*numel, T->shape[d], numel)) *ovf = true;
    if (d) fpi_sb_putc(h, ',');
    sb_i64(h, T->shape[d]);
  }
  return true;
}

/* tensor i's entry of the header, checked ("name":{"dtype":..,"shape":[..],
 * "data_offsets":[b,e]}); *off: where its data starts, then ends; *size its
 * bytes */
static bool put_entry(const char *path, ptrbuf *pb, const fp_st_tensor *T, int i, const void *const *data,
                      int64_t *off, fp_sbuf *h, int64_t *size, char *err, size_t errlen) {
  if (!T->name) {
    seterr(err, errlen, path, "tensor %d has no name", i);
    return false;
  }
  const char *P = ptr_name(pb, T->name);
  if (strcmp(T->name, "__metadata__") == 0) {
    seterr(err, errlen, path, "%s: the name is reserved", P);
    return false;
  }
  const char *dn = fpi_st_dtype_name(T->dtype);
  if (!dn) {
    seterr(err, errlen, path, "%s: dtype %d has no safetensors name", P, (int)T->dtype);
    return false;
  }
  if (T->ndim < 0 || T->ndim > FP_ST_MAX_DIMS) {
    seterr(err, errlen, path, "%s: ndim %d is not in 0..%d", P, T->ndim, FP_ST_MAX_DIMS);
    return false;
  }
  int64_t numel;
  bool zero, ovf;
  if (i) fpi_sb_putc(h, ',');
  fpi_json_put_string(h, T->name);
  fpi_sb_puts(h, ":{\"dtype\":");
  fpi_json_put_string(h, dn);
  fpi_sb_puts(h, ",\"shape\":[");
  if (!put_shape(path, P, T, h, &numel, &zero, &ovf, err, errlen)) return false;
  fpi_sb_puts(h, "],\"data_offsets\":[");
  if (!zero && (ovf || !fpi_mul64(numel, dtype_size(T->dtype), size))) {
    seterr(err, errlen, path, "%s/shape: the tensor's size overflows int64", P);
    return false;
  }
  if (*size > 0 && (!data || !data[i])) {
    seterr(err, errlen, path, "%s: no data for %lld bytes", P, (long long)*size);
    return false;
  }
  int64_t end;
  if (!fpi_add64(*off, *size, &end)) {
    seterr(err, errlen, path, "%s: the file would pass int64 bytes", P);
    return false;
  }
  sb_i64(h, *off);
  fpi_sb_putc(h, ',');
  sb_i64(h, end);
  fpi_sb_puts(h, "]}");
  *off = end;
  return true;
}

/* no two of the n names alike (sorted here) */
static bool names_unique(const char *path, ptrbuf *pb, const char **names, int n, char *err, size_t errlen) {
  qsort(names, (size_t)n, sizeof *names, name_ptr_cmp);
  for (int i = 1; i < n; i++)
    if (strcmp(names[i - 1], names[i]) == 0) {
      seterr(err, errlen, path, "%s: two tensors have this name", ptr_name(pb, names[i]));
      return false;
    }
  return true;
}

/* the file: the header's length, the header padded with spaces to 8 bytes,
 * the tensors' data in order; removed again when any write fails */
static bool write_file(const char *path, const fp_sbuf *h, int n, const int64_t *sizes, const void *const *data,
                       char *err, size_t errlen) {
  size_t hlen = h->len;
  size_t padded = (hlen + 7) / 8 * 8; /* the data starts 8-aligned: 8 + padded */
  if (padded > (size_t)FP_ST_MAX_HEADER) {
    seterr(err, errlen, path, "header of %zu bytes exceeds the %d-byte limit", padded, FP_ST_MAX_HEADER);
    return false;
  }
  unsigned char lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    seterr(err, errlen, path, "cannot create: %s", strerror(errno));
    return false;
  }
  static const char spaces[8] = "        ";
  bool wok = write_full(fd, lb, 8) && write_full(fd, h->p, hlen) && write_full(fd, spaces, padded - hlen);
  for (int i = 0; wok && i < n; i++)
    if (sizes[i] > 0) wok = write_full(fd, data[i], (size_t)sizes[i]);
  if (!wok) {
    seterr(err, errlen, path, "write failed: %s", strerror(errno));
    close(fd);
    unlink(path);
    return false;
  }
  if (close(fd) != 0) {
    seterr(err, errlen, path, "write failed: %s", strerror(errno));
    unlink(path);
    return false;
  }
  return true;
}

bool fpi_st_write(const char *path, int n, const fp_st_tensor *tensors, const void *const *data, char *err,
                 size_t errlen) {
  ptrbuf pb;
  bool ok = false;
  fp_sbuf h = {0}; /* the header: {"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},..} */
  if (err && errlen) err[0] = 0;
  if (n < 0 || (n > 0 && !tensors)) {
    seterr(err, errlen, path, "no tensors given");
    return false;
  }
  int64_t *sizes = calloc((size_t)(n ? n : 1), sizeof *sizes);
  const char **names = calloc((size_t)(n ? n : 1), sizeof *names);
  fpi_sb_putc(&h, '{');
  if (!sizes || !names) {
    seterr(err, errlen, path, "out of memory");
    goto out;
  }
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (!put_entry(path, &pb, &tensors[i], i, data, &off, &h, &sizes[i], err, errlen)) goto out;
    names[i] = tensors[i].name;
  }
  if (!names_unique(path, &pb, names, n, err, errlen)) goto out;
  fpi_sb_putc(&h, '}');
  ok = write_file(path, &h, n, sizes, data, err, errlen);
out:
  free(h.p);
  free(sizes);
  free(names);
  return ok;
}

/* ---- the public face (flexplan.h): a file's names, as the refit reads them ---- */
struct fp_safetensors {
  fp_st_file *f; /* NULL after a failed open */
  char err[512];
};

fp_status fp_safetensors_open(const char *path, fp_safetensors **out) {
  if (!out) return FP_ERR_ARG;
  fp_safetensors *s = calloc(1, sizeof *s);
  *out = s;
  if (!s) return FP_ERR_NOMEM;
  if (!path) {
    snprintf(s->err, sizeof s->err, "fp_safetensors_open: path is NULL");
    return FP_ERR_ARG;
  }
  s->f = fpi_st_open(path, s->err, sizeof s->err);
  return s->f ? FP_OK : FP_ERR_WEIGHTS;
}

const char *fp_safetensors_errmsg(const fp_safetensors *s) { return s ? s->err : "no safetensors handle"; }

int64_t fp_safetensors_count(const fp_safetensors *s) { return s ? fpi_st_count(s->f) : 0; }

const char *fp_safetensors_name(const fp_safetensors *s, int64_t i) {
  if (!s || i < 0 || i >= fpi_st_count(s->f)) return NULL;
  return fpi_st_get(s->f, (int)i)->name;
}

void fp_safetensors_close(fp_safetensors *s) {
  if (!s) return;
  fpi_st_close(s->f);
  free(s);
}
