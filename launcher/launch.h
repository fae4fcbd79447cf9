/* launch.h - the launch command: its subcommands, and this node as the
 * agent and `launch env` see it (node.c), so that `launch env` prints what
 * the agent gives a worker under the same flags. */
#ifndef LAUNCH_H
#define LAUNCH_H

#include <limits.h>
#include <stdio.h>

#include "aff.h"
#include "config.h"
#include "env.h"
#include "lu.h"

extern char **environ; /* what the subcommands read their configuration from */

/* Each subcommand: argv[0] is the subcommand name. RET the exit code. */
int launch_cmd_ckpt(int argc, char **argv);
int launch_cmd_server(int argc, char **argv);
int launch_cmd_status(int argc, char **argv);
int launch_cmd_topo(int argc, char **argv);
int launch_cmd_env(int argc, char **argv);
int launch_cmd_doctor(int argc, char **argv);

/* ---- node.c ----------------------------------------------------------------- */

/* This node: the NCCL profile, the topology and the binding plan, the GPU
 * libraries' versions. */
/* launch's own exit statuses (docs/exit-codes.md); a failed job exits with
 * its failing worker's code, 128 + N for a signal. */
enum {
  LAUNCH_EXIT_USAGE = 2,     /* configuration or usage error */
  LAUNCH_EXIT_INTERNAL = 70, /* launch itself failed */
  LAUNCH_EXIT_RDZV = 75,     /* the rendezvous failed: another try may work */
  LAUNCH_EXIT_MISMATCH = 76  /* this node differs from node 0 */
};

typedef struct launch_node_s {
  prof_t *prof;
  aff_policy_t *pol;
  aff_topo_t *topo;   /* NULL when nothing needed it */
  aff_plan_t *plan;   /* NULL: the workers are not bound */
  aff_sysinfo_t si;   /* probed where there are GPUs (or under root) */
  aff_facts_t *facts; /* this node's GPUs, HCAs and ports, netdevs
                         (under root), read once at open: the lint's */
  const char *root;   /* /sys and /proc prefix of the lint (NULL = /) */
  int foreign;        /* the topology is another machine's (--topology) */
  int torch_version;  /* the workers' PyTorch (cfg_t's), for the lint */
  int no_gpu;         /* the job uses no GPU here: NCCL lint errors warn */
  int report_only;    /* the plan is for --report-bindings only: the
                         workers are neither bound nor told */
} launch_node_t;

/* What launch_node_open is for. */
enum {
  LAUNCH_NODE_TOPO = 1 << 0, /* load the topology even without binding */
  LAUNCH_NODE_SHOW = 1 << 1  /* `launch env`: ranks are shown, not started,
                                so another machine's plan (--topology) is
                                shown as theirs; elsewhere it is a report
                                only (this machine is not that one) */
};

/* Load the profile, the node's facts, the topology (when binding,
 * --report-bindings, --topology or LAUNCH_NODE_TOPO ask for it) and the plan. Blocking (hwloc, and
 * NVML where there are GPUs); once at start. Messages go to log (NULL:
 * quiet). RET 0, or an error with err naming the flag to fix. Close n
 * whatever it returned. */
int launch_node_open(const cfg_t *c, unsigned flags, const char *root,
                     lu_log_t *log, launch_node_t *n, char *err, size_t errlen);
void launch_node_close(launch_node_t *n);

/* What a round decided, as the worker environment needs it. */
typedef struct launch_round_s {
  int64_t round;
  int64_t restarts;       /* spent on failures: TORCHELASTIC_RESTART_COUNT */
  int node_rank, nnodes, world_size, base_rank;
  char master_addr[300];  /* the store the workers use */
  int master_port;
  char endpoint[320];     /* the server, host:port */
  char attempt_dir[PATH_MAX];
  int64_t resume_step;    /* the agreed step (LAUNCH_RESUME_STEP), -1 none */
  int64_t ckpt_verified;  /* this node verified that step's shards, -1 */
  const char *const *progress_tags; /* per local rank (hang_tag), or NULL */
} launch_round_t;

/* The round the flags promise before the rendezvous: round 0, the node
 * rank asked for (else 0), MAX nodes of nproc workers each, the store at
 * the endpoint, the attempt directory under run_dir. */
void launch_round_guess(const cfg_t *c, const char *run_dir, launch_round_t *r);

/* Local rank local_rank's whole environment (env_build_rank with the
 * contract of c and r, the binding of n's plan, n's profile). log: the
 * profile's changes and warnings (NULL: quiet). OUT *out: env_free().
 * RET 0 or an error. */
int launch_rank_env(const cfg_t *c, const launch_node_t *n,
                    const launch_round_t *r, int local_rank, lu_log_t *log,
                    env_t **out);

/* Lint e against this node (its interfaces and RDMA devices under n->root,
 * NVLink from the topology, the installed NCCL's version). OUT *f
 * (free()), *nf. RET 0 or RDZV_ENOMEM. */
int launch_lint(const launch_node_t *n, const env_t *e, env_finding_t **f,
                int *nf);

/* The worker command line: python3 -u (-m) for Python programs
 * (PYTHON_EXEC), else the program itself. OUT *argv NULL-terminated,
 * free with launch_argv_free. RET 0 or RDZV_ENOMEM. */
int launch_worker_argv(const cfg_t *c, char ***argv);
/* The version of the PyTorch PROGRAM's interpreter would import, as major *
 * 100 + minor, read from its site-packages without importing it
 * (torchver.c); 0 when there is no Python or no torch. where: the file it
 * came from. */
int launch_torch_version(const cfg_t *c, char *where, size_t wl);
/* Its parsers apart from their reads (fuzz_torchver_files):
 * tv__line_value: the first of f's lines (400, read 511 bytes at a time)
 * starting with key, after it and without its newline, into out (RET 1, or
 * 0 none); tv__shebang: the python a script's first line (changed) names
 * after "#!", directly or through env (RET 0 or -1); tv__prefix_reply: the
 * interpreter's "PREFIX\nX.Y" (changed) into prefix and pyver (RET 0 or
 * -1). */
int tv__line_value(FILE *f, const char *key, char *out, size_t cap);
int tv__shebang(char *line, char *out, size_t cap);
int tv__prefix_reply(char *out, char *prefix, size_t pl, char *pyver,
                     size_t vl);
void launch_argv_free(char **argv);

/* The node fingerprint sent with the join: e a rank's environment; the
 * program files of argv (regular files named with a '/': the executable,
 * the script of an interpreter) plus extra (NULL-terminated, may be NULL)
 * are hashed. OUT *out: env_fp_free(). RET 0 or -errno (a file to hash is
 * unreadable: err says which). */
int launch_node_fingerprint(const launch_node_t *n, const env_t *e,
                            char *const *argv, const char *const *extra,
                            env_fp_t **out, char *err, size_t errlen);

/* Is ip (text) one of this node's addresses (127/8 counts)? */
int launch_ip_is_local(const char *ip);
/* Which process listens on TCP port (any address), when this user can
 * see it: writes "comm (pid N)" to out. RET its pid, 0 when not knowable
 * (nothing listed, or another user's process). */
int launch_port_holder(int port, char *out, size_t cap);
/* The inode of the socket listening on port in f, a table of /proc/net/tcp
 * or tcp6; 0 when none (netaddr.c; fuzz_proc_text drives it). */
unsigned long launch__listen_inode_in(FILE *f, int port);
/* Is name one of this node's host names (host: cfg_t's)? */
int launch_is_my_name(const char *name, const char *host);
/* host's first address as text. RET 0 or RDZV_ERESOLVE. */
int launch_resolve_ip(const char *host, char *ip, size_t cap);

/* Print "launch: <msg>" to stderr; used for usage errors (exit 2). */
void launch_usage_error(const char *fmt, ...) LU_PRINTF(1, 2);
/* Raise RLIMIT_NOFILE's soft limit to the hard limit. */

#endif
