/* nvml_mem.c - where NVML's share of the agent's memory goes (issue #23:
 * +19.4 MB of VmRSS on the H200, docs/BENCHMARKS.md). Never a test.
 *
 *   nvml_mem [FLAGS [LIBRARY]]   (bench/run_metrics_collect.sh runs it)
 *
 * Loads NVML as metrics.c does (dlopen, RTLD_NOW | RTLD_LOCAL), then steps
 * through what the agent does with it, printing VmRSS after each:
 * dlopen; nvmlInitWithFlags(FLAGS) (0 is nvmlInit_v2's;
 * 2 NVML_INIT_FLAG_NO_ATTACH, 1 NVML_INIT_FLAG_NO_GPUS); the handle of each
 * GPU; one of each query a scrape makes. At the end, the resident memory of
 * each mapping of at least 128 kB (and every NVIDIA one: the library, the
 * /dev/nvidia* mappings) from /proc/self/smaps: the library's file pages
 * (text, read-only data) against its anonymous ones (relocated data, bss)
 * and the heap's. */
#include <dirent.h>
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_proc.h"

typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;

static void stage(const char *what, long *last) {
  long kb = bench_vmrss_kb();
  printf("  %-44s VmRSS %7.2f MB (%+.2f MB)\n", what, kb / 1024.0,
         (kb - *last) / 1024.0);
  *last = kb;
}

#define MAPS 256

typedef struct { char name[96]; long rss, anon; } map_t;

/* One smaps header line's name: the base name of a file, [heap], [anon]. */
static void map_name(const char *line, char *out, size_t cap) {
  const char *p = line;
  for (int field = 0; field < 5 && *p; field++) {
    p += strcspn(p, " ");
    p += strspn(p, " ");
  }
  if (*p == '\0' || *p == '\n')
    p = "[anon]";
  else if (*p == '/' && strrchr(p, '/'))
    p = strrchr(p, '/') + 1;
  snprintf(out, cap, "%.*s", (int)strcspn(p, "\n"), p);
}

static void smaps(void) {
  static map_t m[MAPS];
  char line[512], name[96];
  long kb;
  int n = 0, cur = -1;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL)
    return;
  while (fgets(line, sizeof(line), f)) {
    char perms[8];
    if (sscanf(line, "%*x-%*x %7s", perms) == 1) {
      map_name(line, name, sizeof(name));
      for (cur = 0; cur < n && strcmp(m[cur].name, name) != 0; cur++)
        ;
      if (cur == n && n < MAPS)
        snprintf(m[n++].name, sizeof(m[0].name), "%s", name);
      else if (cur == n)
        cur = -1;
    } else if (cur >= 0 && sscanf(line, "Rss: %ld", &kb) == 1) {
      m[cur].rss += kb;
    } else if (cur >= 0 && sscanf(line, "Anonymous: %ld", &kb) == 1) {
      m[cur].anon += kb;
    }
  }
  fclose(f);
  printf("resident memory by mapping (smaps; anonymous: written pages):\n");
  for (int i = 0; i < n; i++)
    if (m[i].rss >= 128 || strstr(m[i].name, "nvidia"))
      printf("  %-40s %7.2f MB (file %.2f MB, anonymous %.2f MB)\n",
             m[i].name, m[i].rss / 1024.0, (m[i].rss - m[i].anon) / 1024.0,
             m[i].anon / 1024.0);
}

/* Where the anonymous memory is: malloc's view (in use, free but kept) and
 * the threads NVML started (each may have an arena of its own). */
static void heap(const char *when) {
  struct mallinfo2 mi = mallinfo2();
  int threads = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d));)
    threads += e->d_name[0] != '.';
  if (d)
    closedir(d);
  printf("  malloc %s: arena %.2f MB, mmapped %.2f MB, in use %.2f MB, "
         "free %.2f MB; %d threads\n",
         when, mi.arena / 1048576.0, mi.hblkhd / 1048576.0,
         mi.uordblks / 1048576.0, mi.fordblks / 1048576.0, threads);
}

/* Every anonymous mapping of at least 256 kB resident, one line each. */
static void anon_maps(void) {
  char line[512], hdr[512] = "";
  long kb;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL)
    return;
  printf("anonymous mappings >= 256 kB resident:\n");
  while (fgets(line, sizeof(line), f)) {
    char perms[8];
    if (sscanf(line, "%*x-%*x %7s", perms) == 1)
      snprintf(hdr, sizeof(hdr), "%s", line);
    else if (sscanf(line, "Anonymous: %ld", &kb) == 1 && kb >= 256) {
      unsigned long a, b;
      sscanf(hdr, "%lx-%lx", &a, &b);
      printf("  %7.2f MB of %8.2f MB  %s", kb / 1024.0, (b - a) / 1048576.0,
             hdr);
    }
  }
  fclose(f);
}

int main(int argc, char **argv) {
  unsigned flags = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 0;
  const char *name = argc > 2 ? argv[2] : "libnvidia-ml.so.1";
  int (*init)(unsigned), (*count)(unsigned *), (*handle)(unsigned, void **);
  int (*util)(void *, util_t *), (*mem)(void *, mem_t *);
  int (*power)(void *, unsigned *), (*temp)(void *, int, unsigned *);
  unsigned n = 0, v;
  long last;
  void *lib, *h;
  util_t u;
  mem_t mm;
  printf("nvml_mem: flags %u, %s\n", flags, name); /* stdio's buffer first */
  last = bench_vmrss_kb();
  stage("start", &last);
  if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) == NULL) {
    printf("no NVML: %s\n", dlerror());
    return 0;
  }
  stage("dlopen", &last);
  *(void **)&init = dlsym(lib, "nvmlInitWithFlags");
  if (init == NULL && flags == 0) /* an NVML older than the flags */
    *(void **)&init = dlsym(lib, "nvmlInit_v2");
  *(void **)&count = dlsym(lib, "nvmlDeviceGetCount_v2");
  *(void **)&handle = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&util = dlsym(lib, "nvmlDeviceGetUtilizationRates");
  *(void **)&mem = dlsym(lib, "nvmlDeviceGetMemoryInfo");
  *(void **)&power = dlsym(lib, "nvmlDeviceGetPowerUsage");
  *(void **)&temp = dlsym(lib, "nvmlDeviceGetTemperature");
  if (!init || !count || !handle || !util || !mem || !power || !temp) {
    printf("this NVML lacks a symbol the bench needs\n");
    return 1;
  }
  printf("  nvmlInitWithFlags(%u): %d\n", flags, init(flags));
  stage("init", &last);
  heap("after init");
  v = (unsigned)count(&n);
  printf("  nvmlDeviceGetCount_v2: %d (%u GPUs)\n", (int)v, n);
  for (unsigned g = 0; g < n; g++) {
    int rc = handle(g, &h);
    stage("a GPU's handle", &last);
    if (rc != 0) {
      printf("  GPU %u: handle %d\n", g, rc);
      continue;
    }
    rc = util(h, &u);
    printf("  GPU %u: utilisation %d", g, rc);
    rc = mem(h, &mm);
    printf(", memory %d", rc);
    rc = power(h, &v);
    printf(", power %d", rc);
    rc = temp(h, 0, &v);
    printf(", temperature %d (0: read)\n", rc);
    stage("its queries", &last);
  }
  heap("after the queries");
  anon_maps();
  smaps();
  malloc_trim(0);
  stage("malloc_trim(0)", &last);
  heap("after malloc_trim");
  return 0;
}
