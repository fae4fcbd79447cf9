/* aff_plan.c - binding policies and per-local-rank plans. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <numa.h>
#include <numaif.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aff_int.h"

#define PLAN_MAX_WARN 64

struct aff_plan_s {
  const aff_topo_t *t;
  aff_policy_t policy;
  int nranks;
  aff_binding_t *ranks;
  int nwarn;
  char warn[PLAN_MAX_WARN][256];
};

static void pwarn(aff_plan_t *p, const char *fmt, ...) LU_PRINTF(2, 3);
static void pwarn(aff_plan_t *p, const char *fmt, ...) {
  va_list ap;
  if (p->nwarn >= PLAN_MAX_WARN)
    return;
  va_start(ap, fmt);
  vsnprintf(p->warn[p->nwarn], sizeof(p->warn[0]), fmt, ap);
  va_end(ap);
  for (int i = 0; i < p->nwarn; i++)
    if (strcmp(p->warn[i], p->warn[p->nwarn]) == 0)
      return;
  p->nwarn++;
}

const char *aff_cpu_bind_name(aff_cpu_bind_t c) {
  switch (c) {
  case AFF_CPU_NONE: return "none";
  case AFF_CPU_NUMA: return "numa";
  case AFF_CPU_CORES: return "cores";
  case AFF_CPU_LIST: return "list";
  }
  return "?";
}

const char *aff_mem_bind_name(aff_mem_bind_t m) {
  switch (m) {
  case AFF_MEM_NONE: return "none";
  case AFF_MEM_LOCAL: return "local";
  case AFF_MEM_PREFERRED: return "preferred";
  }
  return "?";
}

int aff_policy_parse(const char *cpu_bind, const char *mem_bind,
                     aff_policy_t *p, char *err, size_t errlen) {
  memset(p, 0, sizeof(*p));
  if (cpu_bind == NULL || strcmp(cpu_bind, "none") == 0) {
    p->cpu = AFF_CPU_NONE;
  } else if (strcmp(cpu_bind, "numa") == 0) {
    p->cpu = AFF_CPU_NUMA;
  } else if (strcmp(cpu_bind, "cores") == 0) {
    p->cpu = AFF_CPU_CORES;
  } else if (cpu_bind[0] >= '0' && cpu_bind[0] <= '9') {
    char sub[200];
    int n = aff_cpulists_parse(cpu_bind, p->lists, AFF_MAX_RANKS, sub,
                               sizeof(sub));
    if (n < 0) {
      lu_errf(err, errlen, "--cpu-bind: %s", sub);
      return n;
    }
    p->cpu = AFF_CPU_LIST;
    p->nlists = n;
  } else {
    lu_errf(err, errlen,
           "--cpu-bind: '%s' is not a policy: use none, numa (the GPU's NUMA "
           "node), cores (the node's cores split among its GPUs) or one CPU "
           "list per local rank separated by ':' (e.g. 0-15:16-31)",
           cpu_bind);
    return RDZV_EINVAL;
  }
  if (mem_bind == NULL || strcmp(mem_bind, "none") == 0) {
    p->mem = AFF_MEM_NONE;
  } else if (strcmp(mem_bind, "local") == 0) {
    p->mem = AFF_MEM_LOCAL;
  } else if (strcmp(mem_bind, "preferred") == 0) {
    p->mem = AFF_MEM_PREFERRED;
  } else {
    lu_errf(err, errlen,
           "--mem-bind: '%s' is not a policy: use none, local (memory only "
           "from the rank's NUMA node) or preferred (that node first)",
           mem_bind);
    return RDZV_EINVAL;
  }
  return 0;
}

/* Index of the NUMA node (OS index) in t's arrays, -1 if absent. */
static int numa_slot(const aff_topo_t *t, int os) {
  for (int i = 0; i < t->nnuma; i++)
    if (t->numa_os[i] == os)
      return i;
  return -1;
}

/* Node whose CPUs hold most of `cpus` (-1 when none). */
static int numa_of_cpus(const aff_topo_t *t, const aff_cpuset_t *cpus) {
  int best = -1, bestn = 0;
  for (int i = 0; i < t->nnuma; i++) {
    aff_cpuset_t x = t->numa_cpus[i];
    int n;
    aff_cpuset_and(&x, cpus);
    n = aff_cpuset_count(&x);
    if (n > bestn) {
      bestn = n;
      best = t->numa_os[i];
    }
  }
  return best;
}

/* A NIC for a rank without a GPU: on its node, RDMA first. */
static int nic_for_numa(const aff_topo_t *t, int numa) {
  int any = -1;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < t->nnics; k++) {
      const aff_nic_t *n = &t->nics[k];
      int usable = n->port_state < 0 || n->port_state == 4;
      if ((pass == 0) != (n->hca[0] != '\0') || !usable)
        continue;
      if (n->numa == numa && numa >= 0)
        return k;
      if (any < 0)
        any = k;
    }
  return any;
}

/* The cores (their allowed PUs) inside `within`, in hwloc's logical order,
 * which follows the physical layout. RET the count. */
static int cores_in(const aff_topo_t *t, const aff_cpuset_t *within,
                    aff_cpuset_t *cores, int max) {
  int n = 0;
  for (int i = 0; i < t->ncore_sets && n < max; i++) {
    aff_cpuset_t s = t->core_sets[i];
    aff_cpuset_and(&s, within);
    if (aff_cpuset_count(&s) > 0)
      cores[n++] = s;
  }
  return n;
}

static void fill_strings(const aff_topo_t *t, aff_binding_t *b) {
  const aff_cpuset_t *shown = b->bind_cpus ? &b->cpus : &t->allowed;
  const char *busid = b->gpu >= 0 ? t->gpus[b->gpu].busid : "";
  aff_cpulist_format(shown, b->cpulist, sizeof(b->cpulist));
  snprintf(b->numa_str, sizeof(b->numa_str), "%d", b->numa);
  if (b->hca[0])
    snprintf(b->hca_port_str, sizeof(b->hca_port_str), "%d", b->hca_port);
  else
    b->hca_port_str[0] = '\0';
  b->busid = busid;
  b->hcas = t->gpu_hcas[0] ? t->gpu_hcas : b->hca;
  snprintf(b->env_buf[0], sizeof(b->env_buf[0]), "LAUNCH_CPUS=%s", b->cpulist);
  snprintf(b->env_buf[1], sizeof(b->env_buf[1]), "LAUNCH_NUMA_NODE=%s",
           b->numa_str);
  snprintf(b->env_buf[2], sizeof(b->env_buf[2]), "LAUNCH_GPU_BUSID=%s", busid);
  snprintf(b->env_buf[3], sizeof(b->env_buf[3]), "LAUNCH_HCA=%s", b->hca);
  snprintf(b->env_buf[4], sizeof(b->env_buf[4]), "LAUNCH_HCA_PORT=%s",
           b->hca_port_str);
  snprintf(b->env_buf[5], sizeof(b->env_buf[5]), "LAUNCH_NETDEV=%s", b->netdev);
  snprintf(b->env_buf[6], sizeof(b->env_buf[6]), "LAUNCH_HCAS=%s", b->hcas);
  for (int i = 0; i < AFF_ENV_COUNT; i++)
    b->envv[i] = b->env_buf[i];
  b->envv[AFF_ENV_COUNT] = NULL;
  snprintf(b->fail_msg, sizeof(b->fail_msg),
           "launch: warning: local rank %d: binding to CPUs %.60s failed, "
           "the worker runs on the CPUs it inherited: ",
           b->local_rank, b->cpulist);
  snprintf(b->mem_fail_msg, sizeof(b->mem_fail_msg),
           "launch: warning: local rank %d: binding its memory to NUMA node "
           "%d failed, its memory is not bound: ",
           b->local_rank, b->numa);
}

int aff_plan_new(const aff_topo_t *t, const aff_policy_t *pol, int nproc,
                 lu_log_t *log, aff_plan_t **out, char *err, size_t errlen) {
  aff_plan_t *p;
  int nnodes_cpu = 0, node_with_cpus[AFF_MAX_NUMA];
  int numa_ok = t->from_xml || numa_available() >= 0;
  aff_cpuset_t used, *node = NULL, *cores = NULL;

  *out = NULL;
  if (nproc < 1 || nproc > AFF_MAX_RANKS) {
    lu_errf(err, errlen, "--nproc-per-node %d: must be 1..%d", nproc,
           AFF_MAX_RANKS);
    return RDZV_EINVAL;
  }
  if (pol->cpu == AFF_CPU_LIST && pol->nlists != nproc) {
    lu_errf(err, errlen,
           "--cpu-bind gives %d CPU list%s for %d local ranks: give exactly "
           "one per local rank, separated by ':'",
           pol->nlists, pol->nlists == 1 ? "" : "s", nproc);
    return RDZV_EINVAL;
  }
  if ((p = calloc(1, sizeof(*p))) == NULL)
    return RDZV_ENOMEM;
  if ((p->ranks = calloc((size_t)nproc, sizeof(*p->ranks))) == NULL) {
    free(p);
    return RDZV_ENOMEM;
  }
  p->t = t;
  p->policy = *pol;
  p->nranks = nproc;

  for (int i = 0; i < t->nnuma; i++) {
    aff_cpuset_t x = t->numa_cpus[i];
    aff_cpuset_and(&x, &t->allowed);
    if (aff_cpuset_count(&x) > 0)
      node_with_cpus[nnodes_cpu++] = i;
  }
  if (t->ngpus > 0 && nproc > t->ngpus)
    pwarn(p, "%d local ranks for %d visible GPU%s: ranks %d and up share GPUs",
          nproc, t->ngpus, t->ngpus == 1 ? "" : "s", t->ngpus);

  /* Where each rank lives: its GPU's NUMA node, or (no GPU) a block of
   * NUMA nodes. `local` = the CPUs it may be given. */
  for (int r = 0; r < nproc; r++) {
    aff_binding_t *b = &p->ranks[r];
    aff_cpuset_t local;
    b->local_rank = r;
    b->gpu = t->ngpus > 0 ? r % t->ngpus : -1;
    b->numa = -1;
    aff_cpuset_zero(&local);
    if (b->gpu >= 0) {
      const aff_gpu_t *g = &t->gpus[b->gpu];
      int slot = g->numa >= 0 ? numa_slot(t, g->numa) : -1;
      b->numa = g->numa;
      local = slot >= 0 ? t->numa_cpus[slot] : g->cpus;
      if (g->nic >= 0) {
        const aff_nic_t *n = &t->nics[g->nic];
        lu_strlcpy(b->hca, n->hca, sizeof(b->hca));
        b->hca_port = n->hca[0] ? n->port : 0;
        lu_strlcpy(b->netdev, n->netdev, sizeof(b->netdev));
      }
    } else if (nnodes_cpu > 0) {
      int slot = node_with_cpus[(r * nnodes_cpu) / nproc];
      b->numa = t->numa_os[slot];
      local = t->numa_cpus[slot];
    }
    if (b->gpu < 0) {
      int k = nic_for_numa(t, b->numa);
      if (k >= 0) {
        lu_strlcpy(b->hca, t->nics[k].hca, sizeof(b->hca));
        b->hca_port = t->nics[k].hca[0] ? t->nics[k].port : 0;
        lu_strlcpy(b->netdev, t->nics[k].netdev, sizeof(b->netdev));
      }
    }
    aff_cpuset_and(&local, &t->allowed);
    b->cpus = local;
  }

  /* CPU policy */
  node = malloc(sizeof(*node) * (size_t)nproc);
  cores = malloc(sizeof(*cores) * (size_t)AFF_MAX_CPUS);
  if (node == NULL || cores == NULL) {
    free(node);
    free(cores);
    aff_plan_free(p);
    return RDZV_ENOMEM;
  }
  for (int r = 0; r < nproc; r++)
    node[r] = p->ranks[r].cpus;
  aff_cpuset_zero(&used);
  for (int r = 0; r < nproc; r++) {
    aff_binding_t *b = &p->ranks[r];
    switch (pol->cpu) {
    case AFF_CPU_NONE:
      b->bind_cpus = 0;
      break;
    case AFF_CPU_NUMA:
      if (aff_cpuset_count(&b->cpus) == 0) {
        pwarn(p,
              "local rank %d: no CPUs known near %s (no NUMA information, or "
              "none allowed to this process); it runs unbound",
              r, b->gpu >= 0 ? t->gpus[b->gpu].busid : "its NUMA node");
        b->bind_cpus = 0;
      } else {
        b->bind_cpus = 1;
      }
      break;
    case AFF_CPU_CORES: {
      /* The ranks sharing this rank's node split its cores in order. */
      int k = 0, pos = 0, ncores;
      if (aff_cpuset_count(&node[r]) == 0) {
        pwarn(p, "local rank %d: no CPUs known near %s; it runs unbound", r,
              b->gpu >= 0 ? t->gpus[b->gpu].busid : "its NUMA node");
        b->bind_cpus = 0;
        break;
      }
      for (int q = 0; q < nproc; q++)
        if (q == r || aff_cpuset_equal(&node[q], &node[r])) {
          if (q < r)
            pos++;
          k++;
        }
      ncores = cores_in(t, &node[r], cores, AFF_MAX_CPUS);
      if (ncores < k) {
        pwarn(p,
              "NUMA node %d has %d core%s for %d local ranks: they share the "
              "node's CPUs instead of owning cores",
              b->numa, ncores, ncores == 1 ? "" : "s", k);
        b->bind_cpus = 1; /* the whole node, shared */
      } else {
        int lo = pos * ncores / k, hi = (pos + 1) * ncores / k;
        aff_cpuset_zero(&b->cpus);
        for (int c = lo; c < hi; c++)
          aff_cpuset_or(&b->cpus, &cores[c]);
        b->bind_cpus = 1;
      }
      break;
    }
    case AFF_CPU_LIST: {
      aff_cpuset_t want = pol->lists[r], got = pol->lists[r];
      char wl[256], gl[256];
      aff_cpuset_and(&got, &t->allowed);
      if (!aff_cpuset_equal(&want, &got)) {
        aff_cpulist_format(&want, wl, sizeof(wl));
        aff_cpulist_format(&got, gl, sizeof(gl));
        pwarn(p,
              "local rank %d: CPUs %s asked, but this %s only has (or only "
              "allows) %s of them",
              r, wl, t->from_xml ? "topology" : "process",
              gl[0] ? gl : "none");
      }
      if (aff_cpuset_count(&got) == 0) {
        b->bind_cpus = 0;
        pwarn(p, "local rank %d: no usable CPU in its list; it runs unbound", r);
      } else {
        b->bind_cpus = 1;
        b->cpus = got;
        if (aff_cpuset_intersects(&got, &used))
          pwarn(p, "local rank %d: its CPU list overlaps another rank's", r);
        aff_cpuset_or(&used, &got);
        /* the node that holds the CPUs is the rank's node now */
        if (numa_of_cpus(t, &got) >= 0)
          b->numa = numa_of_cpus(t, &got);
      }
      break;
    }
    }
  }

  free(node);
  free(cores);

  /* Memory policy */
  for (int r = 0; r < nproc; r++) {
    aff_binding_t *b = &p->ranks[r];
    memset(b->nodemask, 0, sizeof(b->nodemask));
    b->mem_policy = 0;
    if (pol->mem == AFF_MEM_NONE)
      continue;
    if (!numa_ok) {
      pwarn(p, "this kernel has no NUMA support (numa_available() < 0): "
               "memory is not bound");
      continue;
    }
    if (b->numa < 0 || b->numa >= AFF_MAX_CPUS) {
      pwarn(p, "local rank %d: its NUMA node is unknown; memory is not bound",
            r);
      continue;
    }
    /* A node this process may not use (a cgroup cpuset's mems, numactl
     * --membind): set_mempolicy would fail in every worker. */
    if (t->mems_known && !(t->mems[(size_t)b->numa / AFF_LONG_BITS] &
                           (1ul << ((size_t)b->numa % AFF_LONG_BITS)))) {
      pwarn(p, "local rank %d: NUMA node %d is not one this process may use "
               "memory of (Mems_allowed_list); memory is not bound",
            r, b->numa);
      continue;
    }
    b->nodemask[(size_t)b->numa / AFF_LONG_BITS] |=
        1ul << ((size_t)b->numa % AFF_LONG_BITS);
    b->mem_policy = pol->mem == AFF_MEM_LOCAL ? MPOL_BIND : MPOL_PREFERRED;
  }

  for (int r = 0; r < nproc; r++)
    fill_strings(t, &p->ranks[r]);
  if (log)
    for (int i = 0; i < p->nwarn; i++)
      LU_WARN(log, "binding: %s", p->warn[i]);
  *out = p;
  return 0;
}

void aff_plan_free(aff_plan_t *p) {
  if (p == NULL)
    return;
  free(p->ranks);
  free(p);
}

int aff_plan_nranks(const aff_plan_t *p) { return p->nranks; }

const aff_binding_t *aff_plan_rank(const aff_plan_t *p, int r) {
  return r >= 0 && r < p->nranks ? &p->ranks[r] : NULL;
}

int aff_plan_nwarnings(const aff_plan_t *p) { return p->nwarn; }

const char *aff_plan_warning(const aff_plan_t *p, int i) {
  return i >= 0 && i < p->nwarn ? p->warn[i] : NULL;
}

const aff_policy_t *aff_plan_policy(const aff_plan_t *p) { return &p->policy; }

const char *const *aff_binding_envv(const aff_binding_t *b) { return b->envv; }

int aff_binding_format(const aff_plan_t *p, const aff_topo_t *t, int r,
                       char *buf, size_t n) {
  const aff_binding_t *b = aff_plan_rank(p, r);
  char gpu[64] = "no GPU", mem[48] = "mem unbound", nic[80] = "no NIC";
  if (b == NULL)
    return snprintf(buf, n, "local rank %d: not planned", r);
  if (b->gpu >= 0)
    snprintf(gpu, sizeof(gpu), "GPU%d %s", b->gpu, t->gpus[b->gpu].busid);
  if (b->mem_policy)
    snprintf(mem, sizeof(mem), "mem %s %d",
             b->mem_policy == MPOL_BIND ? "bind" : "preferred", b->numa);
  if (b->hca[0])
    snprintf(nic, sizeof(nic), "NIC %s:%d%s%s", b->hca, b->hca_port,
             b->netdev[0] ? " " : "", b->netdev);
  else if (b->netdev[0])
    snprintf(nic, sizeof(nic), "NIC %s", b->netdev);
  return snprintf(buf, n, "local rank %d: %s NUMA %d cpus %s (%s) %s %s", r, gpu,
                  b->numa, b->cpulist,
                  b->bind_cpus ? aff_cpu_bind_name(p->policy.cpu) : "unbound",
                  mem, nic);
}
