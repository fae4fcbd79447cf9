/* summary.c - the failure summary and the reader of PyTorch's error file.
 *
 * The error file is JSON written by the worker (a user program), so it is
 * untrusted input: util/json.c's strict reader, with a size limit and a
 * nesting limit. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lu.h"
#include "summary.h"

#define SUM_FILE_MAX (1024 * 1024) /* bytes of an error file */
#define SUM_OTHER_TAIL 5           /* stderr lines shown per other failure */

int sum_parse_error_json(const char *buf, size_t len, char **message,
                         double *timestamp) {
  /* PyTorch's @record writes {"message": "..."} or {"message": {"message":
   * "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}. */
  lu_jdoc_t *doc = NULL;
  const lu_jv_t *root, *m, *text, *extra, *cs, *ts;
  char *out = NULL;
  int rc;
  *message = NULL;
  if (timestamp)
    *timestamp = 0;
  if (len > SUM_FILE_MAX)
    return RDZV_ETOOBIG;
  if ((rc = lu_jv_parse(buf, len, LU_JV_LENIENT, &doc, &root, NULL, 0)) != 0)
    return rc;
  m = lu_jv_get(root, "message");
  extra = m && m->type == LU_JV_OBJ ? lu_jv_get(m, "extraInfo") : NULL;
  text = m && m->type == LU_JV_OBJ ? lu_jv_get(m, "message") : m;
  cs = lu_jv_get(extra, "py_callstack");
  ts = lu_jv_get(extra, "timestamp");
  if (text == NULL || text->type != LU_JV_STR) {
    rc = RDZV_EPROTO;
  } else if (cs && cs->type == LU_JV_STR && cs->slen > 0) {
    if ((out = malloc(text->slen + 1 + cs->slen + 1)) != NULL) {
      memcpy(out, text->s, text->slen);
      out[text->slen] = '\n';
      memcpy(out + text->slen + 1, cs->s, cs->slen + 1);
    }
  } else {
    out = strdup(text->s);
  }
  if (rc == 0 && out == NULL)
    rc = RDZV_ENOMEM;
  if (rc == 0) {
    /* The message ends with the traceback's newline; the summary indents
     * every line itself. */
    lu_rtrim(out, strlen(out));
    *message = out;
    /* PyTorch writes the timestamp as a string; a number will do too. */
    if (timestamp && ts && ts->type == LU_JV_STR) {
      char *end;
      double t = strtod(ts->s, &end);
      if (end != ts->s && *end == '\0' && t > 0)
        *timestamp = t;
    } else if (timestamp && ts && ts->type == LU_JV_NUM && ts->d > 0) {
      *timestamp = ts->d;
    }
  }
  lu_jv_free(doc);
  return rc;
}

int sum_read_error_file(const char *path, char **message) {
  char *data = NULL;
  size_t len = 0;
  int rc;
  *message = NULL;
  rc = lu_read_file(path, SUM_FILE_MAX, &data, &len);
  if (rc != 0)
    return rc;
  rc = sum_parse_error_json(data, len, message, NULL);
  free(data);
  return rc;
}

/* ---- signals -------------------------------------------------------------------------- */

const char *sum_signal_name(int sig) {
  /* Linux numbering (x86, arm, riscv share it). 32 and up are real-time
   * signals, whose SIGRTMIN offset depends on the C library: by number. */
  static const char *const names[] = {
      "signal 0", "SIGHUP",    "SIGINT",    "SIGQUIT", "SIGILL",    "SIGTRAP",
      "SIGABRT",  "SIGBUS",    "SIGFPE",    "SIGKILL", "SIGUSR1",   "SIGSEGV",
      "SIGUSR2",  "SIGPIPE",   "SIGALRM",   "SIGTERM", "SIGSTKFLT", "SIGCHLD",
      "SIGCONT",  "SIGSTOP",   "SIGTSTP",   "SIGTTIN", "SIGTTOU",   "SIGURG",
      "SIGXCPU",  "SIGXFSZ",   "SIGVTALRM", "SIGPROF", "SIGWINCH",  "SIGIO",
      "SIGPWR",   "SIGSYS",    "signal 32", "signal 33", "signal 34",
      "signal 35", "signal 36", "signal 37", "signal 38", "signal 39",
      "signal 40", "signal 41", "signal 42", "signal 43", "signal 44",
      "signal 45", "signal 46", "signal 47", "signal 48", "signal 49",
      "signal 50", "signal 51", "signal 52", "signal 53", "signal 54",
      "signal 55", "signal 56", "signal 57", "signal 58", "signal 59",
      "signal 60", "signal 61", "signal 62", "signal 63", "signal 64"};
  if (sig < 0 || sig >= (int)LU_ARRAY_SIZE(names))
    return "unknown signal";
  return names[sig];
}

/* A word on what a signal usually means, for the person reading the
 * summary at 3 a.m. */
static const char *sum_signal_hint(int sig) {
  switch (sig) {
  case SIGKILL:
    return "killed: by the out-of-memory killer (see dmesg), the scheduler, "
           "or the agent after the grace period";
  case SIGSEGV:
    return "invalid memory access in the worker or a native library";
  case SIGBUS:
    return "bus error: often /dev/shm too small (shared memory)";
  case SIGABRT:
    return "aborted: a failed assertion, or an uncaught C++ exception";
  case SIGFPE:
    return "arithmetic error, such as an integer division by zero";
  case SIGTERM:
    return "terminated: asked to stop";
  case SIGINT:
    return "interrupted (Ctrl-C)";
  default:
    return NULL;
  }
}

/* ---- the summary ----------------------------------------------------------------------- */

int sum_exit_status(const sum_failure_t *root) {
  if (root == NULL)
    return 1;
  if (root->signal > 0)
    return 128 + (root->signal & 127);
  if (root->exit_code > 0)
    return root->exit_code & 255 ? root->exit_code & 255 : 1;
  return 1; /* a failure never exits 0 */
}

/* n bytes of a worker's text: no escape code reaches the terminal (issue
 * #24). */
static void sum_put(FILE *out, const char *p, size_t n) {
  char small[1024], *b = n * 4 < sizeof(small) ? small : malloc(n * 4 + 1);
  if (b == NULL)
    return;
  fwrite(b, 1, lu_escape(p, n, b, n * 4 + 1, 0), out);
  if (b != small)
    free(b);
}

/* Print text with every line after the first indented by `indent`. */
static void sum_indented(FILE *out, const char *text, int indent) {
  const char *p = text;
  for (;;) {
    size_t n = strcspn(p, "\n");
    sum_put(out, p, n);
    fputc('\n', out);
    if (p[n] == '\0')
      break;
    p += n + 1;
    if (*p == '\0')
      break;
    fprintf(out, "%*s", indent, "");
  }
}

/* The last `keep` lines of tail (all when keep <= 0), each as "    | x". */
static void sum_tail(FILE *out, const char *tail, int keep) {
  const char *p = tail;
  int lines = 1, skip;
  for (const char *q = tail; *q; q++)
    if (*q == '\n' && q[1] != '\0')
      lines++;
  skip = keep > 0 && lines > keep ? lines - keep : 0;
  if (skip > 0)
    fprintf(out, "    | (%d earlier line%s)\n", skip, skip == 1 ? "" : "s");
  for (int i = 0; *p; i++) {
    size_t n = strcspn(p, "\n");
    if (i >= skip) {
      fputs("    | ", out);
      sum_put(out, p, n);
      fputc('\n', out);
    }
    p += n;
    if (*p == '\n')
      p++;
  }
}

static void sum_block(FILE *out, const sum_failure_t *f, int root) {
  char when[40];
  lu_iso8601(f->wall_s, when, sizeof(when));
  fprintf(out, "  time       : %s\n", when);
  fprintf(out, "  host       : %s\n", f->host[0] ? f->host : "<unknown>");
  fprintf(out, "  rank       : %d (local_rank %d, node %d)\n", f->rank,
          f->local_rank, f->node_rank);
  fprintf(out, "  pid        : %d\n", f->pid);
  if (f->signal > 0) {
    const char *hint = sum_signal_hint(f->signal);
    /* launch --hang-timeout killed it: say that launch did */
    if (f->signal == SIGKILL && f->error_message &&
        strncmp(f->error_message, "hang: ", 6) == 0)
      hint = "killed by launch for a hang (--hang-timeout; the error "
             "line below says why)";
    fprintf(out, "  signal     : %s (%d)", sum_signal_name(f->signal),
            f->signal);
    if (hint)
      fprintf(out, ": %s", hint);
    fputc('\n', out);
  } else {
    fprintf(out, "  exit code  : %d", f->exit_code);
    if (f->exit_code == 127)
      fputs(" (command not found, or it could not be executed)", out);
    else if (f->exit_code == 126)
      fputs(" (command not executable)", out);
    else if (f->exit_code > 128 && f->exit_code < 128 + 65)
      fprintf(out, " (a shell's way to say its child died of %s)",
              sum_signal_name(f->exit_code - 128));
    fputc('\n', out);
  }
  if (f->error_message && f->error_message[0]) {
    fputs("  error file : ", out);
    sum_indented(out, f->error_message, 15);
  } else if (root && f->python) {
    fputs("  error file : <none> (Python: decorate main with @record from\n"
          "               torch.distributed.elastic.multiprocessing.errors to "
          "see the\n"
          "               exception and traceback here; "
          "https://pytorch.org/docs/stable/elastic/errors.html)\n",
          out);
  } else {
    fputs("  error file : <none>\n", out);
  }
  if (f->stderr_tail && f->stderr_tail[0]) {
    static const char tb[] = "Traceback (most recent call last):";
    const char *t = strstr(f->stderr_tail, tb), *last = t;
    /* The error file has the traceback: the tail's copy of it is not
     * printed a second time, only what came before it. */
    while (last && (t = strstr(last + 1, tb)) != NULL)
      last = t;
    if (last && f->error_message && strstr(f->error_message, tb)) {
      char *before = strndup(f->stderr_tail, (size_t)(last - f->stderr_tail));
      if (before && before[0]) {
        fputs("  last lines of stderr (then the traceback above):\n", out);
        sum_tail(out, before, root ? 0 : SUM_OTHER_TAIL);
      } else {
        fputs("  last lines of stderr: the traceback above\n", out);
      }
      free(before);
    } else {
      fputs("  last lines of stderr:\n", out);
      sum_tail(out, f->stderr_tail, root ? 0 : SUM_OTHER_TAIL);
    }
  } else {
    fputs("  last lines of stderr: <none>\n", out);
  }
}

static int sum_before(const sum_failure_t *a, const sum_failure_t *b) {
  if (a->wall_s != b->wall_s)
    return a->wall_s < b->wall_s;
  return a->rank < b->rank;
}

void sum_print(FILE *out, const char *job, const sum_failure_t *f, size_t n,
               int restarts, int max_restarts, int given) {
  size_t root = given >= 0 && (size_t)given < n ? (size_t)given : 0, *order;
  fprintf(out, "launch: job %s failed (restarts used: %d of %d)\n",
          job && job[0] ? job : "<none>", restarts, max_restarts);
  if (n == 0) {
    fputs("No worker failure was recorded.\n", out);
    fflush(out);
    return;
  }
  for (size_t i = 1; given < 0 && i < n; i++)
    if (sum_before(&f[i], &f[root]))
      root = i;
  fputs("Root cause (first failure):\n", out);
  sum_block(out, &f[root], 1);
  if (n == 1) {
    fflush(out);
    return;
  }
  fprintf(out, "Other failures (%zu, in order of time):\n", n - 1);
  /* Sort the others by time; n is the number of local failures seen, so
   * an insertion sort is fine, and without memory it degrades to input
   * order rather than failing to print. */
  order = malloc(n * sizeof(*order));
  if (order) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
      size_t k;
      if (i == root)
        continue;
      for (k = m; k > 0 && sum_before(&f[i], &f[order[k - 1]]); k--)
        order[k] = order[k - 1];
      order[k] = i;
      m++;
    }
    for (size_t i = 0; i < m; i++) {
      fprintf(out, "[%zu]\n", i + 1);
      sum_block(out, &f[order[i]], 0);
    }
    free(order);
  } else {
    for (size_t i = 0, k = 1; i < n; i++)
      if (i != root) {
        fprintf(out, "[%zu]\n", k++);
        sum_block(out, &f[i], 0);
      }
  }
  fflush(out);
}

void sum_failure_free(sum_failure_t *f) {
  if (f == NULL)
    return;
  free(f->stderr_tail);
  free(f->error_message);
  f->stderr_tail = NULL;
  f->error_message = NULL;
}
