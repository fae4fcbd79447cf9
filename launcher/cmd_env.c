/* cmd_env.c - `launch env`: the environment a local rank would get (the
 * inherited one, the launcher's LAUNCH_* variables, the NCCL profile, the
 * lock), its lint, the node fingerprint, the built-in profiles. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "aff.h"
#include "env.h"
#include "launch.h"
#include "lu_buf.h"

extern char **environ;

static const char env_help[] =
    "usage: launch env [options]\n"
    "\n"
    "Prints the environment a local rank would get: what launch sets\n"
    "(LAUNCH_CPUS, LAUNCH_HCA, ...), the NCCL profile on top of the inherited\n"
    "environment, and the lock (NCCL_NVLS_ENABLE=0,\n"
    "TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1), each with\n"
    "where it came from.\n"
    "\n"
    "options:\n"
    "  --profile NAME|FILE     NCCL profile: auto, pcie-ib, nvlink-ib, roce,\n"
    "                          socket, or a KEY=VALUE file (default auto);\n"
    "                          --nccl-profile is the same\n"
    "  --local-rank N          the rank to show (default 0)\n"
    "  --nproc-per-node N      local ranks planned (default: visible GPUs)\n"
    "  --topology FILE.xml     plan for another machine's hwloc XML\n"
    "  --cpu-bind P, --mem-bind P   binding policy (as launch topo)\n"
    "  --allow-env-override    inherited values win over the profile\n"
    "  --all                   print the inherited variables too\n"
    "  --lint                  check the environment (exit 1 on errors)\n"
    "  --root DIR              read /sys and /proc under DIR for --lint\n"
    "  --fingerprint           print the node fingerprint instead\n"
    "  --program FILE          a file the fingerprint hashes (repeatable)\n"
    "  --list-profiles         list the built-in profiles\n"
    "  --show-profile NAME     print a built-in profile (to copy and edit)\n"
    "  --json                  machine-readable output\n"
    "\n"
    "examples:\n"
    "  launch env --profile pcie-ib --local-rank 3\n"
    "  launch env --profile /etc/profile.d/nccl.sh --lint\n"
    "  launch env --show-profile pcie-ib > my.env\n";

static const char *src_name(env_src_t s) {
  switch (s) {
  case ENV_SRC_INHERITED: return "inherited";
  case ENV_SRC_LAUNCH: return "launch";
  case ENV_SRC_PROFILE: return "profile";
  case ENV_SRC_LOCK: return "lock";
  }
  return "?";
}

/* Variables worth showing without --all: ours, and inherited ones that
 * shape communication. */
static int interesting(const env_var_t *v) {
  static const char *const pre[] = {"NCCL_", "TORCH_NCCL_", "NVSHMEM_",
                                    "TORCH_SYMM_MEM_", "UCX_", "CUDA_"};
  if (v->src != ENV_SRC_INHERITED)
    return 1;
  for (size_t i = 0; i < LU_ARRAY_SIZE(pre); i++)
    if (strncmp(v->key, pre[i], strlen(pre[i])) == 0)
      return 1;
  return 0;
}

static void print_findings_text(const env_finding_t *f, int n) {
  if (n == 0) {
    printf("lint: no findings\n");
    return;
  }
  for (int i = 0; i < n; i++) {
    printf("%s [%s] %s", env_sev_name(f[i].sev), f[i].rule, f[i].var);
    if (f[i].value[0])
      printf("=%s", f[i].value);
    if (f[i].where[0])
      printf(" (%s)", f[i].where);
    printf("\n    why: %s\n", f[i].why);
    if (f[i].fix[0])
      printf("    fix: %s\n", f[i].fix);
  }
}

static void json_findings(lu_json_t *j, const env_finding_t *f, int n) {
  lu_json_arr(j, "findings");
  for (int i = 0; i < n; i++) {
    lu_json_obj(j, NULL);
    lu_json_str(j, "severity", env_sev_name(f[i].sev));
    lu_json_str(j, "rule", f[i].rule);
    lu_json_str(j, "var", f[i].var);
    lu_json_str(j, "value", f[i].value);
    lu_json_str(j, "where", f[i].where);
    lu_json_str(j, "why", f[i].why);
    lu_json_str(j, "fix", f[i].fix);
    lu_json_end_obj(j);
  }
  lu_json_end_arr(j);
}

int launch_cmd_env(int argc, char **argv) {
  static const struct option opts[] = {
      {"profile", required_argument, 0, 'p'},
      {"nccl-profile", required_argument, 0, 'p'},
      {"local-rank", required_argument, 0, 'r'},
      {"nproc-per-node", required_argument, 0, 'n'},
      {"topology", required_argument, 0, 't'},
      {"cpu-bind", required_argument, 0, 'c'},
      {"mem-bind", required_argument, 0, 'm'},
      {"allow-env-override", no_argument, 0, 'o'},
      {"all", no_argument, 0, 'a'},
      {"lint", no_argument, 0, 'l'},
      {"root", required_argument, 0, 'R'},
      {"fingerprint", no_argument, 0, 'f'},
      {"program", required_argument, 0, 'P'},
      {"list-profiles", no_argument, 0, 'L'},
      {"show-profile", required_argument, 0, 'S'},
      {"json", no_argument, 0, 'j'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *profile = "auto", *cpu_bind = "cores", *mem_bind = "local";
  const char *root = NULL, *programs[9] = {0};
  int nprog = 0, local_rank = 0, nproc = 0, allow = 0, all = 0, lint = 0;
  int fingerprint = 0, json = 0, opt, rc, ret = 1;
  aff_topo_opts_t to = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  aff_policy_t *pol = NULL;
  aff_plan_t *plan = NULL;
  prof_t *prof = NULL;
  env_t *e = NULL;
  env_finding_t *f = NULL;
  int nf = 0, errors = 0;
  char err[1024], lr[32], lws[32];
  const char *contract[3];
  lu_log_t log;

  lu_log_init(&log, "launch env");
  if (getenv("LAUNCH_LOG_LEVEL") == NULL)
    log.level = LU_LOG_WARN;
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
    case 'p': profile = optarg; break;
    case 'r':
      if (lu_parse_int(optarg, 0, AFF_MAX_RANKS - 1, &local_rank) != 0) {
        launch_usage_error("--local-rank: '%s' is not a number from 0 to %d",
                           optarg, AFF_MAX_RANKS - 1);
        return 2;
      }
      break;
    case 'n':
      if (lu_parse_int(optarg, 1, AFF_MAX_RANKS, &nproc) != 0) {
        launch_usage_error("--nproc-per-node: '%s' is not a number from 1 to %d",
                           optarg, AFF_MAX_RANKS);
        return 2;
      }
      break;
    case 't': to.xml = optarg; break;
    case 'c': cpu_bind = optarg; break;
    case 'm': mem_bind = optarg; break;
    case 'o': allow = 1; break;
    case 'a': all = 1; break;
    case 'l': lint = 1; break;
    case 'R': root = optarg; break;
    case 'f': fingerprint = 1; break;
    case 'P':
      if (nprog >= 8) {
        launch_usage_error("--program: at most 8 files");
        return 2;
      }
      programs[nprog++] = optarg;
      break;
    case 'L':
      for (const char *const *n = prof_builtin_names(); *n; n++) {
        prof_t *p = NULL;
        if (prof_load(*n, &p, err, sizeof(err)) == 0)
          printf("%-10s %s\n", *n, prof_summary(p));
        prof_free(p);
      }
      return 0;
    case 'S': {
      const char *text = prof_builtin_text(optarg);
      if (text == NULL) {
        launch_usage_error("--show-profile: no built-in profile '%s' (see "
                           "launch env --list-profiles)",
                           optarg);
        return 2;
      }
      fputs(text, stdout);
      return 0;
    }
    case 'j': json = 1; break;
    case 'h': fputs(env_help, stdout); return 0;
    default:
      launch_usage_error("env: unknown or incomplete option '%s' (see launch "
                         "env --help)",
                         argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    launch_usage_error("env: unexpected argument '%s'", argv[optind]);
    return 2;
  }
  if (root) {
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) {
      launch_usage_error("--root %s: not a directory", root);
      return 2;
    }
  }
  if ((rc = prof_load(profile, &prof, err, sizeof(err))) != 0) {
    launch_usage_error("%s", err);
    return rc == RDZV_ENOMEM ? 1 : 2;
  }
  if ((pol = malloc(sizeof(*pol))) == NULL)
    goto out;
  if (aff_policy_parse(cpu_bind, mem_bind, pol, err, sizeof(err)) != 0) {
    launch_usage_error("%s", err);
    ret = 2;
    goto out;
  }
  if ((rc = aff_topo_load(&to, &t, err, sizeof(err))) != 0) {
    launch_usage_error("%s", err);
    ret = 2;
    goto out;
  }
  if (nproc == 0)
    nproc = aff_topo_ngpus(t) > 0 ? aff_topo_ngpus(t) : 1;
  if (local_rank >= nproc) {
    launch_usage_error("--local-rank %d: only %d local rank%s planned (set "
                       "--nproc-per-node)",
                       local_rank, nproc, nproc == 1 ? "" : "s");
    ret = 2;
    goto out;
  }
  if ((rc = aff_plan_new(t, pol, nproc, NULL, &plan, err, sizeof(err))) != 0) {
    launch_usage_error("%s", err);
    ret = 2;
    goto out;
  }
  {
    env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
    snprintf(lr, sizeof(lr), "LOCAL_RANK=%d", local_rank);
    snprintf(lws, sizeof(lws), "LOCAL_WORLD_SIZE=%d", nproc);
    contract[0] = lr;
    contract[1] = lws;
    contract[2] = NULL;
    ro.base = environ;
    ro.launch = contract;
    ro.launch2 = aff_binding_envv(aff_plan_rank(plan, local_rank));
    ro.profile = prof;
    ro.allow_override = allow;
    ro.log = &log;
    if (env_build_rank(&ro, &e) != 0)
      goto out;
  }
  if (fingerprint) {
    env_fp_t *fp = NULL;
    char *text = NULL;
    if ((rc = launch_node_fingerprint(e, prof_name(prof), t, programs, &fp, err,
                                      sizeof(err))) != 0) {
      launch_usage_error("%s", err);
      ret = 2;
      goto out;
    }
    if (json) {
      lu_buf_t b = LU_BUF_INIT;
      lu_json_t j;
      lu_json_init(&j, &b, 1);
      lu_json_obj(&j, NULL);
      for (int i = 0; i < env_fp_count(fp); i++)
        lu_json_str(&j, env_fp_key(fp, i), env_fp_value(fp, i));
      lu_json_end_obj(&j);
      rc = lu_buf_finish(&b, &text, NULL);
    } else {
      rc = env_fp_serialize(fp, &text, NULL);
    }
    env_fp_free(fp);
    if (rc == 0)
      fputs(text, stdout);
    free(text);
    ret = rc == 0 ? 0 : 1;
    goto out;
  }
  if (lint) {
    env_node_t *node = malloc(sizeof(*node));
    aff_sysinfo_t si;
    if (node == NULL)
      goto out;
    env_node_probe(node, root);
    node->has_nvlink = aff_topo_has_nvlink(t);
    aff_sysinfo_probe(&si, root);
    node->nccl_version = si.nccl;
    if (to.xml) {
      /* Another machine: its interfaces are not ours to check. */
      node->probed = 0;
    }
    rc = env_lint(e, node, &f, &nf);
    free(node);
    if (rc != 0)
      goto out;
    for (int i = 0; i < nf; i++)
      errors += f[i].sev == ENV_SEV_ERROR;
  }
  if (json) {
    lu_buf_t b = LU_BUF_INIT;
    lu_json_t j;
    char *text = NULL;
    lu_json_init(&j, &b, 1);
    lu_json_obj(&j, NULL);
    lu_json_str(&j, "profile", prof_name(prof));
    lu_json_int(&j, "local_rank", local_rank);
    lu_json_arr(&j, "vars");
    for (int i = 0; i < env_count(e); i++) {
      const env_var_t *v = env_at(e, i);
      if (!all && !interesting(v))
        continue;
      lu_json_obj(&j, NULL);
      lu_json_str(&j, "key", v->key);
      lu_json_str(&j, "value", v->value);
      lu_json_str(&j, "source", src_name(v->src));
      lu_json_str(&j, "origin", v->origin);
      if (v->tmpl)
        lu_json_str(&j, "template", v->tmpl);
      lu_json_end_obj(&j);
    }
    lu_json_end_arr(&j);
    lu_json_arr(&j, "notes");
    for (int i = 0; i < env_nnotes(e); i++) {
      const env_note_t *n = env_note(e, i);
      lu_json_obj(&j, NULL);
      lu_json_str(&j, "key", n->key);
      lu_json_str(&j, "value", n->value);
      lu_json_str(&j, "origin", n->origin);
      lu_json_str(&j, "reason", n->reason);
      lu_json_end_obj(&j);
    }
    lu_json_end_arr(&j);
    if (lint)
      json_findings(&j, f, nf);
    lu_json_end_obj(&j);
    if (lu_buf_finish(&b, &text, NULL) != 0)
      goto out;
    fputs(text, stdout);
    free(text);
  } else if (lint) {
    print_findings_text(f, nf);
  } else {
    printf("# launch env: local rank %d of %d, profile %s (%s)\n", local_rank,
           nproc, prof_name(prof), aff_topo_source(t));
    for (int i = 0; i < env_count(e); i++) {
      const env_var_t *v = env_at(e, i);
      if (!all && !interesting(v))
        continue;
      printf("%s=%s", v->key, v->value);
      if (v->src != ENV_SRC_INHERITED || all)
        printf("    # %s%s%s", v->origin ? v->origin : src_name(v->src),
               v->tmpl ? ": " : "", v->tmpl ? v->tmpl : "");
      printf("\n");
    }
    for (int i = 0; i < env_nnotes(e); i++) {
      const env_note_t *n = env_note(e, i);
      printf("# %s=%s from %s: %s\n", n->key, n->value, n->origin, n->reason);
    }
  }
  ret = errors > 0 ? 1 : 0;
out:
  free(f);
  env_free(e);
  aff_plan_free(plan);
  aff_topo_free(t);
  free(pol);
  prof_free(prof);
  return ret;
}
