/* node.c - this node as the job sees it (profile, topology, binding plan,
 * GPU libraries), each rank's environment and its lint, the fingerprint:
 * one code path for the agent and `launch env`. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch.h"

int launch_node_open(const cfg_t *c, unsigned flags, const char *root,
                     lu_log_t *log, launch_node_t *n, char *err,
                     size_t errlen) {
  char why[1024];
  int bind, rc;
  memset(n, 0, sizeof(*n));
  n->root = root;
  n->foreign = c->topology_file[0] != '\0';
  n->torch_version = c->torch_version;
  n->no_gpu = root == NULL && !n->foreign && c->ngpus == 0;
  if ((rc = prof_load(c->nccl_profile, &n->prof, why, sizeof(why))) != 0) {
    lu_errf(err, errlen, "--nccl-profile: %s", why);
    return rc;
  }
  if ((n->pol = calloc(1, sizeof(*n->pol))) == NULL ||
      (n->facts = malloc(sizeof(*n->facts))) == NULL)
    return RDZV_ENOMEM;
  aff_facts_probe(n->facts, root);
  if (aff_policy_parse(c->cpu_bind, c->mem_bind, n->pol, err, errlen) != 0)
    return RDZV_EINVAL;
  bind = n->pol->cpu != AFF_CPU_NONE || n->pol->mem != AFF_MEM_NONE;
  /* --report-bindings prints the plan; it changes nothing for the workers.
   * Nor does another machine's topology where workers start here: its
   * CPUs and NICs are not this node's (binding to them fails, or binds
   * to the wrong ones). The tests' agents take one for a GPU node in the
   * lint. */
  n->report_only = (!bind && c->report_bindings) ||
                   (n->foreign && !(flags & LAUNCH_NODE_SHOW));
  if (n->foreign && !(flags & LAUNCH_NODE_SHOW) && log)
    LU_WARN(log, "--topology %s is another machine's: the workers here are "
            "neither bound nor given LAUNCH_CPUS and the other binding "
            "variables (it is for planning that machine: launch topo "
            "--topology, launch env --topology)", c->topology_file);
  bind = bind || c->report_bindings;
  if (bind || (flags & LAUNCH_NODE_TOPO) || n->foreign) {
    aff_topo_opts_t to = AFF_TOPO_OPTS_INIT;
    to.xml = n->foreign ? c->topology_file : NULL;
    to.cuda_visible_devices = c->cuda_visible_devices;
    to.log = log;
    if ((rc = aff_topo_load(&to, &n->topo, why, sizeof(why))) != 0) {
      lu_errf(err, errlen, "topology: %s", why);
      return rc;
    }
  }
  if (bind &&
      (rc = aff_plan_new(n->topo, n->pol, c->nproc, c->quiet ? NULL : log,
                         &n->plan, why, sizeof(why))) != 0) {
    lu_errf(err, errlen, "binding: %s", why);
    return rc;
  }
  /* The GPU stack's versions from files (no GPU library is loaded into
   * the agent), only where there is a GPU to describe. */
  memset(&n->si, 0, sizeof(n->si));
  n->si.ngpus = -1;
  if (root || aff_gpu_count(root, NULL) > 0)
    aff_sysinfo_files(&n->si, root);
  return 0;
}

void launch_node_close(launch_node_t *n) {
  aff_plan_free(n->plan);
  aff_topo_free(n->topo);
  free(n->pol);
  free(n->facts);
  prof_free(n->prof);
  memset(n, 0, sizeof(*n));
}

void launch_round_guess(const cfg_t *c, const char *run_dir,
                        launch_round_t *r) {
  memset(r, 0, sizeof(*r));
  r->node_rank = c->pref_node_rank >= 0 ? c->pref_node_rank : 0;
  r->nnodes = c->max_nodes;
  r->world_size = c->max_nodes * c->nproc;
  r->base_rank = r->node_rank * c->nproc;
  if (c->from_tasks) { /* the scheduler placed this task */
    r->base_rank = c->task_rank - c->task_local_rank;
    r->world_size = c->task_world;
  }
  lu_strlcpy(r->master_addr, c->endpoint_host, sizeof(r->master_addr));
  r->master_port = c->endpoint_port;
  snprintf(r->endpoint, sizeof(r->endpoint),
           strchr(c->endpoint_host, ':') ? "[%s]:%d" : "%s:%d",
           c->endpoint_host, c->endpoint_port);
  /* --from-tasks: no attempt folder (launch_rank_env says why); the run's
   * folder names the error files. */
  snprintf(r->attempt_dir, sizeof(r->attempt_dir),
           c->from_tasks ? "%.4000s" : "%.4000s/attempt_0", run_dir);
  r->resume_step = r->ckpt_verified = -1;
}

int launch_rank_env(const cfg_t *c, const launch_node_t *n,
                    const launch_round_t *r, int local_rank, lu_log_t *log,
                    env_t **out) {
  env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
  env_contract_t k;
  char error_file[PATH_MAX + 32];
  env_contract_init(&k);
  k.local_rank = local_rank;
  k.rank = k.role_rank = r->base_rank + local_rank;
  k.node_rank = k.launch_node_rank = r->node_rank;
  k.role_name = c->role;
  k.local_world_size = c->nproc;
  k.world_size = k.role_world_size = r->world_size;
  k.nnodes = k.launch_nnodes = r->nnodes;
  k.master_addr = r->master_addr;
  k.master_port = r->master_port;
  k.restart_count = r->restarts;
  k.max_restarts = c->max_restarts;
  k.run_id = k.rdzv_id = c->run_id;
  k.use_agent_store = c->torch_store == CFG_STORE_AGENT;
  snprintf(error_file, sizeof(error_file), "%s/%d/error.json", r->attempt_dir,
           local_rank);
  /* --from-tasks: the task becomes PROGRAM (exec) and no launch process is
   * left to remove a folder afterwards, so none is made: the error file
   * lies beside the run's folder, named by the rank, written only by a
   * worker that fails under PyTorch's @record; no LAUNCH_ATTEMPT_DIR
   * (Slurm restarts nothing: no attempts). */
  if (c->from_tasks)
    snprintf(error_file, sizeof(error_file), "%s.%d.error.json",
             r->attempt_dir, k.rank);
  k.error_file = error_file;
  k.signals = c->signals_spec;
  /* The name the worker's PyTorch reads: before 2.2 only
   * NCCL_ASYNC_ERROR_HANDLING; from 2.2 TORCH_NCCL_ASYNC_ERROR_HANDLING,
   * with a deprecation warning on every rank when the old name is set.
   * PyTorch >= 2.2 falls back to an old name the user set alone: its value
   * is carried over, not shadowed by our 1 (the lint says so). */
  if (c->torch_version > 0 && c->torch_version < 202)
    k.nccl_async_eh = "1";
  else if ((k.torch_nccl_async_eh = sched_getenv(
                c->environ, "NCCL_ASYNC_ERROR_HANDLING")) == NULL)
    k.torch_nccl_async_eh = "1";
  if (c->nproc > 1)
    k.omp_num_threads = "1";
  k.endpoint = r->endpoint;
  k.token_file = c->token_file[0] ? c->token_file : NULL;
  k.tls_ca = c->tls_ca[0] ? c->tls_ca : NULL;
  k.tls_cert = c->tls_cert[0] ? c->tls_cert : NULL;
  k.tls_key = c->tls_key[0] ? c->tls_key : NULL;
  k.round = r->round;
  k.hostname = c->host;
  k.attempt_dir = c->from_tasks ? NULL : r->attempt_dir;
  if (r->progress_tags)
    k.progress_tag = r->progress_tags[local_rank];
  /* --ckpt-dir: the same for the agent, `launch env` and --from-tasks; the
   * agreed step only where an agent agreed on one. */
  if (c->ckpt_dir[0]) {
    k.ckpt_dir = c->ckpt_dir;
    k.ckpt_keep = c->ckpt_keep;
    k.resume_step = r->resume_step;
    k.ckpt_verified = r->ckpt_verified;
  }
  /* The binding's rows, when the workers are bound. */
  if (n->plan && !n->report_only) {
    const aff_binding_t *b = aff_plan_rank(n->plan, local_rank);
    k.cpus = b->cpulist;
    k.numa_node = b->numa_str;
    k.gpu_busid = b->busid;
    k.hca = b->hca;
    k.hca_port = b->hca_port_str;
    k.netdev = b->netdev;
    k.hcas = b->hcas;
  }
  k.nccl_profile = n->prof ? prof_name(n->prof) : NULL;
  ro.base = c->environ;
  ro.contract = &k;
  ro.profile = n->prof;
  ro.allow_override = c->allow_env_override;
  ro.log = log;
  return env_build_rank(&ro, out);
}

int launch_lint(const launch_node_t *n, const env_t *e, env_finding_t **f,
                int *nf) {
  env_node_t *node = malloc(sizeof(*node));
  int rc;
  if (node == NULL)
    return RDZV_ENOMEM;
  env_node_from_facts(node, n->facts);
  /* Another machine's topology: this node's interfaces are not its. */
  if (n->foreign)
    node->probed = 0;
  node->has_nvlink = n->topo ? aff_topo_has_nvlink(n->topo) : -1;
  node->nccl_version = n->si.nccl;
  node->torch_version = n->torch_version;
  node->no_gpu = n->no_gpu;
  rc = env_lint(e, node, f, nf);
  free(node);
  return rc;
}

int launch_worker_argv(const cfg_t *c, char ***out) {
  size_t len = strlen(c->prog_argv[0]);
  int python, k = 0;
  char **argv = calloc((size_t)c->prog_argc + 4, sizeof(char *));
  python = c->prog_mode == CFG_PROG_MODULE || c->prog_mode == CFG_PROG_RUN_PATH ||
           (c->prog_mode == CFG_PROG_AUTO && len > 3 &&
            strcmp(c->prog_argv[0] + len - 3, ".py") == 0);
  *out = argv;
  if (argv == NULL)
    return RDZV_ENOMEM;
  if (python) {
    argv[k++] = strdup(c->python);
    argv[k++] = strdup("-u");
    if (c->prog_mode == CFG_PROG_MODULE)
      argv[k++] = strdup("-m");
  }
  for (int i = 0; i < c->prog_argc; i++)
    argv[k++] = strdup(c->prog_argv[i]);
  for (int i = 0; i < k; i++)
    if (argv[i] == NULL)
      return RDZV_ENOMEM;
  return 0;
}

void launch_argv_free(char **argv) {
  for (int i = 0; argv && argv[i]; i++)
    free(argv[i]);
  free(argv);
}

/* The script a Python interpreter runs: its first argument that is no
 * option of the interpreter's own (-u, -W arg, -Xdev, ...). RET its index,
 * or -1 when it runs no file (-c, -m, stdin). */
static int python_script(char *const *argv) {
  for (int i = 1; argv[i]; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--"))
      return argv[i + 1] ? i + 1 : -1;
    if (a[0] != '-')
      return i;
    if (a[1] == '\0')
      return -1; /* "-": stdin */
    if (a[1] == '-') {
      if (!strcmp(a, "--check-hash-based-pycs") && argv[i + 1])
        i++;
      continue;
    }
    for (const char *o = a + 1; *o; o++) {
      if (*o == 'c' || *o == 'm')
        return -1;
      if (*o == 'W' || *o == 'X') {
        if (o[1] == '\0' && argv[i + 1])
          i++; /* the value is the next argument */
        break;
      }
    }
  }
  return -1;
}

/* The script a POSIX shell runs (`bash -e train.sh ARGS`): its first
 * argument that is no option; -o and +o take a value. RET its index, or -1
 * (-c, -s: a command string or stdin). */
static int shell_script(char *const *argv) {
  for (int i = 1; argv[i]; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--"))
      return argv[i + 1] ? i + 1 : -1;
    if (a[0] != '-' && a[0] != '+')
      return i;
    if (a[1] == '-')
      continue; /* bash's long options (--norc, --login) */
    for (const char *o = a + 1; *o; o++) {
      if (*o == 'c' || *o == 's')
        return -1;
      if (*o == 'o' && o[1] == '\0' && argv[i + 1])
        i++; /* -o pipefail: the value is the next argument */
    }
  }
  return -1;
}

static int is_shell(const char *base) {
  static const char *const shells[] = {"sh", "bash", "dash", "zsh", "ksh"};
  for (size_t i = 0; i < LU_ARRAY_SIZE(shells); i++)
    if (!strcmp(base, shells[i]))
      return 1;
  return 0;
}

/* The file whose SHA-256 stands for the program in the fingerprint: the
 * binary the workers run, found in their PATH as exec finds it, or for a
 * Python interpreter or a shell the script it runs. Never the other arguments: a data
 * shard or a config file may differ between nodes by design. OUT out[cap].
 * RET 0, or -1: nothing to hash (python -m, sh -c, a program not found). */
static int program_file(char *const *argv, const char *path, char *out,
                        size_t cap) {
  const char *base = strrchr(argv[0], '/');
  struct stat sb;
  int i = 0;
  base = base ? base + 1 : argv[0];
  if (!strncmp(base, "python", 6) || !strncmp(base, "pypy", 4)) {
    if ((i = python_script(argv)) < 0)
      return -1;
    if (snprintf(out, cap, "%s", argv[i]) >= (int)cap)
      return -1;
  } else if (is_shell(base)) {
    if ((i = shell_script(argv)) < 0)
      return -1;
    if (snprintf(out, cap, "%s", argv[i]) >= (int)cap)
      return -1;
  } else if (lu_which(argv[0], path, out, cap) != 0) {
    return -1;
  }
  /* Regular files only: a FIFO or device would block the hash. */
  return stat(out, &sb) == 0 && S_ISREG(sb.st_mode) && access(out, R_OK) == 0
             ? 0
             : -1;
}

int launch_node_fingerprint(const launch_node_t *n, const env_t *e,
                            char *const *argv, const char *const *extra,
                            env_fp_t **out, char *err, size_t errlen) {
  env_fp_input_t in = ENV_FP_INPUT_INIT;
  const char *files[12];
  char model[64] = "", prog[PATH_MAX];
  int ngpus = n->topo ? aff_topo_ngpus(n->topo) : 0, k = 0;
  if (argv && argv[0] &&
      program_file(argv, env_get(e, "PATH"), prog, sizeof(prog)) == 0)
    files[k++] = prog;
  for (int i = 0; extra && extra[i] && k < 11; i++)
    files[k++] = extra[i];
  files[k] = NULL;
  if (ngpus > 0)
    lu_strlcpy(model, aff_topo_gpu(n->topo, 0)->model, sizeof(model));
  else if (n->si.gpu_model[0])
    lu_strlcpy(model, n->si.gpu_model, sizeof(model));
  if (ngpus == 0 && n->si.ngpus > 0)
    ngpus = n->si.ngpus;
  in.env = e;
  in.profile = prof_name(n->prof);
  in.driver = n->si.driver;
  in.cuda_driver = n->si.cuda_driver;
  in.cuda_runtime = n->si.cuda_runtime;
  in.nccl = n->si.nccl;
  in.gpu_model = model;
  in.gpu_count = ngpus;
  in.files = files;
  return env_fp_collect(&in, out, err, errlen);
}
