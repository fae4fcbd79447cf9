/* metrics_collect.c - what one collection of the agent's metrics costs,
 * without the HTTP server: the collection's own cost (issue #23).
 *
 *   metrics_collect [N [CKPT_DIR]]  (bench/run_metrics_collect.sh runs it twice)
 *
 * Times met_local (the GPU sampler started: launcher/sampler.h), N
 * renders of what a scrape answers (the node's series: /proc, NUMA, IB,
 * and the GPUs' through the sampler: its block, fresh for 2.5 s after the
 * first render's request, as the agent's loop keeps it), and the refresh
 * done after a scrape; reports this process's VmRSS at each stage
 * and the sampler's VmHWM and VmRSS: NVML's memory is the sampler's. This
 * program is not launch: LAUNCH_GPU_SAMPLER names the launch binary to
 * start as the sampler (run_metrics_collect.sh sets it), else there are no
 * GPU series. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_proc.h"
#include "lu_buf.h"
#include "metrics.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* p50, p99 and max of v[0..n) (sorted in place). */
static void report(const char *what, double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp);
  printf("%s: p50 %.1f us, p99 %.1f us, max %.1f us (%d runs)\n", what,
         v[n / 2], v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], v[n - 1], n);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  long rss0 = bench_vmrss_kb(), rss1, rss2;
  double t0, *us;
  met_t *m;
  lu_buf_t b = LU_BUF_INIT;
  char *text;
  size_t len;
  int series = 0, gpu = 0, rc = 1;
  if (n < 10 || (us = calloc((size_t)n, sizeof(*us))) == NULL) {
    fprintf(stderr, "usage: metrics_collect [N >= 10 [CKPT_DIR]]\n");
    return 2;
  }
  double t_local;
  printf("metrics_collect: %d renders\n", n); /* stdio's buffers first */
  rss0 = bench_vmrss_kb();
  t0 = now_us();
  if (met_local("bench", &m) != 0) {
    fprintf(stderr, "met_local failed\n");
    free(us);
    return 1;
  }
  /* from here every exit goes through out: (the sampler stopped, us freed) */
  t_local = now_us() - t0;
  rss1 = bench_vmrss_kb();
  if (argc > 2 && met_set_ckpt_dir(m, argv[2]) == 0)
    printf("%s: on no block device /proc/diskstats lists\n", argv[2]);
  printf("met_local (NVML %s): %.0f us\n",
         getenv("LAUNCH_NVML_LIBRARY") ? getenv("LAUNCH_NVML_LIBRARY")
                                       : "libnvidia-ml.so.1",
         t_local);
  /* The first renders: until the sampler answers (NVML's init), 10 s. */
  for (int i = 0;; i++) {
    met_render(m, &b);
    if (lu_buf_finish(&b, &text, &len) != 0)
      goto out;
    if (i == 100 || !strstr(text, "launch_gpu_sampler_up{") ||
        strstr(text, "launch_gpu_sampler_up{node=\"bench\"} 1\n"))
      break;
    free(text);
    met_refresh(m);
    nanosleep(&(struct timespec){0, 100000000}, NULL);
  }
  printf("GPU sampler: %s\n",
         !strstr(text, "launch_gpu_sampler_up{") ? "none (no NVML, or "
                                                   "LAUNCH_GPU_SAMPLER unset)"
         : strstr(text, "_up{node=\"bench\"} 1\n") ? "answered"
                                                   : "did not answer in 10 s");
  for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"))
    if (l[0] != '#') {
      series++;
      gpu += strncmp(l, "launch_gpu_", 11) == 0;
    }
  free(text);
  for (int i = 0; i < n; i++) {
    t0 = now_us();
    met_render(m, &b);
    us[i] = now_us() - t0;
    if (lu_buf_finish(&b, &text, &len) != 0)
      goto out;
    free(text);
  }
  printf("a scrape's text: %zu bytes, %d series (%d GPU)\n", len, series, gpu);
  report("render (what a scrape waits for)", us, n);
  for (int i = 0; i < 20; i++) {
    t0 = now_us();
    met_refresh(m);
    us[i] = now_us() - t0;
  }
  report("refresh after a scrape (reaps a dead sampler)", us, 20);
  rss2 = bench_vmrss_kb();
  printf("VmRSS: start %ld KiB, after met_local %ld KiB (+%ld), after the "
         "renders %ld KiB (+%ld)\n", rss0, rss1, rss1 - rss0, rss2,
         rss2 - rss1);
  if (met_sampler_pid(m) > 0) {
    char path[64], line[128];
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)met_sampler_pid(m));
    if ((f = fopen(path, "r")) != NULL) {
      while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmHWM:", 6) || !strncmp(line, "VmRSS:", 6))
          printf("GPU sampler (pid %d) %s", (int)met_sampler_pid(m), line);
      fclose(f);
    }
  }
  rc = 0;
out:
  met_stop(m);
  free(us);
  return rc;
}
