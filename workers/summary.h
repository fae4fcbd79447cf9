/* summary.h - the failure summary printed when a job fails: the root cause
 * first (the earliest failure), then every other failure, each with time,
 * host, global and local rank, pid, exit code or signal name, the last
 * lines of its stderr, and the message from its TORCHELASTIC_ERROR_FILE. */
#ifndef SUMMARY_H
#define SUMMARY_H

#include <stddef.h>
#include <stdio.h>

typedef struct sum_failure_s {
  double wall_s;         /* when it failed */
  char host[256];
  int rank, local_rank, node_rank;
  int pid;
  int exit_code;         /* -1 when killed by a signal */
  int signal;
  char *stderr_tail;     /* malloc'd or NULL */
  char *error_message;   /* from the error file, malloc'd or NULL */
  int python;            /* the worker runs Python: the @record hint
                            applies when there is no error file */
} sum_failure_t;

/* Read a TORCHELASTIC_ERROR_FILE (PyTorch's @record format:
 * {"message": {"message": "...", "extraInfo": {"py_callstack": "...",
 * "timestamp": "..."}}} or {"message": "..."}).
 * OUT *message (malloc'd: the message, then the traceback if present,
 * trailing newlines removed; NULL on error).
 * RET 0, -ENOENT when there is no file, RDZV_EPROTO when it is not that
 * JSON, RDZV_ETOOBIG over 1 MiB, other -errno from reading it. Never
 * crashes on malformed input. */
int sum_read_error_file(const char *path, char **message);

/* The parser behind sum_read_error_file, on memory (added for the fuzz
 * target and for callers that read the file themselves). Strict RFC 8259
 * JSON, at most 1 MiB and 64 levels of nesting; \uXXXX escapes become
 * UTF-8, a lone surrogate or \u0000 becomes U+FFFD; a leading UTF-8 BOM is
 * skipped. OUT *message as above; *timestamp (may be NULL): the error
 * file's extraInfo.timestamp (epoch seconds; PyTorch uses it to find the
 * root cause), 0 when absent. RET 0, RDZV_EPROTO, RDZV_ETOOBIG,
 * RDZV_ENOMEM. */
int sum_parse_error_json(const char *buf, size_t len, char **message,
                         double *timestamp);

/* Signal name for a number: "SIGKILL", "SIGSEGV", ... or "signal 42"
 * (real-time signals, 32..64), "unknown signal" out of range. Static. */
const char *sum_signal_name(int sig);

/* Print the summary of n failures to out. The root cause is f[root] when
 * root >= 0 (the server's: the one every node's exit status comes from,
 * whatever the nodes' clocks say), else the earliest by wall_s (ties:
 * lowest rank). `job` names the run id; `restarts` the restarts used of
 * `max_restarts`. */
void sum_print(FILE *out, const char *job, const sum_failure_t *f, size_t n,
               int restarts, int max_restarts, int root);

/* Exit status of launch for a root cause: its exit code, or 128 + signal;
 * never 0 (a root cause without either, or NULL, gives 1). */
int sum_exit_status(const sum_failure_t *root);

void sum_failure_free(sum_failure_t *f);

#endif /* SUMMARY_H */
