/* aff_int.h - affinity internals shared by the aff_*.c files. */
#ifndef AFF_INT_H
#define AFF_INT_H

#include <hwloc.h>

#include "aff.h"

#define AFF_MAX_GPUS 64
#define AFF_MAX_NICS 64
#define AFF_MAX_NUMA 64
#define AFF_MAX_WARN 64

/* aff_gpu.c: GPU enumeration through NVML / the CUDA runtime. */
typedef struct aff_gpu_probe_s {
  char busid[16];
  char model[64];
  char uuid[48];
  uint64_t mem_bytes;
  int nvlinks; /* active NVLink links, -1 unknown */
} aff_gpu_probe_t;

/* Where a PCI device sits: the bus ids from the device itself up through
 * its bridges to its host bridge ("hb:dddd:bb", the root bus), and the CPU
 * object that host bridge hangs under. Paths between devices are computed
 * from this alone (aff__io_path), whether it came from hwloc's I/O tree or
 * from sysfs, so that both give the same answer. */
#define AFF_PCI_DEPTH 16
typedef struct aff_iopath_s {
  int n;                        /* 0: unknown, paths fall back to NUMA */
  char id[AFF_PCI_DEPTH][16];
  /* The non-I/O object the host bridge hangs under, as numbers that
   * outlive the hwloc tree (a cached topology has none): its gp_index + 1
   * (0: unknown), and that of its ancestor just below the Machine (0 when
   * it is the Machine itself). */
  uint64_t loc_id;
  uint64_t loc_top;
  unsigned long loc_group;      /* non-zero: the I/O Group hwloc would insert
                                   below loc for these local CPUs (a hash
                                   of them) */
} aff_iopath_t;

struct aff_topo_s {
  hwloc_topology_t hw;
  int from_xml;
  int io_sysfs;                /* GPUs, NICs and PCIe paths from sysfs (no
                                  hwloc I/O objects: no export) */
  int sysfs_reads;             /* link widths, IB ports read under root */
  int from_cache;              /* CPUs, GPUs, NICs from aff_tcache.c: no
                                  hwloc tree (hw is NULL) */
  char source[320];
  char hostname[128];
  char root[256];              /* "" = "/" */
  /* every NVIDIA GPU in PCI order, then the visible ones by CUDA index */
  int nall;
  aff_gpu_t all[AFF_MAX_GPUS];
  hwloc_obj_t all_obj[AFF_MAX_GPUS]; /* PCI object, NULL when hwloc lacks it */
  aff_iopath_t all_io[AFF_MAX_GPUS];
  int ngpus;
  aff_gpu_t gpus[AFF_MAX_GPUS];
  hwloc_obj_t gpu_obj[AFF_MAX_GPUS];
  aff_iopath_t gpu_io[AFF_MAX_GPUS];
  int nnics;
  aff_nic_t nics[AFF_MAX_NICS];
  hwloc_obj_t nic_obj[AFF_MAX_NICS];
  aff_iopath_t nic_io[AFF_MAX_NICS];
  int nnuma;
  int numa_os[AFF_MAX_NUMA];
  aff_cpuset_t numa_cpus[AFF_MAX_NUMA];
  int ncpus, ncores;
  aff_cpuset_t allowed;        /* CPUs the plan may use */
  int mems_known;              /* mems is this process's (this machine) */
  unsigned long mems[AFF_MAX_CPUS / AFF_LONG_BITS]; /* memory nodes it may
                                  use: Mems_allowed */
  int ncore_sets;              /* the cores (PUs when hwloc has no cores) */
  aff_cpuset_t *core_sets;     /* in hwloc's logical order; malloc'd */
  uint64_t nvlink[AFF_MAX_GPUS][AFF_MAX_GPUS]; /* MB/s, by visible index */
  int nvlink_known;
  /* what NVML said, by NVML index */
  int nnvml;
  aff_gpu_probe_t nvml[AFF_MAX_GPUS];
  int nvml_links[AFF_MAX_GPUS][AFF_MAX_GPUS];
  char gpu_hcas[512];
  int nwarn;
  char warn[AFF_MAX_WARN][256];
};

/* aff_topo.c */
void aff__topo_warn(aff_topo_t *t, const char *fmt, ...) LU_PRINTF(2, 3);
aff_path_t aff__io_path(const aff_iopath_t *a, const aff_iopath_t *b,
                        int numa_a, int numa_b);
aff_path_t aff__nic_path(const aff_topo_t *t, int a, int b);
/* io->loc_id and io->loc_top of the non-I/O object o (NULL: unknown). */
void aff__set_loc(aff_iopath_t *io, hwloc_obj_t o);
/* hwloc bitmap -> our set */
void aff__from_hwloc(aff_cpuset_t *d, hwloc_const_bitmap_t b);

/* NVML: every GPU in NVML (= PCI) order, and the NVLink links between
 * them: links[i][j] = active links from i that reach j, directly or
 * through an NVSwitch (links may be NULL; -1 entries: unknown).
 * RET count, or -1 when NVML is unavailable. */
int aff__nvml_gpus(aff_gpu_probe_t *g, int max, int (*links)[AFF_MAX_GPUS]);
/* CUDA runtime: the visible devices in CUDA order (bus ids only). RET
 * count, or -1 when the runtime is absent or finds no device. */
int aff__cudart_gpus(aff_gpu_probe_t *g, int max);

/* Normalise a bus id ("00000000:07:00.0", "0000:07:00.0", "07:00.0") to
 * "dddd:bb:dd.f" lower case. RET 0 or -1. */
int aff__busid_norm(const char *in, char out[16]);

/* Some /dev/nvidia<N> beside /dev/nvidiactl under root ("" = /): a
 * container given some GPUs has only theirs (aff_facts.c). RET 1 or 0. */
int aff__nvidia_dev_nodes(const char *root);

/* Read a small sysfs/proc file under root: RET length, -1 on error. */
#define aff__read_line lu_read_line /* util/lu.h */

/* PCIe link of a device from sysfs under t->root (current and maximum
 * width and speed) over what l already holds. */
void aff__pcie_sysfs(const aff_topo_t *t, const char *busid, aff_pcie_t *l);
/* hwloc's GB/s for a link of `width` lanes at `gts` GT/s per lane (its
 * pci_link_speed, computed the same way, in float). */
double aff__pcie_gbps(double gts, int width);
/* IB ports of a NIC whose hca name is set (sysfs under t->root, else the
 * hwloc object's infos; hca may be NULL). */
void aff__nic_ports(aff_topo_t *t, hwloc_obj_t hca, aff_nic_t *n);

/* The NUMA node of a device whose locality holds the nodes `nodes`: the
 * one node; among several of the same CPUs (a package with its HBM in
 * flat mode, CXL memory: memory nodes beside the DRAM one) the DRAM one,
 * not one hwloc gives a subtype (HBM, MCDRAM, SPM, CXL-DRAM, NVM,
 * GPUMemory), then hint (the device's sysfs numa_node, -1 none) when it
 * is one of those, else the lowest. Nodes of different CPUs (a package
 * in SNC/NPS mode seen whole) are not one device's: -1. */
int aff__node_of(hwloc_topology_t hw, hwloc_const_bitmap_t nodes, int hint);

/* t->all (with all_obj and all_io) in bus id order. */
void aff__sort_all(aff_topo_t *t);
/* CUDA_VISIBLE_DEVICES (cvd, NULL = unset) over n GPUs in bus id order
 * whose UUIDs are uuids[i] ("" unknown), as CUDA reads it. OUT pick[j]: the
 * GPU that is CUDA device j. RET the number of visible GPUs. */
int aff__visible(const char *cvd, const char *const *uuids, int n, int *pick,
                 lu_log_t *log);

/* aff_sysfs.c: every NVIDIA GPU CUDA can see (t->all, PCI order) and every
 * NIC (t->nics, PCI order) with their PCIe paths, NUMA nodes and links,
 * from sysfs and /proc/driver/nvidia under t->root; t->hw holds the CPU
 * tree only. GPU libraries are not loaded. */
void aff__sysfs_scan(aff_topo_t *t, lu_log_t *log);
/* What changes while the machine runs, read again for the devices of a
 * cached topology: PCIe link widths and speeds, IB port states, rates and
 * link layers. */
void aff__sysfs_refresh(aff_topo_t *t);

/* aff_gpu.c: the driver version of /proc/driver/nvidia/version under root
 * (NULL = "/"), "550.54.15"; out untouched when there is none. */
void aff__driver_from_proc(const char *root, char *out, size_t n);

/* aff_libs.c: the parsers behind aff_sysinfo_files (each takes bytes; the
 * fuzz target fuzz_libfiles drives them all).
 * libver_name: the numbers after stem in a file name ("libnccl.so." and
 *   "libnccl.so.2.21.5": 2, 21, 5). RET how many (0: not that stem).
 * nccl_code: NCCL_VERSION(major, minor, patch) as ncclGetVersion gives it
 *   (0 for nonsense).
 * cudart_header: CUDART_VERSION of cuda_runtime_api.h's text, 0 none.
 * nccl_verstr: the first "NCCL version X.Y.Z" of buf as nccl_code, 0 none.
 * ldcache_find: the path /etc/ld.so.cache gives for soname on this
 *   architecture. RET 0, or -1 (absent, or not a cache glibc wrote).
 * elf_section: offset and size of the PROGBITS section name of a 64-bit
 *   ELF file read through rd (RET 0 when rd read all n bytes). RET 0/-1.
 * cuda_of_driver: the CUDA version a driver branch reports ("550.54.15":
 *   12040), 0 unknown. */
typedef int (*aff_read_fn)(void *ctx, uint64_t off, void *buf, size_t n);
int aff__libver_name(const char *base, const char *stem, int v[3]);
int aff__nccl_code(int major, int minor, int patch);
int aff__cudart_header(const char *text, size_t n);
int aff__nccl_verstr(const char *buf, size_t n);
int aff__ldcache_find(const unsigned char *buf, size_t n, const char *soname,
                      char *out, size_t cap);
int aff__elf_section(aff_read_fn rd, void *ctx, const char *name,
                     uint64_t *off, uint64_t *size);
int aff__cuda_of_driver(const char *driver);

/* aff_cache.c: what NVML said (t->nvml: memory, NVLink) for this boot,
 * driver and set of GPUs, in a file of this user (docs in the file).
 * store RET 0 or -1 (nothing written); apply RET 1 when it matched t->all
 * and filled memory sizes and NVLink of t's GPUs, else 0. */
int aff__cache_store(const aff_topo_t *t);
int aff__cache_apply(aff_topo_t *t);

/* aff_cache.c, for both caches:
 * cache_dir: a directory only this user can enter (aff_tcache.c's file).
 *   RET 0 or -1 (none usable).
 * cache_read: the text of path (NUL-terminated, *len its length) when it
 *   is a regular file of this user that nobody else may write, of at most
 *   max bytes, opened without following a link; else NULL.
 * cache_write: text to a temporary file of path's directory (0600), then
 *   renamed over path. RET 0 or -1 (nothing left behind). */
int aff__cache_dir(char *out, size_t n);
char *aff__cache_read(const char *path, size_t max, size_t *len);
int aff__cache_write(const char *path, const char *text, size_t len);

/* aff_tcache.c: the discovered topology (CPUs, NUMA nodes, cores, GPUs,
 * NICs, PCIe paths: what aff__sysfs_scan and hwloc's CPU discovery give)
 * for this boot and these inputs, so that the next start loads no hwloc
 * tree and walks no sysfs (docs in the file).
 * key: the key text for t's inputs (boot, driver, affinity, cgroup, ...);
 *   RET 0 or -1 (no boot id: no cache).
 * encode: key + t's discovered state as the file's text (malloc'd).
 * decode: fill t from text when its key is `key` and every line is well
 *   formed; RET 0, else -1 with t's discovered state cleared.
 * load/store: the file itself; load RET 1 when t was filled from it. */
int aff__tcache_key(const aff_topo_t *t, const char *xml, char **key);
int aff__tcache_encode(const aff_topo_t *t, const char *key, char **text,
                       size_t *len);
int aff__tcache_decode(aff_topo_t *t, const char *key, const char *text,
                       size_t len);
/* The checksum of the "end" line (FNV-1a 64 of the bytes before it). */
uint64_t aff__tcache_sum(const char *p, size_t n);
int aff__tcache_load(aff_topo_t *t, const char *key, lu_log_t *log);
int aff__tcache_store(const aff_topo_t *t, const char *key, lu_log_t *log);
/* 0 when LAUNCH_TOPO_CACHE says off ("0", "off", "no", "false"). */
int aff__tcache_enabled(void);

#endif /* AFF_INT_H */
