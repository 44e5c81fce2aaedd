/* flexplan.c - the command line: compile, check, print, verify, explain,
 * simulate, viz, reshard, help.
 *
 * Options are parsed by getopt_long from one table of commands (their
 * synopsis, help and long options), so every command has --help and every
 * option takes "--opt value" and "--opt=value"; unknown names get the
 * closest known one suggested (fpi_closest_name). docs/cli.md.
 *
 * Exit status: 0 ok, 1 input error (located messages on stderr), 2 usage,
 * 70 internal error (FP_ASSERT). Outputs are written atomically: into a
 * temporary file next to the target, renamed over it only when complete, and
 * removed on any error, so a failed run leaves nothing behind. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdarg.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/api_impl.h"
#include "base/json.h"
#include "ir/ir.h"
#include "ir/xfer.h"
#include "viz/viz.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2, EXIT_INTERNAL = 70 };

/* ---- the commands and their options (getopt_long) ------------------------------ */
/* Every option takes "--opt value" and "--opt=value" (short ones "-o value"
 * and "-ovalue"); a unique prefix of a long option is accepted (getopt_long);
 * options and operands mix in any order; "--" ends the options. */
enum {
  OPT_SPEC = 256, /* --spec SPEC */
  OPT_EMIT,       /* --emit KIND */
  OPT_TIME,       /* --time */
  OPT_HARDWARE,   /* --hardware PRESET|FILE */
  OPT_POLICY,     /* --policy P */
  OPT_RANKS,      /* --ranks LIST */
  OPT_FORMAT,     /* --format trace|html */
  OPT_MEASURED,   /* --measured FILE (repeatable) */
  OPT_EXPOSED,    /* --exposed */
  OPT_TRANSFORM,  /* --transform PATTERN=NAME (repeatable) */
  OPT_WHAT,       /* --what weights|weights+optimizer */
  OPT_TO_OFFSET,  /* --to-offset N */
  OPT_FROM_OFFSET, /* --from-offset M */
  OPT_NAME         /* --name NAME */
};
#define O_HELP {"help", no_argument, NULL, 'h'}
#define O_OUT {"output", required_argument, NULL, 'o'}
#define O_HW {"hardware", required_argument, NULL, OPT_HARDWARE}
#define O_POLICY {"policy", required_argument, NULL, OPT_POLICY}
#define O_SPEC {"spec", required_argument, NULL, OPT_SPEC}
#define O_RANKS {"ranks", required_argument, NULL, OPT_RANKS}
#define O_END {NULL, 0, NULL, 0}

#define O_TIME {"time", no_argument, NULL, OPT_TIME}
static const struct option compile_opts[] = {O_SPEC, O_OUT, {"emit", required_argument, NULL, OPT_EMIT}, O_HW, O_POLICY,
                                             O_RANKS, O_TIME, O_HELP, O_END};
static const struct option check_opts[] = {O_SPEC, O_HW, O_POLICY, O_TIME, O_HELP, O_END};
static const struct option file_opts[] = {O_HELP, O_END};
static const struct option simulate_opts[] = {O_HW, {"measured", required_argument, NULL, OPT_MEASURED}, O_HELP,
                                              O_END};
static const struct option explain_opts[] = {O_HW, {"exposed", no_argument, NULL, OPT_EXPOSED}, O_HELP, O_END};
static const struct option viz_opts[] = {{"format", required_argument, NULL, OPT_FORMAT}, O_OUT, O_RANKS, O_HW,
                                         {"measured", required_argument, NULL, OPT_MEASURED}, O_HELP, O_END};
static const struct option calibrate_opts[] = {O_OUT, O_HW, {"measured", required_argument, NULL, OPT_MEASURED},
                                               {"name", required_argument, NULL, OPT_NAME}, O_HELP, O_END};
static const struct option reshard_opts[] = {{"transform", required_argument, NULL, OPT_TRANSFORM},
                                             {"what", required_argument, NULL, OPT_WHAT},
                                             {"to-offset", required_argument, NULL, OPT_TO_OFFSET},
                                             {"from-offset", required_argument, NULL, OPT_FROM_OFFSET},
                                             O_OUT,
                                             {"emit", required_argument, NULL, OPT_EMIT},
                                             O_HELP,
                                             O_END};

/* the values of the enumerated options (NULL-terminated) */
static const char *const emit_names[] = {"plan", "ir", "summary", "trace", "html", NULL};
static const char *const format_names[] = {"trace", "html", NULL};
static const char *const policy_names[] = {"flexplan", "fsdp2", NULL};
static const char *const reshard_emit_names[] = {"summary", "ir", "explain", "json", "trace", NULL};
static const char *const preset_names[] = {"h100-sxm", "h200", "h200-fit", "cpu-mpi", NULL}; /* planner/cost.c's presets */

typedef struct command {
  const char *name;
  const struct option *opts;
  const char *shortopts; /* getopt_long's: "-:h" and "o:" where -o is taken */
  const char *synopsis; /* the command and its options ("\n" + 10 spaces between lines) */
  const char *brief;    /* what it does, one line */
  const char *help;    /* CMD --help: what it does and its options */
} command;

static const command commands[] = {
    {"compile", compile_opts, "-:ho:",
     "compile MODEL [--spec SPEC] [-o OUT] [--emit plan|ir|summary|trace|html]\n"
     "          [--hardware HW] [--policy flexplan|fsdp2] [--ranks LIST] [--time]",
     "compile a model into a plan (plan.json), its IR, a summary, a trace or a page",
     "Compile MODEL (model.json, or {\"model\":..,\"spec\":..}) into a plan.\n"
     "\n"
     "  --spec SPEC       a separate spec.json (not with a spec embedded in MODEL);\n"
     "                    with neither, the defaults apply (a note on stderr says which)\n"
     "  -o, --output OUT  where to write (- is standard output). Default:\n"
     "                    <model name>.plan.json / .fpir / .trace.json / .html;\n"
     "                    the summary goes to standard output\n"
     "  --emit KIND       plan (plan.json, default), ir (the .fpir text), summary\n"
     "                    (JSON figures), trace or html (what 'viz' writes)\n"
     "  --hardware HW     replace the spec's hardware: a preset (h100-sxm, h200, h200-fit, cpu-mpi) or a\n                    hardware file (docs/cost-model.md)\n"
     "  --policy P        flexplan (default: the spec as written) or fsdp2 (lower as\n"
     "                    PyTorch FSDP2 does by default: a baseline to compare)\n"
     "  --ranks LIST      the ranks --emit trace|html shows, e.g. 0,3,8-11\n"
     "  --time            print the CPU time of each phase of the compile on stderr\n"
     "  -h, --help        this text\n"},
    {"check", check_opts, "-:h",
     "check MODEL [--spec SPEC] [--hardware HW] [--policy flexplan|fsdp2] [--time]",
     "run the whole compiler, write nothing",
     "Run the whole compiler on MODEL (as 'compile' does) and write nothing; print\n"
     "a one-line summary on standard error.\n"
     "\n"
     "  --spec SPEC       a separate spec.json (not with a spec embedded in MODEL)\n"
     "  --hardware HW     replace the spec's hardware: a preset (h100-sxm, h200, h200-fit, cpu-mpi) or a\n                    hardware file (docs/cost-model.md)\n"
     "  --policy P        flexplan (default) or fsdp2\n"
     "  --time            print the CPU time of each phase of the compile on stderr\n"
     "  -h, --help        this text\n"},
    {"print", file_opts, "-:h", "print FILE", "print a plan.json or .fpir as .fpir",
     "Read a plan.json (hash and tables checked) or a .fpir file (parsed and\n"
     "verified) and print it as .fpir text on standard output.\n"
     "\n"
     "  -h, --help        this text\n"},
    {"verify", file_opts, "-:h", "verify FILE", "verify a plan.json or .fpir (exit 0 valid, 1 invalid)",
     "Verify a plan.json or .fpir file: exit 0 when valid, 1 with located errors\n"
     "when not.\n"
     "\n"
     "  -h, --help        this text\n"},
    {"explain", explain_opts, "-:h",
     "explain FILE [--hardware HW] [--exposed]",
     "a plan as a table, one row per op, with the modeled start and end",
     "Print a plan.json or .fpir as a table, one row per op, with the modeled start\n"
     "and end of each (simulated as 'simulate' does).\n"
     "\n"
     "  --hardware HW     model on this preset or hardware file (default: the plan's\n                    machine)\n"
     "  --exposed         print the exposed communication ranked instead (op,\n"
     "                    bucket, the hook that waits, ms)\n"
     "  -h, --help        this text\n"},
    {"simulate", simulate_opts, "-:h",
     "simulate PLAN [--hardware HW] [--measured FILE ...]", "the modeled time per segment and the totals",
     "Replay a plan.json or .fpir on the plan's hardware (or HW) and print the\n"
     "modeled time per segment and the totals (docs/cost-model.md).\n"
     "\n"
     "  --hardware HW     model on this preset (h100-sxm, h200, h200-fit, cpu-mpi) or hardware file\n"
     "  --measured FILE   (repeatable) a timing record of the plan: print modeled\n"
     "                    against measured per hook and per step, and the error\n"
     "  -h, --help        this text\n"},
    {"viz", viz_opts, "-:ho:",
     "viz PLAN [--format trace|html] [-o OUT] [--ranks LIST] [--hardware HW]\n"
     "          [--measured FILE ...]",
     "the modeled schedule for Perfetto (trace) or as one HTML page",
     "Write the modeled schedule of a plan.json or .fpir as Chrome Trace Event JSON\n"
     "for Perfetto (trace) or one self-contained HTML page (html); docs/viz.md.\n"
     "'viz T.xfer.json [-o OUT]' draws a saved transfer (flexplan reshard -o) as a trace.\n"
     "\n"
     "  --format FMT      trace (default) or html\n"
     "  -o, --output OUT  where to write (- is standard output); default\n"
     "                    <model name>.trace.json / .html\n"
     "  --ranks LIST      the ranks shown, e.g. 0,3,8-11 (default: rank 0 and one\n"
     "                    rank of every other layout class)\n"
     "  --hardware HW     model on this preset or hardware file (default: the plan's\n                    machine)\n"
     "  --measured FILE   (repeatable) add the step an executor recorded\n"
     "                    (fp_exec_timing_write) under the modeled one\n"
     "  -h, --help        this text\n"},
    {"calibrate", calibrate_opts, "-:ho:",
     "calibrate PLAN --measured FILE ... -o HW.json [--hardware HW] [--name NAME]",
     "fit the cost model's machine to measured steps; write a hardware file",
     "Fit the machine of the cost model to the timing records an executor wrote\n"
     "(fp_exec_timing_write, train_mlp --timing) for PLAN, and write it as a\n"
     "hardware file for --hardware FILE; print the fit's residuals per op kind.\n"
     "docs/cost-model.md, \"Calibration\".\n"
     "\n"
     "  --measured FILE   (repeatable, at least one) a timing record of PLAN; its\n"
     "                    last step is fitted\n"
     "  -o, --output OUT  the hardware file to write (required)\n"
     "  --hardware HW     the machine to start from and keep what the records do\n"
     "                    not determine (default: the plan's)\n"
     "  --name NAME       the fitted machine's name (default: calibrated)\n"
     "  -h, --help        this text\n"},
    {"reshard", reshard_opts, "-:ho:",
     "reshard FROM TO [--transform PATTERN=NAME ...] [--what weights|weights+optimizer]\n"
     "          [--to-offset N] [--from-offset M] [-o OUT] [--emit summary|ir|explain|json|trace]",
     "compile and verify the transfer of the weights between two plans",
     "Compile and verify the transfer of the main weights from the ranks of plan\n"
     "FROM to those of plan TO (two plan.json of one model); docs/reshard.md.\n"
     "\n"
     "  --transform PATTERN=NAME  (repeatable) params matching PATTERN go through transform NAME:\n"
     "                    mxfp8 or mxfp8_sender (MXFP8 quantized by the sender), mxfp8_receiver\n"
     "                    (FROM's bytes on the wire, MXFP8 on receipt); the first match decides\n"
     "  --what WHAT       weights (default) or weights+optimizer\n"
     "  --to-offset N     TO rank r is process r + N (default 0)\n"
     "  --from-offset M   FROM rank r is process r + M (default 0)\n"
     "  -o, --output OUT  write the transfer as JSON (flexplan.xfer.v1)\n"
     "  --emit KIND       what goes to standard output: summary (default: the\n"
     "                    figures), ir, explain, json or trace\n"
     "  -h, --help        this text\n"},
};
#define NCOMMANDS ((int)(sizeof commands / sizeof commands[0]))

static const command *find_command(const char *name) {
  for (int k = 0; k < NCOMMANDS; k++)
    if (!strcmp(commands[k].name, name)) return &commands[k];
  return NULL;
}

/* the general usage, to f */
static void put_usage(FILE *f) {
  fputs("usage: flexplan <command> [options]\n\ncommands:\n", f);
  for (int k = 0; k < NCOMMANDS; k++) {
    const command *c = &commands[k];
    if (strlen(c->synopsis) < 14) /* fits before the description's column */
      fprintf(f, "  %-14s %s\n", c->synopsis, c->brief);
    else
      fprintf(f, "  %s\n                 %s\n", c->synopsis, c->brief);
  }
  fputs("  help [COMMAND] this text, or a command's (also: flexplan COMMAND --help)\n"
        "\n"
        "options:\n"
        "  -h, --help     this text\n"
        "  --version      the version\n"
        "\n"
        "Every option takes '--opt value' or '--opt=value'. docs/cli.md\n"
        "exit status: 0 ok, 1 input error, 2 usage error, 70 internal error\n",
        f);
}

static bool stdout_written(void);

/* CMD --help, to stdout */
static int put_help(const command *c) {
  printf("usage: flexplan %s\n", c->synopsis);
  printf("\n%s\nexit status: 0 ok, 1 input error, 2 usage error, 70 internal error\n", c->help);
  return EXIT_OK;
}

/* "flexplan: [CMD: ]message\n(see flexplan [CMD ]--help)" on stderr; 2 */
static int usage_error(const command *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const command *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "flexplan: %s%s", c ? c->name : "", c ? ": " : "");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(see flexplan %s%s--help)\n", c ? c->name : "", c ? " " : "");
  return EXIT_USAGE;
}

/* "a, b or c" of a NULL-terminated list */
static const char *or_list(char *buf, size_t len, const char *const *names) {
  size_t n = 0, k;
  buf[0] = 0;
  for (k = 0; names[k]; k++) {
    const char *sep = !k ? "" : names[k + 1] ? ", " : " or ";
    int w = snprintf(buf + n, len - n, "%s%s", sep, names[k]);
    if (w < 0 || (size_t)w >= len - n) break;
    n += (size_t)w;
  }
  return buf;
}

/* `; did you mean 'x'?` for GOT among NAMES, or "" (PREFIX goes before x) */
static const char *did_you_mean(char *buf, size_t len, const char *got, const char *const *names, const char *prefix) {
  const char *near = fpi_closest_name(got, names);
  if (!near) return "";
  snprintf(buf, len, "; did you mean '%s%s'?", prefix, near);
  return buf;
}

/* the index of VALUE in NAMES, or -1 after a usage error naming WHAT
 * ("unknown policy 'x' (expected flexplan or fsdp2); did you mean ...") */
static int enum_value(const command *c, const char *what, const char *value, const char *const *names) {
  for (int k = 0; names[k]; k++)
    if (!strcmp(names[k], value)) return k;
  char list[256], near[128];
  usage_error(c, "unknown %s '%s' (expected %s)%s", what, value, or_list(list, sizeof list, names),
              did_you_mean(near, sizeof near, value, names, ""));
  return -1;
}

/* A command's arguments, one at a time (getopt_long in "-" mode: operands
 * come back in order as ARG_OPERAND; after "--" everything is one). */
enum { ARG_END = -1, ARG_OPERAND = 1, ARG_STOP = -2 /* usage error or --help: exit with *rc */ };
typedef struct argp {
  const command *cmd;
  int argc;
  char **argv; /* argv[0] is the command's name */
  bool tail;   /* past "--" */
  int rc;      /* ARG_STOP: the exit status */
} argp;

static void argp_init(argp *p, const command *c, int argc, char **argv) {
  *p = (argp){c, argc, argv, false, 0};
  optind = 0; /* glibc: a full re-initialisation */
  opterr = 0;
}

/* the long options' names, NULL-terminated, into names[] (at most 15) */
static void option_names(const struct option *o, const char **names) {
  int n = 0;
  for (; o->name && n < 15; o++) names[n++] = o->name;
  names[n] = NULL;
}

/* the next argument: an option's code with *val its value, ARG_OPERAND with
 * *val the operand, ARG_END, or ARG_STOP (reported; exit with p->rc) */
static int argp_next(argp *p, const char **val) {
  *val = NULL;
  if (p->tail) {
    if (optind >= p->argc) return ARG_END;
    *val = p->argv[optind++];
    return ARG_OPERAND;
  }
  int k = getopt_long(p->argc, p->argv, p->cmd->shortopts, p->cmd->opts, NULL);
  const char *arg = optind > 0 && optind <= p->argc ? p->argv[optind - 1] : "";
  if (k == -1) {
    p->tail = true; /* "--" seen (or the end) */
    return argp_next(p, val);
  }
  if (k == 1) {
    *val = optarg;
    return ARG_OPERAND;
  }
  if (k == 'h') {
    p->rc = put_help(p->cmd);
    if (!stdout_written()) p->rc = EXIT_INPUT;
    return ARG_STOP;
  }
  if (k == ':') {
    const char *const *choices = NULL;
    switch (optopt) {
      case OPT_EMIT: choices = p->cmd->opts == reshard_opts ? reshard_emit_names : emit_names; break;
      case OPT_FORMAT: choices = format_names; break;
      case OPT_POLICY: choices = policy_names; break;
      case OPT_HARDWARE: choices = preset_names; break;
    }
    char list[256];
    if (choices)
      p->rc = usage_error(p->cmd, "option '%s' needs a value (%s)", arg, or_list(list, sizeof list, choices));
    else
      p->rc = usage_error(p->cmd, "option '%s' needs a value", arg);
    return ARG_STOP;
  }
  if (k == '?') {
    const char *names[16];
    option_names(p->cmd->opts, names);
    char near[128];
    if (optopt && !strncmp(arg, "--", 2)) { /* --flag=value of a flag */
      p->rc = usage_error(p->cmd, "option '%.*s' takes no value", (int)strcspn(arg, "="), arg);
    } else if (optopt) { /* a short option not known */
      p->rc = usage_error(p->cmd, "unknown option '-%c'", optopt);
    } else {
      /* a long option not known, or a prefix of more than one */
      size_t n = strcspn(arg + 2, "=");
      char given[64];
      snprintf(given, sizeof given, "%.*s", (int)(n < 63 ? n : 63), arg + 2);
      char list[256] = "";
      int nmatch = 0;
      for (int j = 0; names[j]; j++)
        if (!strncmp(names[j], given, strlen(given))) {
          size_t l = strlen(list);
          snprintf(list + l, sizeof list - l, "%s--%s", nmatch++ ? ", " : "", names[j]);
        }
      if (nmatch > 1 && *given)
        p->rc = usage_error(p->cmd, "ambiguous option '--%s' (could be %s)", given, list);
      else
        p->rc = usage_error(p->cmd, "unknown option '%s'%s", arg, did_you_mean(near, sizeof near, given, names, "--"));
    }
    return ARG_STOP;
  }
  *val = optarg;
  return k;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- atomic output -------------------------------------------------------- */
/* Everything written to standard output reached it; else say so (stdio keeps
 * a failed write's error on the stream, and a later fflush may succeed). */
static bool stdout_written(void) {
  bool flushed = fflush(stdout) == 0;
  int err = errno;
  if (flushed && !ferror(stdout)) return true;
  if (!flushed) fprintf(stderr, "flexplan: error: cannot write to standard output: %s\n", strerror(err));
  else fprintf(stderr, "flexplan: error: cannot write to standard output\n");
  return false;
}

/* where a command writes: standard output ("-"), or a file written whole
 * or not at all (fp_out: a temporary renamed into place; a device such as
 * /dev/null or a FIFO written in place) */
typedef struct {
  const char *path; /* NULL for stdout */
  fp_out out;
  FILE *f;
} out_file;

static bool out_open(out_file *o, const char *path) {
  memset(o, 0, sizeof *o);
  if (!strcmp(path, "-")) {
    o->f = stdout;
    return true;
  }
  o->path = path;
  if (!fpi_out_open(&o->out, path)) {
    fprintf(stderr, "%s: error: cannot create output: %s\n", path, strerror(errno));
    return false;
  }
  o->f = o->out.f;
  return true;
}

static bool out_commit(out_file *o) {
  if (!o->path) return stdout_written();
  if (fpi_out_commit(&o->out)) return true;
  fprintf(stderr, "%s: error: cannot write output: %s\n", o->path, strerror(errno));
  return false;
}

/* "OUT: error: cannot write the WHAT: <reason>" (err: the failed write's errno, 0: unknown) */
static void write_failed(const char *out, const char *what, int err) {
  if (err) fprintf(stderr, "%s: error: cannot write the %s: %s\n", out, what, strerror(err));
  else fprintf(stderr, "%s: error: cannot write the %s\n", out, what);
}

/* SIGTERM, SIGINT, SIGHUP or SIGPIPE during a write: remove the temporary
 * (fpi_out_unlink_all), then die of the signal as before */
static void on_fatal_signal(int sig) {
  fpi_out_unlink_all();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void remove_temporaries_on_signals(void) {
  static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};
  for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
    struct sigaction sa, old;
    if (sigaction(sigs[k], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue; /* ignored stays ignored */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sigs[k], &sa, NULL);
  }
}

/* a write that failed before commit: nothing is left behind */
static void out_abort(out_file *o) {
  if (o->path) fpi_out_abort(&o->out);
}

/* ---- default output names ----------------------------------------------------- */
/* Without -o, compile and viz write <name>.<ext> where name comes from the
 * input (the model's or plan's name): it is reduced to one safe file name in
 * the current directory (docs/cli.md): '/', '\', control characters (C0, DEL,
 * UTF-8 C1) and a leading '.' become '_', at most 200 bytes are kept (cut on
 * a UTF-8 character), and an empty name is FALLBACK; a note says when the
 * name was changed (-o chooses another). */
#define MAX_DEFAULT_STEM 200 /* + ".trace.json" and the temporary's suffix stay under NAME_MAX (255) */
static const char *default_output(fp_arena *ar, const char *name, const char *fallback, const char *ext) {
  if (!name || !*name) name = fallback;
  size_t n = strlen(name);
  if (n > MAX_DEFAULT_STEM) {
    n = MAX_DEFAULT_STEM;
    while (n > 0 && ((unsigned char)name[n] & 0xc0) == 0x80) n--; /* not inside a UTF-8 character */
  }
  char *stem = fpi_strndup(ar, name, n);
  bool changed = n != strlen(name);
  for (size_t k = 0; k < n; k++) {
    unsigned char c = (unsigned char)stem[k];
    bool c1 = c == 0xc2 && k + 1 < n && (unsigned char)stem[k + 1] >= 0x80 && (unsigned char)stem[k + 1] <= 0x9f;
    if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f || c1 || (c == '.' && k == 0)) {
      if (c1) memmove(stem + k + 1, stem + k + 2, n - k - 1), n--; /* two bytes become one '_' */
      stem[k] = '_';
      changed = true;
    }
  }
  /* with no '/' and no leading '.', the name is one component and never "." or ".." */
  const char *out = fpi_sprintf(ar, "%s.%s", stem, ext);
  if (changed) {
    char q[300];
    fprintf(stderr, "flexplan: note: the name %s from the input is not a safe file name; writing %s (choose with -o)\n",
            fpi_quote(q, sizeof q, name), out);
  }
  return out;
}

/* ---- reading plans and IR --------------------------------------------------- */
static fp_prog *read_program_flags(fp_arena *a, fp_diag *d, const char *path, unsigned flags) {
  fp_src *src = fpi_alloc(a, sizeof *src);
  if (!fpi_src_read(a, d, path, src)) return NULL;
  const char *q = src->text;
  while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
  if (*q == '{') return fpi_plan_read_flags(a, d, src, flags);
  fp_prog *p = fpi_ir_parse(a, d, src);
  if (p && !fpi_ir_verify_flags(p, d, src, flags)) return NULL;
  return p;
}
static fp_prog *read_program(fp_arena *a, fp_diag *d, const char *path) { return read_program_flags(a, d, path, 0); }

/* --hardware names no preset and no file: an input error (exit 1) */
static int unknown_preset(const char *name) {
  char near[128];
  fprintf(stderr,
          "flexplan: error: --hardware: unknown hardware preset '%s' (expected one of: %s); a hardware file is "
          "named by a path holding '/' or '.' (e.g. ./hw.json)%s\n",
          name, fpa_hw_preset_list(), did_you_mean(near, sizeof near, name, preset_names, ""));
  return EXIT_INPUT;
}

/* --hardware ARG names a preset or looks like a file (read later) */
static bool hw_arg_known(const char *arg) {
  fp_hw h;
  return fpa_hw_preset(arg, &h) || fpa_hw_arg_is_file(arg);
}

/* the machine to model P on: --hardware's preset or file, else the plan's,
 * else h100-sxm with a note; false when the preset is unknown or the file
 * bad (reported) */
static bool pick_hw(fp_arena *a, fp_diag *d, const fp_prog *p, const char *preset, const char *path, fp_hw *hw) {
  if (preset) {
    int got = fpa_hw_lookup(a, d, preset, hw);
    if (got < 0) return unknown_preset(preset), false;
    if (got == 0) return false;
  } else if (p->hw.name) {
    *hw = p->hw;
  } else {
    fpa_hw_preset("h100-sxm", hw);
    fprintf(stderr, "%s: note: the plan names no hardware; simulating on h100-sxm\n", path);
  }
  return true;
}

/* the modeled step on hw was not a finite number (a verified plan's machine
 * is valid, but its rates may be absurdly small for the plan's work) */
static void not_finite(const fp_hw *hw, const char *path) {
  fp_diag d; /* a diagnostic: the machine's name (from the plan) printed with escapes */
  fpi_diag_init(&d, stderr);
  fpi_diag_errorf(&d, path, "the modeled step time on hardware '%s' is not a finite number: its rates are too small for "
                 "the plan's work", hw->name);
  fpi_diag_free(&d);
}

/* ---- viz: --ranks and the writers ------------------------------------------------ */
#define MAX_RANKS_SHOWN 64   /* --ranks: each rank shown repeats every op */
#define MAX_DEFAULT_RANKS 16 /* default: rank 0 and up to 15 other layout classes */

typedef struct rank_list {
  int64_t v[MAX_RANKS_SHOWN];
  int32_t n;
} rank_list;

/* "0,3,8-11" into *out (duplicates dropped, order kept); a usage error (2) or 0 */
static int parse_ranks(const command *c, const char *s, rank_list *out) {
  out->n = 0;
  const char *q = s;
  if (!*q) return usage_error(c, "--ranks needs a list of ranks, e.g. 0,3,8-11");
  while (*q) {
    char *end;
    errno = 0;
    if (*q < '0' || *q > '9') return usage_error(c, "--ranks: expected a rank number at '%s'", q);
    long long lo = strtoll(q, &end, 10), hi = lo;
    if (errno) return usage_error(c, "--ranks: number out of range at '%s'", q);
    q = end;
    if (*q == '-') {
      q++;
      if (*q < '0' || *q > '9') return usage_error(c, "--ranks: expected the end of a range at '%s'", q);
      errno = 0;
      hi = strtoll(q, &end, 10);
      if (errno) return usage_error(c, "--ranks: number out of range at '%s'", q);
      if (hi < lo) return usage_error(c, "--ranks: a range ends before it starts at '%s'", q);
      q = end;
    }
    for (long long r = lo;; r++) { /* stops at hi, never past it: hi may be LLONG_MAX */
      bool dup = false;
      for (int32_t k = 0; k < out->n && !dup; k++) dup = out->v[k] == r;
      if (!dup) {
        if (out->n == MAX_RANKS_SHOWN) return usage_error(c, "--ranks: at most 64 ranks at once (at '%s')", s);
        out->v[out->n++] = r;
      }
      if (r == hi) break;
    }
    if (*q == ',') {
      q++;
      if (!*q) return usage_error(c, "--ranks: a list ends in ',': '%s'", s);
    } else if (*q) {
      return usage_error(c, "--ranks: unexpected '%s'", q);
    }
  }
  return 0;
}

typedef enum {
  VIZ_TRACE, /* Chrome Trace Event JSON (Perfetto) */
  VIZ_HTML,  /* one self-contained HTML page */
} viz_format;

/* the view of p on hw written to o; false after reported errors */
static bool write_view(fp_arena *ar, fp_diag *d, const char *where, const fp_prog *p, const fp_hw *hw,
                       const rank_list *ranks, viz_format fmt, const fp_viz_measured *meas, int32_t nmeas,
                       out_file *o) {
  fp_viz v;
  if (!fpi_viz_build(ar, d, where, p, hw, ranks && ranks->n ? ranks->v : NULL, ranks ? ranks->n : 0, MAX_DEFAULT_RANKS,
                    &v))
    return false;
  if ((!ranks || !ranks->n) && v.nclasses > v.nranks)
    fprintf(stderr, "flexplan: note: the plan has %d layout classes; showing the first %d (choose with --ranks)\n",
            (int)v.nclasses, (int)v.nranks);
  v.measured = meas, v.nmeasured = nmeas;
  for (int32_t k = 0; k < nmeas; k++) {
    double hooks = 0;
    for (int32_t s = 0; s < p->nsegs; s++) hooks += meas[k].hook_t[2 * s + 1] - meas[k].hook_t[2 * s];
    char hq[128];
    fprintf(stderr, "  rank %lld measured (step %lld, %s): step %.3f ms, %.3f ms of it inside hooks; modeled on %s: "
            "step %.3f ms, exposed communication %.3f ms\n",
            (long long)meas[k].rank, (long long)meas[k].step, meas[k].path, meas[k].end_us / 1e3, hooks / 1e3,
            fpi_quote(hq, sizeof hq, v.hw.name), v.sim.step_us / 1e3, v.sim.exposed_comm_us / 1e3);
  }
  return fmt == VIZ_TRACE ? fpi_viz_trace(&v, o->f) : fpi_viz_html(&v, o->f);
}

/* ---- compile / check ----------------------------------------------------------- */
typedef enum {
  EMIT_PLAN,    /* plan.json */
  EMIT_IR,      /* the .fpir text */
  EMIT_SUMMARY, /* the summary as JSON */
  EMIT_TRACE,   /* what viz --format=trace writes */
  EMIT_HTML,    /* what viz --format=html writes */
} emit_kind;

/* compile's and check's options and MODEL */
typedef struct compile_args {
  const char *model, *spec, *out, *hw;
  emit_kind emit;
  int policy;
  rank_list ranks;
} compile_args;

/* the options and MODEL of compile or check into *a, *timing for --time:
 * true to go on; false to exit with *rc (after --help, or a usage error
 * reported) */
static bool compile_parse_args(const command *cmd, int argc, char **argv, compile_args *a, bool *timing, int *rc) {
  *a = (compile_args){.emit = EMIT_PLAN, .policy = fpa_policy_parse("flexplan"), .ranks = {.n = 0}};
  *timing = false;
  bool have_ranks = false;
  argp ap;
  argp_init(&ap, cmd, argc, argv);
  const char *v;
  int k, e;
  *rc = EXIT_USAGE;
  while ((k = argp_next(&ap, &v)) != ARG_END) {
    switch (k) {
      case ARG_STOP: return *rc = ap.rc, false;
      case OPT_TIME: *timing = true; break;
      case OPT_RANKS:
        if ((*rc = parse_ranks(cmd, v, &a->ranks))) return false;
        have_ranks = true;
        break;
      case OPT_POLICY:
        if ((e = enum_value(cmd, "policy", v, policy_names)) < 0) return *rc = EXIT_USAGE, false;
        a->policy = fpa_policy_parse(policy_names[e]);
        break;
      case OPT_HARDWARE: a->hw = v; break;
      case OPT_SPEC: a->spec = v; break;
      case 'o': a->out = v; break;
      case OPT_EMIT:
        if ((e = enum_value(cmd, "--emit kind", v, emit_names)) < 0) return *rc = EXIT_USAGE, false;
        a->emit = (emit_kind)e; /* emit_kind follows emit_names */
        break;
      case ARG_OPERAND:
        if (a->model) return *rc = usage_error(cmd, "unexpected argument '%s' (one MODEL only)", v), false;
        a->model = v;
        break;
    }
  }
  if (!a->model) return *rc = usage_error(cmd, "missing MODEL"), false;
  if (have_ranks && a->emit != EMIT_TRACE && a->emit != EMIT_HTML)
    return *rc = usage_error(cmd, "--ranks picks the ranks of --emit=trace or --emit=html"), false;
  if (a->hw && !hw_arg_known(a->hw)) return *rc = unknown_preset(a->hw), false;
  return true;
}

/* the compiled plan written as --emit says, to -o or beside the model's
 * name (the summary to stdout), nothing left half-written on a failure;
 * then the summary's text and the device warnings on stderr: the exit
 * status */
static int compile_write(fp_arena *ar, fp_diag *d, const compile_args *a, const fpa_compiled *c) {
  const fp_prog *prog = c->prog;
  emit_kind emit = a->emit;
  const char *out = a->out;
  if (!out) {
    if (emit == EMIT_SUMMARY)
      out = "-";
    else
      out = default_output(ar, c->model_name, "model",
                           emit == EMIT_PLAN   ? "plan.json"
                           : emit == EMIT_IR   ? "fpir"
                           : emit == EMIT_HTML ? "html"
                                               : "trace.json");
  }
  out_file o;
  if (!out_open(&o, out)) return EXIT_INPUT;
  bool ok = true;
  errno = 0;
  switch (emit) {
  case EMIT_PLAN: ok = fpi_plan_write(prog, o.f); break;
  case EMIT_IR: fpi_ir_print(prog, o.f); break;
  case EMIT_SUMMARY: fpa_summary_json(c, o.f); break;
  case EMIT_TRACE:
  case EMIT_HTML:
    ok = write_view(ar, d, a->model, prog, &prog->hw, &a->ranks, emit == EMIT_HTML ? VIZ_HTML : VIZ_TRACE, NULL, 0,
                    &o);
    break;
  }
  if (!ok) {
    int err = errno; /* the failed write's (a full disk: ENOSPC) */
    out_abort(&o);
    if (!d->nerrors) write_failed(out, emit == EMIT_TRACE ? "trace" : emit == EMIT_HTML ? "page" : "plan", err);
    return EXIT_INPUT;
  }
  if (!out_commit(&o)) return EXIT_INPUT;
  if (emit != EMIT_SUMMARY) {
    fpa_summary_text(c, stderr);
    if (o.path) fprintf(stderr, "  wrote %s\n", o.path);
  }
  fpa_summary_warn_device(c, stderr);
  return EXIT_OK;
}

static int cmd_compile(const command *cmd, int argc, char **argv) {
  compile_args a;
  bool timing;
  int rc;
  if (!compile_parse_args(cmd, argc, argv, &a, &timing, &rc)) return rc;
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  rc = EXIT_INPUT;
  fpa_request rq = {.model_path = a.model, .spec_path = a.spec, .hw_preset = a.hw, .policy = a.policy, .notes = true};
  fpa_compiled c;
  if (fpa_compile_run(ar, &d, &rq, &c)) {
    if (timing) fpa_print_times(&c, a.model, stderr);
    if (!strcmp(cmd->name, "check")) {
      const fp_prog *prog = c.prog;
      fprintf(stderr, "%s: ok: %s, %lld ops, arena %.3f GiB\n", a.model, prog->strategy, (long long)prog->nops,
              (double)prog->arena_bytes / (1 << 30));
      rc = EXIT_OK;
    } else {
      rc = compile_write(ar, &d, &a, &c);
    }
  }
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return rc;
}

/* ---- print / verify ------------------------------------------------------ */
static bool is_xfer_file(const char *path);

static int cmd_file(const command *cmd, int argc, char **argv) {
  argp ap;
  argp_init(&ap, cmd, argc, argv);
  const char *v, *path = NULL;
  int k;
  while ((k = argp_next(&ap, &v)) != ARG_END) {
    if (k == ARG_STOP) return ap.rc;
    if (path) return usage_error(cmd, "expected exactly one FILE, got '%s' too", v);
    path = v;
  }
  if (!path) return usage_error(cmd, "missing FILE");
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  int rc = EXIT_INPUT;
  if (is_xfer_file(path)) { /* a transfer (flexplan reshard -o): read, verified as reshard does, printed as --emit=ir */
    fp_src *src = fpi_alloc(ar, sizeof *src);
    fp_tx *t = fpi_src_read(ar, &d, path, src) ? fpi_tx_read(ar, &d, src) : NULL;
    if (t && fpi_tx_verify(t, &d)) {
      rc = EXIT_OK;
      if (!strcmp(cmd->name, "print")) fpi_tx_print(t, stdout);
      else fprintf(stderr, "%s: ok: a transfer of %lld processes, %d ops, %lld bytes on the wire\n", path,
                   (long long)t->nprocs, t->nops, (long long)t->wire_bytes);
      if (!stdout_written()) rc = EXIT_INPUT;
    }
    fpi_diag_free(&d);
    fpi_arena_free(ar);
    return rc;
  }
  /* verify: rule 9 (the semantic check, ir/verify_sem.c) too */
  long skipped = fp_ir_sem_skipped;
  fp_prog *p = read_program_flags(ar, &d, path, strcmp(cmd->name, "verify") ? 0 : FP_VERIFY_SEM);
  if (p && fp_ir_sem_skipped > skipped)
    fprintf(stderr, "%s: note: the semantic check (rule 9) was skipped: too many rank classes x sharded params\n", path);
  if (p) {
    rc = EXIT_OK;
    if (!strcmp(cmd->name, "print")) fpi_ir_print(p, stdout);
    else fprintf(stderr, "%s: ok: %d ops in %d segments, arena %lld bytes\n", path, p->nops, p->nsegs,
                 (long long)p->arena_bytes);
    if (!stdout_written()) rc = EXIT_INPUT;
  }
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return rc;
}

/* ---- explain and simulate: a plan replayed on a machine ---------------------------- */
/* COMMAND PLAN [--hardware HW] [--exposed]: read the plan, simulate it
 * on the preset (default: the plan's machine), and print it (explain: one
 * row per op, or with --exposed the ranked exposed communication; simulate:
 * the segments and totals) */
#define MAX_MEASURED 64
static int cmd_modeled(const command *cmd, int argc, char **argv) {
  const char *path = NULL, *hwname = NULL, *v;
  const char *measured_paths[MAX_MEASURED];
  int32_t nmeasured = 0;
  fpa_show what = !strcmp(cmd->name, "simulate") ? FPA_SHOW_SIMULATION : FPA_SHOW_EXPLAIN;
  argp ap;
  argp_init(&ap, cmd, argc, argv);
  int k, rc;
  while ((k = argp_next(&ap, &v)) != ARG_END) {
    switch (k) {
      case ARG_STOP: return ap.rc;
      case OPT_HARDWARE: hwname = v; break;
      case OPT_EXPOSED: what = FPA_SHOW_EXPOSED; break;
      case OPT_MEASURED:
        if (nmeasured == MAX_MEASURED) return usage_error(cmd, "at most 64 --measured files (got more at '%s')", v);
        measured_paths[nmeasured++] = v;
        break;
      case ARG_OPERAND:
        if (path) return usage_error(cmd, "unexpected argument '%s' (one PLAN only)", v);
        path = v;
        break;
    }
  }
  if (!path) return usage_error(cmd, "missing PLAN");
  fp_hw hw;
  if (hwname && !hw_arg_known(hwname)) return unknown_preset(hwname);
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  rc = EXIT_INPUT;
  fp_prog *p = read_program(ar, &d, path);
  if (p && pick_hw(ar, &d, p, hwname, path, &hw)) {
    /* the records first: a bad one prints nothing */
    const double **op_t = fpi_alloc_array(ar, (size_t)(nmeasured ? nmeasured : 1), sizeof *op_t);
    const double **hook_t = fpi_alloc_array(ar, (size_t)(nmeasured ? nmeasured : 1), sizeof *hook_t);
    const char **names = fpi_alloc_array(ar, (size_t)(nmeasured ? nmeasured : 1), sizeof *names);
    bool ok = true;
    for (int32_t r = 0; ok && r < nmeasured; r++) {
      fp_viz_measured m;
      ok = fpi_viz_measured_read(ar, &d, measured_paths[r], p, &m);
      if (ok) {
        op_t[r] = m.op_t, hook_t[r] = m.hook_t;
        names[r] = fpi_sprintf(ar, "%s (rank %lld, step %lld)", measured_paths[r], (long long)m.rank, (long long)m.step);
      }
    }
    if (!ok)
      ;
    else if (!fpa_modeled_print(ar, p, &hw, what, stdout) ||
             (nmeasured && !fpa_compare_print(ar, p, &hw, op_t, hook_t, names, nmeasured, stdout)))
      not_finite(&hw, path);
    else
      rc = stdout_written() ? EXIT_OK : EXIT_INPUT;
  }
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return rc;
}

/* ---- viz ------------------------------------------------------------------------- */

static int cmd_viz_xfer(const char *path, const char *out);

/* calibrate PLAN --measured FILE ... -o OUT: fit, write the hardware file,
 * print the residuals (stdout) */
static int cmd_calibrate(const command *cmd, int argc, char **argv) {
  const char *path = NULL, *hwname = NULL, *out = NULL, *name = "calibrated", *v;
  const char *measured_paths[MAX_MEASURED];
  int32_t nmeasured = 0;
  argp ap;
  argp_init(&ap, cmd, argc, argv);
  int k, rc;
  while ((k = argp_next(&ap, &v)) != ARG_END) {
    switch (k) {
      case ARG_STOP: return ap.rc;
      case OPT_MEASURED:
        if (nmeasured == MAX_MEASURED) return usage_error(cmd, "at most 64 --measured files (got more at '%s')", v);
        measured_paths[nmeasured++] = v;
        break;
      case 'o': out = v; break;
      case OPT_HARDWARE: hwname = v; break;
      case OPT_NAME: name = v; break;
      case ARG_OPERAND:
        if (path) return usage_error(cmd, "unexpected argument '%s' (one PLAN only)", v);
        path = v;
        break;
    }
  }
  if (!path) return usage_error(cmd, "missing PLAN");
  if (!nmeasured) return usage_error(cmd, "missing --measured FILE (a timing record of the plan)");
  if (!out) return usage_error(cmd, "missing -o OUT (the hardware file to write)");
  for (const char *q = name; *q; q++)
    if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || strchr("._-+", *q)))
      return usage_error(cmd, "--name: expected letters, digits or . _ - + (got '%s')", name);
  if (!*name || strlen(name) > 64) return usage_error(cmd, "--name: expected 1 to 64 characters");
  if (hwname && !hw_arg_known(hwname)) return unknown_preset(hwname);
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  rc = EXIT_INPUT;
  fp_hw hw;
  fp_prog *p = read_program(ar, &d, path);
  if (!p || !pick_hw(ar, &d, p, hwname, path, &hw)) goto done;
  const double **op_t = fpi_alloc_array(ar, (size_t)nmeasured, sizeof *op_t);
  const double **hook_t = fpi_alloc_array(ar, (size_t)nmeasured, sizeof *hook_t);
  for (int32_t r = 0; r < nmeasured; r++) {
    fp_viz_measured m;
    if (!fpi_viz_measured_read(ar, &d, measured_paths[r], p, &m)) goto done;
    op_t[r] = m.op_t, hook_t[r] = m.hook_t;
  }
  out_file o;
  if (!out_open(&o, out)) goto done;
  char err[600];
  if (!fpa_calibrate(p, &hw, op_t, hook_t, nmeasured, name, o.f, o.path ? stdout : stderr, err, sizeof err)) {
    out_abort(&o);
    fprintf(stderr, "%s: error: %s\n", path, err);
    goto done;
  }
  if (out_commit(&o)) rc = EXIT_OK;
done:
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return rc;
}
static bool is_xfer_file(const char *path);

static int cmd_viz(const command *cmd, int argc, char **argv) {
  const char *path = NULL, *hwname = NULL, *out = NULL, *v, *plan_only = NULL;
  const char *measured_paths[MAX_MEASURED];
  int32_t nmeasured = 0;
  viz_format fmt = VIZ_TRACE;
  rank_list ranks = {.n = 0};
  argp ap;
  argp_init(&ap, cmd, argc, argv);
  int k, rc, e;
  while ((k = argp_next(&ap, &v)) != ARG_END) {
    switch (k) {
      case ARG_STOP: return ap.rc;
      case OPT_MEASURED:
        if (nmeasured == MAX_MEASURED) return usage_error(cmd, "at most 64 --measured files (got more at '%s')", v);
        measured_paths[nmeasured++] = v;
        plan_only = "--measured";
        break;
      case OPT_HARDWARE:
        hwname = v;
        plan_only = "--hardware";
        break;
      case 'o': out = v; break;
      case OPT_FORMAT:
        if ((e = enum_value(cmd, "--format", v, format_names)) < 0) return EXIT_USAGE;
        fmt = (viz_format)e; /* viz_format follows format_names */
        break;
      case OPT_RANKS:
        if ((rc = parse_ranks(cmd, v, &ranks))) return rc;
        plan_only = "--ranks";
        break;
      case ARG_OPERAND:
        if (path) return usage_error(cmd, "unexpected argument '%s' (one PLAN only)", v);
        path = v;
        break;
    }
  }
  if (!path) return usage_error(cmd, "missing PLAN");
  if (is_xfer_file(path)) {
    if (plan_only) return usage_error(cmd, "option '%s' does not apply to a transfer", plan_only);
    if (fmt != VIZ_TRACE) return usage_error(cmd, "a transfer draws as a trace only, not html");
    return cmd_viz_xfer(path, out);
  }
  fp_hw hw;
  if (hwname && !hw_arg_known(hwname)) return unknown_preset(hwname);
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  rc = EXIT_INPUT;
  fp_prog *p = read_program(ar, &d, path);
  if (!p || !pick_hw(ar, &d, p, hwname, path, &hw)) goto done;
  fp_viz_measured *meas = fpi_alloc_array(ar, (size_t)(nmeasured ? nmeasured : 1), sizeof *meas);
  for (int32_t k = 0; k < nmeasured; k++)
    if (!fpi_viz_measured_read(ar, &d, measured_paths[k], p, &meas[k])) goto done;
  if (!out) out = default_output(ar, p->model, "plan", fmt == VIZ_HTML ? "html" : "trace.json");
  out_file o;
  if (!out_open(&o, out)) goto done;
  errno = 0;
  if (!write_view(ar, &d, path, p, &hw, &ranks, fmt, meas, nmeasured, &o)) {
    int err = errno;
    out_abort(&o);
    if (!d.nerrors) write_failed(out, fmt == VIZ_HTML ? "page" : "trace", err);
    goto done;
  }
  if (!out_commit(&o)) goto done;
  if (o.path) fprintf(stderr, "  wrote %s\n", o.path);
  rc = EXIT_OK;
done:
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return rc;
}

/* ---- reshard: a transfer between two plans (planner/reshard.c) ---------------- */
/* reshard's options and its two plans */
typedef struct reshard_args {
  const char *paths[2], *out, *emit, *what;
  const char **pats; /* the --transform values, PATTERN=NAME (malloc'd) */
  int npats;
  long long off, foff; /* --to-offset, --from-offset */
} reshard_args;

/* the options and FROM, TO of reshard into *a: true to go on (a->pats to
 * be freed); false to exit with *rc (after --help, or a usage error
 * reported) */
static bool reshard_parse_args(const command *cmd, int argc, char **argv, reshard_args *a, int *rc) {
  *a = (reshard_args){.emit = "summary", .what = "weights"};
  const char *v;
  a->pats = calloc((size_t)argc + 1, sizeof *a->pats);
  int np = 0, k, e;
  FP_ASSERT(a->pats);
  argp ap;
  argp_init(&ap, cmd, argc, argv);
  bool stop = false;
  *rc = 0;
  while (!*rc && !stop && (k = argp_next(&ap, &v)) != ARG_END) {
    switch (k) {
      case ARG_STOP: *rc = ap.rc, stop = true; break;
      case 'o': a->out = v; break;
      case OPT_WHAT: a->what = v; break;
      case OPT_TO_OFFSET:
      case OPT_FROM_OFFSET: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || *end || end == v) *rc = usage_error(cmd, "offset '%s' is not a number", v);
        *(k == OPT_TO_OFFSET ? &a->off : &a->foff) = x;
        break;
      }
      case OPT_TRANSFORM: {
        /* (the command line registers no plug-in: NAME is a built-in) */
        const char *eq = strrchr(v, '=');
        if (!eq || eq == v || !eq[1])
          *rc = usage_error(cmd, "--transform '%s': expected PATTERN=NAME (NAME one of %s)", v, FPI_XF_BUILTIN_NAMES);
        else if (fpi_xf_builtin_mode(eq + 1) < 0)
          *rc = usage_error(cmd, "--transform '%s': unknown transform '%s' (known: %s)", v, eq + 1, FPI_XF_BUILTIN_NAMES);
        a->pats[a->npats++] = v;
        break;
      }
      case OPT_EMIT:
        if ((e = enum_value(cmd, "--emit kind", v, reshard_emit_names)) < 0) *rc = EXIT_USAGE;
        else a->emit = reshard_emit_names[e];
        break;
      case ARG_OPERAND:
        if (np == 2) *rc = usage_error(cmd, "expected FROM and TO, got '%s' too", v);
        else a->paths[np++] = v;
        break;
    }
  }
  if (!*rc && !stop && np != 2) *rc = usage_error(cmd, "expected two plans, FROM and TO");
  if (*rc || stop) {
    free(a->pats);
    return false;
  }
  return true;
}

/* the verified transfer t to -o (JSON, when given) and to stdout as --emit
 * says (the summary: its figures and the milliseconds it took to compile
 * and to verify): the exit status */
static int reshard_write(const fp_tx *t, const char *out, const char *emit, double compile_ms, double verify_ms) {
  out_file of;
  if (out) {
    if (!out_open(&of, out)) return EXIT_INPUT;
    fpi_tx_write_json(t, of.f);
    if (!out_commit(&of)) return EXIT_INPUT;
  }
  if (!strcmp(emit, "ir")) fpi_tx_print(t, stdout);
  else if (!strcmp(emit, "explain")) fpi_tx_explain(t, stdout);
  else if (!strcmp(emit, "json")) fpi_tx_write_json(t, stdout);
  else if (!strcmp(emit, "trace")) fpi_tx_trace(t, stdout);
  else
    printf("{\"processes\":%lld,\"ops\":%d,\"wire_bytes\":%lld,\"lower_bound_bytes\":%lld,"
           "\"ratio\":%.3f,\"local_bytes\":%lld,\"max_send_bytes\":%lld,\"max_recv_bytes\":%lld,"
           "\"compile_ms\":%.3f,\"verify_ms\":%.3f}\n",
           (long long)t->nprocs, t->nops, (long long)t->wire_bytes, (long long)t->lower_bound,
           t->lower_bound ? (double)t->wire_bytes / (double)t->lower_bound : 1.0, (long long)t->local_bytes,
           (long long)t->max_send_bytes, (long long)t->max_recv_bytes, compile_ms, verify_ms);
  return stdout_written() ? EXIT_OK : EXIT_INPUT;
}

static int cmd_reshard(const command *cmd, int argc, char **argv) {
  reshard_args a;
  int rc;
  if (!reshard_parse_args(cmd, argc, argv, &a, &rc)) return rc;
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  rc = EXIT_INPUT;
  fp_src *src[2];
  fp_prog *prog[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    src[k] = fpi_alloc(ar, sizeof *src[k]);
    if (fpi_src_read(ar, &d, a.paths[k], src[k])) prog[k] = fpi_plan_read(ar, &d, src[k]);
  }
  if (prog[0] && prog[1]) {
    double t0 = now_ms();
    fp_tx *t = fpa_reshard(ar, prog[0], src[0], prog[1], src[1], a.what, a.off, a.foff, a.pats, a.npats, &d);
    double t1 = now_ms();
    if (t && fpi_tx_verify(t, &d)) {
      double t2 = now_ms();
      rc = reshard_write(t, a.out, a.emit, t1 - t0, t2 - t1);
    }
  }
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  free(a.pats);
  return rc;
}

/* ---- viz of a transfer (a flexplan.xfer.v1 file): its trace ------------------- */
static bool is_xfer_file(const char *path) {
  char head[256] = {0};
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false; /* a FIFO is never opened here (fpi_src_read says) */
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = 0;
  return strstr(head, "\"format\":\"flexplan.xfer.v1\"") != NULL;
}

static int cmd_viz_xfer(const char *path, const char *out) {
  fp_arena *ar = fpi_arena_new();
  fp_diag d;
  fpi_diag_init(&d, stderr);
  fp_src *src = fpi_alloc(ar, sizeof *src);
  fp_tx *t = fpi_src_read(ar, &d, path, src) ? fpi_tx_read(ar, &d, src) : NULL;
  int rc = EXIT_INPUT;
  if (t) {
    const char *o = out ? out : default_output(ar, t->model, "transfer", "xfer.trace.json");
    out_file of;
    if (out_open(&of, o)) {
      fpi_tx_trace(t, of.f);
      if (out_commit(&of)) rc = EXIT_OK;
    }
  }
  fpi_diag_free(&d);
  fpi_arena_free(ar);
  return rc;
}

/* "unknown command 'x'", with the closest command's name when one is close */
static int unknown_command(const char *name) {
  const char *names[NCOMMANDS + 2];
  for (int k = 0; k < NCOMMANDS; k++) names[k] = commands[k].name;
  names[NCOMMANDS] = "help";
  names[NCOMMANDS + 1] = NULL;
  char near[128];
  return usage_error(NULL, "unknown command '%s'%s", name, did_you_mean(near, sizeof near, name, names, ""));
}

int main(int argc, char **argv) {
#ifdef __GLIBC__
  /* No fastbins: a compile frees the parsed JSON (hundreds of thousands of
   * small objects for a large model) and then allocates the arena's large
   * chunks, and with fastbins glibc consolidates every freed object on the
   * first of them (6% of DeepSeek-V3 671B's compile). The process is short
   * lived; bins without fastbins reuse the memory as well. */
  mallopt(M_MXFAST, 0);
  /* Arrays up to 32 MiB (a candidate's op array, the sync pass's tables)
   * come from the heap and go back to it, where the next candidate finds
   * them already faulted in, instead of a mapping made and unmapped each
   * time (with the held plan's array handed back early, llama3-405b's
   * compile went from 1,384 to 1,095 page faults); from 32 MiB the arena
   * maps its own (base.c, FP_MAP_MIN). The heap's free top is given back
   * to the kernel only past 256 MiB: the passes' temporaries (up to 32 MiB
   * each) are freed between phases and the next phase's come from the
   * same pages, where a 64 MiB threshold gave 100-150 MB back three times
   * at 100,000 units and faulted them in again (276k page faults, 216k
   * now, the peak resident memory unchanged: the heap was that big anyway). */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  remove_temporaries_on_signals();
  if (argc < 2) {
    put_usage(stderr);
    return EXIT_USAGE;
  }
  const char *name = argv[1];
  if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
    if (!strcmp(name, "help") && argc > 2) { /* help COMMAND */
      const command *c = find_command(argv[2]);
      if (!c) return unknown_command(argv[2]);
      if (argc > 3) return usage_error(NULL, "help: expected one COMMAND, got '%s' too", argv[3]);
      put_help(c);
    } else {
      if (argc > 2) return usage_error(NULL, "%s: unexpected argument '%s' (flexplan help COMMAND)", name, argv[2]);
      put_usage(stdout);
    }
    return stdout_written() ? EXIT_OK : EXIT_INPUT;
  }
  if (!strcmp(name, "--version")) {
    printf("flexplan %s\n", FP_VERSION);
    return stdout_written() ? EXIT_OK : EXIT_INPUT;
  }
  const command *c = find_command(name);
  if (!c) {
    if (name[0] == '-') return usage_error(NULL, "unknown option '%s' (a command comes first: flexplan --help)", name);
    return unknown_command(name);
  }
  argc--, argv++; /* argv[0]: the command's name */
  if (!strcmp(name, "compile") || !strcmp(name, "check")) return cmd_compile(c, argc, argv);
  if (!strcmp(name, "simulate") || !strcmp(name, "explain")) return cmd_modeled(c, argc, argv);
  if (!strcmp(name, "viz")) return cmd_viz(c, argc, argv);
  if (!strcmp(name, "calibrate")) return cmd_calibrate(c, argc, argv);
  if (!strcmp(name, "reshard")) return cmd_reshard(c, argc, argv);
  return cmd_file(c, argc, argv); /* print, verify */
}
