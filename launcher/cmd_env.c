/* cmd_env.c - `launch env`: the environment a local rank would get (the
 * inherited one, the launcher's LAUNCH_* variables, the NCCL profile, the
 * lock), its lint, the node fingerprint, the built-in profiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "lu_buf.h"

static const char *const src_names[] = {
    [ENV_SRC_INHERITED] = "inherited", [ENV_SRC_LAUNCH] = "launch",
    [ENV_SRC_PROFILE] = "profile", [ENV_SRC_LOCK] = "lock"};

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
    lu_json_str(&j, "source", src_names[v->src]);
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
      printf("    # %s%s%s", v->origin ? v->origin : src_names[v->src],
             v->tmpl ? ": " : "", v->tmpl ? v->tmpl : "");
    printf("\n");
  }
  for (int i = 0; i < env_nnotes(e); i++) {
    const env_note_t *no = env_note(e, i);
    printf("# %s=%s from %s: %s\n", no->key, no->value, no->origin, no->reason);
  }
}

static void list_profiles(void) {
  char err[256];
  for (const char *const *n = prof_builtin_names(); *n; n++) {
    prof_t *p = NULL;
    if (prof_load(*n, &p, err, sizeof(err)) == 0)
      printf("%-10s %s\n", *n, prof_summary(p));
    prof_free(p);
  }
}

int launch_cmd_env(int argc, char **argv) {
  char err[1024], run_dir[PATH_MAX];
  cfg_t c;
  launch_node_t n;
  launch_round_t r;
  env_t *e = NULL;
  env_finding_t *f = NULL;
  char **wargv = NULL;
  int nf = 0, errors = 0, rc, ret = 2;
  lu_log_t log;

  memset(&n, 0, sizeof(n));
  lu_log_init(&log, "launch env");
  if (sched_getenv(environ, "LAUNCH_LOG_LEVEL") == NULL)
    log.level = LU_LOG_WARN;
  if ((rc = cfg_parse(argc, argv, environ, CFG_ENV_CMD, &c, err,
                      sizeof(err))) != 0) {
    if (rc < 0)
      launch_usage_error("%s", err);
    cfg_free(&c);
    return rc < 0 ? 2 : 0;
  }
  if (c.env_list) {
    list_profiles();
    ret = 0;
    goto out;
  }
  if (c.env_show[0]) {
    if (prof_builtin_text(c.env_show) == NULL)
      launch_usage_error("--show-profile: no built-in profile '%s' (see "
                         "launch env --list-profiles)", c.env_show);
    else
      fputs(prof_builtin_text(c.env_show), stdout), ret = 0;
    goto out;
  }
  if (c.env_local_rank >= c.nproc) {
    launch_usage_error("--local-rank %d: only %d local rank%s planned (set "
                       "--nproc-per-node)",
                       c.env_local_rank, c.nproc, c.nproc == 1 ? "" : "s");
    goto out;
  }
  if ((rc = launch_node_open(&c,
                             LAUNCH_NODE_SHOW |
                                 ((c.env_fingerprint || c.max_nodes > 1) &&
                                          c.ngpus > 0
                                      ? LAUNCH_NODE_TOPO
                                      : 0),
                             c.env_root[0] ? c.env_root : NULL, &log, &n, err,
                             sizeof(err))) != 0) {
    launch_usage_error("%s", err);
    ret = rc == RDZV_ENOMEM ? 1 : 2;
    goto out;
  }
  snprintf(run_dir, sizeof(run_dir), "%.2000s/%s%.200s_XXXXXX",
           c.log_dir[0] ? c.log_dir : c.tmpdir, c.log_dir[0] ? "" : "launch_",
           c.run_id);
  launch_round_guess(&c, run_dir, &r);
  ret = 1;
  if (launch_rank_env(&c, &n, &r, c.env_local_rank, &log, &e) != 0)
    goto out;
  if (c.env_fingerprint) {
    env_fp_t *fp = NULL;
    /* The CUDA and NCCL libraries as `launch doctor` finds them, GPUs or
     * not (the agent skips the probe where no GPU is: nothing to match) */
    if (n.si.ngpus < 0)
      aff_sysinfo_probe(&n.si, c.env_root[0] ? c.env_root : NULL);
    if (c.prog_argc > 0 && launch_worker_argv(&c, &wargv) != 0)
      goto out;
    if ((rc = launch_node_fingerprint(&n, e, wargv, c.env_programs, &fp, err,
                                      sizeof(err))) != 0) {
      launch_usage_error("%s", err);
      ret = 2;
      goto out;
    }
    print_fingerprint(fp, c.env_json);
    env_fp_free(fp);
    ret = 0;
    goto out;
  }
  if (c.env_lint) {
    if (launch_lint(&n, e, &f, &nf) != 0)
      goto out;
    for (int i = 0; i < nf; i++)
      errors += f[i].sev == ENV_SEV_ERROR;
  }
  if (c.env_json)
    print_env_json(e, prof_name(n.prof), c.env_local_rank, c.env_all, f, nf,
                   c.env_lint);
  else if (c.env_lint)
    print_findings_text(f, nf);
  else
    print_env_text(e, &c, &n, c.env_local_rank, c.env_all);
  ret = errors > 0 ? 1 : 0;
out:
  free(f);
  env_free(e);
  launch_argv_free(wargv);
  launch_node_close(&n);
  cfg_free(&c);
  return ret;
}
