/* main.c - `launch`: dispatch to subcommands. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "launch.h"

void launch_usage_error(const char *fmt, ...) {
  va_list ap;
  fputs("launch: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n", stderr);
}

void launch_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static void usage(FILE *out) {
  fputs("usage: launch SUBCOMMAND [options]\n"
        "\n"
        "subcommands:\n"
        "  server   run a standalone rendezvous server (store + TCPStore)\n"
        "  topo     GPU/NIC/NUMA topology, binding plan per local rank\n"
        "  env      the environment a rank gets: NCCL profile, lock, lint\n"
        "  doctor   check this node: GPUs, driver, IB, NUMA, NCCL env, ports\n"
        "\n"
        "`launch SUBCOMMAND --help` describes each.\n",
        out);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("launch %d.%d (protocol %d)\n", RDZV_VERSION_MAJOR,
           RDZV_VERSION_MINOR, RDZV_PROTOCOL_VERSION);
    return 0;
  }
  if (strcmp(argv[1], "server") == 0)
    return launch_cmd_server(argc - 1, argv + 1);
  if (strcmp(argv[1], "topo") == 0)
    return launch_cmd_topo(argc - 1, argv + 1);
  if (strcmp(argv[1], "env") == 0)
    return launch_cmd_env(argc - 1, argv + 1);
  if (strcmp(argv[1], "doctor") == 0)
    return launch_cmd_doctor(argc - 1, argv + 1);
  launch_usage_error("unknown subcommand '%s' (try launch --help)", argv[1]);
  return 2;
}
