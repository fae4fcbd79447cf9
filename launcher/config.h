/* config.h - the job's configuration (prefix cfg_): everything the agent and
 * `launch env` need to know, read once, in one pass, from
 *
 *   1. the command line: torchrun's flags in both spellings
 *      (--nproc-per-node / --nproc_per_node) and launch's own;
 *   2. the environment, through the tables of sched.c: launch's own
 *      LAUNCH_* variables, torchrun's PET_* (Kubeflow's PyTorchJob sets
 *      them), then the schedulers' (Kubeflow, Slurm, Volcano);
 *   3. defaults, and what follows from the rest (the binding policy, the
 *      endpoint of a static rendezvous, a fresh run id for --standalone).
 *
 * The command line beats the environment, which beats the defaults. Each
 * setting is one row of the table in config.c, with its handler and its
 * help text, so `launch --help` is generated from what the parser accepts.
 * Nothing else in the launcher reads an environment variable: the workers'
 * inherited environment is cfg.environ. docs/launcher.md lists it all. */
#ifndef CONFIG_H
#define CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "server.h"

enum { CFG_BACKEND_C10D = 0, CFG_BACKEND_STATIC = 1, CFG_BACKEND_ETCD = 2 };
enum { CFG_STORE_AGENT = 0, CFG_STORE_RANK0 = 1 };
enum { CFG_PROG_AUTO = 0, CFG_PROG_MODULE, CFG_PROG_NO_PYTHON, CFG_PROG_RUN_PATH };
enum { CFG_LINT_ERROR = 0, CFG_LINT_WARN, CFG_LINT_OFF };
enum { CFG_CKPT_VERIFY_SHA = 0, CFG_CKPT_VERIFY_SIZE };
/* --exit-code: the failing worker's code, or torchrun's 1 for any failure */
enum { CFG_EXIT_LAUNCH = 0, CFG_EXIT_TORCHRUN = 1 };

#define CFG_MAX_NPROC 1024
/* --rdzv-conf etcd_prefix: its longest value (a '/' is added when it does
 * not end in one) */
#define CFG_ETCD_PREFIX_MAX 200

/* The settings: one row each in config.c's table. Those without a flag are
 * set from the environment only. */
typedef enum {
  CFG_S_NNODES, CFG_S_NPROC, CFG_S_BACKEND, CFG_S_ENDPOINT, CFG_S_ID,
  CFG_S_CONF, CFG_S_STANDALONE, CFG_S_NODE_RANK, CFG_S_MASTER_ADDR,
  CFG_S_MASTER_PORT, CFG_S_LOCAL_ADDR, CFG_S_MAX_RESTARTS, CFG_S_SIGNALS,
  CFG_S_STOP_TIMEOUT, CFG_S_EXIT_BARRIER, CFG_S_MONITOR, CFG_S_START_METHOD,
  CFG_S_HANG_TIMEOUT, CFG_S_HANG_SIGNAL, /* hang.c */
  CFG_S_STANDBY, CFG_S_STANDBY_TIMEOUT,
  CFG_S_NO_RESTART_CODES,
  CFG_S_ROLE, CFG_S_MODULE, CFG_S_NO_PYTHON, CFG_S_RUN_PATH, CFG_S_LOG_DIR,
  CFG_S_REDIRECTS, CFG_S_TEE, CFG_S_RANKS_FILTER, CFG_S_LINE_PREFIX,
  CFG_S_EVENT_LOG, CFG_S_EVENT_FILE, CFG_S_METRICS_PORT, CFG_S_LOGS_SPECS, CFG_S_TORCH_STORE, CFG_S_TOKEN_FILE,
  CFG_S_TLS_CA, CFG_S_TLS_CERT, CFG_S_TLS_KEY, CFG_S_TCPSTORE_ALLOW,
  CFG_S_CPU_BIND, CFG_S_NUMA_BINDING, CFG_S_MEM_BIND,
  CFG_S_REPORT_BINDINGS, CFG_S_TOPOLOGY, CFG_S_NCCL_PROFILE,
  CFG_S_ALLOW_ENV_OVERRIDE, CFG_S_LINT, CFG_S_ALLOW_MISMATCH, CFG_S_QUIET,
  CFG_S_NO_LOG_TIME, CFG_S_EXIT_CODE, CFG_S_TORCH_VERSION,
  /* checkpoints (docs/checkpoints.md) */
  CFG_S_CKPT_DIR, CFG_S_CKPT_KEEP, CFG_S_CKPT_LAYOUT, CFG_S_CKPT_VERIFY,
  /* `launch env`'s */
  CFG_S_ENV_LOCAL_RANK, CFG_S_ENV_PROFILE, CFG_S_ENV_ALL, CFG_S_ENV_LINT,
  CFG_S_ENV_ROOT, CFG_S_ENV_FINGERPRINT, CFG_S_ENV_PROGRAM, CFG_S_ENV_LIST,
  CFG_S_ENV_SHOW, CFG_S_ENV_JSON, CFG_S_STATUS_TIMEOUT,
  /* `launch doctor`'s */
  CFG_S_DOC_NNODES, CFG_S_DOC_EXPECT_GPUS, CFG_S_DOC_NO_PROBE,
  CFG_S_DOC_TIMEOUT, CFG_S_DOC_JOIN_TIMEOUT, CFG_S_DOC_COMPACT,
  /* `launch topo`'s */
  CFG_S_TOPO_CVD, CFG_S_TOPO_GPU_PROBE, CFG_S_TOPO_EXPORT,
  /* `launch server`'s: what srv_new takes (cfg.srv) */
  CFG_S_SRV_HOST, CFG_S_SRV_PORT, CFG_S_SRV_UNIX, CFG_S_SRV_PORT_FILE,
  CFG_S_SRV_TOKEN_FILE, CFG_S_SRV_ISSUE_KEY, CFG_S_SRV_TLS_CERT,
  CFG_S_SRV_TLS_KEY, CFG_S_SRV_TLS_CA, CFG_S_SRV_TCPSTORE_JOB,
  CFG_S_SRV_TCPSTORE_ALLOW, CFG_S_SRV_METRICS_PORT, CFG_S_SRV_THREADS,
  CFG_S_SRV_EVENT_LOG,
  /* its limits (docs/protocol.md#limits) */
  CFG_S_SRV_MAX_MEMORY, CFG_S_SRV_MAX_STORE, CFG_S_SRV_MAX_INPUT,
  CFG_S_SRV_MAX_OUT, CFG_S_SRV_MAX_FRAME, CFG_S_SRV_MAX_VALUE,
  CFG_S_SRV_MAX_WAITS, CFG_S_SRV_MAX_CONNS, CFG_S_SRV_MAX_CONNS_ADDR,
  CFG_S_SRV_MAX_JOBS, CFG_S_SRV_MAX_JOBS_ADDR, CFG_S_SRV_HANDSHAKE,
  CFG_S_SRV_JOB_GRACE, CFG_S_SRV_KEEP_ENDED, CFG_S_SRV_LIMIT_EVENT,
  /* its debug knobs (launch server --help-debug; LAUNCH_SERVER_*) */
  CFG_S_SRV_TRACE, CFG_S_SRV_TURN, CFG_S_SRV_PASS, CFG_S_SRV_PLAIN_LOCK,
  CFG_S_SRV_LOCK_SPINS, CFG_S_SRV_BIG_CACHE, CFG_S_HELP_DEBUG,
  /* `launch ckpt`'s */
  CFG_S_CKPT_CMD_LAYOUT, CFG_S_CKPT_CMD_RANKS,
  CFG_S_HELP, CFG_S_VERSION, CFG_S_FROM_TASKS,
  /* from the environment only */
  CFG_S_HOSTNAME, CFG_S_EXPECTED_HOSTS, CFG_S_NODE_INDEX, CFG_S_PYTHON,
  CFG_S_TMPDIR, CFG_S_CUDA_VISIBLE,
  /* what a scheduler says (sched.c): where the rendezvous is and whether
   * this node hosts it, this task's place (--from-tasks), whether it bound
   * the task's CPUs */
  CFG_S_SCHED_ENDPOINT, CFG_S_SCHED_HOST, CFG_S_TASK_RANK,
  CFG_S_TASK_LOCAL_RANK, CFG_S_TASK_WORLD, CFG_S_TASK_LOCAL_WORLD,
  CFG_S_SCHED_BOUND,
  /* a Volcano job of several tasks: this pod's place among every task's
   * pods, its task's pod count, every task's pods (config.c's
   * sched_job_wide) */
  CFG_S_SCHED_JOB_INDEX, CFG_S_SCHED_TASK_NODES, CFG_S_SCHED_JOB_HOSTS,
  CFG_S_COUNT
} cfg_setting_t;

typedef struct cfg_s {
  /* nodes and processes */
  int min_nodes, max_nodes;  /* --nnodes N or MIN:MAX */
  int nproc;                 /* --nproc-per-node (resolved: gpu/cpu/auto) */
  char nproc_spec[32];       /* as given, for messages */
  /* rendezvous */
  int standalone;
  int backend;               /* CFG_BACKEND_* (static unless an endpoint) */
  char endpoint_host[256];   /* --rdzv-endpoint host */
  int endpoint_port;
  int endpoint_given;
  char run_id[256];          /* --rdzv-id */
  int node_rank;             /* --node-rank; -1 = not given */
  int pref_node_rank;        /* the node rank asked for at the join: static
                                --node-rank, else the scheduler's node index
                                (c10d), else -1 */
  char master_addr[256];     /* --master-addr */
  int master_port;           /* --master-port */
  char local_addr[256];      /* --local-addr ("" = detect) */
  int64_t join_timeout_ms;   /* --rdzv-conf join_timeout */
  int64_t last_call_timeout_ms;
  int64_t close_timeout_ms;  /* how long the hosting agent keeps the server
                                for the others to learn the end */
  int64_t heartbeat_ms;
  int64_t read_timeout_ms;   /* a server that answers no request this long
                                is lost */
  int64_t static_wait_ms;    /* static backend: how long a node other than
                                node 0 waits for node 0's server (--rdzv-conf
                                timeout, default 900 s as torchrun) */
  int conf_rank;             /* --rdzv-conf rank (static backend's node
                                rank); -1 when not given */
  int conf_heartbeat;        /* --rdzv-conf heartbeat was given */
  int conf_timeout;          /* --rdzv-conf timeout was given */
  /* --rdzv-backend etcd (docs/rendezvous.md#etcd-backend) */
  char endpoint_raw[1024];   /* --rdzv-endpoint as given (etcd: a list) */
  char etcd_cacert[PATH_MAX]; /* --rdzv-conf cacert/cert/key */
  char etcd_cert[PATH_MAX];
  char etcd_key[PATH_MAX];
  char etcd_user[256];       /* --rdzv-conf user=NAME[:PASSWORD] */
  char etcd_prefix[CFG_ETCD_PREFIX_MAX + 2]; /* --rdzv-conf etcd_prefix,
                                ending in '/' ("/launch/" by default): the
                                job's keys lie under <etcd_prefix><job>/ */
  int etcd_https;            /* --rdzv-conf protocol=https */
  int64_t etcd_ttl_ms;       /* --rdzv-conf lease_ttl (default 10 s) */
  int store_port;            /* --rdzv-conf store_port: the embedded
                                server's port under etcd (default 29400) */
  int is_host;               /* -1 auto, 0, 1 (rdzv-conf is_host, else the
                                scheduler's sched_host) */
  int sched_endpoint;        /* the endpoint is the scheduler's (the first
                                node of the job, a derived port) */
  int sched_host;            /* -1, or whether the scheduler's endpoint is
                                this node (node 0 of the job): decides who
                                hosts, instead of the address */
  /* supervision */
  int max_restarts;
  int64_t stop_grace_ms;     /* --stop-timeout: SIGTERM -> SIGKILL */
  int64_t exit_barrier_ms;   /* --exit-barrier-timeout */
  unsigned signals_mask;     /* --signals-to-handle, bit per signal */
  char signals_spec[128];
  char role[64];
  int64_t hang_timeout_ms;   /* --hang-timeout: 0 = off */
  int hang_signal;           /* --hang-signal: the dump signal, 0 none */
  int standby;               /* --standby: a pre-started worker per rank */
  int64_t standby_ready_ms;  /* --standby-timeout: it says ready by then */
  unsigned char no_restart[256]; /* --no-restart-exit-codes: 1 for each exit
                                    code that ends the job at once */
  char event_log[PATH_MAX];  /* --event-log FILE ("" none; events.h) */
  int event_handler;         /* --event-log-handler: 0 null, 1 console */
  int metrics_port;          /* --metrics-port: -1 off, 0 any free port */
  char metrics_addr[64];     /* its address ("" every address) */
  /* logs */
  char log_dir[PATH_MAX];
  unsigned redirects[CFG_MAX_NPROC], tee[CFG_MAX_NPROC]; /* per local rank */
  char redirects_spec[256], tee_spec[256];
  char ranks_filter_spec[256];
  unsigned char console[CFG_MAX_NPROC]; /* --local-ranks-filter */
  char line_prefix[256];     /* --log-line-prefix template */
  int quiet;
  int no_log_time;           /* no timestamps on the agent's lines */
  /* program */
  int prog_mode;             /* CFG_PROG_* */
  char **prog_argv;          /* PROGRAM ARGS... (points into argv) */
  int prog_argc;
  char python[PATH_MAX];     /* PYTHON_EXEC, else python3 */
  /* launch's own */
  int torch_store;           /* CFG_STORE_* */
  char token_file[PATH_MAX];
  char tls_ca[PATH_MAX];     /* TLS to the server (docs/protocol.md#tls) */
  char tls_cert[PATH_MAX];
  char tls_key[PATH_MAX];
  char tcpstore_allow[256];
  char cpu_bind[4096];       /* none|numa|cores|LIST, defaults resolved */
  char mem_bind[32];         /* none|local|preferred, defaults resolved */
  int report_bindings;
  char nccl_profile[PATH_MAX]; /* name or file (default auto) */
  int allow_env_override;
  int allow_mismatch;
  char topology_file[PATH_MAX];
  int lint;                  /* CFG_LINT_* */
  /* checkpoints (docs/checkpoints.md): agreed resume step at every start */
  char ckpt_dir[PATH_MAX];   /* --ckpt-dir ("" = none) */
  int ckpt_keep;             /* --ckpt-keep (default 3) */
  int ckpt_layout;           /* --ckpt-layout: a ckpt_layout_t */
  int ckpt_verify;           /* --ckpt-verify: CFG_CKPT_VERIFY_* */
  int exit_code_mode;        /* CFG_EXIT_* */
  char torch_version_spec[32]; /* --torch-version as given ("" = find it) */
  int torch_version;         /* major * 100 + minor of the workers' PyTorch,
                                0 when not known (see launch_torch_version) */
  /* this node, from the environment */
  char host[256];            /* LAUNCH_HOSTNAME, else gethostname() */
  char **expected_hosts;     /* LAUNCH_EXPECTED_HOSTS, SLURM_JOB_NODELIST */
  size_t nexpected;
  int sched_node_index;      /* SLURM_NODEID, VC_TASK_INDEX; -1 */
  /* A Volcano job of several tasks: this pod's index among the pods of
   * every task, its task's pod count (-1), every task's pods. A node count
   * more than the task's makes them the node index and expected hosts. */
  int sched_job_index, sched_task_nodes;
  char **sched_job_hosts;
  size_t nsched_job_hosts;
  /* --from-tasks: the scheduler started one task per worker */
  int from_tasks;
  int task_rank, task_local_rank;   /* SLURM_PROCID, SLURM_LOCALID; -1 */
  int task_world, task_local_world; /* SLURM_NTASKS, this node's tasks; -1 */
  int sched_bound;           /* the scheduler bound this task's CPUs */
  char tmpdir[PATH_MAX];     /* TMPDIR, else /tmp */
  const char *cuda_visible_devices; /* NULL when unset (points into environ) */
  int ngpus;                 /* GPUs this node shows the job */
  char *const *environ;      /* what the workers inherit */
  /* `launch env`'s own options (CFG_ENV_CMD) */
  int env_local_rank, env_all, env_lint, env_fingerprint, env_json, env_list;
  char env_root[PATH_MAX];
  char env_show[64];
  const char *env_programs[9]; /* NULL-terminated */
  int env_nprograms;
  int64_t status_timeout_ms; /* `launch status --timeout` */
  /* `launch doctor`'s (CFG_DOCTOR_CMD) */
  int doc_nnodes, doc_expect_gpus, doc_no_probe, doc_timeout_ms, doc_compact;
  int64_t doc_join_timeout_ms;
  /* `launch topo`'s (CFG_TOPO_CMD) */
  char topo_cvd[256];        /* --cuda-visible-devices */
  int topo_gpu_probe;        /* sysfs, nvml, pci, check */
  char topo_export[PATH_MAX];
  /* `launch server`'s (CFG_SERVER_CMD): srv is what srv_new takes, its
   * strings point here (cfg_server_config); --token-file, the TLS files,
   * --tcpstore-allow and --metrics-port are the agent's fields above */
  srv_config_t srv;
  char srv_host[256], srv_unix[PATH_MAX], srv_port_file[PATH_MAX];
  char srv_issue_key[256], srv_tcpstore_job[256];
  char srv_event_log[PATH_MAX]; /* launch server --event-log */
  /* `launch ckpt`'s (CFG_CKPT_CMD): --layout is ckpt_layout above */
  char ckpt_ranks[256];      /* --ranks LIST as given ("" all) */
  /* the positional arguments of a command that takes them among its
   * options (`launch ckpt ls DIR --json`) */
  char *args[4];
  int nargs;
  char warning[512];         /* a setup that runs, but not as meant (an
                                sbatch script without srun): printed by the
                                agent at start */
  char notes[1024];          /* settings accepted with no effect here: one
                                line each, printed by the agent at start */
  unsigned char given[CFG_S_COUNT]; /* set on the command line or from the
                                       environment */
  const char *given_by[CFG_S_COUNT]; /* the variable a setting came from
                                        (static), NULL: not from one */
} cfg_t;

/* How cfg_parse is called. */
enum {
  CFG_NEED_PROGRAM = 1 << 0, /* the agent: PROGRAM is required */
  CFG_ENV_CMD = 1 << 1,      /* `launch env`: its own options first */
  CFG_STATUS_CMD = 1 << 2,   /* `launch status`: its own and the server's
                                address, id, token and TLS files */
  CFG_DOCTOR_CMD = 1 << 3,   /* `launch doctor`: its own, the rendezvous'
                                and the NCCL profile */
  CFG_TOPO_CMD = 1 << 4,     /* `launch topo`: its own and the binding's */
  CFG_SERVER_CMD = 1 << 5,   /* `launch server`: its own, from the command
                                line and LAUNCH_SERVER_* only */
  CFG_CKPT_CMD = 1 << 6,     /* `launch ckpt`: its own; VERB DIR anywhere
                                among them (c->args) */
  CFG_HELP_DEBUG = 1 << 7,   /* cfg_help: the debug knobs too */
};

/* Fill c from argv (argv[0] is the program name) and envp (NULL-terminated
 * "KEY=VALUE", kept as c->environ: it must outlive c). Writes the reason of
 * a failure to err (one line naming the flag or variable). RET 0, 1 when
 * --help or --version was printed (exit 0), -1 on a usage error (exit 2).
 * Free with cfg_free() whatever it returned. */
int cfg_parse(int argc, char **argv, char *const *envp, unsigned flags,
              cfg_t *c, char *err, size_t errlen);
void cfg_free(cfg_t *c);
/* --help of the agent, or (flags) of `launch env`, `status`, `doctor`,
 * `topo`, `server` or `ckpt`; CFG_HELP_DEBUG adds the debug knobs. */
void cfg_help(FILE *out, unsigned flags);
/* A PyTorch version ("1.13.1", "2.11.0+cu128", "2.2") as major * 100 +
 * minor. RET 0 or -1. */
int cfg_parse_torch_version(const char *v, int *out);
/* `launch server`: point c->srv's strings at what was given (NULL for what
 * was not). Call once after cfg_parse; c must not move afterwards. */
void cfg_server_config(cfg_t *c);


/* ---- sched.c: the environment --------------------------------------------
 * One table per source: launch's own variables, torchrun's PET_*, Kubeflow,
 * Slurm, Volcano. Each row names a variable and the setting of config.c it
 * feeds (its value as it is, or derived from it and the rest of the
 * environment); a source applies when one of its variables says the process
 * runs under it. A source that is earlier in the list wins over a later
 * one, and the command line over all. docs/schedulers.md. */

/* The value of name in envp, NULL when unset. */
const char *sched_getenv(char *const *envp, const char *name);

typedef int (*sched_apply_fn)(void *ctx, int setting, const char *var,
                              const char *value, char *err, size_t errlen);
/* Call apply(ctx, setting, var, value) for every variable of every table
 * that is set and non-empty in envp, unless seen[setting] (the command line
 * or an earlier source gave it) or a setting that makes the row moot was
 * seen; marks seen. RET 0, -1 with err naming the variables when a
 * scheduler's facts do not add up, or the first non-zero apply result. */
int sched_read(char *const *envp, unsigned char *seen, sched_apply_fn apply,
               void *ctx, char *err, size_t errlen);
/* The same with launch's own variables only, for the commands that run
 * outside a job (`launch server`, `launch ckpt`): no scheduler's. */
int sched_read_own(char *const *envp, unsigned char *seen,
                   sched_apply_fn apply, void *ctx, char *err, size_t errlen);
/* The variable of launch's own that feeds setting, NULL when none (for
 * --help). */
const char *sched_own_var(int setting);
/* Slurm's default rendezvous port of a job step: 29400 + (8 x job id +
 * step id) mod 1000, so that steps and jobs sharing a node differ. */
int sched_slurm_port(long long job_id, long long step_id);

/* ---- tasks.c: --from-tasks ------------------------------------------------
 * The scheduler started each worker (srun --ntasks-per-node=G): give this
 * task its worker environment (torchrun's contract, the NCCL profile, the
 * lock), bind it, let task 0 host the job's store, exec PROGRAM. Returns
 * only on failure: the exit code. */
int launch_from_tasks(cfg_t *c);

/* --metrics-port [ADDR:]PORT|off (the agent's and launch server's): OUT
 * addr ("" every address), *port (-1 off). RET 0, or -1 with err. */
int cfg_parse_metrics_port(const char *v, char *addr, size_t cap, int *port,
                           char *err, size_t n);

#endif /* CONFIG_H */
