/* aff_tcache.c - the whole discovered topology kept for the rest of the
 * boot, so that the agent's next start loads no hwloc tree and walks no
 * sysfs (issue #10: hwloc's CPU discovery and the sysfs walk were ~6.5 ms
 * of a 16 ms start on an H200 node).
 *
 * What is kept: what hwloc's CPU discovery and aff__sysfs_scan() give
 * (host name, PUs, cores in hwloc's order, NUMA nodes and their CPUs, the
 * CPUs hwloc allows, every NVIDIA GPU CUDA can see in PCI order and every
 * NIC, with PCIe paths, localities and links). What is not: the visible
 * GPUs (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER are applied to the kept
 * list on every start), NVML's memory sizes and NVLink (aff_cache.c, read
 * on every start), the agent's own CPU mask (applied on every start), and
 * what changes while the machine runs: PCIe link widths and speeds and IB
 * port states, rates and link layers are read again for the kept devices
 * (a few sysfs files each, no directory walk).
 *
 * Where: launch-topo-<uid>.topo in $XDG_RUNTIME_DIR when that is the
 * user's own and closed to others, else in launch-<uid>/ (0700) of
 * /dev/shm, else of /tmp (aff__cache_dir). Trusted only as a regular file
 * of this user nobody else may write, opened without following a link;
 * written to a temporary file and renamed. Used only when its key is the
 * key of this start, byte for byte:
 *
 *   launch-topo-full 1                   (the format)
 *   key build <build id of the code>     (else the file's identity)
 *   key hwloc <version> <api>
 *   key boot <boot id>                   (/proc/sys/kernel/random/boot_id)
 *   key driver <NVIDIA driver line>      (/proc/driver/nvidia/version)
 *   key root <root> / key xml <path dev ino size mtime> (test fixtures)
 *   key affinity <sched_getaffinity>     key mems <allowed memory nodes>
 *   key cpuset <cpus> <mems>             (of its cgroup, v1 or v2)
 *   key ns <mount> <net> <cgroup namespaces>  (containers see other /sys,
 *                                              /dev)
 *   key env HWLOC_...=...                (every HWLOC_ variable)
 *   key end
 *
 * then the data lines (host, cpus, allowed, numa, core, gpu, nic) and
 * "end <FNV-1a 64 of all the bytes before it>". Strings are one token: bytes <= ' ', >= 0x7f and '%' as %XX, the
 * empty string as "-". Anything else (another key, a line out of place, a
 * number out of range, a sum that does not match) and the file is ignored, discovered again
 * and rewritten. LAUNCH_TOPO_CACHE=0 turns it off. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aff_int.h"
#include "lu_buf.h"

extern char **environ;

#define TC_HEAD "launch-topo-full 1\n"
#define TC_MAX (4u << 20)
#define TC_TOKENS (8 + AFF_PCI_DEPTH + 24)

int aff__tcache_enabled(void) {
  const char *v = getenv("LAUNCH_TOPO_CACHE");
  return v == NULL ||
         !(strcmp(v, "0") == 0 || strcasecmp(v, "off") == 0 ||
           strcasecmp(v, "no") == 0 || strcasecmp(v, "false") == 0);
}

/* ---- strings as tokens --------------------------------------------------------- */

static void put_tok(lu_buf_t *b, const char *s) {
  static const char hex[] = "0123456789abcdef";
  lu_buf_puts(b, " ");
  if (s[0] == '\0' || strcmp(s, "-") == 0) {
    lu_buf_puts(b, s[0] ? "%2d" : "-");
    return;
  }
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char e[4] = {'%', hex[*p >> 4], hex[*p & 15], '\0'};
    if (*p <= ' ' || *p >= 0x7f || *p == '%')
      lu_buf_puts(b, e);
    else
      lu_buf_put(b, (const char *)p, 1);
  }
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* A token back into out[n]. RET 0, -1 (bad escape, NUL, too long). */
static int get_str(const char *tok, char *out, size_t n) {
  size_t k = 0;
  if (strcmp(tok, "-") == 0) {
    out[0] = '\0';
    return 0;
  }
  for (const char *p = tok; *p; p++) {
    int c = (unsigned char)*p;
    if (c == '%') {
      int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
      if (hi < 0 || lo < 0 || (c = hi * 16 + lo) == 0)
        return -1;
      p += 2;
    }
    if (k + 1 >= n)
      return -1;
    out[k++] = (char)c;
  }
  out[k] = '\0';
  return 0;
}

static int get_ll(const char *tok, long long lo, long long hi, long long *v) {
  char *end;
  errno = 0;
  *v = strtoll(tok, &end, 10);
  return errno == 0 && end != tok && *end == '\0' && *v >= lo && *v <= hi ? 0
                                                                          : -1;
}

static int get_int(const char *tok, int lo, int hi, int *v) {
  long long x;
  if (get_ll(tok, lo, hi, &x) != 0)
    return -1;
  *v = (int)x;
  return 0;
}

static int get_u64(const char *tok, uint64_t *v) {
  char *end;
  if (tok[0] < '0' || tok[0] > '9')
    return -1;
  errno = 0;
  *v = strtoull(tok, &end, 10);
  return errno == 0 && *end == '\0' ? 0 : -1;
}

static int get_dbl(const char *tok, double *v) {
  char *end;
  *v = strtod(tok, &end);
  return end != tok && *end == '\0' && isfinite(*v) && *v >= 0 ? 0 : -1;
}

static int get_cpus(const char *tok, aff_cpuset_t *s) {
  char *list = malloc(strlen(tok) + 1);
  int rc = list && get_str(tok, list, strlen(tok) + 1) == 0 &&
                   aff_cpulist_parse(list, s, NULL, 0) == 0
               ? 0
               : -1;
  free(list);
  return rc;
}

/* A whole cpulist, however long (4096 CPUs listed one by one are ~20 KB). */
static void put_cpus(lu_buf_t *b, const aff_cpuset_t *s) {
  char small[256], *list = small;
  size_t need = aff_cpulist_format(s, small, sizeof(small));
  if (need >= sizeof(small)) {
    if ((list = malloc(need + 1)) == NULL) {
      lu_buf_puts(b, " %"); /* a token no decoder takes: the file is refused */
      return;
    }
    aff_cpulist_format(s, list, need + 1);
  }
  put_tok(b, list);
  if (list != small)
    free(list);
}

/* ---- the key --------------------------------------------------------------------- */

/* A small file whole, newlines as they are (cut to n - 1 bytes). */
static void read_small(const char *path, char *buf, size_t n) {
  ssize_t r = -1;
  size_t k = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    while (k + 1 < n && (r = read(fd, buf + k, n - 1 - k)) > 0)
      k += (size_t)r;
    close(fd);
  }
  buf[k] = '\0';
}

static void key_line(lu_buf_t *b, const char *name, const char *value) {
  lu_buf_printf(b, "key %s", name);
  put_tok(b, value);
  lu_buf_puts(b, "\n");
}

typedef struct {
  const void *addr;
  char id[80];
  char file[512];
} build_t;

static int find_build(struct dl_phdr_info *info, size_t size, void *ctx) {
  build_t *bt = ctx;
  int mine = 0;
  (void)size;
  for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    mine = ph->p_type == PT_LOAD && (uintptr_t)bt->addr >= lo &&
           (uintptr_t)bt->addr < lo + ph->p_memsz;
  }
  if (!mine)
    return 0;
  lu_strlcpy(bt->file, info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe",
             sizeof(bt->file));
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
    size_t at = 0;
    if (ph->p_type != PT_NOTE)
      continue;
    while (at + sizeof(ElfW(Nhdr)) <= ph->p_memsz) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(p + at);
      size_t name = (nh->n_namesz + 3) & ~(size_t)3;
      size_t desc = (nh->n_descsz + 3) & ~(size_t)3;
      const unsigned char *d =
          (const unsigned char *)(p + at + sizeof(*nh) + name);
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
          memcmp(p + at + sizeof(*nh), "GNU", 4) == 0 &&
          at + sizeof(*nh) + name + nh->n_descsz <= ph->p_memsz) {
        for (size_t k = 0; k < nh->n_descsz && 2 * k + 2 < sizeof(bt->id); k++)
          snprintf(bt->id + 2 * k, 3, "%02x", d[k]);
        return 1;
      }
      at += sizeof(*nh) + name + desc;
    }
  }
  return 1;
}

/* The build id of the code that discovers (this file's object), else the
 * identity of that file: a new launch may discover differently. */
static void key_build(lu_buf_t *b) {
  build_t bt;
  struct stat sb;
  memset(&bt, 0, sizeof(bt));
  bt.addr = (const void *)&aff__tcache_key;
  dl_iterate_phdr(find_build, &bt);
  if (bt.id[0]) {
    key_line(b, "build", bt.id);
  } else if (bt.file[0] && stat(bt.file, &sb) == 0) {
    lu_buf_printf(b, "key file %llu %llu %lld %lld.%09ld\n",
                  (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino,
                  (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                  sb.st_mtim.tv_nsec);
  } else {
    key_line(b, "build", "unknown");
  }
}

/* The cgroup's cpuset (hwloc's allowed CPUs and nodes come from it): v2
 * "0::/path", v1 "N:cpuset:/path". Its contents, not its path: a job in a
 * cgroup of its own with the same CPUs uses the same file. */
static void key_cgroup(lu_buf_t *b) {
  char cg[2048], cpus[1024] = "", mems[1024] = "", path[2600];
  const char *v2 = NULL, *v1 = NULL;
  read_small("/proc/self/cgroup", cg, sizeof(cg));
  for (char *line = cg; line && *line;) {
    char *nl = strchr(line, '\n'), *c;
    if (nl)
      *nl = '\0';
    if (strncmp(line, "0::", 3) == 0)
      v2 = line + 3;
    else if ((c = strstr(line, ":cpuset:")) != NULL)
      v1 = c + 8;
    line = nl ? nl + 1 : NULL;
  }
  if (v1) {
    snprintf(path, sizeof(path), "/sys/fs/cgroup/cpuset%s/cpuset.effective_cpus", v1);
    read_small(path, cpus, sizeof(cpus));
    snprintf(path, sizeof(path), "/sys/fs/cgroup/cpuset%s/cpuset.effective_mems", v1);
    read_small(path, mems, sizeof(mems));
  } else if (v2) {
    snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpuset.cpus.effective", v2);
    read_small(path, cpus, sizeof(cpus));
    snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpuset.mems.effective", v2);
    read_small(path, mems, sizeof(mems));
  }
  lu_buf_puts(b, "key cpuset");
  put_tok(b, cpus);
  put_tok(b, mems);
  lu_buf_puts(b, "\n");
}

/* The memory nodes this process may use (cpuset mems). */
static void key_mems(lu_buf_t *b) {
  unsigned long mask[4096 / AFF_LONG_BITS];
  memset(mask, 0, sizeof(mask));
  lu_buf_puts(b, "key mems");
  if (syscall(SYS_get_mempolicy, NULL, mask, (unsigned long)4096, NULL,
              4 /* MPOL_F_MEMS_ALLOWED */) == 0) {
    int last = 0;
    for (int i = 0; i < (int)LU_ARRAY_SIZE(mask); i++)
      if (mask[i])
        last = i;
    for (int i = 0; i <= last; i++)
      lu_buf_printf(b, " %lx", mask[i]);
  } else {
    /* a seccomp filter may refuse get_mempolicy: the kernel's own list */
    char st[8192], *m;
    read_small("/proc/self/status", st, sizeof(st));
    m = strstr(st, "Mems_allowed_list:");
    if (m) {
      m += strlen("Mems_allowed_list:");
      m[strcspn(m, "\n")] = '\0';
      put_tok(b, m);
    } else {
      lu_buf_puts(b, " ?");
    }
  }
  lu_buf_puts(b, "\n");
}

int aff__tcache_key(const aff_topo_t *t, const char *xml, char **key) {
  char boot[64], drv[256], ns[3][64], link[64];
  static const char *const nsname[] = {"mnt", "net", "cgroup"};
  lu_buf_t b = LU_BUF_INIT;
  cpu_set_t mine;
  aff_cpuset_t aff;
  struct stat sb;
  *key = NULL;
  /* No boot id (a fixture tree without one): nothing to key by. */
  if (aff__read_line(t->root, "/proc/sys/kernel/random/boot_id", boot,
                     sizeof(boot)) <= 0)
    return -1;
  if (aff__read_line(t->root, "/proc/driver/nvidia/version", drv, sizeof(drv)) <= 0)
    drv[0] = '\0';
  key_build(&b);
  lu_buf_printf(&b, "key hwloc %s %x\n", HWLOC_VERSION, hwloc_get_api_version());
  key_line(&b, "boot", boot);
  key_line(&b, "driver", drv);
  key_line(&b, "root", t->root[0] ? t->root : "/");
  if (xml) {
    if (stat(xml, &sb) != 0) {
      lu_buf_free(&b);
      return -1;
    }
    lu_buf_puts(&b, "key xml");
    put_tok(&b, xml);
    lu_buf_printf(&b, " %llu %llu %lld %lld.%09ld\n",
                  (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino,
                  (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                  sb.st_mtim.tv_nsec);
  }
  aff_cpuset_zero(&aff);
  if (sched_getaffinity(0, sizeof(mine), &mine) == 0)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &mine))
        aff_cpuset_set(&aff, c);
  lu_buf_puts(&b, "key affinity");
  put_cpus(&b, &aff);
  lu_buf_puts(&b, "\n");
  key_mems(&b);
  key_cgroup(&b);
  for (int i = 0; i < 3; i++) {
    char p[32];
    ssize_t r;
    snprintf(p, sizeof(p), "/proc/self/ns/%s", nsname[i]);
    r = readlink(p, link, sizeof(link) - 1);
    link[r > 0 ? r : 0] = '\0';
    lu_strlcpy(ns[i], link, sizeof(ns[i]));
  }
  lu_buf_puts(&b, "key ns");
  for (int i = 0; i < 3; i++)
    put_tok(&b, ns[i]);
  lu_buf_puts(&b, "\n");
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, "HWLOC_", 6) == 0)
      key_line(&b, "env", *e);
  lu_buf_puts(&b, "key end\n");
  return lu_buf_finish(&b, key, NULL) == 0 ? 0 : -1;
}

uint64_t aff__tcache_sum(const char *p, size_t n) {
  return lu_fnv1a64(p, n);
}

/* ---- the data -------------------------------------------------------------------- */

static void put_link(lu_buf_t *b, const aff_pcie_t *l) {
  lu_buf_printf(b, " %d %d %.17g %.17g %.17g", l->width, l->width_max, l->gts,
                l->gts_max, l->gbps);
}

static void put_io(lu_buf_t *b, const aff_iopath_t *io) {
  lu_buf_printf(b, " %d %llu %llu %lu", io->n, (unsigned long long)io->loc_id,
                (unsigned long long)io->loc_top, io->loc_group);
  for (int i = 0; i < io->n; i++)
    put_tok(b, io->id[i]);
}

int aff__tcache_encode(const aff_topo_t *t, const char *key, char **text,
                       size_t *len) {
  lu_buf_t b = LU_BUF_INIT;
  lu_buf_puts(&b, TC_HEAD);
  lu_buf_puts(&b, key);
  lu_buf_puts(&b, "host");
  put_tok(&b, t->hostname);
  lu_buf_printf(&b, "\ncpus %d %d\nallowed", t->ncpus, t->ncores);
  put_cpus(&b, &t->allowed);
  lu_buf_puts(&b, "\n");
  for (int i = 0; i < t->nnuma; i++) {
    lu_buf_printf(&b, "numa %d", t->numa_os[i]);
    put_cpus(&b, &t->numa_cpus[i]);
    lu_buf_puts(&b, "\n");
  }
  for (int i = 0; i < t->ncore_sets; i++) {
    lu_buf_puts(&b, "core");
    put_cpus(&b, &t->core_sets[i]);
    lu_buf_puts(&b, "\n");
  }
  for (int i = 0; i < t->nall; i++) {
    const aff_gpu_t *g = &t->all[i];
    lu_buf_puts(&b, "gpu");
    put_tok(&b, g->busid);
    put_tok(&b, g->model);
    put_tok(&b, g->uuid);
    lu_buf_printf(&b, " %d %d %llu %u %u %d", g->index, g->phys,
                  (unsigned long long)g->mem_bytes, g->vendor, g->device,
                  g->numa);
    put_cpus(&b, &g->cpus);
    lu_buf_printf(&b, " %d %d %d", g->nic, (int)g->nic_path, g->minor);
    put_link(&b, &g->link);
    put_io(&b, &t->all_io[i]);
    lu_buf_puts(&b, "\n");
  }
  for (int k = 0; k < t->nnics; k++) {
    const aff_nic_t *n = &t->nics[k];
    lu_buf_puts(&b, "nic");
    put_tok(&b, n->busid);
    put_tok(&b, n->name);
    put_tok(&b, n->hca);
    put_tok(&b, n->netdev);
    put_tok(&b, n->rate);
    put_tok(&b, n->link_layer);
    lu_buf_printf(&b, " %u %u %d %d %d %d %d", n->vendor, n->device, n->numa,
                  n->port, n->nports, n->port_state, n->rate_gbps);
    put_link(&b, &n->link);
    put_io(&b, &t->nic_io[k]);
    lu_buf_puts(&b, "\n");
  }
  if (b.err == 0)
    lu_buf_printf(&b, "end %016llx\n",
                  (unsigned long long)aff__tcache_sum(b.data, b.len));
  return lu_buf_finish(&b, text, len) == 0 ? 0 : -1;
}

/* The tokens of one line, split in place at spaces. RET the count, -1 when
 * there are more than max or an empty one. */
static int split(char *line, char **tok, int max) {
  int n = 0;
  for (char *p = line;;) {
    char *sp = strchr(p, ' ');
    if (n == max || *p == '\0' || p == sp)
      return -1;
    tok[n++] = p;
    if (sp == NULL)
      return n;
    *sp = '\0';
    p = sp + 1;
  }
}

static int get_link(char **tok, aff_pcie_t *l) {
  return get_int(tok[0], 0, 1024, &l->width) || get_int(tok[1], 0, 1024, &l->width_max) ||
                 get_dbl(tok[2], &l->gts) || get_dbl(tok[3], &l->gts_max) ||
                 get_dbl(tok[4], &l->gbps)
             ? -1
             : 0;
}

/* io tokens from tok[0] to tok[ntok - 1]. */
static int get_io(char **tok, int ntok, aff_iopath_t *io) {
  long long group;
  memset(io, 0, sizeof(*io));
  if (ntok < 4 || get_int(tok[0], 0, AFF_PCI_DEPTH, &io->n) != 0 ||
      ntok != 4 + io->n || get_u64(tok[1], &io->loc_id) != 0 ||
      get_u64(tok[2], &io->loc_top) != 0 ||
      get_ll(tok[3], 0, (long long)(~0ul >> 1), &group) != 0)
    return -1;
  io->loc_group = (unsigned long)group;
  for (int i = 0; i < io->n; i++)
    if (get_str(tok[4 + i], io->id[i], sizeof(io->id[i])) != 0)
      return -1;
  return 0;
}

/* A gpu or nic line: 19 tokens, then at least the 4 of its I/O path. */
static int get_gpu(char **tok, int ntok, aff_gpu_t *g, aff_iopath_t *io) {
  int vendor, device, path;
  memset(g, 0, sizeof(*g));
  if (ntok < 23 || get_str(tok[1], g->busid, sizeof(g->busid)) ||
      get_str(tok[2], g->model, sizeof(g->model)) ||
      get_str(tok[3], g->uuid, sizeof(g->uuid)) ||
      get_int(tok[4], -1, AFF_MAX_GPUS, &g->index) ||
      get_int(tok[5], -1, AFF_MAX_GPUS, &g->phys) ||
      get_u64(tok[6], &g->mem_bytes) || get_int(tok[7], 0, 0xffff, &vendor) ||
      get_int(tok[8], 0, 0xffff, &device) ||
      get_int(tok[9], -1, 1 << 20, &g->numa) || get_cpus(tok[10], &g->cpus) ||
      get_int(tok[11], -1, AFF_MAX_NICS, &g->nic) ||
      get_int(tok[12], 0, AFF_PATH_UNKNOWN, &path) ||
      get_int(tok[13], -1, 1 << 20, &g->minor) || get_link(tok + 14, &g->link))
    return -1;
  g->vendor = (uint16_t)vendor;
  g->device = (uint16_t)device;
  g->nic_path = (aff_path_t)path;
  return get_io(tok + 19, ntok - 19, io);
}

static int get_nic(char **tok, int ntok, aff_nic_t *n, aff_iopath_t *io) {
  int vendor, device;
  memset(n, 0, sizeof(*n));
  if (ntok < 23 || get_str(tok[1], n->busid, sizeof(n->busid)) ||
      get_str(tok[2], n->name, sizeof(n->name)) ||
      get_str(tok[3], n->hca, sizeof(n->hca)) ||
      get_str(tok[4], n->netdev, sizeof(n->netdev)) ||
      get_str(tok[5], n->rate, sizeof(n->rate)) ||
      get_str(tok[6], n->link_layer, sizeof(n->link_layer)) ||
      get_int(tok[7], 0, 0xffff, &vendor) || get_int(tok[8], 0, 0xffff, &device) ||
      get_int(tok[9], -1, 1 << 20, &n->numa) || get_int(tok[10], 0, 1 << 16, &n->port) ||
      get_int(tok[11], 0, 1 << 16, &n->nports) ||
      get_int(tok[12], -1, 1 << 16, &n->port_state) ||
      get_int(tok[13], 0, 1 << 30, &n->rate_gbps) || get_link(tok + 14, &n->link))
    return -1;
  n->vendor = (uint16_t)vendor;
  n->device = (uint16_t)device;
  return get_io(tok + 19, ntok - 19, io);
}

static void clear_discovered(aff_topo_t *t) {
  t->hostname[0] = '\0';
  t->ncpus = t->ncores = t->nnuma = t->nall = t->nnics = 0;
  aff_cpuset_zero(&t->allowed);
  free(t->core_sets);
  t->core_sets = NULL;
  t->ncore_sets = 0;
}

/* One data line into t. *state: 0 before "host", 1 "cpus", 2 "allowed",
 * 3 the lists. RET 0 or -1. */
static int decode_line(aff_topo_t *t, char *line, int *state, int *cap) {
  char *tok[TC_TOKENS];
  int n = split(line, tok, TC_TOKENS);
  if (n < 1)
    return -1;
  if (strcmp(tok[0], "host") == 0 && *state == 0 && n == 2) {
    *state = 1;
    return get_str(tok[1], t->hostname, sizeof(t->hostname));
  }
  if (strcmp(tok[0], "cpus") == 0 && *state == 1 && n == 3) {
    *state = 2;
    return get_int(tok[1], 0, AFF_MAX_CPUS, &t->ncpus) ||
                   get_int(tok[2], 0, AFF_MAX_CPUS, &t->ncores)
               ? -1
               : 0;
  }
  if (strcmp(tok[0], "allowed") == 0 && *state == 2 && n == 2) {
    *state = 3;
    return get_cpus(tok[1], &t->allowed);
  }
  if (*state != 3)
    return -1;
  if (strcmp(tok[0], "numa") == 0 && n == 3 && t->nnuma < AFF_MAX_NUMA) {
    if (get_int(tok[1], 0, 1 << 20, &t->numa_os[t->nnuma]) ||
        get_cpus(tok[2], &t->numa_cpus[t->nnuma]))
      return -1;
    t->nnuma++;
    return 0;
  }
  if (strcmp(tok[0], "core") == 0 && n == 2 && t->ncore_sets < AFF_MAX_CPUS) {
    if (t->ncore_sets == *cap) {
      int nc = *cap ? 2 * *cap : 64;
      aff_cpuset_t *c = realloc(t->core_sets, (size_t)nc * sizeof(*c));
      if (c == NULL)
        return -1;
      t->core_sets = c;
      *cap = nc;
    }
    if (get_cpus(tok[1], &t->core_sets[t->ncore_sets]))
      return -1;
    t->ncore_sets++;
    return 0;
  }
  if (strcmp(tok[0], "gpu") == 0 && t->nall < AFF_MAX_GPUS) {
    if (get_gpu(tok, n, &t->all[t->nall], &t->all_io[t->nall]))
      return -1;
    t->all_obj[t->nall++] = NULL;
    return 0;
  }
  if (strcmp(tok[0], "nic") == 0 && t->nnics < AFF_MAX_NICS) {
    if (get_nic(tok, n, &t->nics[t->nnics], &t->nic_io[t->nnics]))
      return -1;
    t->nic_obj[t->nnics++] = NULL;
    return 0;
  }
  return -1;
}

int aff__tcache_decode(aff_topo_t *t, const char *key, const char *text,
                       size_t len) {
  size_t hl = strlen(TC_HEAD), kl = strlen(key), body, el;
  char *copy, *line, *nl, sum[24];
  int state = 0, cap = 0, rc = 0;
  clear_discovered(t);
  /* "end <sum of everything before>\n" last: a file cut short, or with a
   * byte changed, is refused whatever the change */
  if (len < hl + kl + 22 || memchr(text, '\0', len) != NULL ||
      text[len - 1] != '\n')
    return -1;
  for (body = len - 1; body > 0 && text[body - 1] != '\n'; body--)
    ;
  el = len - body;
  snprintf(sum, sizeof(sum), "end %016llx\n",
           (unsigned long long)aff__tcache_sum(text, body));
  if (body < hl + kl || el != strlen(sum) || memcmp(text + body, sum, el) != 0 ||
      memcmp(text, TC_HEAD, hl) != 0 || memcmp(text + hl, key, kl) != 0 ||
      (copy = malloc(body - hl - kl + 1)) == NULL)
    return -1;
  memcpy(copy, text + hl + kl, body - hl - kl);
  copy[body - hl - kl] = '\0';
  for (line = copy; rc == 0 && *line; line = nl + 1) {
    nl = strchr(line, '\n'); /* every line ends with one */
    *nl = '\0';
    rc = decode_line(t, line, &state, &cap);
  }
  free(copy);
  if (rc != 0 || state != 3) {
    clear_discovered(t);
    return -1;
  }
  return 0;
}

/* ---- the file -------------------------------------------------------------------- */

static int topo_cache_path(char *out, size_t n) {
  char dir[400];
  return aff__cache_dir(dir, sizeof(dir)) == 0 &&
                 (size_t)snprintf(out, n, "%s/launch-topo-%u.topo", dir,
                                  (unsigned)geteuid()) < n
             ? 0
             : -1;
}

int aff__tcache_load(aff_topo_t *t, const char *key, lu_log_t *log) {
  char path[512], *text;
  size_t len = 0;
  if (topo_cache_path(path, sizeof(path)) != 0)
    return 0;
  if ((text = aff__cache_read(path, TC_MAX, &len)) == NULL) {
    if (log)
      LU_DBG(log, LU_DBG_AFF, "topology cache %s: none usable (%s), "
             "discovering", path, errno == ENOENT ? "absent" : "not this "
             "user's regular file, or unreadable");
    return 0;
  }
  if (aff__tcache_decode(t, key, text, len) != 0) {
    if (log)
      LU_DBG(log, LU_DBG_AFF, "topology cache %s: stale or damaged, "
             "discovering again", path);
    free(text);
    return 0;
  }
  free(text);
  if (log)
    LU_DBG(log, LU_DBG_AFF, "topology from the cache %s", path);
  return 1;
}

int aff__tcache_store(const aff_topo_t *t, const char *key, lu_log_t *log) {
  char path[512], *text = NULL;
  size_t len = 0;
  int rc;
  if (topo_cache_path(path, sizeof(path)) != 0 ||
      aff__tcache_encode(t, key, &text, &len) != 0)
    return -1;
  rc = aff__cache_write(path, text, len);
  if (rc != 0 && log)
    LU_DBG(log, LU_DBG_AFF, "topology cache %s: cannot write it (%s)", path,
           strerror(errno));
  free(text);
  return rc;
}
