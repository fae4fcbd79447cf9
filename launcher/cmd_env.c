/* cmd_env.c - `launch env`: the environment a local rank would get (the
 * inherited one, the launcher's LAUNCH_* variables, the NCCL profile, the
 * lock), its lint, the node fingerprint, the built-in profiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launch.h"
#include "lu_buf.h"

extern char **environ;

static const char env_help[] =
    "usage: launch env [options] [launch's options] [PROGRAM [ARGS...]]\n"
    "\n"
    "Prints the environment local rank N would get from `launch` with the\n"
    "same options: the inherited environment, torchrun's variables and\n"
    "launch's (LAUNCH_CPUS, LAUNCH_HCA, ...), the NCCL profile on top, and\n"
    "the lock (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,\n"
    "NVSHMEM_DISABLE_NVLS=1), each with where it came from. Every option of\n"
    "launch is accepted (launch --help). What only the rendezvous decides is\n"
    "shown as the flags promise it: round 0, the node rank asked for (else\n"
    "0), --nnodes MAX nodes, the store at the endpoint; the attempt\n"
    "directory ends in a random part (XXXXXX here), and --standalone gets a\n"
    "fresh run id and port when it starts.\n"
    "\n"
    "options:\n"
    "  --local-rank N          the rank to show (default 0)\n"
    "  --profile NAME|FILE     the same as --nccl-profile\n"
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
    "  launch env --nccl-profile pcie-ib --nproc-per-node 8 --local-rank 3\n"
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

/* launch env's own options; the others are launch's (cfg_parse). */
enum { O_LOCAL_RANK, O_PROFILE, O_ALL, O_LINT, O_ROOT, O_FINGERPRINT, O_PROGRAM,
       O_LIST, O_SHOW, O_JSON, O_HELP };
static const struct {
  const char *name;
  int has_arg;
} own[] = {
    [O_LOCAL_RANK] = {"--local-rank", 1}, [O_PROFILE] = {"--profile", 1},
    [O_ALL] = {"--all", 0},               [O_LINT] = {"--lint", 0},
    [O_ROOT] = {"--root", 1},             [O_FINGERPRINT] = {"--fingerprint", 0},
    [O_PROGRAM] = {"--program", 1},       [O_LIST] = {"--list-profiles", 0},
    [O_SHOW] = {"--show-profile", 1},     [O_JSON] = {"--json", 0},
    [O_HELP] = {"--help", 0},
};

typedef struct env_args_s {
  int local_rank, all, lint, fingerprint, json, nprog;
  const char *root, *programs[9];
  char profile[PATH_MAX + 16];
} env_args_t;

/* Take env's own options out of argv into a; the rest goes to rest[] for
 * cfg_parse. RET 0, 1 (printed what was asked: exit 0), 2 (usage error). */
static int split_args(int argc, char **argv, env_args_t *a, char **rest,
                      int *nrest) {
  char err[1024];
  *nrest = 0;
  rest[(*nrest)++] = (char *)"launch env";
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *eq = strchr(arg, '='), *v = NULL;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    size_t k;
    for (k = 0; k < LU_ARRAY_SIZE(own); k++)
      if (strlen(own[k].name) == len && !strncmp(arg, own[k].name, len))
        break;
    if (k == LU_ARRAY_SIZE(own)) {
      int arity = arg[0] == '-' && strcmp(arg, "--") ? cfg_option_arity(arg) : -2;
      rest[(*nrest)++] = argv[i];
      if (arity == -2) /* the program: everything after is its */
        while (++i < argc)
          rest[(*nrest)++] = argv[i];
      else if (arity == 1 && i + 1 < argc)
        rest[(*nrest)++] = argv[++i];
      continue;
    }
    if (own[k].has_arg) {
      if (!eq && i + 1 >= argc) {
        launch_usage_error("env: option '%s' needs a value", own[k].name);
        return 2;
      }
      v = eq ? eq + 1 : argv[++i];
    }
    switch (k) {
    case O_LOCAL_RANK:
      if (lu_parse_int(v, 0, CFG_MAX_NPROC - 1, &a->local_rank) != 0) {
        launch_usage_error("--local-rank: '%s' is not a number from 0 to %d",
                           v, CFG_MAX_NPROC - 1);
        return 2;
      }
      break;
    case O_PROFILE:
      snprintf(a->profile, sizeof(a->profile), "--nccl-profile=%s", v);
      rest[(*nrest)++] = a->profile;
      break;
    case O_ALL: a->all = 1; break;
    case O_LINT: a->lint = 1; break;
    case O_ROOT: a->root = v; break;
    case O_FINGERPRINT: a->fingerprint = 1; break;
    case O_PROGRAM:
      if (a->nprog >= 8) {
        launch_usage_error("--program: at most 8 files");
        return 2;
      }
      a->programs[a->nprog++] = v;
      break;
    case O_LIST:
      for (const char *const *n = prof_builtin_names(); *n; n++) {
        prof_t *p = NULL;
        if (prof_load(*n, &p, err, sizeof(err)) == 0)
          printf("%-10s %s\n", *n, prof_summary(p));
        prof_free(p);
      }
      return 1;
    case O_SHOW:
      if (prof_builtin_text(v) == NULL) {
        launch_usage_error("--show-profile: no built-in profile '%s' (see "
                           "launch env --list-profiles)", v);
        return 2;
      }
      fputs(prof_builtin_text(v), stdout);
      return 1;
    case O_JSON: a->json = 1; break;
    case O_HELP: fputs(env_help, stdout); return 1;
    }
  }
  rest[*nrest] = NULL;
  return 0;
}

static void print_fingerprint(const env_fp_t *fp, int json) {
  char *text = NULL;
  if (json) {
    lu_buf_t b = LU_BUF_INIT;
    lu_json_t j;
    lu_json_init(&j, &b, 1);
    lu_json_obj(&j, NULL);
    for (int i = 0; i < env_fp_count(fp); i++)
      lu_json_str(&j, env_fp_key(fp, i), env_fp_value(fp, i));
    lu_json_end_obj(&j);
    lu_buf_finish(&b, &text, NULL);
  } else {
    env_fp_serialize(fp, &text, NULL);
  }
  if (text)
    fputs(text, stdout);
  free(text);
}

static void print_env_json(const env_t *e, const char *profile, int local_rank,
                           int all, const env_finding_t *f, int nf, int lint) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  char *text = NULL;
  lu_json_init(&j, &b, 1);
  lu_json_obj(&j, NULL);
  lu_json_str(&j, "profile", profile);
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
  if (lu_buf_finish(&b, &text, NULL) == 0)
    fputs(text, stdout);
  free(text);
}

static void print_env_text(const env_t *e, const cfg_t *c,
                           const launch_node_t *n, int local_rank, int all) {
  printf("# launch env: local rank %d of %d, profile %s (%s)\n", local_rank,
         c->nproc, prof_name(n->prof),
         n->topo ? aff_topo_source(n->topo) : "no topology needed");
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
    const env_note_t *no = env_note(e, i);
    printf("# %s=%s from %s: %s\n", no->key, no->value, no->origin, no->reason);
  }
}

int launch_cmd_env(int argc, char **argv) {
  env_args_t a;
  char **rest = calloc((size_t)argc + 2, sizeof(char *));
  char err[1024], run_dir[PATH_MAX];
  cfg_t c;
  launch_node_t n;
  launch_round_t r;
  env_t *e = NULL;
  env_finding_t *f = NULL;
  char **wargv = NULL;
  int nrest, nf = 0, errors = 0, rc, ret = 2;
  lu_log_t log;

  memset(&a, 0, sizeof(a));
  memset(&c, 0, sizeof(c));
  memset(&n, 0, sizeof(n));
  if (rest == NULL)
    return 1;
  lu_log_init(&log, "launch env");
  if (sched_getenv(environ, "LAUNCH_LOG_LEVEL") == NULL)
    log.level = LU_LOG_WARN;
  if ((rc = split_args(argc, argv, &a, rest, &nrest)) != 0) {
    free(rest);
    return rc == 1 ? 0 : 2;
  }
  if ((rc = cfg_parse(nrest, rest, environ, 0, &c, err, sizeof(err))) != 0) {
    if (rc < 0)
      launch_usage_error("%s", err);
    goto out_rc;
  }
  if (a.root) {
    struct stat st;
    if (stat(a.root, &st) != 0 || !S_ISDIR(st.st_mode)) {
      launch_usage_error("--root %s: not a directory", a.root);
      goto out;
    }
  }
  if (a.local_rank >= c.nproc) {
    launch_usage_error("--local-rank %d: only %d local rank%s planned (set "
                       "--nproc-per-node)",
                       a.local_rank, c.nproc, c.nproc == 1 ? "" : "s");
    goto out;
  }
  if ((rc = launch_node_open(&c, (a.fingerprint || c.max_nodes > 1) && c.ngpus > 0, a.root,
                             &log, &n, err, sizeof(err))) != 0) {
    launch_usage_error("%s", err);
    ret = rc == RDZV_ENOMEM ? 1 : 2;
    goto out;
  }
  snprintf(run_dir, sizeof(run_dir), "%.2000s/%s%.255s_XXXXXX",
           c.log_dir[0] ? c.log_dir : c.tmpdir, c.log_dir[0] ? "" : "launch_",
           c.run_id);
  launch_round_guess(&c, run_dir, &r);
  ret = 1;
  if (launch_rank_env(&c, &n, &r, a.local_rank, &log, &e) != 0)
    goto out;
  if (a.fingerprint) {
    env_fp_t *fp = NULL;
    if (c.prog_argc > 0 && launch_worker_argv(&c, &wargv) != 0)
      goto out;
    if ((rc = launch_node_fingerprint(&n, e, wargv, a.programs, &fp, err,
                                      sizeof(err))) != 0) {
      launch_usage_error("%s", err);
      ret = 2;
      goto out;
    }
    print_fingerprint(fp, a.json);
    env_fp_free(fp);
    ret = 0;
    goto out;
  }
  if (a.lint) {
    if (launch_lint(&n, e, &f, &nf) != 0)
      goto out;
    for (int i = 0; i < nf; i++)
      errors += f[i].sev == ENV_SEV_ERROR;
  }
  if (a.json)
    print_env_json(e, prof_name(n.prof), a.local_rank, a.all, f, nf, a.lint);
  else if (a.lint)
    print_findings_text(f, nf);
  else
    print_env_text(e, &c, &n, a.local_rank, a.all);
  ret = errors > 0 ? 1 : 0;
out:
  free(f);
  env_free(e);
  launch_argv_free(wargv);
  launch_node_close(&n);
out_rc:
  if (ret == 2 && rc > 0)
    ret = 0; /* --help or --version of launch's options */
  cfg_free(&c);
  free(rest);
  return ret;
}
