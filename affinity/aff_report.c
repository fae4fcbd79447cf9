/* aff_report.c - `launch topo`: the matrix in the spirit of nvidia-smi
 * topo -m, the device lists, the plan per local rank, the warnings; as
 * text or JSON. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aff_int.h"
#include "lu_buf.h"

static const char *port_state_name(int s) {
  static const char *const names[] = {"NOP",   "DOWN",   "INIT",
                                      "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  if (s < 0)
    return "unknown";
  return s < (int)LU_ARRAY_SIZE(names) ? names[s] : "?";
}

/* Matrix cell between item i and j (GPUs first, then NICs). */
static void cell(const aff_topo_t *t, int i, int j, char *buf, size_t n) {
  int ng = t->ngpus;
  aff_path_t p;
  if (i < ng && j < ng) {
    p = aff_topo_gpu_path(t, i, j);
    if (p == AFF_PATH_NVLINK) {
      uint64_t mbps = aff_topo_nvlink_mbps(t, i, j);
      unsigned links = (unsigned)((mbps + 12500) / 25000);
      if (links > 0)
        snprintf(buf, n, "NV%u", links);
      else
        snprintf(buf, n, "NV");
      return;
    }
  } else if (i < ng) {
    p = aff_topo_gpu_nic_path(t, i, j - ng);
  } else if (j < ng) {
    p = aff_topo_gpu_nic_path(t, j, i - ng);
  } else {
    p = i == j ? AFF_PATH_SELF : aff__nic_path(t, i - ng, j - ng);
  }
  snprintf(buf, n, "%s", aff_path_name(p));
}

static void pcie_str(const aff_pcie_t *l, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = '\0';
  if (l->width > 0)
    k += (size_t)snprintf(buf + k, n - k, "x%d", l->width);
  if (l->width_max > 0 && l->width_max != l->width && k < n)
    k += (size_t)snprintf(buf + k, n - k, "(max x%d)", l->width_max);
  if (l->gts > 0 && k < n)
    k += (size_t)snprintf(buf + k, n - k, "%s%.1fGT/s", k ? " " : "", l->gts);
  if (l->gts_max > 0 && l->gts_max > l->gts + 0.01 && k < n)
    k += (size_t)snprintf(buf + k, n - k, "(max %.1f)", l->gts_max);
  if (l->gbps > 0 && k < n)
    k += (size_t)snprintf(buf + k, n - k, "%s%.1fGB/s", k ? " " : "", l->gbps);
  if (k == 0)
    snprintf(buf, n, "link unknown");
}

int aff_report_text(const aff_topo_t *t, const aff_plan_t *plan, char **out) {
  lu_buf_t b = LU_BUF_INIT;
  int ng = t->ngpus, nn = t->nnics, total = ng + nn;
  char c[32], list[AFF_CPULIST_LEN];

  lu_buf_printf(&b, "topology: %s%s%s\n", t->source,
                t->hostname[0] ? ", host " : "", t->hostname);
  lu_buf_printf(&b, "CPUs: %d PUs, %d cores, %d NUMA node%s", t->ncpus,
                t->ncores, t->nnuma, t->nnuma == 1 ? "" : "s");
  if (!t->from_xml) {
    aff_cpulist_format(&t->allowed, list, sizeof(list));
    lu_buf_printf(&b, "; this process may use %s", list);
  }
  lu_buf_puts(&b, "\n");
  for (int i = 0; i < t->nnuma; i++) {
    aff_cpulist_format(&t->numa_cpus[i], list, sizeof(list));
    lu_buf_printf(&b, "  NUMA %d: cpus %s\n", t->numa_os[i], list[0] ? list : "(memory only)");
  }
  lu_buf_puts(&b, "\n");
  if (total > 0) {
    lu_buf_printf(&b, "%-8s", "");
    for (int j = 0; j < total; j++) {
      if (j < ng)
        snprintf(c, sizeof(c), "GPU%d", j);
      else
        snprintf(c, sizeof(c), "NIC%d", j - ng);
      lu_buf_printf(&b, "%-6s", c);
    }
    lu_buf_printf(&b, "%-20s %s\n", "CPU Affinity", "NUMA Affinity");
    for (int i = 0; i < total; i++) {
      int numa;
      const aff_cpuset_t *cpus = NULL;
      aff_cpuset_t nc;
      if (i < ng)
        snprintf(c, sizeof(c), "GPU%d", i);
      else
        snprintf(c, sizeof(c), "NIC%d", i - ng);
      lu_buf_printf(&b, "%-8s", c);
      for (int j = 0; j < total; j++) {
        cell(t, i, j, c, sizeof(c));
        lu_buf_printf(&b, "%-6s", c);
      }
      if (i < ng) {
        numa = t->gpus[i].numa;
        cpus = &t->gpus[i].cpus;
      } else {
        numa = t->nics[i - ng].numa;
        aff_cpuset_zero(&nc);
        for (int k = 0; k < t->nnuma; k++)
          if (t->numa_os[k] == numa)
            nc = t->numa_cpus[k];
        cpus = &nc;
      }
      aff_cpulist_format(cpus, list, sizeof(list));
      if (numa >= 0)
        lu_buf_printf(&b, "%-20s %d\n", list[0] ? list : "N/A", numa);
      else
        lu_buf_printf(&b, "%-20s %s\n", list[0] ? list : "N/A", "N/A");
    }
    lu_buf_puts(&b,
                "\nLegend: X self, NV# NVLink (links), PIX at most one PCIe "
                "switch, PXB several PCIe switches, PHB a PCIe host bridge, "
                "NODE host bridges within a NUMA node, SYS across NUMA nodes\n");
    if (ng > 1 && !t->nvlink_known && t->io_sysfs)
      lu_buf_puts(&b, "NVLink is not probed from sysfs: GPU pairs show their "
                      "PCIe path (launch topo --gpu-probe nvml asks NVML)\n");
    lu_buf_puts(&b, "\n");
  }
  if (ng == 0)
    lu_buf_puts(&b, "GPUs: none found (CPU-only plan)\n");
  else
    lu_buf_printf(&b, "GPUs (%d visible):\n", ng);
  for (int i = 0; i < ng; i++) {
    const aff_gpu_t *g = &t->gpus[i];
    char l[96];
    pcie_str(&g->link, l, sizeof(l));
    lu_buf_printf(&b, "  GPU%d %s %s", i, g->busid, g->model);
    if (g->mem_bytes)
      lu_buf_printf(&b, " %.0f GiB", (double)g->mem_bytes / (1u << 30));
    lu_buf_printf(&b, ", NUMA %d, PCIe %s", g->numa, l);
    if (g->nic >= 0)
      lu_buf_printf(&b, ", closest NIC %s (%s)", t->nics[g->nic].name,
                    aff_path_name(g->nic_path));
    if (g->phys != i)
      lu_buf_printf(&b, " [physical GPU %d]", g->phys);
    lu_buf_puts(&b, "\n");
  }
  if (nn > 0)
    lu_buf_puts(&b, "NICs:\n");
  for (int k = 0; k < nn; k++) {
    const aff_nic_t *n = &t->nics[k];
    char l[96];
    pcie_str(&n->link, l, sizeof(l));
    lu_buf_printf(&b, "  NIC%d %s", k, n->name);
    if (n->hca[0] && n->netdev[0])
      lu_buf_printf(&b, " (%s)", n->netdev);
    lu_buf_printf(&b, " %s NUMA %d", n->busid, n->numa);
    if (n->hca[0])
      lu_buf_printf(&b, ", port %d %s%s%s%s%s", n->port,
                    port_state_name(n->port_state), n->rate[0] ? ", " : "",
                    n->rate, n->link_layer[0] ? ", " : "", n->link_layer);
    lu_buf_printf(&b, ", PCIe %s\n", l);
  }
  if (plan) {
    const aff_policy_t *pol = aff_plan_policy(plan);
    lu_buf_printf(&b, "\nbinding plan (--cpu-bind %s --mem-bind %s, %d local rank%s):\n",
                  aff_cpu_bind_name(pol->cpu), aff_mem_bind_name(pol->mem),
                  aff_plan_nranks(plan), aff_plan_nranks(plan) == 1 ? "" : "s");
    for (int r = 0; r < aff_plan_nranks(plan); r++) {
      char line[AFF_CPULIST_LEN + 256];
      aff_binding_format(plan, t, r, line, sizeof(line));
      lu_buf_printf(&b, "  %s\n", line);
    }
  }
  if (t->nwarn > 0 || (plan && aff_plan_nwarnings(plan) > 0)) {
    lu_buf_puts(&b, "\nwarnings:\n");
    for (int i = 0; i < t->nwarn; i++)
      lu_buf_printf(&b, "  - %s\n", t->warn[i]);
    for (int i = 0; plan && i < aff_plan_nwarnings(plan); i++)
      lu_buf_printf(&b, "  - %s\n", aff_plan_warning(plan, i));
  }
  return lu_buf_finish(&b, out, NULL);
}

static void json_pcie(lu_json_t *j, const aff_pcie_t *l) {
  lu_json_obj(j, "pcie");
  lu_json_num(j, "gbps", l->gbps);
  lu_json_int(j, "width", l->width);
  lu_json_int(j, "width_max", l->width_max);
  lu_json_num(j, "gts", l->gts);
  lu_json_num(j, "gts_max", l->gts_max);
  lu_json_end_obj(j);
}

int aff_report_json(const aff_topo_t *t, const aff_plan_t *plan, char **out) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  char list[AFF_CPULIST_LEN], c[32];
  int ng = t->ngpus, total = t->ngpus + t->nnics;
  lu_json_init(&j, &b, 1);
  lu_json_obj(&j, NULL);
  lu_json_str(&j, "source", t->source);
  lu_json_str(&j, "host", t->hostname);
  lu_json_int(&j, "cpus", t->ncpus);
  lu_json_int(&j, "cores", t->ncores);
  aff_cpulist_format(&t->allowed, list, sizeof(list));
  lu_json_str(&j, "allowed_cpus", list);
  lu_json_arr(&j, "numa");
  for (int i = 0; i < t->nnuma; i++) {
    lu_json_obj(&j, NULL);
    lu_json_int(&j, "node", t->numa_os[i]);
    aff_cpulist_format(&t->numa_cpus[i], list, sizeof(list));
    lu_json_str(&j, "cpus", list);
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  lu_json_arr(&j, "gpus");
  for (int i = 0; i < ng; i++) {
    const aff_gpu_t *g = &t->gpus[i];
    lu_json_obj(&j, NULL);
    lu_json_int(&j, "index", g->index);
    lu_json_int(&j, "phys", g->phys);
    lu_json_str(&j, "busid", g->busid);
    lu_json_str(&j, "model", g->model);
    lu_json_str(&j, "uuid", g->uuid);
    lu_json_int(&j, "mem_bytes", (long long)g->mem_bytes);
    lu_json_int(&j, "numa", g->numa);
    aff_cpulist_format(&g->cpus, list, sizeof(list));
    lu_json_str(&j, "cpus", list);
    json_pcie(&j, &g->link);
    lu_json_str(&j, "nic", g->nic >= 0 ? t->nics[g->nic].name : NULL);
    lu_json_str(&j, "nic_path", aff_path_name(g->nic_path));
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  lu_json_arr(&j, "nics");
  for (int k = 0; k < t->nnics; k++) {
    const aff_nic_t *n = &t->nics[k];
    lu_json_obj(&j, NULL);
    lu_json_str(&j, "name", n->name);
    lu_json_str(&j, "hca", n->hca);
    lu_json_str(&j, "netdev", n->netdev);
    lu_json_str(&j, "busid", n->busid);
    lu_json_int(&j, "numa", n->numa);
    lu_json_int(&j, "port", n->port);
    lu_json_str(&j, "port_state", port_state_name(n->port_state));
    lu_json_str(&j, "rate", n->rate);
    lu_json_int(&j, "rate_gbps", n->rate_gbps);
    lu_json_str(&j, "link_layer", n->link_layer);
    json_pcie(&j, &n->link);
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  lu_json_obj(&j, "matrix");
  lu_json_arr(&j, "labels");
  for (int i = 0; i < total; i++) {
    if (i < ng)
      snprintf(c, sizeof(c), "GPU%d", i);
    else
      snprintf(c, sizeof(c), "NIC%d", i - ng);
    lu_json_str(&j, NULL, c);
  }
  lu_json_end_arr(&j);
  lu_json_arr(&j, "rows");
  for (int i = 0; i < total; i++) {
    lu_json_arr(&j, NULL);
    for (int k = 0; k < total; k++) {
      cell(t, i, k, c, sizeof(c));
      lu_json_str(&j, NULL, c);
    }
    lu_json_end_arr(&j);
  }
  lu_json_end_arr(&j);
  lu_json_end_obj(&j);
  if (plan) {
    const aff_policy_t *pol = aff_plan_policy(plan);
    lu_json_obj(&j, "plan");
    lu_json_str(&j, "cpu_bind", aff_cpu_bind_name(pol->cpu));
    lu_json_str(&j, "mem_bind", aff_mem_bind_name(pol->mem));
    lu_json_arr(&j, "ranks");
    for (int r = 0; r < aff_plan_nranks(plan); r++) {
      const aff_binding_t *bb = aff_plan_rank(plan, r);
      lu_json_obj(&j, NULL);
      lu_json_int(&j, "local_rank", r);
      lu_json_int(&j, "gpu", bb->gpu);
      lu_json_str(&j, "gpu_busid", bb->gpu >= 0 ? t->gpus[bb->gpu].busid : NULL);
      lu_json_int(&j, "numa", bb->numa);
      lu_json_str(&j, "cpus", bb->cpulist);
      lu_json_bool(&j, "cpus_bound", bb->bind_cpus);
      lu_json_str(&j, "mem", bb->mem_policy == MPOL_BIND        ? "bind"
                             : bb->mem_policy == MPOL_PREFERRED ? "preferred"
                                                                : "none");
      lu_json_str(&j, "hca", bb->hca);
      lu_json_int(&j, "hca_port", bb->hca_port);
      lu_json_str(&j, "netdev", bb->netdev);
      lu_json_end_obj(&j);
    }
    lu_json_end_arr(&j);
    lu_json_arr(&j, "warnings");
    for (int i = 0; i < aff_plan_nwarnings(plan); i++)
      lu_json_str(&j, NULL, aff_plan_warning(plan, i));
    lu_json_end_arr(&j);
    lu_json_end_obj(&j);
  }
  lu_json_arr(&j, "warnings");
  for (int i = 0; i < t->nwarn; i++)
    lu_json_str(&j, NULL, t->warn[i]);
  lu_json_end_arr(&j);
  lu_json_end_obj(&j);
  return lu_buf_finish(&b, out, NULL);
}
