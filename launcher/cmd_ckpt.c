/* cmd_ckpt.c - `launch ckpt ls|verify DIR`: the steps of a checkpoint
 * directory (launch's layout or another trainer's), whether each is
 * complete, and the step a restart would resume from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "cmd_vals.h"
#include "config.h"
#include "launch.h"
#include "lu_buf.h"

static const char *state_name(ckpt_state_t s) {
  switch (s) {
  case CKPT_STEP_COMPLETE: return "complete";
  case CKPT_STEP_INCOMPLETE: return "incomplete";
  case CKPT_STEP_CORRUPT: return "corrupt";
  default: return "unchecked";
  }
}

static void human_bytes(uint64_t b, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    i++;
  }
  snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* What was checked: SHA-256 exists only in launch's layout; the others are
 * checked by structure and sizes, whatever the command (issue #22). */
static const char *checked_json(const ckpt_scan_t *s, int sha) {
  if (s->layout != CKPT_LAYOUT_LAUNCH)
    return "structure";
  return sha ? "sha256" : "size";
}

static const char *checked_text(const ckpt_scan_t *s, int sha) {
  if (s->layout != CKPT_LAYOUT_LAUNCH)
    return "structure and sizes checked; this layout records no checksums";
  return sha ? "SHA-256 verified" : "sizes checked";
}

static void print_json(const char *dir, const ckpt_scan_t *s, int sha) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  char *text;
  lu_json_init(&j, &b, 1);
  lu_json_obj(&j, NULL);
  lu_json_str(&j, "dir", dir);
  lu_json_str(&j, "layout", ckpt_layout_name(s->layout));
  lu_json_str(&j, "checked", checked_json(s, sha));
  lu_json_arr(&j, "steps");
  for (size_t i = 0; i < s->nsteps; i++) {
    const ckpt_step_t *st = &s->steps[i];
    lu_json_obj(&j, NULL);
    lu_json_str(&j, "name", st->name);
    if (st->step >= 0)
      lu_json_int(&j, "step", (long long)st->step);
    else
      lu_json_null(&j, "step");
    lu_json_str(&j, "state", state_name(st->state));
    if (st->problem[0])
      lu_json_str(&j, "problem", st->problem);
    else
      lu_json_null(&j, "problem");
    lu_json_int(&j, "world_size", st->world_size);
    if (s->layout == CKPT_LAYOUT_LAUNCH)
      lu_json_bool(&j, "replicated", st->replicated);
    lu_json_int(&j, "files", st->files);
    lu_json_int(&j, "bytes", (long long)st->bytes);
    lu_json_bool(&j, "latest", st->is_latest);
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  if (s->latest_name[0] || s->latest_problem[0]) {
    lu_json_obj(&j, "latest");
    if (s->latest_name[0])
      lu_json_str(&j, "name", s->latest_name);
    else
      lu_json_null(&j, "name");
    if (s->latest_problem[0])
      lu_json_str(&j, "problem", s->latest_problem);
    else
      lu_json_null(&j, "problem");
    lu_json_end_obj(&j);
  } else {
    lu_json_null(&j, "latest");
  }
  if (s->resume >= 0) {
    lu_json_obj(&j, "resume");
    lu_json_str(&j, "name", s->steps[s->resume].name);
    if (s->steps[s->resume].step >= 0)
      lu_json_int(&j, "step", (long long)s->steps[s->resume].step);
    else
      lu_json_null(&j, "step");
    lu_json_end_obj(&j);
  } else {
    lu_json_null(&j, "resume");
  }
  lu_json_end_obj(&j);
  if (lu_buf_finish(&b, &text, NULL) == 0) {
    fputs(text, stdout);
    free(text);
  }
}

/* File and directory names are anyone's: escaped for the terminal. */
#define esc lu_esc

/* The newest complete step without a number (a single DCP directory,
 * Megatron's release/): complete, but the agent never resumes it. -1 none. */
static int unnumbered(const ckpt_scan_t *s) {
  for (size_t i = 0; i < s->nsteps; i++)
    if (s->steps[i].state == CKPT_STEP_COMPLETE && s->steps[i].step < 0)
      return (int)i;
  return -1;
}

static void print_text(const char *dir, const ckpt_scan_t *s, int sha) {
  size_t w = 4;
  char e1[4 * CKPT_NAME_MAX], e2[4 * CKPT_PROBLEM_MAX];
  printf("%s: %s layout, %zu step%s (%s)\n", esc(dir, e2, sizeof(e2)),
         ckpt_layout_name(s->layout),
         s->nsteps, s->nsteps == 1 ? "" : "s",
         checked_text(s, sha));
  for (size_t i = 0; i < s->nsteps; i++)
    if (strlen(s->steps[i].name) > w)
      w = strlen(s->steps[i].name);
  for (size_t i = 0; i < s->nsteps; i++) {
    const ckpt_step_t *st = &s->steps[i];
    char sz[32];
    human_bytes(st->bytes, sz, sizeof(sz));
    printf("  %-*s  %-10s  ", (int)w, esc(st->name, e1, sizeof(e1)),
           state_name(st->state));
    if (st->state == CKPT_STEP_UNCHECKED)
      printf("-");
    else if (st->problem[0])
      printf("%s", esc(st->problem, e2, sizeof(e2)));
    else
      printf("%u files, %s", st->files, sz);
    printf("%s\n", st->is_latest ? "  <- latest" : "");
  }
  if (s->latest_problem[0])
    printf("%s\n", esc(s->latest_problem, e2, sizeof(e2)));
  if (s->resume >= 0)
    printf("resume: %s\n", esc(s->steps[s->resume].name, e1, sizeof(e1)));
  else if (unnumbered(s) >= 0)
    printf("resume: none (%s is complete but has no step number: launch "
           "does not resume it, a restart starts fresh)\n",
           esc(s->steps[unnumbered(s)].name, e1, sizeof(e1)));
  else
    printf("resume: none (a restart starts fresh)\n");
}

int launch_cmd_ckpt(int argc, char **argv) {
  /* The options are rows of config.c's table (launch ckpt --help); VERB
   * and DIR may come among them. */
  cfg_t c;
  ckpt_scan_options_t so = CKPT_SCAN_OPTIONS_INIT;
  ckpt_scan_t *s = NULL;
  const char *verb, *dir;
  char err[1024], e[4096];
  int json, sha, rc, ret;
  int *ranks = NULL;
  size_t nranks = 0;

  rc = cfg_parse(argc, argv, environ, CFG_CKPT_CMD, &c, err, sizeof(err));
  if (rc != 0) {
    if (rc < 0)
      launch_usage_error("%s", err);
    cfg_free(&c);
    return rc < 0 ? 2 : 0;
  }
  json = c.env_json;
  so.layout = (ckpt_layout_t)c.ckpt_layout;
  if (c.given[CFG_S_CKPT_CMD_RANKS] &&
      ckpt__parse_ranks(c.ckpt_ranks, &ranks, &nranks) != 0) {
    launch_usage_error("--ranks: '%s' is not a rank list such as 0-3,8",
                       c.ckpt_ranks);
    return 2;
  }
  if (c.nargs != 2) {
    launch_usage_error("ckpt: expected ls|verify and a directory (see launch "
                       "ckpt --help)");
    free(ranks);
    return 2;
  }
  verb = c.args[0];
  dir = c.args[1];
  if (strcmp(verb, "ls") != 0 && strcmp(verb, "verify") != 0) {
    launch_usage_error("ckpt: '%s' is not ls or verify", verb);
    free(ranks);
    return 2;
  }
  sha = strcmp(verb, "verify") == 0;
  if (sha)
    so.flags |= CKPT_SCAN_SHA;
  so.ranks = ranks;
  so.nranks = nranks;
  rc = ckpt_scan(dir, &so, &s, err, sizeof(err));
  free(ranks);
  if (rc != 0) {
    launch_usage_error("ckpt %s: %s", verb, err[0] ? err : ckpt_strerror(rc));
    return rc == RDZV_ENOMEM ? 1 : 2;
  }
  /* A step newer than the one a restart takes is skipped: say why. */
  for (int i = 0; i < (s->resume >= 0 ? s->resume : (int)s->nsteps); i++)
    if (s->steps[i].state != CKPT_STEP_UNCHECKED &&
        s->steps[i].state != CKPT_STEP_COMPLETE) {
      char e1[4 * CKPT_NAME_MAX], e2[4 * CKPT_PROBLEM_MAX];
      fprintf(stderr, "launch ckpt: warning: %s skipped: %s\n",
              esc(s->steps[i].name, e1, sizeof(e1)),
              esc(s->steps[i].problem, e2, sizeof(e2)));
    }
  if (json && s->resume < 0 && unnumbered(s) >= 0) {
    char e1[4 * CKPT_NAME_MAX];
    fprintf(stderr, "launch ckpt: warning: %s is complete but has no step "
            "number: launch does not resume it, a restart starts fresh\n",
            esc(s->steps[unnumbered(s)].name, e1, sizeof(e1)));
  }
  if (json)
    print_json(dir, s, sha);
  else
    print_text(dir, s, sha);
  ret = s->resume == 0 && s->latest_problem[0] == '\0' ? 0 : 1;
  if (s->nsteps == 0)
    fprintf(stderr, "launch ckpt: no checkpoint step in %s\n",
            esc(dir, e, sizeof(e)));
  ckpt_scan_free(s);
  return ret;
}
