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
} sum_failure_t;

/* Read a TORCHELASTIC_ERROR_FILE (PyTorch's @record format:
 * {"message": {"message": "...", "extraInfo": {"py_callstack": "...",
 * "timestamp": "..."}}} or {"message": "..."}).
 * OUT *message (malloc'd: the message, then the traceback if present).
 * RET 0, -ENOENT when there is no file, RDZV_EPROTO when it is not that
 * JSON. Never crashes on malformed input. */
int sum_read_error_file(const char *path, char **message);

/* Signal name for a number: "SIGKILL", "SIGSEGV", ... or "signal 42". */
const char *sum_signal_name(int sig);

/* Print the summary of n failures to out; the root cause is the earliest
 * by wall_s (ties: lowest rank). `job` names the run id; `restarts` the
 * restarts used of `max_restarts`. */
void sum_print(FILE *out, const char *job, const sum_failure_t *f, size_t n,
               int restarts, int max_restarts);

/* Exit status of launch for a root cause: its exit code, or 128 + signal. */
int sum_exit_status(const sum_failure_t *root);

void sum_failure_free(sum_failure_t *f);

#endif /* SUMMARY_H */
