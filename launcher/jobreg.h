/* jobreg.h - the jobs of this node, for `launch status` with no argument
 * (issue #23). Each agent keeps one small JSON file in the user's runtime
 * directory ($XDG_RUNTIME_DIR/launch, else $TMPDIR/launch-UID, mode 0700):
 * its job, where its rendezvous server is, its pid, and at the end how the
 * job ended. `launch status` lists them, asks nothing of a server for an
 * ended job (an embedded server is gone with its agent), and forgets an
 * ended job JOBREG_KEEP_S after its end. docs/launcher.md#launch-status. */
#ifndef LAUNCH_JOBREG_H_
#define LAUNCH_JOBREG_H_

#include <stddef.h>
#include <stdint.h>

#define JOBREG_KEEP_S 600 /* an ended job stays listed this long */
#define JOBREG_PRUNE_EVERY_S 60 /* jobreg_prune's walk, at most this often */

typedef enum { JOBREG_RUNNING = 0, JOBREG_ENDED, JOBREG_GONE } jobreg_state_t;

typedef struct jobreg_s {
  char job[256];
  char host[256];       /* this node */
  char ep_host[256];    /* the rendezvous server the agent talks to */
  int ep_port;
  int pid;              /* the agent's */
  int standalone, hosting;
  int64_t round, restarts;
  int nproc;
  int64_t started, ended; /* unix seconds; ended 0 while running */
  jobreg_state_t state;   /* GONE: said running, but its pid is gone */
  int ok, exit_code;
  char reason[256];       /* why it ended, when it failed */
  char run_dir[1024];     /* the workers' logs */
  char program[256];
} jobreg_t;

/* The registry folder, created (0700) when missing; refused when it is not
 * a folder of this user's that only this user can write. RET 0, -errno. */
int jobreg_dir(char *out, size_t n);

/* Write (or rewrite) j's file, atomically; path[n] (n >= PATH_MAX) names
 * it. RET 0 or -errno. */
int jobreg_write(const jobreg_t *j, char *path, size_t n);

/* The JSON of one file. RET 0, RDZV_EPROTO (not one of ours). */
int jobreg_parse(const char *buf, size_t len, jobreg_t *j);

/* Every job of the registry, running first, then by start; files of jobs
 * that ended more than JOBREG_KEEP_S ago (or whose agent is gone that
 * long) are removed. OUT *out (free()), *n. RET 0 or -errno. */
int jobreg_list(jobreg_t **out, size_t *n);

/* Remove the files of jobs that ended more than JOBREG_KEEP_S ago, as
 * jobreg_list does, for an agent's start: at most once every
 * JOBREG_PRUNE_EVERY_S a node (the registry's ".pruned" file's mtime says
 * when the last walk ran; most starts cost that one stat), and reading
 * only the files not written for JOBREG_KEEP_S. A node that runs hundreds
 * of short jobs a minute keeps each start's cost flat (it read and parsed
 * every file of the last 10 minutes before). RET files removed, -errno. */
int jobreg_prune(void);

#endif
