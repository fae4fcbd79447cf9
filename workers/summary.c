/* summary.c - the failure summary and the reader of PyTorch's error file.
 *
 * The error file is JSON written by the worker (a user program), so it is
 * untrusted input: a small strict reader (RFC 8259) with a size limit and a
 * nesting limit extracts the three strings we want and validates the rest
 * without building a tree. */
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
#define SUM_DEPTH_MAX 64           /* nesting of objects and arrays */
#define SUM_OTHER_TAIL 5           /* stderr lines shown per other failure */

/* ---- the JSON reader ---------------------------------------------------------- */

/* Where a value sits, as far as the fields we extract are concerned. */
enum {
  JS_ANY = 0,    /* a value we only validate */
  JS_ROOT,       /* the top-level object */
  JS_MSG,        /* root.message */
  JS_MSG_MSG,    /* root.message.message */
  JS_EXTRA,      /* root.message.extraInfo */
  JS_CALLSTACK,  /* root.message.extraInfo.py_callstack */
  JS_TIMESTAMP   /* root.message.extraInfo.timestamp */
};

typedef struct js_s {
  const char *p, *end;
  int depth;
  /* Captures, malloc'd; the last duplicate key wins. */
  char *msg;       /* root.message when a string */
  char *msg_msg;   /* root.message.message */
  char *callstack;
  char *timestamp;
  int msg_is_object;
} js_t;

static void js_ws(js_t *j) {
  while (j->p < j->end &&
         (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

static int js_hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return -1;
  }
  *out = v;
  return 0;
}

static size_t js_utf8(unsigned cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of one valid UTF-8 sequence at p (first byte >= 0x80), or 0:
 * overlong forms, surrogates and code points above U+10FFFF are refused. */
static size_t js_utf8_valid(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0], cp, min;
  size_t n;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
    min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
    min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
    min = 0x10000;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n)
    return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

/* A string at j->p (on the opening quote). With out != NULL the decoded
 * text is returned malloc'd (never longer than the source, which bounds
 * the allocation). \u0000 and lone surrogates become U+FFFD, so that the
 * result is a C string of valid UTF-8. RET 0 or RDZV_EPROTO/ENOMEM. */
static int js_string(js_t *j, char **out) {
  const char *s;
  char *buf = NULL;
  size_t n = 0;
  if (j->p >= j->end || *j->p != '"')
    return RDZV_EPROTO;
  s = ++j->p;
  if (out) {
    /* The decoded text is at most as long as the rest of the input, plus
     * slack for U+FFFD (3 bytes) replacing a 6-byte escape: never longer. */
    if ((buf = malloc((size_t)(j->end - s) + 1)) == NULL)
      return RDZV_ENOMEM;
  }
  while (j->p < j->end) {
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      if (out) {
        buf[n] = '\0';
        *out = buf;
      }
      return 0;
    }
    if (c < 0x20)
      break; /* raw control characters are not allowed in JSON strings */
    if (c == '\\') {
      char e;
      if (j->end - j->p < 2)
        break;
      e = j->p[1];
      j->p += 2;
      if (e == 'u') {
        unsigned cp, lo;
        char tmp[4];
        if (j->end - j->p < 4 || js_hex4(j->p, &cp) != 0)
          break;
        j->p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && j->end - j->p >= 6 &&
            j->p[0] == '\\' && j->p[1] == 'u' && js_hex4(j->p + 2, &lo) == 0 &&
            lo >= 0xDC00 && lo <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          j->p += 6;
        } else if (cp >= 0xD800 && cp <= 0xDFFF) {
          cp = 0xFFFD; /* lone surrogate (Python writes them) */
        }
        if (cp == 0)
          cp = 0xFFFD; /* a C string cannot hold NUL */
        if (out) {
          size_t k = js_utf8(cp, tmp);
          memcpy(buf + n, tmp, k);
          n += k;
        }
        continue;
      }
      switch (e) {
      case '"': c = '"'; break;
      case '\\': c = '\\'; break;
      case '/': c = '/'; break;
      case 'b': c = '\b'; break;
      case 'f': c = '\f'; break;
      case 'n': c = '\n'; break;
      case 'r': c = '\r'; break;
      case 't': c = '\t'; break;
      default:
        goto bad;
      }
      if (out)
        buf[n++] = (char)c;
      continue;
    }
    if (c >= 0x80) {
      size_t k = js_utf8_valid((const unsigned char *)j->p,
                               (const unsigned char *)j->end);
      if (k == 0)
        break;
      if (out) {
        memcpy(buf + n, j->p, k);
        n += k;
      }
      j->p += k;
      continue;
    }
    if (out)
      buf[n++] = (char)c;
    j->p++;
  }
bad:
  free(buf);
  return RDZV_EPROTO;
}

static int js_digits(js_t *j) {
  const char *s = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
    j->p++;
  return j->p > s ? 0 : RDZV_EPROTO;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int js_number(js_t *j) {
  if (j->p < j->end && *j->p == '-')
    j->p++;
  if (j->p >= j->end)
    return RDZV_EPROTO;
  if (*j->p == '0')
    j->p++;
  else if (js_digits(j) != 0)
    return RDZV_EPROTO;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (js_digits(j) != 0)
      return RDZV_EPROTO;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
      j->p++;
    if (js_digits(j) != 0)
      return RDZV_EPROTO;
  }
  return 0;
}

static int js_literal(js_t *j, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
    return RDZV_EPROTO;
  j->p += n;
  return 0;
}

static int js_value(js_t *j, int where);

/* Which field a key leads to, from the field that holds the object. */
static int js_child(int where, const char *key) {
  switch (where) {
  case JS_ROOT:
    return strcmp(key, "message") == 0 ? JS_MSG : JS_ANY;
  case JS_MSG:
    if (strcmp(key, "message") == 0)
      return JS_MSG_MSG;
    return strcmp(key, "extraInfo") == 0 ? JS_EXTRA : JS_ANY;
  case JS_EXTRA:
    if (strcmp(key, "py_callstack") == 0)
      return JS_CALLSTACK;
    return strcmp(key, "timestamp") == 0 ? JS_TIMESTAMP : JS_ANY;
  default:
    return JS_ANY;
  }
}

static int js_object(js_t *j, int where) {
  int rc;
  j->p++; /* '{' */
  js_ws(j);
  if (j->p < j->end && *j->p == '}') {
    j->p++;
    return 0;
  }
  for (;;) {
    char *key = NULL;
    int child;
    js_ws(j);
    /* Keys are decoded only where they can select a field we want. */
    if ((rc = js_string(j, where == JS_ANY ? NULL : &key)) != 0)
      return rc;
    child = key ? js_child(where, key) : JS_ANY;
    free(key);
    js_ws(j);
    if (j->p >= j->end || *j->p != ':')
      return RDZV_EPROTO;
    j->p++;
    js_ws(j);
    if ((rc = js_value(j, child)) != 0)
      return rc;
    js_ws(j);
    if (j->p >= j->end)
      return RDZV_EPROTO;
    if (*j->p == '}') {
      j->p++;
      return 0;
    }
    if (*j->p != ',')
      return RDZV_EPROTO;
    j->p++;
  }
}

static int js_array(js_t *j) {
  int rc;
  j->p++; /* '[' */
  js_ws(j);
  if (j->p < j->end && *j->p == ']') {
    j->p++;
    return 0;
  }
  for (;;) {
    js_ws(j);
    if ((rc = js_value(j, JS_ANY)) != 0)
      return rc;
    js_ws(j);
    if (j->p >= j->end)
      return RDZV_EPROTO;
    if (*j->p == ']') {
      j->p++;
      return 0;
    }
    if (*j->p != ',')
      return RDZV_EPROTO;
    j->p++;
  }
}

static char **js_slot(js_t *j, int where) {
  switch (where) {
  case JS_MSG: return &j->msg;
  case JS_MSG_MSG: return &j->msg_msg;
  case JS_CALLSTACK: return &j->callstack;
  case JS_TIMESTAMP: return &j->timestamp;
  default: return NULL;
  }
}

static int js_value(js_t *j, int where) {
  int rc;
  char **slot;
  if (j->p >= j->end)
    return RDZV_EPROTO;
  switch (*j->p) {
  case '{':
    if (++j->depth > SUM_DEPTH_MAX)
      return RDZV_EPROTO;
    if (where == JS_MSG)
      j->msg_is_object = 1;
    rc = js_object(j, where == JS_ROOT || where == JS_MSG || where == JS_EXTRA
                          ? where
                          : JS_ANY);
    j->depth--;
    return rc;
  case '[':
    if (++j->depth > SUM_DEPTH_MAX)
      return RDZV_EPROTO;
    if (where == JS_MSG)
      j->msg_is_object = 0;
    rc = js_array(j);
    j->depth--;
    return rc;
  case '"':
    if ((slot = js_slot(j, where)) == NULL)
      return js_string(j, NULL);
    if (where == JS_MSG)
      j->msg_is_object = 0;
    free(*slot);
    *slot = NULL;
    return js_string(j, slot);
  case 't':
    return js_literal(j, "true");
  case 'f':
    return js_literal(j, "false");
  case 'n':
    return js_literal(j, "null");
  default:
    if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) {
      const char *s = j->p;
      if ((rc = js_number(j)) != 0)
        return rc;
      /* PyTorch writes the timestamp as a string; accept a number too. */
      if (where == JS_TIMESTAMP) {
        free(j->timestamp);
        j->timestamp = strndup(s, (size_t)(j->p - s));
        if (j->timestamp == NULL)
          return RDZV_ENOMEM;
      }
      return 0;
    }
    return RDZV_EPROTO;
  }
}

int sum_parse_error_json(const char *buf, size_t len, char **message,
                         double *timestamp) {
  js_t j;
  int rc;
  const char *msg = NULL;
  char *out = NULL;
  memset(&j, 0, sizeof(j));
  j.p = buf;
  j.end = buf + len;
  *message = NULL;
  if (timestamp)
    *timestamp = 0;
  if (len > SUM_FILE_MAX)
    return RDZV_ETOOBIG;
  /* A UTF-8 byte order mark is not JSON, but editors write one. */
  if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
    j.p += 3;
  js_ws(&j);
  if (j.p >= j.end || *j.p != '{') {
    rc = RDZV_EPROTO;
    goto out;
  }
  if ((rc = js_value(&j, JS_ROOT)) != 0)
    goto out;
  js_ws(&j);
  if (j.p != j.end) {
    rc = RDZV_EPROTO; /* trailing bytes */
    goto out;
  }
  if (j.msg_is_object)
    msg = j.msg_msg;
  else
    msg = j.msg;
  if (msg == NULL) {
    rc = RDZV_EPROTO;
    goto out;
  }
  if (j.msg_is_object && j.callstack && j.callstack[0]) {
    size_t a = strlen(msg), b = strlen(j.callstack);
    if ((out = malloc(a + 1 + b + 1)) == NULL) {
      rc = RDZV_ENOMEM;
      goto out;
    }
    memcpy(out, msg, a);
    out[a] = '\n';
    memcpy(out + a + 1, j.callstack, b + 1);
  } else if ((out = strdup(msg)) == NULL) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  /* The message ends with the traceback's newline; the summary indents
   * every line itself. */
  lu_rtrim(out, strlen(out));
  if (timestamp && j.msg_is_object && j.timestamp) {
    char *end;
    double t = strtod(j.timestamp, &end);
    if (end != j.timestamp && *end == '\0' && t > 0)
      *timestamp = t;
  }
  *message = out;
  rc = 0;
out:
  free(j.msg);
  free(j.msg_msg);
  free(j.callstack);
  free(j.timestamp);
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

/* Print text with every line after the first indented by `indent`. */
static void sum_indented(FILE *out, const char *text, int indent) {
  const char *p = text;
  for (;;) {
    size_t n = strcspn(p, "\n");
    fwrite(p, 1, n, out);
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
    if (i >= skip)
      fprintf(out, "    | %.*s\n", (int)n, p);
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
  } else if (root) {
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
    fputs("  last lines of stderr:\n", out);
    sum_tail(out, f->stderr_tail, root ? 0 : SUM_OTHER_TAIL);
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
               int restarts, int max_restarts) {
  size_t root = 0, *order;
  fprintf(out, "launch: job %s failed (restarts used: %d of %d)\n",
          job && job[0] ? job : "<none>", restarts, max_restarts);
  if (n == 0) {
    fputs("No worker failure was recorded.\n", out);
    fflush(out);
    return;
  }
  for (size_t i = 1; i < n; i++)
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
