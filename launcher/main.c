/* main.c - `launch`: the agent (launch [options] PROGRAM ...) or a
 * subcommand (launch server|status ...). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <limits.h>
#include <unistd.h>

#include "agent.h"
#include "config.h"
#include "launch.h"
#include "lu.h"
#include "sampler.h"

void launch_usage_error(const char *fmt, ...) {
  va_list ap;
  fputs("launch: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n", stderr);
}

static const struct {
  const char *name;
  int (*fn)(int argc, char **argv);
} subcommands[] = {
    {"server", launch_cmd_server},
    {"status", launch_cmd_status},
    {"topo", launch_cmd_topo},
    {"env", launch_cmd_env},
    {"doctor", launch_cmd_doctor},
    {"ckpt", launch_cmd_ckpt},
};

/* Is name a program this node can run (a path, or found in PATH)? */
static int program_exists(const char *name) {
  char buf[PATH_MAX];
  return lu_which(name, getenv("PATH"), buf, sizeof(buf)) == 0;
}

int main(int argc, char **argv) {
  static cfg_t cfg;
  char err[1024];
  int rc;
  /* Internal (sampler.h): the agent's GPU sampler, in no help or list. */
  if (argc >= 2 && strcmp(argv[1], "gpu-sampler") == 0)
    return launch_cmd_gpu_sampler(argc - 1, argv + 1);
  if (argc >= 2)
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
      if (strcmp(argv[1], subcommands[i].name) == 0)
        return subcommands[i].fn(argc - 1, argv + 1);
  if (argc < 2) {
    cfg_help(stderr, 0);
    return 2;
  }
  /* `launch help [SUBCOMMAND]`, as git's */
  if (strcmp(argv[1], "help") == 0 && !program_exists(argv[1])) {
    if (argc >= 3)
      for (size_t i = 0; i < LU_ARRAY_SIZE(subcommands); i++)
        if (strcmp(argv[2], subcommands[i].name) == 0) {
          char *sub[] = {argv[2], (char *)"--help", NULL};
          return subcommands[i].fn(2, sub);
        }
    cfg_help(stdout, 0);
    return 0;
  }
  /* `launch statu`: a misspelt subcommand, not a program to run */
  if (argv[1][0] != '-' && !program_exists(argv[1])) {
    for (size_t i = 0; i < LU_ARRAY_SIZE(subcommands); i++)
      if (lu_edit_distance(argv[1], subcommands[i].name) <= 2) {
        launch_usage_error("'%s' is neither a launch command nor a program "
                           "found in PATH; did you mean `launch %s`?",
                           argv[1], subcommands[i].name);
        return 2;
      }
  }
  rc = cfg_parse(argc, argv, environ, CFG_NEED_PROGRAM, &cfg, err, sizeof(err));
  if (rc == 0) {
    lu_raise_nofile();
    rc = cfg.from_tasks ? launch_from_tasks(&cfg) : agent_run(&cfg);
    /* torchrun exits 1 for any failure: for wrappers that test == 1 */
    if (rc != 0 && cfg.exit_code_mode == CFG_EXIT_TORCHRUN)
      rc = 1;
  } else if (rc < 0) {
    launch_usage_error("%s", err);
    rc = 2;
  } else {
    rc = 0;
  }
  cfg_free(&cfg);
  return rc;
}
