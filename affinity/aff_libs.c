/* aff_libs.c - the GPU software stack's versions read from files, with no
 * GPU library loaded into the process: what the agent puts into the node
 * fingerprint on every start (aff_sysinfo_probe, which loads NVML,
 * libcudart and libnccl, costs tens of milliseconds and megabytes there).
 *
 *   driver        /proc/driver/nvidia/version
 *   cuda_driver   the CUDA version of the driver's branch (table below)
 *   libcudart     found as the dynamic loader would find it (LD_LIBRARY_PATH,
 *                 /etc/ld.so.cache, the default directories), then
 *                 $CUDA_HOME/lib64 and /usr/local/cuda/lib64; its version
 *                 from the file's real name (libcudart.so.12.4.127), else
 *                 CUDART_VERSION of ../include/cuda_runtime_api.h beside it
 *   libnccl       found the same way; version from the real name
 *                 (libnccl.so.2.21.5), else the "NCCL version X.Y.Z"
 *                 string of its .rodata section (ELF section headers read)
 *   GPUs          /proc/driver/nvidia/gpus/<bus id>/information
 *
 * Every parser here takes bytes and is fuzzed (fuzz/fuzz_libfiles.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aff_int.h"

/* ---- parsers ----------------------------------------------------------------------- */

int aff__libver_name(const char *base, const char *stem, int v[3]) {
  size_t sl = strlen(stem);
  const char *p;
  int n = 0;
  v[0] = v[1] = v[2] = 0;
  if (strncmp(base, stem, sl) != 0)
    return 0;
  p = base + sl;
  while (n < 3 && *p >= '0' && *p <= '9') {
    long x = 0;
    while (*p >= '0' && *p <= '9' && x < 1000000)
      x = x * 10 + (*p++ - '0');
    if (*p >= '0' && *p <= '9')
      return 0; /* absurdly long */
    v[n++] = (int)x;
    if (*p == '.')
      p++;
    else
      break;
  }
  return *p == '\0' || n == 3 ? n : 0;
}

int aff__nccl_code(int major, int minor, int patch) {
  if (major <= 0 || major > 99 || minor < 0 || patch < 0 || minor > 99 ||
      patch > 99)
    return 0;
  /* nccl.h's NCCL_VERSION(): 10000-based from 2.9, 1000-based before. */
  if (major > 2 || (major == 2 && minor >= 9))
    return major * 10000 + minor * 100 + patch;
  return major * 1000 + minor * 100 + patch;
}

int aff__cudart_header(const char *text, size_t n) {
  static const char key[] = "#define CUDART_VERSION";
  const char *p = text, *end = text + n;
  while (p < end) {
    const char *hit = memmem(p, (size_t)(end - p), key, sizeof(key) - 1);
    const char *q;
    long v = 0;
    if (hit == NULL)
      return 0;
    q = hit + sizeof(key) - 1;
    p = q;
    if (q >= end || (*q != ' ' && *q != '\t'))
      continue;
    while (q < end && (*q == ' ' || *q == '\t'))
      q++;
    while (q < end && *q >= '0' && *q <= '9' && v < 10000000)
      v = v * 10 + (*q++ - '0');
    if (v >= 1000 && v < 1000000)
      return (int)v;
  }
  return 0;
}

int aff__nccl_verstr(const char *buf, size_t n) {
  static const char key[] = "NCCL version ";
  const char *p = buf, *end = buf + n;
  while (p < end) {
    const char *hit = memmem(p, (size_t)(end - p), key, sizeof(key) - 1);
    const char *q;
    int v[3] = {0, 0, 0}, k = 0;
    if (hit == NULL)
      return 0;
    q = p = hit + sizeof(key) - 1;
    while (k < 3 && q < end && *q >= '0' && *q <= '9') {
      long x = 0;
      while (q < end && *q >= '0' && *q <= '9' && x < 100000)
        x = x * 10 + (*q++ - '0');
      v[k++] = (int)x;
      if (k < 3 && q < end && *q == '.')
        q++;
      else
        break;
    }
    if (k == 3 && aff__nccl_code(v[0], v[1], v[2]) > 0)
      return aff__nccl_code(v[0], v[1], v[2]);
  }
  return 0;
}

/* glibc's ld.so.cache: the new format ("glibc-ld.so.cache1.1"), alone or
 * after the old one ("ld.so-1.7.0"). String offsets count from the start
 * of the new header. */
#define LDC_OLD "ld.so-1.7.0"
#define LDC_NEW "glibc-ld.so.cache1.1"
#define LDC_NEW_HEAD 48 /* magic+version 20, nlibs 4, len_strings 4, flags
                           1 + 3, extension_offset 4, unused 12 */
#define LDC_NEW_ENTRY 24 /* flags 4, key 4, value 4, osversion 4, hwcap 8 */
#define LDC_OLD_ENTRY 12

#if defined(__x86_64__)
#define LDC_ARCH 0x0303 /* FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 */
#elif defined(__aarch64__)
#define LDC_ARCH 0x0a03 /* FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64 */
#else
#define LDC_ARCH -1
#endif

static uint32_t rd32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* The NUL-terminated string at off of buf[0..n), NULL when it is not. */
static const char *ldc_str(const unsigned char *buf, size_t n, uint64_t off) {
  if (off >= n || memchr(buf + off, '\0', n - off) == NULL)
    return NULL;
  return (const char *)buf + off;
}

int aff__ldcache_find(const unsigned char *buf, size_t n, const char *soname,
                      char *out, size_t cap) {
  size_t base = 0;
  uint32_t nlibs;
  if (n >= sizeof(LDC_OLD) - 1 + 5 &&
      memcmp(buf, LDC_OLD, sizeof(LDC_OLD) - 1) == 0) {
    /* magic (11) + pad to 12, nlibs, entries; the new header follows,
     * aligned to 8 */
    uint64_t old = rd32(buf + 12);
    if (old > n / LDC_OLD_ENTRY)
      return -1;
    base = (size_t)(16 + old * LDC_OLD_ENTRY);
    base = (base + 7) & ~(size_t)7;
  }
  if (base > n || n - base < LDC_NEW_HEAD ||
      memcmp(buf + base, LDC_NEW, sizeof(LDC_NEW) - 1) != 0)
    return -1;
  nlibs = rd32(buf + base + 20);
  if (nlibs > (n - base - LDC_NEW_HEAD) / LDC_NEW_ENTRY)
    return -1;
  for (uint32_t i = 0; i < nlibs; i++) {
    const unsigned char *e = buf + base + LDC_NEW_HEAD + (size_t)i * LDC_NEW_ENTRY;
    int32_t flags;
    const char *key, *val;
    memcpy(&flags, e, 4);
    if (LDC_ARCH >= 0 && flags != LDC_ARCH)
      continue;
    key = ldc_str(buf + base, n - base, rd32(e + 4));
    val = ldc_str(buf + base, n - base, rd32(e + 8));
    if (key && val && strcmp(key, soname) == 0 && val[0] == '/' &&
        strlen(val) < cap) {
      memcpy(out, val, strlen(val) + 1);
      return 0;
    }
  }
  return -1;
}

int aff__elf_section(aff_read_fn rd, void *ctx, const char *name,
                     uint64_t *off, uint64_t *size) {
  Elf64_Ehdr eh;
  Elf64_Shdr sh, strsh;
  char nm[32];
  size_t nl = strlen(name);
  if (nl >= sizeof(nm) || rd(ctx, 0, &eh, sizeof(eh)) != 0 ||
      memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      eh.e_shnum > 4096 || eh.e_shstrndx >= eh.e_shnum ||
      eh.e_shoff > UINT64_MAX / 2)
    return -1;
  if (rd(ctx, eh.e_shoff + (uint64_t)eh.e_shstrndx * sizeof(sh), &strsh,
         sizeof(strsh)) != 0)
    return -1;
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    if (rd(ctx, eh.e_shoff + (uint64_t)i * sizeof(sh), &sh, sizeof(sh)) != 0)
      return -1;
    if (sh.sh_type != SHT_PROGBITS || sh.sh_name >= strsh.sh_size ||
        strsh.sh_size - sh.sh_name < nl + 1 ||
        rd(ctx, strsh.sh_offset + sh.sh_name, nm, nl + 1) != 0 ||
        memcmp(nm, name, nl + 1) != 0)
      continue;
    *off = sh.sh_offset;
    *size = sh.sh_size;
    return 0;
  }
  return -1;
}

/* CUDA version that each driver branch reports (cuDriverGetVersion), from
 * NVIDIA's table of toolkit and minimum driver versions. A branch not
 * listed gives 0 ("none") on every node alike: the fingerprint stays
 * comparable. */
static const struct {
  int branch, cuda;
} driver_cuda[] = {
    {450, 11000}, {455, 11010}, {460, 11020}, {465, 11030}, {470, 11040},
    {495, 11050}, {510, 11060}, {515, 11070}, {520, 11080}, {525, 12000},
    {530, 12010}, {535, 12020}, {545, 12030}, {550, 12040}, {555, 12050},
    {560, 12060}, {565, 12070}, {570, 12080}, {575, 12090}, {580, 13000},
    {590, 13010},
};

int aff__cuda_of_driver(const char *driver) {
  int major = 0;
  if (driver == NULL || sscanf(driver, "%d.", &major) != 1)
    return 0;
  for (size_t i = 0; i < LU_ARRAY_SIZE(driver_cuda); i++)
    if (driver_cuda[i].branch == major)
      return driver_cuda[i].cuda;
  return 0;
}

/* ---- files ------------------------------------------------------------------------ */

static void under(const char *root, const char *path, char *out, size_t cap) {
  snprintf(out, cap, "%s%s", root ? root : "", path);
}

/* A whole file of at most max bytes, or NULL. Read to its end, not by its
 * size: /proc's files (the GPUs' information) say 0. Not inlined: gcc 12
 * then takes pointers into the buffer for pointers to the local `b`
 * (-Wdangling-pointer, an error with -Werror). */
__attribute__((noinline)) static char *slurp(const char *path, size_t max,
                                             size_t *len) {
  char *b = NULL;
  return lu_read_file(path, max, &b, len) == 0 ? b : NULL;
}

static int fd_read(void *ctx, uint64_t off, void *buf, size_t n) {
  int fd = *(int *)ctx;
  if (off > (uint64_t)INT64_MAX - n)
    return -1;
  return pread(fd, buf, n, (off_t)off) == (ssize_t)n ? 0 : -1;
}

/* "NCCL version" in the .rodata of an ELF file, read in slices. */
static int nccl_from_elf(const char *path) {
  enum { SLICE = 1 << 20, OVERLAP = 64 };
  uint64_t off, size, done = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC), v = 0;
  char *buf;
  if (fd < 0)
    return 0;
  if (aff__elf_section(fd_read, &fd, ".rodata", &off, &size) != 0 ||
      (buf = malloc(SLICE)) == NULL) {
    close(fd);
    return 0;
  }
  while (v == 0 && done < size) {
    size_t want = (size_t)LU_MIN((uint64_t)SLICE, size - done);
    ssize_t r = pread(fd, buf, want, (off_t)(off + done));
    if (r <= 0)
      break;
    v = aff__nccl_verstr(buf, (size_t)r);
    if ((size_t)r < want || done + (size_t)r >= size)
      break;
    done += (size_t)r > OVERLAP ? (size_t)r - OVERLAP : (size_t)r;
  }
  free(buf);
  close(fd);
  return v;
}

static int is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* root + path, kept in out when it is a regular file. RET 0 or -1. */
static int try_path(const char *root, const char *path, char *out, size_t cap) {
  char p[PATH_MAX];
  under(root, path, p, sizeof(p));
  if (!is_file(p))
    return -1;
  lu_strlcpy(out, p, cap);
  return 0;
}

/* Where dlopen(name) would find it: LD_LIBRARY_PATH (not under a fake
 * root), the loader's cache, the default directories. RET 0 or -1. */
static int find_one(const char *root, const unsigned char *cache, size_t clen,
                    const char *name, char *out, size_t cap) {
  static const char *const defaults[] = {"/lib64", "/usr/lib64", "/lib",
                                         "/usr/lib"};
  const char *ldp = root ? NULL : getenv("LD_LIBRARY_PATH");
  char rel[PATH_MAX];
  for (const char *d = ldp; d && *d;) {
    size_t k = strcspn(d, ":;");
    if (k > 0 && k < sizeof(rel) - 64) {
      snprintf(rel, sizeof(rel), "%.*s/%s", (int)k, d, name);
      if (try_path(NULL, rel, out, cap) == 0)
        return 0;
    }
    d += k;
    d += *d != '\0';
  }
  if (cache && aff__ldcache_find(cache, clen, name, rel, sizeof(rel)) == 0 &&
      try_path(root, rel, out, cap) == 0)
    return 0;
  for (size_t i = 0; i < LU_ARRAY_SIZE(defaults); i++) {
    snprintf(rel, sizeof(rel), "%s/%s", defaults[i], name);
    if (try_path(root, rel, out, cap) == 0)
      return 0;
  }
  return -1;
}

/* One of names where aff_gpu.c's load_lib would dlopen it: each name as
 * the dynamic loader finds it, then each in $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64. OUT path under root. RET 0 or -1. */
static int find_lib(const char *root, const char *const *names, char *out,
                    size_t cap) {
  const char *ch = getenv("CUDA_HOME");
  const char *dirs[2] = {ch && *ch && strlen(ch) < PATH_MAX - 256 ? ch : NULL,
                         "/usr/local/cuda"};
  char p[PATH_MAX];
  size_t clen = 0;
  unsigned char *cache;
  int rc = -1;
  under(root, "/etc/ld.so.cache", p, sizeof(p));
  cache = (unsigned char *)slurp(p, 64u << 20, &clen);
  for (int i = 0; rc != 0 && names[i]; i++)
    rc = find_one(root, cache, clen, names[i], out, cap);
  free(cache);
  for (int d = 0; rc != 0 && d < 2; d++)
    for (int i = 0; rc != 0 && dirs[d] && names[i]; i++) {
      snprintf(p, sizeof(p), "%s/lib64/%s", dirs[d], names[i]);
      rc = try_path(root, p, out, cap);
    }
  return rc;
}

static const char *base_of(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static void cudart_version(const char *root, aff_sysinfo_t *si) {
  static const char *const names[] = {"libcudart.so", "libcudart.so.13",
                                      "libcudart.so.12", "libcudart.so.11.0",
                                      NULL};
  char path[PATH_MAX], real[PATH_MAX], hdr[PATH_MAX + 64];
  char *text, *slash;
  size_t len = 0;
  int v[3];
  if (find_lib(root, names, path, sizeof(path)) != 0)
    return;
  if (realpath(path, real) == NULL)
    lu_strlcpy(real, path, sizeof(real));
  lu_strlcpy(si->cudart_path, real, sizeof(si->cudart_path));
  if (aff__libver_name(base_of(real), "libcudart.so.", v) >= 2) {
    si->cuda_runtime = v[0] * 1000 + v[1] * 10;
    return;
  }
  /* The toolkit's or the wheel's header beside lib/ (lib64/). */
  if ((slash = strrchr(real, '/')) == NULL)
    return;
  *slash = '\0';
  snprintf(hdr, sizeof(hdr), "%s/../include/cuda_runtime_api.h", real);
  if ((text = slurp(hdr, 4u << 20, &len)) != NULL) {
    si->cuda_runtime = aff__cudart_header(text, len);
    free(text);
  }
}

static void nccl_version(const char *root, aff_sysinfo_t *si) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
  char path[PATH_MAX], real[PATH_MAX];
  int v[3];
  if (find_lib(root, names, path, sizeof(path)) != 0)
    return;
  if (realpath(path, real) == NULL)
    lu_strlcpy(real, path, sizeof(real));
  lu_strlcpy(si->nccl_path, real, sizeof(si->nccl_path));
  if (aff__libver_name(base_of(real), "libnccl.so.", v) == 3)
    si->nccl = aff__nccl_code(v[0], v[1], v[2]);
  if (si->nccl == 0)
    si->nccl = nccl_from_elf(real);
}

/* GPU count and the first GPU's model ("Model:  NVIDIA H200"), in bus id
 * order as NVML numbers them. */
static void gpus_from_proc(const char *root, aff_sysinfo_t *si) {
  char dir[PATH_MAX], first[64] = "";
  DIR *d;
  struct dirent *e;
  int n = 0;
  under(root, "/proc/driver/nvidia/gpus", dir, sizeof(dir));
  if ((d = opendir(dir)) == NULL)
    return;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    n++;
    if (first[0] == '\0' || strcmp(e->d_name, first) < 0)
      lu_strlcpy(first, e->d_name, sizeof(first));
  }
  closedir(d);
  si->ngpus = n;
  if (n > 0) {
    char p[PATH_MAX + 80], *text, *line;
    size_t len = 0;
    snprintf(p, sizeof(p), "%s/%s/information", dir, first);
    if ((text = slurp(p, 64u << 10, &len)) == NULL)
      return;
    if ((line = strstr(text, "Model:")) != NULL) {
      line += 6;
      line += strspn(line, " \t");
      line[strcspn(line, "\n")] = '\0';
      lu_rtrim(line, strlen(line));
      lu_strlcpy(si->gpu_model, line, sizeof(si->gpu_model));
    }
    free(text);
  }
}

void aff_sysinfo_files(aff_sysinfo_t *si, const char *root) {
  memset(si, 0, sizeof(*si));
  si->ngpus = -1;
  si->persistence = -1;
  if (root && strcmp(root, "/") == 0)
    root = NULL;
  aff__driver_from_proc(root, si->driver, sizeof(si->driver));
  si->cuda_driver = aff__cuda_of_driver(si->driver);
  cudart_version(root, si);
  nccl_version(root, si);
  gpus_from_proc(root, si);
}
