/* hwfile.c - hardware description files (see hwfile.h; the format is in
 * docs/cost-model.md, "Hardware files", and schemas/hardware.schema.json).
 *
 * A file is one JSON object: "format" (FP_HW_FORMAT), "name" (what the plan
 * records as its machine), optionally "base" (a preset whose values fill the
 * fields left out) and "note" (free text: calibrate writes how it fitted),
 * and the fields of fp_hw under the keys .fpir and plan.json use. Without a
 * base every field is required but hook_us (0 when left out: not modeled).
 * Rates and latencies must be finite and > 0 (hook_us >= 0), counts >= 1:
 * the same machine fpi_hw_valid accepts, so a file never gives the
 * simulator a zero to divide by. */
#include "hwfile.h"

#include <math.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "cost.h"

typedef struct hw_key {
  const char *key;
  size_t off;
  bool integer;
  bool optional; /* may be left out (0) or 0; written only when not 0 */
} hw_key;
#define HK(f, i) {#f, offsetof(fp_hw, f), i, false}
static const hw_key hw_keys[] = {
    HK(gpus_per_node, true), HK(hbm_bytes, true),   HK(flops, false),     HK(nvlink_gbps, false),
    HK(ib_gbps, false),      HK(hbm_gbps, false),   HK(pcie_gbps, false), HK(base_us, false),
    HK(nvlink_hop_us, false), HK(net_hop_us, false), HK(launch_us, false), {"hook_us", offsetof(fp_hw, hook_us), false, true},
};
#undef HK
#define NKEYS ((int)(sizeof hw_keys / sizeof hw_keys[0]))

/* a machine name: 1-64 bytes of letters, digits and . _ - + (it is printed
 * in messages and quoted in .fpir; nothing there needs an escape) */
static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 64) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-' || ch == '+';
    if (!ok) return false;
  }
  return true;
}

bool fpi_hw_parse(fp_jctx *c, const fp_jv *root, fp_hw *out) {
  const char *keys[NKEYS + 5];
  int nk = 0;
  keys[nk++] = "format";
  keys[nk++] = "name";
  keys[nk++] = "base";
  keys[nk++] = "note";
  for (int k = 0; k < NKEYS; k++) keys[nk++] = hw_keys[k].key;
  keys[nk] = NULL;
  if (!fpi_j_is_object(c, root, "") || !fpi_j_keys(c, root, "", keys)) return false;
  const fp_jv *fmt = fpi_j_get(root, "format");
  if (!fpi_j_has(root, "format"))
    return fpi_j_error(c, "", "missing required member 'format' (expected \"%s\")", FP_HW_FORMAT);
  if (!fpi_jv_is(fmt, FP_JSTRING) || strcmp(fmt->s, FP_HW_FORMAT))
    return fpi_j_error(c, "/format", "expected \"%s\", got %s", FP_HW_FORMAT, fpi_j_describe(c->a, fmt));
  const char *name = NULL, *base = NULL, *note = NULL;
  if (!fpi_j_str(c, root, "", "name", true, &name) || !fpi_j_str(c, root, "", "base", false, &base) ||
      !fpi_j_str(c, root, "", "note", false, &note))
    return false;
  if (!name_ok(name))
    return fpi_j_error(c, "/name", "expected 1 to 64 letters, digits or . _ - +, got %s",
                       fpi_j_describe(c->a, fpi_j_get(root, "name")));
  fp_hw h;
  memset(&h, 0, sizeof h);
  if (base && !fpi_hw_preset(base, &h))
    return fpi_j_error(c, "/base", "unknown hardware preset \"%s\" (expected one of: %s)", base,
                       fpi_hw_preset_list());
  for (int k = 0; k < NKEYS; k++) {
    const char *key = hw_keys[k].key;
    if (!fpi_j_has(root, key)) {
      if (base || hw_keys[k].optional) continue;
      return fpi_j_error(c, "", "missing required member '%s' (or name a preset as \"base\" to take its value)", key);
    }
    char *field = (char *)&h + hw_keys[k].off;
    if (hw_keys[k].integer) {
      int64_t v;
      if (!fpi_j_int(c, root, "", key, true, 1, INT64_MAX, &v)) return false;
      memcpy(field, &v, sizeof v);
    } else {
      const fp_jv *v = fpi_j_get(root, key);
      double x = NAN;
      if (v && (fpi_jv_is(v, FP_JINT) || fpi_jv_is(v, FP_JDOUBLE))) x = fpi_jv_num(v);
      if (hw_keys[k].optional ? !(isfinite(x) && x >= 0) : !(isfinite(x) && x > 0))
        return fpi_j_error(c, fpi_ptr_key(c->a, "", key), "expected a number %s 0, got %s",
                           hw_keys[k].optional ? ">=" : ">", fpi_j_describe(c->a, v));
      memcpy(field, &x, sizeof x);
    }
  }
  h.name = fpi_strdup(c->a, name);
  FP_ASSERT(fpi_hw_valid(&h));
  *out = h;
  return true;
}

bool fpi_hw_read(fp_arena *a, fp_diag *d, const char *path, fp_hw *out) {
  fp_src *src = fpi_alloc(a, sizeof *src);
  if (!fpi_src_read(a, d, path, src)) return false;
  fp_jctx c = {a, d, src, NULL};
  const fp_jv *root = fpi_json_parse(&c);
  return root && fpi_hw_parse(&c, root, out);
}

bool fpi_hw_arg_is_file(const char *arg) {
  fp_hw h;
  if (!arg || fpi_hw_preset(arg, &h)) return false;
  return strchr(arg, '/') || strchr(arg, '.');
}

int fpi_hw_lookup(fp_arena *a, fp_diag *d, const char *arg, fp_hw *out) {
  if (fpi_hw_preset(arg, out)) return 1;
  if (!fpi_hw_arg_is_file(arg)) return -1;
  return fpi_hw_read(a, d, arg, out) ? 1 : 0;
}

void fpi_hw_write(const fp_hw *hw, const char *note, FILE *f) {
  fprintf(f, "{\n  \"format\": \"%s\",\n  \"name\": ", FP_HW_FORMAT);
  fp_sbuf b = {0};
  fpi_json_put_string(&b, hw->name);
  if (note) {
    fpi_sb_puts(&b, ",\n  \"note\": ");
    fpi_json_put_string(&b, note);
  }
  fputs(b.p ? b.p : "\"\"", f);
  free(b.p);
  for (int k = 0; k < NKEYS; k++) {
    const char *field = (const char *)hw + hw_keys[k].off;
    if (hw_keys[k].integer) {
      int64_t v;
      memcpy(&v, field, sizeof v);
      fprintf(f, ",\n  \"%s\": %lld", hw_keys[k].key, (long long)v);
    } else {
      double x;
      memcpy(&x, field, sizeof x);
      if (hw_keys[k].optional && x == 0) continue;
      fprintf(f, ",\n  \"%s\": %.6g", hw_keys[k].key, x);
    }
  }
  fputs("\n}\n", f);
}
