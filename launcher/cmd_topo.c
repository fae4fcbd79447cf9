/* cmd_topo.c - `launch topo`: the GPU/NIC/NUMA matrix, the binding plan per
 * local rank and the topology warnings, for this machine or an hwloc XML
 * file of another one. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aff.h"
#include "launch.h"

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
  static const aff_gpusrc_t sources[] = {AFF_GPUSRC_AUTO, AFF_GPUSRC_NVML,
                                         AFF_GPUSRC_PCI, AFF_GPUSRC_AUTO};
  aff_topo_opts_t to = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  aff_plan_t *plan = NULL;
  aff_policy_t *pol = NULL;
  const char *cpu_bind, *mem_bind, *export_path, *spec;
  char err[1024], *text = NULL;
  int nproc = 0, json, rc, ret = 1, check;
  lu_log_t log;
  cfg_t c;

  lu_log_init(&log, "launch topo");
  /* gpu, cpu and auto are counted on the topology, once loaded */
  if ((rc = cfg_parse(argc, argv, environ, CFG_TOPO_CMD, &c, err,
                      sizeof(err))) == 0 && c.given[CFG_S_NPROC] &&
      isdigit((unsigned char)c.nproc_spec[0]) &&
      lu_parse_int(c.nproc_spec, 1, AFF_MAX_RANKS, &nproc) != 0)
    rc = -1, snprintf(err, sizeof(err), "--nproc-per-node: '%s' is not a "
                      "number from 1 to %d, gpu, cpu or auto", c.nproc_spec,
                      AFF_MAX_RANKS);
  if (rc != 0) {
    if (rc < 0)
      launch_usage_error("%s", err);
    cfg_free(&c);
    return rc < 0 ? 2 : 0;
  }
  export_path = c.topo_export[0] ? c.topo_export : NULL;
  json = c.env_json;
  check = c.topo_gpu_probe == 3;
  to.xml = c.topology_file[0] ? c.topology_file : NULL;
  to.cuda_visible_devices = c.given[CFG_S_TOPO_CVD] ? c.topo_cvd : NULL;
  to.gpu_source = sources[c.topo_gpu_probe];
  if ((pol = malloc(sizeof(*pol))) == NULL)
    return 1;
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
  /* The plan launch itself applies on this topology (config.c's
   * defaults): each rank on its GPU's NUMA node, memory preferred there,
   * when there are GPUs; nothing bound without. */
  cpu_bind = c.given[CFG_S_CPU_BIND] ? c.cpu_bind
             : aff_topo_ngpus(t) > 0 ? "numa" : "none";
  mem_bind = c.given[CFG_S_MEM_BIND] ? c.mem_bind
             : aff_topo_ngpus(t) > 0 && strcmp(cpu_bind, "none") ? "preferred"
                                                                 : "none";
  if (aff_policy_parse(cpu_bind, mem_bind, pol, err, sizeof(err)) != 0) {
    launch_usage_error("%s", err);
    ret = 2;
    goto out;
  }
  /* As the agent counts them (config.c), on this topology: gpu its GPUs,
   * cpu the CPUs a plan may use, auto GPUs where there are some. */
  spec = c.given[CFG_S_NPROC] ? c.nproc_spec : "";
  if (!strcmp(spec, "gpu") && aff_topo_ngpus(t) == 0) {
    launch_usage_error("--nproc-per-node gpu: %s has no GPU CUDA can see; "
                       "give a number, or 'cpu'",
                       to.xml ? to.xml : "this machine");
    ret = 2;
    goto out;
  }
  if (!strcmp(spec, "cpu") || (!strcmp(spec, "auto") && aff_topo_ngpus(t) == 0))
    nproc = LU_MIN(LU_MAX(aff_topo_nallowed(t), 1), AFF_MAX_RANKS);
  else if (nproc == 0)
    nproc = aff_topo_ngpus(t) > 0 ? LU_MIN(aff_topo_ngpus(t), AFF_MAX_RANKS) : 1;
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
  cfg_free(&c);
  return ret;
}
