/* cmd_doctor.c - `launch doctor`: this node's health, line by line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "doctor.h"
#include "launch.h"

extern char **environ;

static const char doctor_help[] =
    "usage: launch doctor [options]\n"
    "\n"
    "Checks this node the way the runbooks do by hand (host, OS, kernel,\n"
    "CPUs/NUMA, GPUs and driver, CUDA and NCCL versions, persistence mode,\n"
    "nouveau, NUMA balancing, huge pages, InfiniBand ports, NICs, GPU<->NIC\n"
    "NUMA placement, GPUDirect RDMA, the NCCL environment, the rendezvous\n"
    "port). Every line is PASS, INFO, WARN or FAIL with the reason and the\n"
    "fix. Exit status 1 when any line fails.\n"
    "\n"
    "options:\n"
    "  --rdzv-endpoint H:P     check that the rendezvous port answers\n"
    "  --nccl-profile P        lint this NCCL profile (name or file) too\n"
    "  --expect-gpus N         fail unless exactly N GPUs are present\n"
    "  --root DIR              read /sys, /proc and /etc under DIR\n"
    "  --no-probe              do not load NVML, libcudart, libnccl\n"
    "  --timeout MS            connect timeout for --rdzv-endpoint (3000)\n"
    "  --json                  JSON report\n"
    "  --compact               the line format agents send to node 0\n"
    "\n"
    "example:\n"
    "  launch doctor --rdzv-endpoint 10.10.10.11:29400 --expect-gpus 8\n";

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int launch_cmd_doctor(int argc, char **argv) {
  static const struct option opts[] = {
      {"rdzv-endpoint", required_argument, 0, 'e'},
      {"nccl-profile", required_argument, 0, 'p'},
      {"expect-gpus", required_argument, 0, 'g'},
      {"root", required_argument, 0, 'r'},
      {"no-probe", no_argument, 0, 'n'},
      {"timeout", required_argument, 0, 't'},
      {"json", no_argument, 0, 'j'},
      {"compact", no_argument, 0, 'c'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  doc_opts_t o = DOC_OPTS_INIT;
  doc_report_t *r = NULL;
  char *text = NULL;
  int opt, json = 0, compact = 0, rc;
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
    case 'e': o.rdzv_endpoint = optarg; break;
    case 'p': o.nccl_profile = optarg; break;
    case 'g':
      if (lu_parse_int(optarg, 0, 1024, &o.expect_gpus) != 0) {
        launch_usage_error("--expect-gpus: '%s' is not a number from 0 to 1024",
                           optarg);
        return 2;
      }
      break;
    case 'r': o.root = optarg; break;
    case 'n': o.probe_libs = 0; break;
    case 't':
      if (lu_parse_int(optarg, 1, 600000, &o.connect_timeout_ms) != 0) {
        launch_usage_error("--timeout: '%s' is not milliseconds (1-600000)",
                           optarg);
        return 2;
      }
      break;
    case 'j': json = 1; break;
    case 'c': compact = 1; break;
    case 'h': fputs(doctor_help, stdout); return 0;
    default:
      launch_usage_error("doctor: unknown or incomplete option '%s' (see "
                         "launch doctor --help)",
                         argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    launch_usage_error("doctor: unexpected argument '%s'", argv[optind]);
    return 2;
  }
  if (json && compact) {
    launch_usage_error("doctor: --json and --compact exclude each other");
    return 2;
  }
  if (o.root && !is_dir(o.root)) {
    launch_usage_error("--root %s: not a directory (give the top of a tree "
                       "holding sys/, proc/ and etc/)",
                       o.root);
    return 2;
  }
  o.environ = environ;
  if ((rc = doc_collect(&o, &r)) != 0) {
    launch_usage_error("doctor: %s", rdzv_strerror(rc));
    return 1;
  }
  rc = json ? doc_to_json(r, &text)
            : compact ? doc_to_compact(r, &text, NULL) : doc_to_text(r, &text);
  if (rc == 0)
    fputs(text, stdout);
  free(text);
  rc = rc != 0 ? 1 : doc_worst(r) == DOC_FAIL ? 1 : 0;
  doc_free(r);
  return rc;
}
