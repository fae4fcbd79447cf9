/* env.h - the worker environment: NCCL profiles (prof_), the locked
 * environment builder, lint and node fingerprint (env_). Module env/.
 *
 * What the agent (launcher/node.c) does with it:
 *
 *   at start     prof_load(--nccl-profile)                 once
 *                env_build_rank(rank 0's opts, &e); env_node_probe() and
 *                  env_lint(e, &node, ...) -> log the findings, refuse to
 *                  start on ENV_SEV_ERROR unless --lint warn|off
 *                env_fp_collect(e, versions, program) -> env_fp_serialize()
 *                  -> sent with the rendezvous join; the server
 *                  env_fp_parse()s every node's and env_fp_diff()s them
 *   per rank     env_build_rank(the rank's contract and aff_binding_envv())
 *                  -> env_envp(e) for execve, before fork (nothing here is
 *                  async-signal-safe)
 *
 * Locking (infrastructure rule, not negotiable): every environment built
 * here ends with NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
 * NVSHMEM_DISABLE_NVLS=1. NVLink multicast can take shared GPUs down; no
 * profile, inherited variable or --allow-env-override turns it on, and an
 * NCCL_ALGO that asks for NVLS is dropped. Each refusal is logged and kept
 * as a note that the lint reports.
 *
 * Errors: 0 or negative RDZV_E* / -errno. Parsers fill err with a sentence
 * naming the file, line and what to write instead. Threads: objects are
 * used by one thread at a time; nothing global is mutable.
 */
#ifndef ENV_H
#define ENV_H

#include <stddef.h>
#include <stdint.h>

#include "lu.h"
#include "rdzv.h"

/* ---- profiles ------------------------------------------------------------------
 * A profile is a text file of KEY=VALUE lines and # comments, the format of
 * /etc/profile.d/nccl.sh: an optional leading `export `, values unquoted,
 * "double-quoted" or 'single-quoted', a trailing `# comment` after
 * whitespace. Values may use templates, expanded per rank:
 *   ${NAME}            the variable NAME of the environment being built
 *                      (the launcher's LOCAL_RANK, LAUNCH_HCA, LAUNCH_HCAS,
 *                      LAUNCH_HCA_PORT, LAUNCH_NETDEV, LAUNCH_NUMA_NODE ...)
 *   ${NAME:-default}   default when NAME is unset or empty
 * A line whose template is empty without a default is skipped with a
 * warning (no HCA on this node: no NCCL_IB_HCA). Single quotes keep ${ }
 * literal. Anything else a shell would run (unset, if, $VAR without
 * braces, a key set twice) is refused with the line number. */

#define PROF_MAX_BYTES (1u << 20)
#define PROF_MAX_ENTRIES 512
#define PROF_MAX_LINE 4096

typedef struct prof_s prof_t;

typedef struct prof_entry_s {
  const char *key;
  const char *value; /* unexpanded */
  int line;
  int templated;     /* value holds ${...} */
} prof_entry_t;

/* Parse text (not NUL-terminated; NUL bytes are refused). name is what
 * messages call it ("profile pcie-ib", "/etc/profile.d/nccl.sh").
 * OUT *out: free with prof_free(). RET 0, RDZV_EINVAL (err: "NAME:LINE:
 * what is wrong; what to write"), RDZV_ETOOBIG, RDZV_ENOMEM. */
int prof_parse(const char *text, size_t len, const char *name, prof_t **out,
               char *err, size_t errlen);
/* A built-in name (auto, pcie-ib, nvlink-ib, roce, socket) or a file path
 * (anything with a '/' or ending in .env/.sh, or an existing file).
 * RET as prof_parse, -errno for files, RDZV_ENOKEY for an unknown name
 * (err lists the built-ins). */
int prof_load(const char *name_or_path, prof_t **out, char *err,
              size_t errlen);
void prof_free(prof_t *p); /* NULL is a no-op */
const char *prof_name(const prof_t *p);   /* "pcie-ib" or the path */
/* The profile's leading comment block, first line ("" if none). */
const char *prof_summary(const prof_t *p);
int prof_count(const prof_t *p);
const prof_entry_t *prof_entry(const prof_t *p, int i);
const prof_entry_t *prof_find(const prof_t *p, const char *key);

/* Built-in profiles: NULL-terminated names; the embedded text of one (the
 * same bytes as env/profiles/NAME.env) or NULL. */
const char *const *prof_builtin_names(void);
const char *prof_builtin_text(const char *name);

/* Expand ${...} in tmpl with lookup(ctx, NAME) (NULL or "" = unset).
 * OUT out (NUL-terminated), missing: the first unset name without a
 * default. RET 0, RDZV_ENOKEY (a name unset: out is undefined),
 * RDZV_EINVAL (syntax), RDZV_ETOOBIG (out too small). */
typedef const char *(*prof_lookup_fn)(void *ctx, const char *name);
int prof_expand(const char *tmpl, prof_lookup_fn lookup, void *ctx, char *out,
                size_t outlen, char *missing, size_t missinglen);

/* ---- environments ------------------------------------------------------------ */

typedef enum {
  ENV_SRC_INHERITED = 0, /* the agent's environment */
  ENV_SRC_LAUNCH,        /* set by the launcher (torchrun contract, LAUNCH_*) */
  ENV_SRC_PROFILE,       /* the NCCL profile */
  ENV_SRC_LOCK           /* the infrastructure lock */
} env_src_t;

typedef struct env_var_s {
  const char *key;
  const char *value;
  env_src_t src;
  const char *tmpl;   /* profile text when the value came from a template */
  const char *origin; /* "profile pcie-ib line 7", "inherited", ... */
} env_var_t;

/* Something the builder refused or overrode: the lint reports these. */
typedef struct env_note_s {
  const char *key;
  const char *value;  /* what was asked */
  const char *origin;
  const char *reason; /* one sentence */
} env_note_t;

typedef struct env_s env_t;

int env_new(env_t **out);
void env_free(env_t *e); /* NULL is a no-op */
/* Add every "KEY=VALUE" of envp (NULL-terminated) as src. */
int env_import(env_t *e, char *const *envp, env_src_t src);
/* Set or replace. RET 0, RDZV_EINVAL (bad key), RDZV_ENOMEM. */
int env_set(env_t *e, const char *key, const char *value, env_src_t src,
            const char *origin);
int env_unset(env_t *e, const char *key);
const char *env_get(const env_t *e, const char *key);
const env_var_t *env_find(const env_t *e, const char *key);
/* Variables sorted by key. */
int env_count(const env_t *e);
const env_var_t *env_at(const env_t *e, int i);
int env_nnotes(const env_t *e);
const env_note_t *env_note(const env_t *e, int i);
/* NULL-terminated "KEY=VALUE" array for execve, valid until e changes or
 * is freed. RET NULL on allocation failure. */
char **env_envp(env_t *e);

/* Apply profile p: the profile wins over inherited values, unless
 * allow_override, when an inherited value is kept. Values set by the
 * launcher are never replaced. Every change and refusal is logged
 * (INFO, WARN) when log is set. RET the number of variables set, or
 * RDZV_ENOMEM. */
int env_apply_profile(env_t *e, const prof_t *p, int allow_override,
                      lu_log_t *log);
/* The infrastructure lock, applied last: see the top of this file.
 * RET the number of values it had to override. */
int env_lock(env_t *e, lu_log_t *log);
/* The locked variables and their values. */
int env_locked_count(void);
/* Debug and logging variables belong to the user: NCCL_DEBUG,
 * NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE and TORCH_*DEBUG*. An inherited value
 * beats the profile's (its origin then says "inherited, kept over the
 * profile's ..."), and the lint warns. */
int env_is_user_debug(const char *key);
const char *env_locked_key(int i);
const char *env_locked_value(int i);

/* ---- a rank's whole environment (worker.c) -------------------------------
 * The one builder of what a worker gets; the agent, `launch env` and
 * `launch doctor` all call env_build_rank. In order, later wins:
 *
 *   base      the agent's environment, inherited
 *   launch    extra "KEY=VALUE" of the caller
 *   contract  the rows of env/contract.h (env_contract_t): torchrun's
 *             variables, launch's own, the binding's (LAUNCH_CPUS,
 *             LAUNCH_HCA, ...) and the profile's name
 *   profile   the NCCL profile (its templates see everything above)
 *   lock      NVLink multicast off
 *
 * docs/launcher.md "The worker environment" lists the variables. */

/* The contract's values are an rdzv_env_t (include/rdzv.h): the table
 * env/contract.h says which variable each field is and how it is written;
 * an unset field (-1, NULL) writes nothing. */
typedef rdzv_env_t env_contract_t;

/* An env_contract_t with every field unset. */
void env_contract_init(env_contract_t *k);

typedef struct env_rank_opts_s {
  size_t size;              /* sizeof(env_rank_opts_t) */
  unsigned version;         /* 1 */
  char *const *base;        /* inherited environment (NULL = none) */
  const char *const *launch;  /* more "KEY=VALUE" set by the caller */
  const prof_t *profile;    /* NULL = none; LAUNCH_NCCL_PROFILE is its name
                               unless the contract gives one */
  int allow_override;       /* --allow-env-override */
  lu_log_t *log;            /* changes and warnings; NULL = quiet (the agent
                               logs rank 0 of the first round only) */
  const env_contract_t *contract; /* NULL = none */
} env_rank_opts_t;

#define ENV_RANK_OPTS_INIT                                                     \
  { sizeof(env_rank_opts_t), 1, NULL, NULL, NULL, 0, NULL, NULL }

/* OUT *out: free with env_free(). RET 0, RDZV_EINVAL (a bad name in
 * launch), RDZV_ENOMEM. */
int env_build_rank(const env_rank_opts_t *o, env_t **out);

/* ---- node facts the lint checks against ---------------------------------- */

#define ENV_NODE_NETDEVS 1024 /* as aff.h's AFF_FACTS_NETDEVS */
#define ENV_NODE_HCAS 256     /* as AFF_FACTS_HCAS */
typedef struct env_hca_s {
  char name[32];
  int nports;
  int state[8];          /* 4 = ACTIVE, -1 unknown */
  char link_layer[8][16]; /* "InfiniBand", "Ethernet" */
} env_hca_t;

typedef struct env_node_s {
  int probed;            /* 0: no names known, existence checks skipped */
  int nnetdevs;
  char netdevs[ENV_NODE_NETDEVS][32];
  int nhcas;
  env_hca_t hcas[ENV_NODE_HCAS];
  int netdevs_incomplete; /* more interfaces than listed: a name not in
                             netdevs may exist, and is not called missing */
  int hcas_incomplete;    /* the same for the RDMA devices */
  int has_nvlink;        /* 1, 0, -1 unknown (aff_topo_has_nvlink) */
  int nccl_version;      /* 22809; 0 = unknown: the list's reference */
  int torch_version;     /* the workers' PyTorch (major * 100 + minor), 0
                            unknown: below 2.2 the old names are right */
  int no_gpu;            /* no GPU is used here: NCCL does not run, its
                            findings are warnings */
} env_node_t;

/* The names the lint checks against, from the node's facts that affinity/
 * read (aff_facts_t, aff.h): network interfaces, RDMA devices and their
 * ports. has_nvlink = -1, nccl_version = 0: the caller fills them. */
struct aff_facts_s;
void env_node_from_facts(env_node_t *n, const struct aff_facts_s *f);
/* The same from sysfs under root (NULL = "/"), read now (aff_facts_probe).
 * RET 0, RDZV_ENOMEM. */
int env_node_probe(env_node_t *n, const char *root);

/* ---- lint ------------------------------------------------------------------------- */

typedef enum { ENV_SEV_INFO = 0, ENV_SEV_WARN, ENV_SEV_ERROR } env_sev_t;
const char *env_sev_name(env_sev_t s); /* "info", "warning", "error" */

typedef struct env_finding_s {
  env_sev_t sev;
  char rule[32];    /* "gid-on-ib", "unknown-var", ... */
  char var[64];
  char value[160];
  char where[96];   /* "profile pcie-ib line 7", "inherited" */
  char why[400];
  char fix[320];
} env_finding_t;

/* Check e (a rank's environment) against node (NULL = nothing known).
 * OUT *out (malloc'd array, free()), *n. Sorted: errors first.
 * RET 0 or RDZV_ENOMEM. */
int env_lint(const env_t *e, const env_node_t *node, env_finding_t **out,
             int *n);
/* NCCL's variable list: RET 1 when NCCL reads name (in any release), and
 * the first/last release (last 0 = still read) and whether it is an
 * integer. */
int env_nccl_var_info(const char *name, int *first, int *last, int *is_int);
/* The NCCL version the list was checked against (22809). */
int env_nccl_ref_version(void);

/* ---- node fingerprint ------------------------------------------------------
 * What must be identical on every node of a job, as sorted
 * KEY=VALUE items: env.* (the effective NCCL environment, templated values
 * as their template, so the rank's HCA name does not count), profile,
 * driver, cuda.driver, cuda.runtime, nccl, gpu.model, gpu.count,
 * sha256.<file>. Host name, address and node rank are not
 * part of it. */

typedef struct env_fp_s env_fp_t;

typedef struct env_fp_input_s {
  size_t size;            /* sizeof(env_fp_input_t) */
  unsigned version;       /* 1 */
  const env_t *env;       /* a rank's environment (env_build_rank) */
  const char *profile;    /* profile name, NULL = none */
  const char *driver;     /* aff_sysinfo_t fields; ""/0 = absent */
  int cuda_driver;
  int cuda_runtime;
  int nccl;
  const char *gpu_model;
  int gpu_count;
  const char *const *files; /* program files to hash (NULL-terminated) */
  const char *const *extra; /* more "key=value" items (NULL-terminated) */
} env_fp_input_t;

#define ENV_FP_INPUT_INIT                                                      \
  { sizeof(env_fp_input_t), 1, NULL, NULL, NULL, 0, 0, 0, NULL, 0, NULL, NULL }

/* RET 0, -errno (a file to hash cannot be read: err names it),
 * RDZV_ENOMEM. OUT *out: free with env_fp_free(). */
int env_fp_collect(const env_fp_input_t *in, env_fp_t **out, char *err,
                   size_t errlen);
void env_fp_free(env_fp_t *fp); /* NULL is a no-op */
/* An empty fingerprint, and setting one item (for other key=value sets
 * compared across nodes, such as doctor reports). RET 0, RDZV_ETOOBIG
 * (over 1024 items), RDZV_ENOMEM. */
int env_fp_new(env_fp_t **out);
int env_fp_set(env_fp_t *fp, const char *key, const char *value);
int env_fp_count(const env_fp_t *fp);
const char *env_fp_key(const env_fp_t *fp, int i);
const char *env_fp_value(const env_fp_t *fp, int i);
const char *env_fp_get(const env_fp_t *fp, const char *key);
/* "launch-fingerprint 1\n" then "key=value\n" sorted by key; newlines and
 * backslashes in values escaped. OUT *out malloc'd. RET 0 or RDZV_ENOMEM. */
int env_fp_serialize(const env_fp_t *fp, char **out, size_t *len);
/* Inverse of env_fp_serialize (wire input: bounded, strict). RET 0,
 * RDZV_EPROTO (not a fingerprint / bad line), RDZV_ETOOBIG, RDZV_ENOMEM. */
int env_fp_parse(const char *text, size_t len, env_fp_t **out);
/* Compare n fingerprints named names[i] ("node0", a host name). OUT
 * *report (malloc'd): one line per differing item, e.g.
 * "NCCL_IB_HCA: node0=mlx5_0 node3=mlx5_1"; "" when all agree.
 * RET the number of differing items, or RDZV_ENOMEM. */
int env_fp_diff(const env_fp_t *const *fps, const char *const *names, int n,
                char **report);
/* SHA-256 of a file as 64 hex digits. RET 0 or -errno. */
int env_sha256_file(const char *path, char hex[65]);

#endif /* ENV_H */
