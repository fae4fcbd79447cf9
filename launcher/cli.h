/* cli.h - `launch [options] PROGRAM [ARGS...]`: torchrun's flags in both
 * spellings (--nproc-per-node / --nproc_per_node) with their PET_*
 * environment fallbacks (command line beats environment beats default),
 * plus launch's own. Parsing fails at once, naming the flag, on unknown
 * flags and impossible values. */
#ifndef CLI_H
#define CLI_H

#include <stdint.h>
#include <stdio.h>

enum { CLI_BACKEND_C10D = 0, CLI_BACKEND_STATIC = 1 };
enum { CLI_STORE_AGENT = 0, CLI_STORE_RANK0 = 1 };
enum { CLI_PROG_AUTO = 0, CLI_PROG_MODULE, CLI_PROG_NO_PYTHON, CLI_PROG_RUN_PATH };

typedef struct cli_opts_s {
  /* nodes and processes */
  int min_nodes, max_nodes;  /* --nnodes N or MIN:MAX */
  int nproc;                 /* --nproc-per-node (resolved: gpu/cpu/auto) */
  char nproc_spec[32];       /* as given, for messages */
  /* rendezvous */
  int standalone;
  int backend;               /* CLI_BACKEND_* (static unless an endpoint) */
  char endpoint_host[256];   /* --rdzv-endpoint host */
  int endpoint_port;
  int endpoint_given;
  char run_id[256];          /* --rdzv-id */
  int node_rank;             /* --node-rank; -1 = not given */
  char master_addr[256];     /* --master-addr */
  int master_port;           /* --master-port */
  char local_addr[256];      /* --local-addr ("" = detect) */
  /* --rdzv-conf */
  int64_t join_timeout_ms, last_call_timeout_ms, close_timeout_ms;
  int64_t heartbeat_ms, read_timeout_ms;
  int is_host;               /* -1 auto, 0, 1 */
  /* supervision */
  int max_restarts;
  int64_t monitor_interval_ms; /* accepted for compatibility */
  int64_t stop_grace_ms;     /* --stop-timeout: SIGTERM -> SIGKILL */
  int64_t exit_barrier_ms;   /* --exit-barrier-timeout */
  unsigned signals_mask;     /* --signals-to-handle, bit per signal */
  char signals_spec[128];
  char role[64];
  /* logs */
  char log_dir[1024];
  unsigned redirects[1024], tee[1024]; /* per local rank, filled to nproc */
  int redirects_given, tee_given;
  char redirects_spec[256], tee_spec[256];
  int ranks_filter_given;
  char ranks_filter_spec[256];
  unsigned char console[1024]; /* --local-ranks-filter */
  char line_prefix[256];     /* --log-line-prefix template */
  /* program */
  int prog_mode;             /* CLI_PROG_* */
  char **prog_argv;          /* PROGRAM ARGS... (points into argv) */
  int prog_argc;
  /* launch's own */
  int torch_store;           /* CLI_STORE_* */
  char token_file[1024];
  char tcpstore_allow[256];
  char cpu_bind[4096];       /* none|numa|cores|LIST ("" = default) */
  char mem_bind[32];
  int report_bindings;
  char nccl_profile[1024];
  int allow_env_override;
  int allow_mismatch;
  char topology_file[1024];
  int quiet;
  int lint;                  /* CLI_LINT_*: --lint error|warn|off */
  /* TLS to the rendezvous server (docs/protocol.md#tls) */
  char tls_ca[1024];         /* --tls-ca: verify the server */
  char tls_cert[1024];       /* --tls-cert: this agent's certificate */
  char tls_key[1024];        /* --tls-key */
} cli_opts_t;

enum { CLI_LINT_ERROR = 0, CLI_LINT_WARN, CLI_LINT_OFF };

/* Parse argv (argv[0] is the program name). Writes the reason of a
 * failure to err (one line naming the flag). RET 0 on success, 1 when
 * --help or --version was printed (exit 0), -1 on a usage error (exit 2). */
int cli_parse(int argc, char **argv, cli_opts_t *o, char *err, size_t errlen);
void cli_help(FILE *out);
/* Parse "N" or "MIN:MAX". RET 0 or -1. */
int cli_parse_nnodes(const char *s, int *min, int *max);
/* Parse a torchrun std spec "3" or "0:1,1:2" for nproc ranks into out[].
 * RET 0 or -1. */
int cli_parse_std_spec(const char *s, int nproc, unsigned *out);
void cli_opts_free(cli_opts_t *o);

#endif /* CLI_H */
