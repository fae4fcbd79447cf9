/* aff.h - topology and binding (module affinity/, prefix aff_).
 *
 * What the agent does with it, in order:
 *
 *   1. aff_topo_load()      once at start (blocking: hwloc walks the CPUs,
 *                           sysfs and /proc/driver/nvidia give the GPUs and
 *                           NICs, no GPU library is loaded; about a
 *                           millisecond, run it in uv_queue_work or before
 *                           the loop starts). GPUs by PCI bus id in CUDA's
 *                           order, honouring CUDA_VISIBLE_DEVICES and
 *                           CUDA_DEVICE_ORDER; each GPU's NUMA node, local
 *                           cores, PCIe link, closest NIC. What hwloc
 *                           and sysfs found is kept for the boot
 *                           (aff_tcache.c; LAUNCH_TOPO_CACHE=0: off) and
 *                           the next start reads that instead.
 *   2. aff_policy_parse()   from --cpu-bind / --mem-bind.
 *   3. aff_plan_new()       before forking: one aff_binding_t per local rank,
 *                           fully precomputed (CPU mask, node mask, the
 *                           LAUNCH_* strings), warnings logged once.
 *   4. in the child:        aff_apply_child(aff_plan_rank(plan, i), 2)
 *                           between fork() and exec(): no allocation, no
 *                           locks, only sched_setaffinity + set_mempolicy.
 *   5. aff_binding_envv()   LAUNCH_CPUS, LAUNCH_NUMA_NODE, LAUNCH_GPU_BUSID,
 *                           LAUNCH_HCA, LAUNCH_HCA_PORT, LAUNCH_NETDEV,
 *                           LAUNCH_HCAS for the worker environment (and the
 *                           NCCL profile templates).
 *
 * Threads: a topology and a plan are immutable after creation and may be
 * read from any thread. Errors: 0 or a negative RDZV_E* / -errno code;
 * functions that parse user input also fill an err buffer with a sentence
 * that says what to change.
 */
#ifndef AFF_H
#define AFF_H

#include <stddef.h>
#include <stdint.h>

#include "lu.h"

/* ---- CPU sets ------------------------------------------------------------------
 * Same layout as glibc's cpu_set_t (an array of unsigned long, bit i = CPU
 * i), so it goes to sched_setaffinity as is. */
#define AFF_MAX_CPUS 4096
#define AFF_LONG_BITS (8 * sizeof(unsigned long))
typedef struct aff_cpuset_s {
  unsigned long bits[AFF_MAX_CPUS / AFF_LONG_BITS];
} aff_cpuset_t;

void aff_cpuset_zero(aff_cpuset_t *s);
void aff_cpuset_set(aff_cpuset_t *s, int cpu);
int aff_cpuset_isset(const aff_cpuset_t *s, int cpu);
int aff_cpuset_count(const aff_cpuset_t *s);
int aff_cpuset_first(const aff_cpuset_t *s); /* -1 when empty */
/* Next set CPU after `cpu`, -1 at the end. */
int aff_cpuset_next(const aff_cpuset_t *s, int cpu);
void aff_cpuset_and(aff_cpuset_t *d, const aff_cpuset_t *a);
void aff_cpuset_or(aff_cpuset_t *d, const aff_cpuset_t *a);
int aff_cpuset_equal(const aff_cpuset_t *a, const aff_cpuset_t *b);
int aff_cpuset_intersects(const aff_cpuset_t *a, const aff_cpuset_t *b);

/* Parse a Linux cpulist: "0-9,20-29", "3", "" (empty set). Spaces around
 * items are allowed. Rejects ranges that run backwards, CPUs >=
 * AFF_MAX_CPUS, stray characters.
 * OUT *s. RET 0 or RDZV_EINVAL with err explaining (err may be NULL). */
int aff_cpulist_parse(const char *str, aff_cpuset_t *s, char *err,
                      size_t errlen);
/* Format as a cpulist ("0-9,20-29"; "" for the empty set) into buf.
 * RET the length it needed (like snprintf); truncated output ends with
 * '\0' at n-1. */
size_t aff_cpulist_format(const aff_cpuset_t *s, char *buf, size_t n);

/* Per-local-rank CPU lists, the LIST form of --cpu-bind: lists separated by
 * ':' ("0-3:4-7:8-11:12-15"). ':' needs no shell quoting and never appears
 * inside a cpulist. RET the number of lists (>= 1) or RDZV_EINVAL with err
 * naming the list that is wrong. OUT sets[0..max-1]. */
int aff_cpulists_parse(const char *str, aff_cpuset_t *sets, int max,
                       char *err, size_t errlen);

/* ---- topology --------------------------------------------------------------- */

typedef struct aff_topo_s aff_topo_t;

/* How two devices are connected, best first, as nvidia-smi topo -m. */
typedef enum {
  AFF_PATH_SELF = 0, /* X: the same device */
  AFF_PATH_NVLINK,   /* NV#: NVLink (hwloc NVLinkBandwidth or NVML) */
  AFF_PATH_PIX,      /* at most one PCIe switch between them */
  AFF_PATH_PXB,      /* several PCIe switches, no host bridge */
  AFF_PATH_PHB,      /* through a PCIe host bridge */
  AFF_PATH_NODE,     /* across host bridges inside one NUMA node */
  AFF_PATH_SYS,      /* across NUMA nodes (the socket interconnect) */
  AFF_PATH_UNKNOWN
} aff_path_t;

const char *aff_path_name(aff_path_t p); /* "X", "NV", "PIX", ... */

/* A PCIe link as negotiated and as the device could do. 0 = unknown. */
typedef struct aff_pcie_s {
  double gbps;       /* hwloc's pci_link_speed: GB/s of the current link */
  int width;         /* current lanes */
  int width_max;     /* lanes the device supports */
  double gts;        /* current GT/s per lane */
  double gts_max;    /* GT/s the device supports */
} aff_pcie_t;

typedef struct aff_gpu_s {
  int index;          /* CUDA device index (position among visible GPUs) */
  int phys;           /* position among all NVIDIA GPUs in PCI bus order
                         (the nvidia-smi / NVML index) */
  char busid[16];     /* "0000:07:00.0" */
  char model[64];     /* "NVIDIA A100-SXM4-40GB", or the PCI id */
  char uuid[48];      /* "GPU-..." when known */
  uint64_t mem_bytes; /* 0 = unknown */
  uint16_t vendor, device;
  int numa;           /* NUMA node (OS index), -1 unknown */
  aff_cpuset_t cpus;  /* CPUs local to the GPU (its NUMA node's) */
  aff_pcie_t link;
  int nic;            /* closest NIC (index into the NIC list), -1 none */
  aff_path_t nic_path;
  int minor;          /* /dev/nvidia<minor> (/proc/driver/nvidia), -1 unknown */
} aff_gpu_t;

typedef struct aff_nic_s {
  char name[32];       /* HCA name ("mlx5_0"), else the netdev */
  char hca[32];        /* RDMA device, "" when none */
  char netdev[32];     /* network interface, "" when none */
  char busid[16];
  uint16_t vendor, device;
  int numa;            /* -1 unknown */
  int port;            /* the port used: first ACTIVE port, else 1 */
  int nports;
  int port_state;      /* IB port state: 4 ACTIVE, 1 DOWN, 2 INIT, 3 ARMED;
                          -1 unknown */
  char rate[48];       /* "200 Gb/sec (4X HDR)", "" unknown */
  int rate_gbps;       /* 0 unknown */
  char link_layer[16]; /* "InfiniBand", "Ethernet" (RoCE), "" unknown */
  aff_pcie_t link;
} aff_nic_t;

/* Where the GPUs, NICs and PCIe paths of this machine come from. The
 * mapping (GPU -> NUMA node -> cores, closest NIC, PCIe links) is the same
 * whichever is used (tests/test_aff_sysfs.c on every tests/topo fixture,
 * tests/test_aff_gpu_probe.c on a GPU machine); what only NVML knows
 * (memory size, NVLink) is known with AFF_GPUSRC_NVML alone.
 *
 * AFF_GPUSRC_AUTO, CUDA's view without CUDA: the NVIDIA display and 3D
 * controllers of /sys/bus/pci/devices that the driver lists in
 * /proc/driver/nvidia/gpus (all of them when it has no such directory),
 * minus those it marks "GPU Excluded", minus, in a container that has some
 * /dev/nvidia<minor> but not all, those whose device node is missing; in
 * PCI bus order. That is CUDA_DEVICE_ORDER=PCI_BUS_ID, and also CUDA's
 * default FASTEST_FIRST on a machine whose GPUs are all one model (PCI
 * device id), where the tie is broken by bus id. GPUs of different models
 * under FASTEST_FIRST are numbered by a heuristic of the CUDA runtime that
 * launch does not reproduce: they are planned in PCI order with a warning
 * to set CUDA_DEVICE_ORDER=PCI_BUS_ID (docs/affinity.md). CUDA_VISIBLE_DEVICES
 * takes indexes, GPU-<uuid> (or a unique prefix; the UUID is the driver's,
 * from /proc), MIG-GPU-<uuid>/<gi>/<ci> (its parent GPU); a MIG-<uuid>
 * entry cannot be traced to its GPU without NVML: the visible list ends
 * there with a warning, as it does, like CUDA's, at the first entry that
 * names no GPU. Memory sizes and NVLink are known only when an NVML load
 * of this boot recorded them (aff_cache.c: a file of this user, refused
 * when stale), unknown otherwise. */
typedef enum {
  AFF_GPUSRC_AUTO = 0, /* sysfs + /proc/driver/nvidia; hwloc for CPUs only */
  AFF_GPUSRC_PCI,      /* hwloc's PCI tree: NVIDIA display/3D devices, no
                          GPU library */
  AFF_GPUSRC_NVML      /* hwloc's PCI tree and NVML (else the CUDA runtime)
                          loaded into this process: names, memory, NVLink;
                          ~20 MB and ~30 ms on a GPU node. The check of
                          AUTO (launch topo --gpu-probe nvml|check) */
} aff_gpusrc_t;

typedef struct aff_topo_opts_s {
  size_t size;       /* sizeof(aff_topo_opts_t) */
  unsigned version;  /* 2 */
  const char *xml;   /* hwloc XML file to plan for; NULL = this machine */
  const char *root;  /* prefix for /sys, /proc and /dev reads (NULL = "/");
                        tests */
  const char *cuda_visible_devices; /* NULL = the CUDA_VISIBLE_DEVICES env */
  aff_gpusrc_t gpu_source;          /* XML topologies always use PCI */
  lu_log_t *log;     /* warnings while loading; NULL = quiet */
  /* version 2 */
  const char *cuda_device_order;    /* NULL = the CUDA_DEVICE_ORDER env */
  /* With xml: the XML gives the CPUs and NUMA nodes only, the GPUs, NICs
   * and PCIe paths come from the sysfs tree under root as on a live
   * machine (how tests check the sysfs discovery against a fixture). */
  int io_from_root;
} aff_topo_opts_t;

#define AFF_TOPO_OPTS_INIT                                                     \
  { sizeof(aff_topo_opts_t), 2, NULL, NULL, NULL, AFF_GPUSRC_AUTO, NULL,     \
    NULL, 0 }

/* Discover (or load from XML) the topology. Blocking; any thread.
 * OUT *out: free with aff_topo_free(). RET 0, -errno (XML file missing),
 * RDZV_EINVAL (hwloc refused the XML; err says why). */
int aff_topo_load(const aff_topo_opts_t *opts, aff_topo_t **out, char *err,
                  size_t errlen);
void aff_topo_free(aff_topo_t *t); /* NULL is a no-op */

/* Where it came from: "hwloc XML tests/topo/dgx-a100.xml" or "this machine
 * (hwloc 2.9.0, GPUs from sysfs)"; "from NVML" with AFF_GPUSRC_NVML. */
const char *aff_topo_source(const aff_topo_t *t);
/* The number of GPUs CUDA sees on this machine (root: as in
 * aff_topo_opts_t) with this CUDA_VISIBLE_DEVICES (NULL = unset): the
 * aff_topo_ngpus() of its topology, without loading one (no hwloc; the
 * driver's file and the PCI ids of each of its GPUs). --nproc-per-node
 * gpu and auto. */
int aff_gpu_count(const char *root, const char *cuda_visible_devices);
const char *aff_topo_hostname(const aff_topo_t *t);
int aff_topo_ngpus(const aff_topo_t *t);          /* visible GPUs */
const aff_gpu_t *aff_topo_gpu(const aff_topo_t *t, int i);
int aff_topo_nnics(const aff_topo_t *t);
const aff_nic_t *aff_topo_nic(const aff_topo_t *t, int i);
int aff_topo_ncpus(const aff_topo_t *t);          /* PUs */
/* PUs a plan may use (this process's mask on this machine). */
int aff_topo_nallowed(const aff_topo_t *t);
int aff_topo_ncores(const aff_topo_t *t);
/* NUMA nodes: RET the count; aff_topo_numa() gives the i-th node's OS
 * index and CPUs (the CPUs may be empty: memory-only nodes). */
int aff_topo_nnuma(const aff_topo_t *t);
int aff_topo_numa(const aff_topo_t *t, int i, aff_cpuset_t *cpus);
/* Path between GPU a and GPU b (indexes of aff_topo_gpu). */
aff_path_t aff_topo_gpu_path(const aff_topo_t *t, int a, int b);
aff_path_t aff_topo_gpu_nic_path(const aff_topo_t *t, int gpu, int nic);
/* NVLink bandwidth between two GPUs in MB/s (0 = none or unknown). */
uint64_t aff_topo_nvlink_mbps(const aff_topo_t *t, int a, int b);
/* 1 when any GPU pair has NVLink, 0 when none, -1 unknown (no GPUs). */
int aff_topo_has_nvlink(const aff_topo_t *t);
/* Comma list of the HCAs that are the closest NIC of some GPU ("mlx5_0,
 * mlx5_1,..."): the compute rails; "" when none. */
const char *aff_topo_gpu_hcas(const aff_topo_t *t);

/* Topology warnings (a NIC on another NUMA node than its GPUs, a PCIe link
 * narrower or slower than the device supports, NUMA balancing on, an IB
 * port down): RET the count; aff_topo_warning() the i-th sentence. */
int aff_topo_nwarnings(const aff_topo_t *t);
const char *aff_topo_warning(const aff_topo_t *t, int i);

/* Compare what two loads found (a: AFF_GPUSRC_AUTO, b: AFF_GPUSRC_NVML on
 * this machine, or a fixture loaded both ways): every visible GPU (bus id,
 * CUDA index, model, UUID, NUMA node, local CPUs, PCIe link), every NIC,
 * each GPU's closest NIC, every GPU-GPU (unless an NVLink is known on
 * either side), GPU-NIC and NIC-NIC path, the NUMA nodes and the CPUs a
 * plan may use. Memory sizes and NVLink are not compared (only NVML knows
 * them); a PCIe GB/s figure is compared only when both sides have one.
 * OUT diff: one line per difference ("GPU1 numa: 0 vs 1"), truncated to n.
 * RET the number of differences. */
int aff_topo_compare(const aff_topo_t *a, const aff_topo_t *b, char *diff,
                     size_t n);

/* Export the topology as hwloc XML with launch's extra info attributes
 * (PCIe current/max width and speed, IB port rate and link layer) so that
 * another machine can plan for this one. This machine loaded from sysfs
 * (AFF_GPUSRC_AUTO) is read again through hwloc's I/O discovery for it; a
 * fixture checked against a sysfs tree (io_from_root) cannot be exported.
 * RET 0 or RDZV_EINVAL. */
int aff_topo_export_xml(const aff_topo_t *t, const char *path, char *err,
                        size_t errlen);

/* ---- policies and plans ----------------------------------------------------- */

typedef enum {
  AFF_CPU_NONE = 0, /* inherit the agent's CPUs */
  AFF_CPU_NUMA,     /* every CPU of the GPU's NUMA node */
  AFF_CPU_CORES,    /* the node's cores split without overlap among the
                       GPUs that share the node */
  AFF_CPU_LIST      /* explicit per-rank lists */
} aff_cpu_bind_t;

typedef enum {
  AFF_MEM_NONE = 0,  /* default policy */
  AFF_MEM_LOCAL,     /* MPOL_BIND to the rank's NUMA node */
  AFF_MEM_PREFERRED  /* MPOL_PREFERRED: the node first, others when full */
} aff_mem_bind_t;

#define AFF_MAX_RANKS 256

typedef struct aff_policy_s {
  aff_cpu_bind_t cpu;
  aff_mem_bind_t mem;
  int nlists;                      /* AFF_CPU_LIST: lists given */
  aff_cpuset_t lists[AFF_MAX_RANKS];
} aff_policy_t;

/* Parse --cpu-bind (none|numa|cores|LIST; NULL = none) and --mem-bind
 * (none|local|preferred; NULL = none). OUT *p. RET 0 or RDZV_EINVAL, err
 * says which value is wrong and what is accepted. */
int aff_policy_parse(const char *cpu_bind, const char *mem_bind,
                     aff_policy_t *p, char *err, size_t errlen);
const char *aff_cpu_bind_name(aff_cpu_bind_t c);
const char *aff_mem_bind_name(aff_mem_bind_t m);

#define AFF_ENV_COUNT 7
#define AFF_CPULIST_LEN 1024

/* One local rank, everything precomputed so that applying it in a forked
 * child needs no allocation and no lookups. Read-only for the caller. */
typedef struct aff_binding_s {
  int local_rank;
  int gpu;                 /* index of aff_topo_gpu, -1: no GPU */
  int numa;                /* the rank's NUMA node, -1 unknown */
  int bind_cpus;           /* apply `cpus` */
  aff_cpuset_t cpus;       /* the CPU set the worker gets */
  int mem_policy;          /* 0 none, else MPOL_BIND / MPOL_PREFERRED */
  unsigned long nodemask[AFF_MAX_CPUS / AFF_LONG_BITS];
  char cpulist[AFF_CPULIST_LEN]; /* `cpus` as a cpulist */
  char hca[32];            /* closest HCA, "" none */
  int hca_port;
  char netdev[32];         /* closest netdev, "" none */
  /* The values of the worker contract's binding rows (env/contract.h):
   * LAUNCH_CPUS is cpulist, LAUNCH_HCA hca, LAUNCH_NETDEV netdev. */
  char numa_str[12];       /* LAUNCH_NUMA_NODE: the node, "-1" unknown */
  char hca_port_str[12];   /* LAUNCH_HCA_PORT: "" without an HCA */
  const char *busid;       /* LAUNCH_GPU_BUSID: "" without a GPU */
  const char *hcas;        /* LAUNCH_HCAS (points into the topology) */
  /* The same as "KEY=VALUE": see aff_binding_envv(). */
  char env_buf[AFF_ENV_COUNT][AFF_CPULIST_LEN + 32];
  const char *envv[AFF_ENV_COUNT + 1];
  /* Written to errfd by aff_apply_child() when binding the CPUs, or the
   * memory, fails: each part is told apart. */
  char fail_msg[192];
  char mem_fail_msg[192];
} aff_binding_t;

typedef struct aff_plan_s aff_plan_t;

/* Plan nproc local ranks on topology t with policy p. Never fails on a
 * machine that cannot honour the policy: it degrades (fewer cores than
 * ranks: ranks share the node's CPUs; no NUMA information: no memory
 * binding; a CPU list naming absent CPUs: that rank is not bound) and
 * records a warning for each (aff_plan_warning), logged once when log is
 * set. For this machine (t loaded without xml) CPUs outside the agent's
 * own affinity mask (a cgroup/cpuset, srun's binding) are never used.
 * OUT *out: free with aff_plan_free(). RET 0, RDZV_EINVAL (nproc out of
 * 1..AFF_MAX_RANKS, or a LIST policy whose list count is not nproc: err
 * says so), RDZV_ENOMEM. */
int aff_plan_new(const aff_topo_t *t, const aff_policy_t *p, int nproc,
                 lu_log_t *log, aff_plan_t **out, char *err, size_t errlen);
void aff_plan_free(aff_plan_t *plan); /* NULL is a no-op */
int aff_plan_nranks(const aff_plan_t *plan);
const aff_binding_t *aff_plan_rank(const aff_plan_t *plan, int local_rank);
int aff_plan_nwarnings(const aff_plan_t *plan);
const char *aff_plan_warning(const aff_plan_t *plan, int i);
const aff_policy_t *aff_plan_policy(const aff_plan_t *plan);

/* NULL-terminated "KEY=VALUE" strings of the values above, for reports
 * and tests (the worker environment takes the values through the
 * contract's rows, env/contract.h):
 * LAUNCH_CPUS (cpulist), LAUNCH_NUMA_NODE (node or -1), LAUNCH_GPU_BUSID,
 * LAUNCH_HCA, LAUNCH_HCA_PORT, LAUNCH_NETDEV (empty when none),
 * LAUNCH_HCAS (every GPU-attached HCA of the node, comma-separated; the
 * rank's own HCA when no GPU has one). They live as long as the plan. */
const char *const *aff_binding_envv(const aff_binding_t *b);

/* The --report-bindings line for a rank:
 * "local rank 1: GPU1 0000:0f:00.0 NUMA 3 cpus 56-63,184-191 (cores)
 *  mem bind 3 NIC mlx5_1:1 ibp18s0". RET as snprintf. */
int aff_binding_format(const aff_plan_t *plan, const aff_topo_t *t, int rank,
                       char *buf, size_t n);

/* Apply b to the calling process. Async-signal-safe: only
 * sched_setaffinity(2) and set_mempolicy(2); safe between fork and exec.
 * RET 0, or -errno of the first call that failed (the other is still
 * tried). */
int aff_apply(const aff_binding_t *b);
/* aff_apply, and for each part that fails write its message plus the
 * error to errfd (write(2) only): b->fail_msg for the CPUs,
 * b->mem_fail_msg for the memory; then go on: a job is never stopped by a binding the
 * kernel refused, but it is never silent either. RET as aff_apply. */
int aff_apply_child(const aff_binding_t *b, int errfd);

/* ---- reports ------------------------------------------------------------------ */

/* `launch topo`: the GPU/NIC/NUMA matrix, the binding plan per local rank
 * (plan may be NULL), the warnings. OUT *out malloc'd text. RET 0 or
 * RDZV_ENOMEM. */
int aff_report_text(const aff_topo_t *t, const aff_plan_t *plan, char **out);
int aff_report_json(const aff_topo_t *t, const aff_plan_t *plan, char **out);

/* ---- node facts (aff_facts.c) ------------------------------------------------
 * What this node's sysfs says about its GPUs, their PCIe links, its RDMA
 * devices (HCAs) and their ports, and its network interfaces: read once,
 * here, under a root prefix (a copy of another node's /sys, or a test's),
 * and read from this struct by the agent (the lint, launch_node_t), `launch
 * env` and `launch doctor`. The topology (aff_topo_load) reads IB ports
 * with the same reader, aff_ib_port_read. Plain data: no allocation. */

#define AFF_FACTS_MAX 64       /* GPUs */
#define AFF_FACTS_HCAS 256     /* RDMA devices: SR-IOV VFs count (mlx5_*) */
#define AFF_FACTS_NETDEVS 1024 /* interfaces: a Kubernetes node's veths
                                  (cali*, veth*) count */
#define AFF_FACTS_PORTS 8      /* ports per HCA */

typedef struct aff_ib_port_s {
  int state;           /* 4 ACTIVE, 1 DOWN, 2 INIT, 3 ARMED; -1 unreadable */
  char rate[48];       /* "200 Gb/sec (4X HDR)", "" unreadable */
  char link_layer[16]; /* "InfiniBand", "Ethernet" (RoCE), "" unreadable */
} aff_ib_port_t;

typedef struct aff_facts_hca_s {
  char name[64];       /* "mlx5_0" */
  int numa;            /* -1 unknown */
  aff_pcie_t link;     /* its PCIe link (gbps left 0) */
  int nports;          /* ports 1..nports: each has a state or a rate */
  aff_ib_port_t ports[AFF_FACTS_PORTS];
} aff_facts_hca_t;

/* Whether CUDA here can use a GPU of the PCI bus, as the topology decides
 * it (aff_topo_load): the driver runs it (/proc/driver/nvidia/gpus lists
 * it), has not excluded it, and this container was given its
 * /dev/nvidia<minor> (when some are present). No driver list: every GPU
 * counts. CUDA_VISIBLE_DEVICES is a job's choice, not the node's. */
typedef enum {
  AFF_GPU_USABLE = 0,
  AFF_GPU_NO_DRIVER, /* on the bus, absent from the driver's list */
  AFF_GPU_EXCLUDED,  /* "GPU Excluded: Yes" (NVreg_ExcludedGpus) */
  AFF_GPU_NOT_GIVEN  /* no /dev/nvidia<minor> in this container */
} aff_gpu_use_t;

typedef struct aff_facts_gpu_s {
  char busid[64];      /* as /sys/bus/pci/devices names it */
  unsigned device;     /* PCI device id */
  int numa;            /* -1 unknown */
  aff_pcie_t link;     /* gbps left 0 */
  aff_gpu_use_t use;
} aff_facts_gpu_t;

typedef struct aff_facts_s {
  int probed;          /* /sys/class/net was readable: names are known */
  int ngpus, nhcas, nnetdevs;
  /* names past the arrays, left out: then a name not listed may exist */
  int hcas_cut, netdevs_cut;
  aff_facts_gpu_t gpus[AFF_FACTS_MAX]; /* every NVIDIA display/3D controller
                                          of the PCI bus, bus id order */
  aff_facts_hca_t hcas[AFF_FACTS_HCAS]; /* /sys/class/infiniband, by name */
  char netdevs[AFF_FACTS_NETDEVS][32];  /* /sys/class/net, by name */
} aff_facts_t;

/* Fill f from sysfs under root (NULL or "/" = this machine). Never fails:
 * what cannot be read is absent. Large (about 200 KiB): allocate it. */
void aff_facts_probe(aff_facts_t *f, const char *root);
/* Port `port` (1-based) of RDMA device hca under root (NULL = "/"). RET 1
 * when the port has a state or a rate, else 0. */
int aff_ib_port_read(const char *root, const char *hca, int port,
                     aff_ib_port_t *p);
/* The PCIe link of the device at sysfs directory dir under root (its
 * current_link_width, max_link_width, current_link_speed, max_link_speed)
 * over what l holds. */
void aff_pcie_read(const char *root, const char *dir, aff_pcie_t *l);

/* ---- GPU software stack (dlopen at run time; nothing at build time) ---------- */

typedef struct aff_sysinfo_s {
  char driver[32];       /* "550.54.15" (NVML, else /proc/driver/nvidia) */
  int cuda_driver;       /* CUDA version the driver supports, 12040; 0 */
  int cuda_runtime;      /* libcudart version, 12040; 0 = not found */
  int nccl;              /* ncclGetVersion, 22809; 0 = not found */
  char nccl_path[256];   /* the library that answered */
  char cudart_path[256];
  int nvml;              /* 1 when NVML answered */
  int ngpus;             /* NVML's count; -1 when NVML is absent */
  char gpu_model[64];    /* first GPU's name ("" none) */
  uint64_t gpu_mem_bytes;
  int persistence;       /* GPUs with persistence mode on; -1 unknown */
} aff_sysinfo_t;

/* Ask NVML, libcudart and libnccl (each dlopen'ed from the default search
 * path, $CUDA_HOME/lib64 and /usr/local/cuda/lib64) and read the driver
 * version under root (NULL = "/"). Never fails: what is absent stays 0/"".
 * Blocking (NVML init takes up to a second on big machines). */
void aff_sysinfo_probe(aff_sysinfo_t *si, const char *root);
/* The same without loading any library (aff_libs.c): the driver from
 * /proc/driver/nvidia/version, the CUDA version of its branch, libcudart's
 * and libnccl's versions from their files (found as the dynamic loader
 * finds them: real file name, the runtime's header, NCCL's version string),
 * the GPU count and first model from /proc/driver/nvidia/gpus. nvml stays
 * 0, persistence -1, gpu_mem_bytes 0. What the agent fingerprints. */
void aff_sysinfo_files(aff_sysinfo_t *si, const char *root);
/* Marketing name of an NVIDIA datacenter GPU by PCI device id
 * ("Tesla V100-PCIE-32GB" for 0x1db6), NULL when not in launch's table. */
const char *aff_gpu_model_name(unsigned device_id);
/* "12.4", "2.28.9" from the integer codes (NCCL: both the old 2xyz and
 * the new 2xxyy encodings). */
void aff_cuda_version_str(int v, char *buf, size_t n);
void aff_nccl_version_str(int v, char *buf, size_t n);

#endif /* AFF_H */
