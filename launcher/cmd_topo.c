/* cmd_topo.c - `launch topo`: the GPU/NIC/NUMA matrix, the binding plan per
 * local rank and the topology warnings, for this machine or an hwloc XML
 * file of another one. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aff.h"
#include "launch.h"

static const char topo_help[] =
    "usage: launch topo [options]\n"
    "\n"
    "Shows how the GPUs, NICs, NUMA nodes and CPUs of a machine connect (in\n"
    "the spirit of nvidia-smi topo -m), the binding every local rank would\n"
    "get, and what is wrong with the topology: a NIC on another NUMA node\n"
    "than its GPUs, a PCIe link narrower or slower than the device supports,\n"
    "an InfiniBand port down, NUMA balancing on.\n"
    "\n"
    "options:\n"
    "  --topology FILE.xml     plan for the machine described by this hwloc\n"
    "                          XML (lstopo --of xml, or --export below)\n"
    "                          instead of this one\n"
    "  --nproc-per-node N      local ranks to plan (default: one per visible\n"
    "                          GPU, 1 without GPUs)\n"
    "  --cpu-bind POLICY       none | numa | cores | LIST (default cores);\n"
    "                          LIST is one cpulist per local rank separated\n"
    "                          by ':', e.g. 0-15:16-31\n"
    "  --mem-bind POLICY       none | local | preferred (default local)\n"
    "  --cuda-visible-devices L  plan as if CUDA_VISIBLE_DEVICES=L\n"
  "  --gpu-probe SOURCE      where this machine's GPUs come from: sysfs\n"
  "                          (default: sysfs and /proc/driver/nvidia, no GPU\n"
  "                          library, what the agent uses), nvml (hwloc's\n"
  "                          PCI tree and NVML: memory sizes and NVLink\n"
  "                          too), pci (hwloc's PCI tree only), or check\n"
  "                          (load sysfs and nvml, print what differs, exit\n"
  "                          1 if anything does)\n"
    "  --json                  machine-readable output\n"
    "  --export FILE.xml       write this machine's topology as hwloc XML,\n"
    "                          with the PCIe link widths/speeds and IB port\n"
    "                          rates launch reads from sysfs, and exit\n"
    "\n"
    "examples:\n"
    "  launch topo\n"
    "  launch topo --topology tests/topo/dgx-a100.xml --nproc-per-node 8\n"
    "  launch topo --cpu-bind 0-3:4-7 --mem-bind none --nproc-per-node 2\n";

/* --gpu-probe check: this machine read from sysfs and through NVML. */
static int launch_topo_check(const aff_topo_opts_t *base) {
  aff_topo_opts_t to = *base;
  aff_topo_t *a = NULL, *b = NULL;
  char err[512], diff[8192];
  int nd, ret = 1;
  to.gpu_source = AFF_GPUSRC_AUTO;
  if (aff_topo_load(&to, &a, err, sizeof(err)) != 0) {
    launch_usage_error("%s", err);
    return 1;
  }
  to.gpu_source = AFF_GPUSRC_NVML;
  to.log = NULL; /* the same warnings once */
  if (aff_topo_load(&to, &b, err, sizeof(err)) != 0) {
    launch_usage_error("%s", err);
    aff_topo_free(a);
    return 1;
  }
  nd = aff_topo_compare(a, b, diff, sizeof(diff));
  printf("sysfs: %s\nnvml:  %s\n", aff_topo_source(a), aff_topo_source(b));
  if (nd == 0) {
    printf("the same: %d GPU(s), %d NIC(s), NUMA nodes, local CPUs, closest "
           "NICs, PCIe links and paths\n",
           aff_topo_ngpus(a), aff_topo_nnics(a));
    ret = 0;
  } else {
    printf("%d difference(s) (sysfs vs nvml):\n%s", nd, diff);
  }
  aff_topo_free(a);
  aff_topo_free(b);
  return ret;
}

int launch_cmd_topo(int argc, char **argv) {
  static const struct option opts[] = {
      {"topology", required_argument, 0, 't'},
      {"nproc-per-node", required_argument, 0, 'n'},
      {"cpu-bind", required_argument, 0, 'c'},
      {"mem-bind", required_argument, 0, 'm'},
      {"cuda-visible-devices", required_argument, 0, 'v'},
      {"json", no_argument, 0, 'j'},
      {"export", required_argument, 0, 'e'},
      {"gpu-probe", required_argument, 0, 'g'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  aff_topo_opts_t to = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  aff_plan_t *plan = NULL;
  aff_policy_t *pol = NULL;
  const char *cpu_bind = "cores", *mem_bind = "local", *export_path = NULL;
  char err[512], *text = NULL;
  int opt, nproc = 0, json = 0, rc, ret = 1, check = 0;
  lu_log_t log;

  lu_log_init(&log, "launch topo");
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
    case 't': to.xml = optarg; break;
    case 'n':
      if (lu_parse_int(optarg, 1, AFF_MAX_RANKS, &nproc) != 0) {
        launch_usage_error("--nproc-per-node: '%s' is not a number from 1 to %d",
                           optarg, AFF_MAX_RANKS);
        return 2;
      }
      break;
    case 'c': cpu_bind = optarg; break;
    case 'm': mem_bind = optarg; break;
    case 'v': to.cuda_visible_devices = optarg; break;
    case 'j': json = 1; break;
    case 'e': export_path = optarg; break;
    case 'g':
      if (strcmp(optarg, "sysfs") == 0)
        to.gpu_source = AFF_GPUSRC_AUTO;
      else if (strcmp(optarg, "nvml") == 0)
        to.gpu_source = AFF_GPUSRC_NVML;
      else if (strcmp(optarg, "pci") == 0)
        to.gpu_source = AFF_GPUSRC_PCI;
      else if (strcmp(optarg, "check") == 0)
        check = 1;
      else {
        launch_usage_error("--gpu-probe: '%s' is not sysfs, nvml, pci or check",
                           optarg);
        return 2;
      }
      break;
    case 'h': fputs(topo_help, stdout); return 0;
    default:
      launch_usage_error("topo: unknown or incomplete option '%s' (see launch "
                         "topo --help)",
                         argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    launch_usage_error("topo: unexpected argument '%s'", argv[optind]);
    return 2;
  }
  if ((pol = malloc(sizeof(*pol))) == NULL)
    return 1;
  if (aff_policy_parse(cpu_bind, mem_bind, pol, err, sizeof(err)) != 0) {
    launch_usage_error("%s", err);
    free(pol);
    return 2;
  }
  to.log = &log;
  if (check && to.xml) {
    launch_usage_error("--gpu-probe check compares two ways of reading this "
                       "machine; it cannot be combined with --topology");
    free(pol);
    return 2;
  }
  if (check) {
    free(pol);
    return launch_topo_check(&to);
  }
  if ((rc = aff_topo_load(&to, &t, err, sizeof(err))) != 0) {
    launch_usage_error("%s", err);
    free(pol);
    return rc == RDZV_ENOMEM ? 1 : 2;
  }
  if (export_path) {
    if (to.xml) {
      launch_usage_error("--export writes this machine's topology; it cannot "
                         "be combined with --topology");
      ret = 2;
    } else if (aff_topo_export_xml(t, export_path, err, sizeof(err)) != 0) {
      launch_usage_error("%s", err);
    } else {
      fprintf(stderr, "launch topo: wrote %s (%s); check it with lstopo -i %s\n",
              export_path, aff_topo_source(t), export_path);
      ret = 0;
    }
    goto out;
  }
  if (nproc == 0)
    nproc = aff_topo_ngpus(t) > 0 ? aff_topo_ngpus(t) : 1;
  if ((rc = aff_plan_new(t, pol, nproc, NULL, &plan, err, sizeof(err))) != 0) {
    launch_usage_error("%s", err);
    ret = rc == RDZV_ENOMEM ? 1 : 2;
    goto out;
  }
  rc = json ? aff_report_json(t, plan, &text) : aff_report_text(t, plan, &text);
  if (rc != 0)
    goto out;
  fputs(text, stdout);
  ret = 0;
out:
  free(text);
  aff_plan_free(plan);
  aff_topo_free(t);
  free(pol);
  return ret;
}
