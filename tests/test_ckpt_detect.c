/* test_ckpt_detect.c - which layout `launch ckpt ls` and the agent take a
 * directory for when none is named (--layout auto): each row of the layout
 * table (checkpoint/scan.c) claims what it writes, a directory one layout
 * owns by name is not also another's (Megatron's torch_dist iter_N holds
 * DCP files), launch's empty step-N counts only when nothing else is
 * there, and a directory holding two layouts is refused with both named.
 * Also: every layout name parses back to its layout. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_int.h"
#include "test.h"

/* "a/b" into p (1024 bytes). */
static void join(char *p, const char *a, const char *b) {
  int k = snprintf(p, 1024, "%s/%s", a, b);
  if (k < 0 || k >= 1024)
    TEST_FAIL("%s/%s: path too long", a, b);
}

/* dir/rel (its directories made) holding text. */
static void put(const char *dir, const char *rel, const char *text) {
  char p[1024], d[1024];
  const char *slash;
  int fd;
  join(p, dir, rel);
  if ((slash = strrchr(p, '/')) != NULL) {
    snprintf(d, sizeof(d), "%.*s", (int)(slash - p), p);
    test_mkdirs(d);
  }
  fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT(fd >= 0);
  ASSERT_EQ((ssize_t)strlen(text), write(fd, text, strlen(text)));
  close(fd);
}

/* A fresh directory for one case. */
static const char *fresh(const char *name) {
  static char p[1024];
  join(p, test_tmpdir(), name);
  test_mkdirs(p);
  return p;
}

/* The layout ckpt_scan detects in dir; it must scan without an error. */
static ckpt_layout_t detected(const char *dir) {
  ckpt_scan_t *s = NULL;
  char err[512] = "";
  ckpt_layout_t l;
  int rc = ckpt_scan(dir, NULL, &s, err, sizeof(err));
  if (rc != 0)
    TEST_FAIL("%s: ckpt_scan: %s (%s)", dir, ckpt_strerror(rc), err);
  l = s->layout;
  ckpt_scan_free(s);
  return l;
}

static void test_names(void) {
  static const ckpt_layout_t all[] = {CKPT_LAYOUT_AUTO, CKPT_LAYOUT_LAUNCH,
                                      CKPT_LAYOUT_MEGATRON,
                                      CKPT_LAYOUT_DEEPSPEED, CKPT_LAYOUT_HF,
                                      CKPT_LAYOUT_DCP};
  ckpt_layout_t back;
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
    const char *name = ckpt_layout_name(all[i]);
    ASSERT(strcmp(name, "?") != 0);
    ASSERT_OK(ckpt_layout_parse(name, &back));
    ASSERT_EQ(all[i], back);
  }
  ASSERT_STR_EQ("auto", ckpt_layout_name(CKPT_LAYOUT_AUTO));
  ASSERT_STR_EQ("megatron", ckpt_layout_name(CKPT_LAYOUT_MEGATRON));
  ASSERT_STR_EQ("?", ckpt_layout_name((ckpt_layout_t)99));
  ASSERT_EQ(RDZV_EINVAL, ckpt_layout_parse("zero3", &back));
}

/* One directory each: its files as (path, content) pairs, a path ending
 * in '/' an empty directory. */
typedef struct detect_case_s {
  const char *name; /* what the case shows, and its directory */
  ckpt_layout_t want;
  const char *files[10];
} detect_case_t;

static const detect_case_t cases[] = {
    /* Nothing yet: a fresh directory is launch's. */
    {"empty", CKPT_LAYOUT_LAUNCH, {NULL}},
    {"launch",
     CKPT_LAYOUT_LAUNCH,
     {"latest", "step-3\n", "step-3/manifest.json", "{}", NULL}},
    {"megatron",
     CKPT_LAYOUT_MEGATRON,
     {"latest_checkpointed_iteration.txt", "10\n",
      "iter_0000010/mp_rank_00/model_optim_rng.pt", "x", NULL}},
    {"deepspeed",
     CKPT_LAYOUT_DEEPSPEED,
     {"latest", "global_step7", "global_step7/mp_rank_00_model_states.pt",
      "x", NULL}},
    {"hf",
     CKPT_LAYOUT_HF,
     {"checkpoint-5/trainer_state.json", "{\"global_step\": 5}", NULL}},
    {"dcp", CKPT_LAYOUT_DCP, {".metadata", "x", "__0_0.distcp", "x", NULL}},
    /* Megatron's torch_dist step is a DCP checkpoint inside iter_N: still
     * Megatron's alone, not "several layouts". */
    {"torch_dist",
     CKPT_LAYOUT_MEGATRON,
     {"latest_checkpointed_iteration.txt", "10\n",
      "iter_0000010/metadata.json", "{\"sharded_backend\": \"torch_dist\"}",
      "iter_0000010/.metadata", "x", "iter_0000010/__0_0.distcp", "x", NULL}},
    /* DCP steps are often called checkpoint-N too: by content. */
    {"dcp_named_hf",
     CKPT_LAYOUT_DCP,
     {"checkpoint-5/.metadata", "x", "checkpoint-5/__0_0.distcp", "x", NULL}},
    {"dcp_in_steps",
     CKPT_LAYOUT_DCP,
     {"step-4/.metadata", "x", "step-4/__0_0.distcp", "x", NULL}},
    /* An empty step-N is launch's being written, unless something else is
     * there: a DCP checkpoint in a subdirectory. */
    {"bare_step", CKPT_LAYOUT_LAUNCH, {"step-3/", "", NULL}},
    {"bare_step_and_dcp",
     CKPT_LAYOUT_DCP,
     {"step-3/", "", "run/.metadata", "x", "run/__0_0.distcp", "x", NULL}},
    /* A `latest` that names no directory is nobody's pointer. */
    {"stray_latest",
     CKPT_LAYOUT_HF,
     {"latest", "global_step9", "checkpoint-2/trainer_state.json",
      "{\"global_step\": 2}", NULL}},
    /* What launch before issue #22 set aside is nobody's step. */
    {"abandoned",
     CKPT_LAYOUT_LAUNCH,
     {"abandoned-step-500-1796182836408/.metadata", "x", "step-2/rank-0.bin",
      "x", NULL}},
};

static void test_cases(void) {
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const detect_case_t *c = &cases[i];
    const char *d = fresh(c->name);
    ckpt_layout_t got;
    for (size_t k = 0; c->files[k] != NULL; k += 2) {
      size_t n = strlen(c->files[k]);
      if (c->files[k][n - 1] == '/') {
        char p[1024];
        join(p, d, c->files[k]);
        test_mkdirs(p);
      } else {
        put(d, c->files[k], c->files[k + 1]);
      }
    }
    if ((got = detected(d)) != c->want)
      TEST_FAIL("%s: taken for %s, not %s", c->name, ckpt_layout_name(got),
                ckpt_layout_name(c->want));
  }
}

static void test_several(void) {
  const char *d = fresh("several");
  ckpt_scan_t *s = (ckpt_scan_t *)1;
  char err[512] = "";
  put(d, "step-3/manifest.json", "{}");
  put(d, "latest_checkpointed_iteration.txt", "10\n");
  ASSERT_EQ(CKPT_ELAYOUT, ckpt_scan(d, NULL, &s, err, sizeof(err)));
  ASSERT(s == NULL);
  ASSERT_CONTAINS(err, "several layouts (launch, megatron)");
  ASSERT_CONTAINS(err, "pass --layout");
}

int main(void) {
  int fds = test_fd_count();
  test_names();
  test_cases();
  test_several();
  ASSERT_EQ(fds, test_fd_count());
  printf("ok\n");
  return 0;
}
