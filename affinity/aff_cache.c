/* aff_cache.c - what only NVML knows (each GPU's memory size, the NVLinks
 * between GPUs), kept for the rest of the boot by whatever loaded NVML
 * (`launch topo --gpu-probe nvml|check`, AFF_GPUSRC_NVML), so that the
 * agent and a plain `launch topo`, which read sysfs and load no GPU library,
 * still know it.
 *
 * One small text file per user: $XDG_RUNTIME_DIR/launch-topo-<uid>.cache
 * when that directory is the user's own and closed to others, else
 * /dev/shm, else /tmp. Trusted only when it is a regular file of this
 * user that nobody else may write, read without following a link, and
 * only for the same boot (/proc/sys/kernel/random/boot_id), the same
 * driver (/proc/driver/nvidia/version) and exactly the same GPUs (bus ids
 * and UUIDs of every GPU the driver runs): a reboot, a driver update or a
 * GPU swap makes it stale, and a stale file is ignored, then replaced by
 * the next NVML load. Written to a temporary file of the same directory
 * and renamed, so that a reader never sees half of one.
 *
 *   launch-topo-cache 1
 *   boot 4c2a7efc-69b4-4484-8e8f-895afff69c9d
 *   driver NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 ...
 *   gpu 0000:07:00.0 GPU-5eed0000-... 85899345920
 *   nvlink 0000:07:00.0 0000:0f:00.0 300000     (MB/s, one line per pair)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aff_int.h"
#include "lu_buf.h"

#define CACHE_HEAD "launch-topo-cache 1"
#define CACHE_MAX (64 * 1024)

/* A directory only this user may write to (or a sticky one, /tmp). */
static int usable_dir(const char *dir, int own) {
  struct stat sb;
  if (dir == NULL || dir[0] != '/' || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return 0;
  if (own)
    return sb.st_uid == geteuid() && (sb.st_mode & 0022) == 0;
  return (sb.st_mode & S_ISVTX) || (sb.st_mode & 0022) == 0;
}

/* The full topology's cache (aff_tcache.c) wants a directory nobody else
 * can list or write: $XDG_RUNTIME_DIR, else launch-<uid> (made 0700 when
 * missing) in /dev/shm, else in /tmp. */
int aff__cache_dir(char *out, size_t n) {
  static const char *const shared[] = {"/dev/shm", "/tmp"};
  const char *x = getenv("XDG_RUNTIME_DIR");
  struct stat sb;
  if (usable_dir(x, 1))
    return (size_t)snprintf(out, n, "%s", x) < n ? 0 : -1;
  for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
    if (!usable_dir(shared[i], 0) ||
        (size_t)snprintf(out, n, "%s/launch-%u", shared[i],
                         (unsigned)geteuid()) >= n)
      continue;
    if (mkdir(out, 0700) != 0 && errno != EEXIST)
      continue;
    if (lstat(out, &sb) == 0 && S_ISDIR(sb.st_mode) &&
        sb.st_uid == geteuid() && (sb.st_mode & 0077) == 0)
      return 0;
  }
  return -1;
}

static int cache_path(char *out, size_t n) {
  const char *x = getenv("XDG_RUNTIME_DIR");
  const char *dir = usable_dir(x, 1) ? x
                    : usable_dir("/dev/shm", 0) ? "/dev/shm"
                    : usable_dir("/tmp", 0) ? "/tmp"
                                            : NULL;
  if (dir == NULL)
    return -1;
  return (size_t)snprintf(out, n, "%s/launch-topo-%u.cache", dir,
                          (unsigned)geteuid()) < n ? 0 : -1;
}

/* The lines that say which boot and driver a cache belongs to. */
static int cache_key(const aff_topo_t *t, char *boot, size_t bn, char *drv,
                     size_t dn) {
  if (aff__read_line(t->root, "/proc/sys/kernel/random/boot_id", boot, bn) <= 0)
    return -1;
  if (aff__read_line(t->root, "/proc/driver/nvidia/version", drv, dn) <= 0)
    drv[0] = '\0';
  drv[strcspn(drv, "\n")] = '\0';
  return 0;
}

int aff__cache_write(const char *path, const char *text, size_t len) {
  char tmp[600];
  int fd, rc = -1;
  if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
    return -1;
  if ((fd = mkstemp(tmp)) >= 0) {
    if (fchmod(fd, 0600) == 0 && write(fd, text, len) == (ssize_t)len &&
        close(fd) == 0) {
      fd = -1;
      rc = rename(tmp, path) == 0 ? 0 : -1;
    }
    if (fd >= 0)
      close(fd);
    if (rc != 0)
      unlink(tmp);
  }
  return rc;
}

int aff__cache_store(const aff_topo_t *t) {
  char path[512], boot[64], drv[256];
  lu_buf_t b = LU_BUF_INIT;
  char *text = NULL;
  size_t len = 0;
  int rc, known = 0;
  if (t->nnvml <= 0 || cache_path(path, sizeof(path)) != 0 ||
      cache_key(t, boot, sizeof(boot), drv, sizeof(drv)) != 0)
    return -1;
  lu_buf_printf(&b, CACHE_HEAD "\nboot %s\ndriver %s\n", boot, drv);
  for (int i = 0; i < t->nnvml; i++) {
    if (t->nvml[i].busid[0] == '\0')
      return -1; /* NVML could not name this one: nothing to key it by */
    lu_buf_printf(&b, "gpu %s %s %llu\n", t->nvml[i].busid,
                  t->nvml[i].uuid[0] ? t->nvml[i].uuid : "-",
                  (unsigned long long)t->nvml[i].mem_bytes);
  }
  for (int i = 0; i < t->nnvml; i++)
    for (int j = 0; j < t->nnvml; j++) {
      known |= t->nvml_links[i][j] >= 0;
      /* NVML counts links; 25 GB/s per link and direction (V100 to H100). */
      if (i != j && t->nvml_links[i][j] > 0)
        lu_buf_printf(&b, "nvlink %s %s %llu\n", t->nvml[i].busid,
                      t->nvml[j].busid,
                      (unsigned long long)t->nvml_links[i][j] * 25000u);
    }
  if (known)
    lu_buf_puts(&b, "nvlink-known\n");
  if (lu_buf_finish(&b, &text, &len) != 0)
    return -1;
  rc = aff__cache_write(path, text, len);
  free(text);
  return rc;
}

char *aff__cache_read(const char *path, size_t max, size_t *len) {
  char *text;
  struct stat sb;
  ssize_t r;
  int fd;
  if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
    return NULL;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid() ||
      (sb.st_mode & 0022) != 0 || sb.st_size <= 0 || (size_t)sb.st_size > max ||
      (text = malloc((size_t)sb.st_size + 1)) == NULL) {
    close(fd);
    return NULL;
  }
  r = read(fd, text, (size_t)sb.st_size);
  close(fd);
  if (r != sb.st_size) {
    free(text);
    return NULL;
  }
  text[r] = '\0';
  if (len)
    *len = (size_t)r;
  return text;
}

/* The cache file's text when it may be trusted (see the top), else NULL. */
static char *cache_read(void) {
  char path[512];
  return cache_path(path, sizeof(path)) == 0
             ? aff__cache_read(path, CACHE_MAX, NULL)
             : NULL;
}

static int find_all(const aff_topo_t *t, const char *busid) {
  for (int i = 0; i < t->nall; i++)
    if (strcmp(t->all[i].busid, busid) == 0)
      return i;
  return -1;
}

int aff__cache_apply(aff_topo_t *t) {
  char boot[64], drv[256], *text, *copy, *save = NULL, *line;
  uint64_t mem[AFF_MAX_GPUS];
  int seen[AFF_MAX_GPUS] = {0}, ngpu = 0, ok = 1, known = 0;
  if (t->nall == 0 || cache_key(t, boot, sizeof(boot), drv, sizeof(drv)) != 0 ||
      (text = cache_read()) == NULL)
    return 0;
  if ((copy = strdup(text)) == NULL) {
    free(text);
    return 0;
  }
  memset(mem, 0, sizeof(mem));
  line = strtok_r(text, "\n", &save);
  if (line == NULL || strcmp(line, CACHE_HEAD) != 0)
    ok = 0;
  /* First pass: the key and the GPUs must match exactly. */
  while (ok && (line = strtok_r(NULL, "\n", &save)) != NULL) {
    char a[32], u[64];
    unsigned long long v;
    int k;
    if (strncmp(line, "boot ", 5) == 0) {
      ok = strcmp(line + 5, boot) == 0;
    } else if (strncmp(line, "driver ", 7) == 0) {
      ok = strcmp(line + 7, drv) == 0;
    } else if (sscanf(line, "gpu %31s %63s %llu", a, u, &v) == 3) {
      k = find_all(t, a);
      ok = k >= 0 && !seen[k] &&
           (strcmp(u, "-") == 0 ? t->all[k].uuid[0] == '\0'
                                : strcmp(u, t->all[k].uuid) == 0);
      if (ok) {
        seen[k] = 1;
        mem[k] = v;
        ngpu++;
      }
    } else if (strcmp(line, "nvlink-known") == 0) {
      known = 1;
    } else if (strncmp(line, "nvlink ", 7) != 0) {
      ok = 0;
    }
  }
  free(text);
  if (!ok || ngpu != t->nall) {
    free(copy);
    return 0;
  }
  for (int i = 0; i < t->nall; i++)
    t->all[i].mem_bytes = mem[i];
  for (int g = 0; g < t->ngpus; g++)
    for (int i = 0; i < t->nall; i++)
      if (strcmp(t->gpus[g].busid, t->all[i].busid) == 0)
        t->gpus[g].mem_bytes = mem[i];
  save = NULL;
  for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char a[32], b[32];
    unsigned long long v;
    int i = -1, j = -1;
    if (sscanf(line, "nvlink %31s %31s %llu", a, b, &v) != 3)
      continue;
    for (int g = 0; g < t->ngpus; g++) {
      if (strcmp(t->gpus[g].busid, a) == 0)
        i = g;
      if (strcmp(t->gpus[g].busid, b) == 0)
        j = g;
    }
    if (i >= 0 && j >= 0)
      t->nvlink[i][j] = v;
  }
  free(copy);
  t->nvlink_known = known;
  return 1;
}
