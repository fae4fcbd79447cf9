/* test_metrics_text.c - the Prometheus text the agent serves (metrics.c),
 * without a server: HELP and TYPE once per family, label values escaped,
 * NaN and infinities spelled as Prometheus reads them, integers without a
 * fraction, the job's text handed over whole, the node's series (CPU and
 * memory from /proc). GPUs: NVML's series when NVML and a GPU are there
 * (LAUNCH_TEST_EXPECT_GPU=1 demands them: the GPU machine), else none and
 * no error. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "lu_buf.h"
#include "metrics.h"
#include "sampler.h"
#include "test.h"

/* A fake /sys with two HCA ports: mlx5_0 port 1 active at 200 Gb/s with
 * counters, mlx5_1 port 1 down at 25 Gb/s (RoCE). */
static void put(const char *root, const char *rel, const char *text) {
  char path[1024], cmd[1200];
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
  ASSERT_EQ(0, system(cmd));
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs(text, f);
  fclose(f);
}

/* What a scrape would answer now (malloc'd). */
static char *render(met_t *m) {
  lu_buf_t b = LU_BUF_INIT;
  char *text;
  met_render(m, &b);
  ASSERT_EQ(0, lu_buf_finish(&b, &text, NULL));
  return text;
}

static void test_ib(met_t *m) {
  char root[] = "/tmp/launch-ib-XXXXXX", cmd[200], *text;
  const char *p0 = "sys/class/infiniband/mlx5_0/ports/1/";
  const char *p1 = "sys/class/infiniband/mlx5_1/ports/1/";
  char rel[200];
  ASSERT(mkdtemp(root) != NULL);
#define PUT(p, f, t) (snprintf(rel, sizeof(rel), "%s%s", p, f), put(root, rel, t))
  PUT(p0, "state", "4: ACTIVE\n");
  PUT(p0, "rate", "200 Gb/sec (4X HDR)\n");
  PUT(p0, "link_layer", "InfiniBand\n");
  PUT(p0, "counters/port_rcv_data", "1000\n");
  PUT(p0, "counters/port_xmit_data", "250\n");
  PUT(p1, "state", "1: DOWN\n");
  PUT(p1, "rate", "25 Gb/sec (1X EDR)\n");
  PUT(p1, "link_layer", "Ethernet\n");
#undef PUT
  met_set_sysfs_root(m, root);
  text = render(m);
  ASSERT_CONTAINS(text, "# TYPE launch_ib_port_up gauge\n");
  ASSERT_CONTAINS(text, "launch_ib_port_up{node=\"node\\\"1\",device=\"mlx5_0\","
                        "port=\"1\",link_layer=\"InfiniBand\"} 1\n");
  ASSERT_CONTAINS(text, "launch_ib_port_up{node=\"node\\\"1\",device=\"mlx5_1\","
                        "port=\"1\",link_layer=\"Ethernet\"} 0\n");
  ASSERT_CONTAINS(text, "launch_ib_port_rate_bits_per_second{node=\"node\\\"1\","
                        "device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} "
                        "200000000000\n");
  ASSERT_CONTAINS(text, "launch_ib_port_receive_bytes_total{node=\"node\\\"1\","
                        "device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} "
                        "4000\n");
  ASSERT_CONTAINS(text, "launch_ib_port_transmit_bytes_total{node=\"node\\\"1\","
                        "device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} "
                        "1000\n");
  ASSERT(strstr(text, "transmit_bytes_total{node=\"node\\\"1\",device=\"mlx5_1\"")
         == NULL); /* no counters there: no series */
  free(text);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  ASSERT_EQ(0, system(cmd));
  met_set_sysfs_root(m, "/nonexistent-launch-root");
  text = render(m); /* no IB: no series, no error */
  ASSERT(strstr(text, "launch_ib_") == NULL);
  free(text);
  printf("IB/RoCE ports from a fake sysfs: up, rate, byte counters\n");
}

/* NUMA nodes and the checkpoint disk from a fake root: node0 and node1's
 * numastat; a /proc/diskstats with the row of the device that holds the
 * test's own dir (its real major:minor), a partition among others. */
static void test_numa_disk(met_t *m) {
  char root[] = "/tmp/launch-numa-XXXXXX", cmd[200], *text, row[256];
  char want[300];
  struct stat st;
  ASSERT(mkdtemp(root) != NULL);
  ASSERT_EQ(0, stat(root, &st));
  put(root, "sys/devices/system/node/node0/numastat",
      "numa_hit 1000\nnuma_miss 7\nnuma_foreign 3\ninterleave_hit 1\n"
      "local_node 990\nother_node 10\n");
  put(root, "sys/devices/system/node/node1/numastat",
      "numa_hit 500\nnuma_miss 0\nnuma_foreign 7\nother_node 0\n");
  put(root, "sys/devices/system/node/online", "0-1\n");
  snprintf(row, sizeof(row),
           "   7       0 loop0 1 0 2 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
           " %4u %7u ckptdev 100 5 2048 40 200 9 4096 80 0 1500 120 0 0 0 0\n"
           " %4u %7u other 1 0 8 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
           major(st.st_dev), minor(st.st_dev), major(st.st_dev),
           minor(st.st_dev) + 1);
  put(root, "proc/diskstats", row);
  met_set_sysfs_root(m, root);
  ASSERT_EQ(1, met_set_ckpt_dir(m, root));
  text = render(m);
  ASSERT_CONTAINS(text, "# TYPE launch_node_numa_hit_pages_total counter\n");
  ASSERT_CONTAINS(text, "launch_node_numa_hit_pages_total{node=\"node\\\"1\","
                        "numa=\"0\"} 1000\n");
  ASSERT_CONTAINS(text, "launch_node_numa_hit_pages_total{node=\"node\\\"1\","
                        "numa=\"1\"} 500\n");
  ASSERT_CONTAINS(text, "launch_node_numa_miss_pages_total{node=\"node\\\"1\","
                        "numa=\"0\"} 7\n");
  ASSERT_CONTAINS(text, "launch_node_numa_foreign_pages_total{node=\"node\\\"1\","
                        "numa=\"1\"} 7\n");
  ASSERT_CONTAINS(text, "launch_node_numa_other_node_pages_total{node=\"node\\\"1\","
                        "numa=\"0\"} 10\n");
  snprintf(want, sizeof(want), "launch_node_ckpt_disk_read_bytes_total{node="
           "\"node\\\"1\",device=\"ckptdev\"} %d\n", 2048 * 512);
  ASSERT_CONTAINS(text, want);
  snprintf(want, sizeof(want), "launch_node_ckpt_disk_written_bytes_total{node="
           "\"node\\\"1\",device=\"ckptdev\"} %d\n", 4096 * 512);
  ASSERT_CONTAINS(text, want);
  ASSERT_CONTAINS(text, "launch_node_ckpt_disk_reads_total{node=\"node\\\"1\","
                        "device=\"ckptdev\"} 100\n");
  ASSERT_CONTAINS(text, "launch_node_ckpt_disk_writes_total{node=\"node\\\"1\","
                        "device=\"ckptdev\"} 200\n");
  ASSERT_CONTAINS(text, "launch_node_ckpt_disk_io_seconds_total{node=\"node\\\"1\","
                        "device=\"ckptdev\"} 1.5\n");
  ASSERT(strstr(text, "device=\"other\"") == NULL);
  free(text);
  /* A dir not made yet: the device of its nearest ancestor. */
  snprintf(want, sizeof(want), "%s/not/yet", root);
  ASSERT_EQ(1, met_set_ckpt_dir(m, want));
  /* /proc: an anonymous device (as tmpfs, overlay): no disk series. */
  ASSERT_EQ(0, met_set_ckpt_dir(m, "/proc"));
  text = render(m);
  ASSERT(strstr(text, "launch_node_ckpt_disk_") == NULL);
  ASSERT_CONTAINS(text, "launch_node_numa_hit_pages_total{");
  free(text);
  /* No NUMA directory: no NUMA series, no error. */
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  ASSERT_EQ(0, system(cmd));
  text = render(m);
  ASSERT(strstr(text, "launch_node_numa_") == NULL);
  free(text);
  met_set_sysfs_root(m, "");
  printf("NUMA numastat and the checkpoint disk's diskstats from a fake root\n");
}

/* promtool check metrics on text, when promtool is installed: the format
 * and Prometheus' naming rules (units, _total on counters). */
static void promtool_check(const char *text) {
  FILE *p;
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    printf("promtool missing: the text is not checked by it\n");
    return;
  }
  ASSERT((p = popen("promtool check metrics", "w")) != NULL);
  fputs(text, p);
  ASSERT_EQ(0, pclose(p));
}

/* A scrape once the GPU sampler answered (its NVML starting may take
 * longer than one scrape waits): at most ~15 s of scrapes; at once when
 * there is no sampler (no launch_gpu_sampler_up). */
static char *render_ready(met_t *m) {
  char *text = render(m);
  for (int i = 0; i < 30 && strstr(text, "launch_gpu_sampler_up{") &&
                  !strstr(text, "launch_gpu_sampler_up{node=\"n\"} 1\n") &&
                  !strstr(text, "launch_gpu_sampler_up{node=\"node\\\"1\"} 1\n");
       i++) {
    free(text);
    met_refresh(m);
    usleep(100000);
    text = render(m);
  }
  return text;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* launch_gpu_sample_age_seconds in text, -1 when absent. */
static double sample_age(const char *text) {
  const char *k = "launch_gpu_sample_age_seconds{node=\"n\"} ";
  const char *p = strstr(text, k);
  return p ? strtod(p + strlen(k), NULL) : -1;
}

/* Wait until the sampler pid loaded the fake NVML, and a moment for its
 * init: a request sent then is read alone (not with the next one). */
static void nvml_loaded(pid_t pid) {
  char path[64], line[512];
  int found = 0;
  snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
  for (int i = 0; i < 1000 && !found; i++) {
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    while (!found && fgets(line, sizeof(line), f))
      found = strstr(line, "fake_nvml") != NULL;
    fclose(f);
    if (!found)
      usleep(10000);
  }
  ASSERT(found);
  usleep(200000);
}

/* The process is gone and reaped (not a zombie). */
static int gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

/* The GPU series from a fake NVML (fake_nvml.c), through the GPU sampler
 * (launch gpu-sampler, the launch binary LAUNCH_GPU_SAMPLER names): two
 * GPUs; ECC on GPU 0 only; XIDs 79, 48, 79 queued; clocks held by power
 * cap and HW thermal on GPU 0, idle on GPU 1. Then the sampler killed
 * (the scrape goes without, the child reaped), a late answer discarded,
 * one stopped after a fresh sample (served from the block, then up 0),
 * and one that hangs in NVML (the scrape does not wait for it). */
static void test_fake_nvml(void) {
#if defined(FAKE_NVML) && defined(LAUNCH_BIN_PATH)
  met_t *m;
  char *text;
  const char *g0 = "node=\"n\",gpu=\"0\"", *g1 = "node=\"n\",gpu=\"1\"";
  char want[300];
  pid_t pid;
  double t0, t1;
  ASSERT_EQ(0, setenv("LAUNCH_NVML_LIBRARY", FAKE_NVML, 1));
  /* No sampler named, and this program is not launch: no child (it
   * would run this test again), no series, no gauge. */
  ASSERT_EQ(0, unsetenv("LAUNCH_GPU_SAMPLER"));
  ASSERT_EQ(0, met_local("n", &m));
  ASSERT_EQ(0, met_sampler_pid(m));
  text = render(m);
  ASSERT(strstr(text, "launch_gpu_") == NULL);
  free(text);
  met_stop(m);
  ASSERT_EQ(0, setenv("LAUNCH_GPU_SAMPLER", LAUNCH_BIN_PATH, 1));
  ASSERT_EQ(0, met_local("n", &m));
  ASSERT((pid = met_sampler_pid(m)) > 0);
  text = render_ready(m);
#define HAS(fmt, lab)                                                  \
  do {                                                                 \
    snprintf(want, sizeof(want), fmt, lab);                            \
    ASSERT_CONTAINS(text, want);                                       \
  } while (0)
  HAS("launch_gpu_sampler_up{%s} 1\n", "node=\"n\"");
  ASSERT_CONTAINS(text, "# TYPE launch_gpu_sampler_up gauge\n");
  HAS("launch_gpu_utilization_ratio{%s} 0.97\n", g0);
  HAS("launch_gpu_utilization_ratio{%s} 0.12\n", g1);
  HAS("launch_gpu_power_watts{%s} 650.5\n", g0);
  HAS("launch_gpu_memory_total_bytes{%s} 85899345920\n", g1);
  HAS("launch_gpu_pcie_transmit_bytes_per_second{%s} 1536000\n", g0);
  HAS("launch_gpu_pcie_receive_bytes_per_second{%s} 256000\n", g0);
  HAS("launch_gpu_pcie_receive_bytes_per_second{%s} 1280000\n", g1);
  HAS("launch_gpu_ecc_errors_total{%s,type=\"corrected\",scope=\"volatile\"} "
      "5\n", g0);
  HAS("launch_gpu_ecc_errors_total{%s,type=\"uncorrected\",scope=\"aggregate\"}"
      " 10\n", g0);
  ASSERT(strstr(text, "launch_gpu_ecc_errors_total{node=\"n\",gpu=\"1\"") ==
         NULL); /* ECC off: no series */
  HAS("launch_gpu_xid_errors_total{%s,xid=\"79\"} 2\n", g0);
  HAS("launch_gpu_xid_errors_total{%s,xid=\"48\"} 1\n", g1);
  HAS("launch_gpu_throttle_reason{%s,reason=\"sw_power_cap\"} 1\n", g0);
  HAS("launch_gpu_throttle_reason{%s,reason=\"hw_thermal_slowdown\"} 1\n", g0);
  HAS("launch_gpu_throttle_reason{%s,reason=\"hw_slowdown\"} 0\n", g0);
  HAS("launch_gpu_throttle_reason{%s,reason=\"gpu_idle\"} 1\n", g1);
  HAS("launch_gpu_throttle_reason{%s,reason=\"sw_power_cap\"} 0\n", g1);
  ASSERT_CONTAINS(text, "# HELP launch_gpu_power_watts GPU power draw\n");
  promtool_check(text);
  free(text);
  /* The events were taken once: the counts stay, nothing counted twice. */
  met_refresh(m);
  text = render(m);
  HAS("launch_gpu_xid_errors_total{%s,xid=\"79\"} 2\n", g0);
  HAS("launch_gpu_xid_errors_total{%s,xid=\"48\"} 1\n", g1);
  free(text);
  printf("GPU series from a fake NVML through the sampler (pid %d): PCIe, "
         "ECC, XID, throttle reasons\n", (int)pid);
  /* kill -9: once it is reaped (by the loop's refresh, scraped or not),
   * a scrape has no GPU series and says so, though the block it gave is
   * still fresh: a dead sampler's samples are not served. */
  ASSERT_EQ(0, kill(pid, SIGKILL));
  for (int i = 0; i < 500 && met_sampler_pid(m) != 0; i++) {
    met_refresh(m);
    usleep(10000);
  }
  ASSERT_EQ(0, met_sampler_pid(m));
  ASSERT(gone(pid));
  text = render(m);
  HAS("launch_gpu_sampler_up{%s} 0\n", "node=\"n\"");
  ASSERT(strstr(text, "launch_gpu_utilization_ratio") == NULL);
  ASSERT_CONTAINS(text, "launch_node_memory_total_bytes{node=\"n\"} ");
  ASSERT(sample_age(text) >= 0 && sample_age(text) * 1000 < GS_FRESH_MS);
  free(text);
  met_stop(m);
  printf("sampler killed: reaped, launch_gpu_sampler_up 0, no GPU series\n");
  /* NVML blocks 1.5 s once: the first two scrapes go without (each asked:
   * no block yet); the answer to the first, late, is discarded by the
   * next scrape, which takes the second's (GPU 1's power grows by 1 W a
   * read: 90 W in the late one, 91 W in the next), fresh: served. */
  ASSERT_EQ(0, setenv("FAKE_NVML_HANG_MS", "1500", 1));
  ASSERT_EQ(0, setenv("FAKE_NVML_HANG_CALLS", "1", 1));
  ASSERT_EQ(0, met_local("n", &m));
  ASSERT_EQ(0, unsetenv("FAKE_NVML_HANG_MS"));
  ASSERT_EQ(0, unsetenv("FAKE_NVML_HANG_CALLS"));
  nvml_loaded(met_sampler_pid(m)); /* it reads the first request alone */
  for (int i = 0; i < 2; i++) {
    text = render(m);
    HAS("launch_gpu_sampler_up{%s} 0\n", "node=\"n\"");
    ASSERT(strstr(text, "launch_gpu_sample_age_seconds") == NULL);
    free(text);
  }
  usleep(1200000); /* both answers are in the socket */
  text = render(m);
  HAS("launch_gpu_sampler_up{%s} 1\n", "node=\"n\"");
  HAS("launch_gpu_power_watts{%s} 91\n", g1);
  free(text);
  /* The loop's prefetch brings the next sample; a scrape serves the
   * newest block, the same until then. */
  for (int i = 0; i < 100; i++) {
    text = render(m);
    HAS("launch_gpu_sampler_up{%s} 1\n", "node=\"n\"");
    if (strstr(text, "launch_gpu_power_watts{node=\"n\",gpu=\"1\"} 92\n"))
      break;
    HAS("launch_gpu_power_watts{%s} 91\n", g1);
    free(text);
    text = NULL;
    met_tick(m);
    usleep(50000);
  }
  ASSERT(text != NULL); /* 92 W came */
  free(text);
  met_stop(m);
  printf("a late answer (NVML blocked 1.5 s) discarded: the next scrape "
         "took the newest request's; the loop's prefetch the next\n");
  /* Hung after a fresh sample (SIGSTOP): a scrape serves the block at
   * once, up 1 with its age; once it is older than GS_FRESH_MS, a scrape
   * asks and goes without (up 0), the age still shown; resumed, it
   * answers again. */
  ASSERT_EQ(0, met_local("n", &m));
  ASSERT((pid = met_sampler_pid(m)) > 0);
  text = render_ready(m);
  HAS("launch_gpu_sampler_up{%s} 1\n", "node=\"n\"");
  free(text);
  ASSERT_EQ(0, kill(pid, SIGSTOP));
  t0 = now_s();
  text = render(m);
  t1 = now_s();
  HAS("launch_gpu_sampler_up{%s} 1\n", "node=\"n\"");
  HAS("launch_gpu_utilization_ratio{%s} 0.97\n", g0);
  ASSERT(sample_age(text) >= 0 && sample_age(text) * 1000 < GS_FRESH_MS);
  printf("sampler stopped after a fresh sample: scrape answered in %.3f s "
         "from the block, %.3f s old\n", t1 - t0, sample_age(text));
  free(text);
  usleep((GS_FRESH_MS + 200) * 1000);
  t0 = now_s();
  text = render(m);
  t1 = now_s();
  HAS("launch_gpu_sampler_up{%s} 0\n", "node=\"n\"");
  ASSERT(strstr(text, "launch_gpu_utilization_ratio") == NULL);
  ASSERT(sample_age(text) * 1000 > GS_FRESH_MS);
  printf("the block older than %d ms: the scrape asked (%.3f s), up 0, age "
         "%.3f s\n", GS_FRESH_MS, t1 - t0, sample_age(text));
  free(text);
  ASSERT_EQ(0, kill(pid, SIGCONT));
  text = render_ready(m);
  HAS("launch_gpu_sampler_up{%s} 1\n", "node=\"n\"");
  ASSERT(sample_age(text) * 1000 < GS_FRESH_MS);
  free(text);
  ASSERT_EQ(pid, met_sampler_pid(m));
  met_stop(m);
  ASSERT(gone(pid));
  printf("resumed: it answers again, the same sampler\n");
  /* NVML blocks for a minute: the scrape answers without it. */
  ASSERT_EQ(0, setenv("FAKE_NVML_HANG_MS", "60000", 1));
  ASSERT_EQ(0, met_local("n", &m));
  ASSERT_EQ(0, unsetenv("FAKE_NVML_HANG_MS"));
  ASSERT((pid = met_sampler_pid(m)) > 0);
  for (int i = 0; i < 2; i++) {
    t0 = now_s();
    text = render(m);
    t1 = now_s();
    HAS("launch_gpu_sampler_up{%s} 0\n", "node=\"n\"");
    ASSERT(strstr(text, "launch_gpu_utilization_ratio") == NULL);
    ASSERT_CONTAINS(text, "launch_node_memory_total_bytes{node=\"n\"} ");
    ASSERT(t1 - t0 < 30); /* not the minute NVML takes */
    free(text);
    printf("sampler hung in NVML: scrape %d answered in %.3f s, without GPU "
           "series\n", i + 1, t1 - t0);
  }
#undef HAS
  ASSERT_EQ(pid, met_sampler_pid(m)); /* hung, not dead: kept */
  met_stop(m);
  ASSERT(gone(pid));
  ASSERT_EQ(0, unsetenv("LAUNCH_NVML_LIBRARY"));
  ASSERT_EQ(0, unsetenv("LAUNCH_GPU_SAMPLER"));
  printf("met_stop ended the hung sampler (pid %d) and reaped it\n", (int)pid);
#endif
}

int main(void) {
  lu_buf_t b = LU_BUF_INIT;
  met_t *m;
  char esc[64], *text, *page;
  const char *want_gpu = getenv("LAUNCH_TEST_EXPECT_GPU");
#ifdef LAUNCH_BIN_PATH
  /* The GPU series come from `launch gpu-sampler`: this is not launch. */
  ASSERT_EQ(0, setenv("LAUNCH_GPU_SAMPLER", LAUNCH_BIN_PATH, 1));
#endif
  met_label_escape("a\"b\\c\nd", esc, sizeof(esc));
  ASSERT_STR_EQ("a\\\"b\\\\c\\nd", esc);
  met_family(&b, "launch_rank_loss", "gauge", "loss");
  met_sample(&b, "launch_rank_loss", "rank=\"0\"", NAN);
  met_sample(&b, "launch_rank_loss", "rank=\"1\"", 2.5);
  met_sample(&b, "launch_rank_loss", "rank=\"2\"", INFINITY);
  met_family(&b, "launch_job_restarts_total", "counter", "restarts");
  met_sample(&b, "launch_job_restarts_total", "", 3);
  {
    /* Every digit that matters: a byte counter past 1e15 (5.5 h of a
     * 400 Gb/s port) moves by 1, a value past 2^53 and a fraction read back
     * as they were; none that does not (0.1); no cast of a huge value. */
    lu_buf_t nb = LU_BUF_INIT;
    char *nums;
    met_sample(&nb, "a", "", 1500000000000001.0);
    met_sample(&nb, "b", "", 123456789.123);
    met_sample(&nb, "c", "", 0.1);
    met_sample(&nb, "d", "", 18446744073709551616.0 * 1024);
    met_sample(&nb, "e", "", 1e300);
    ASSERT_EQ(0, lu_buf_finish(&nb, &nums, NULL));
    ASSERT_STR_EQ("a 1500000000000001\nb 123456789.123\nc 0.1\n"
                  "d 1.888946593147858e+22\ne 1e+300\n", nums);
    free(nums);
  }
  ASSERT_EQ(0, lu_buf_finish(&b, &text, NULL));
  ASSERT_STR_EQ("# HELP launch_rank_loss loss\n"
                "# TYPE launch_rank_loss gauge\n"
                "launch_rank_loss{rank=\"0\"} NaN\n"
                "launch_rank_loss{rank=\"1\"} 2.5\n"
                "launch_rank_loss{rank=\"2\"} +Inf\n"
                "# HELP launch_job_restarts_total restarts\n"
                "# TYPE launch_job_restarts_total counter\n"
                "launch_job_restarts_total 3\n", text);
  ASSERT_EQ(0, met_local("node\"1", &m));
  met_publish(m, text); /* m owns it */
  ASSERT_EQ(0, lu_buf_finish(&b, &page, NULL)); /* empty */
  met_publish_page(m, page);
  text = render_ready(m);
  ASSERT(strncmp(text, "# HELP launch_rank_loss loss\n", 29) == 0);
  ASSERT_CONTAINS(text, "launch_node_memory_total_bytes{node=\"node\\\"1\"} ");
  ASSERT_CONTAINS(text, "launch_node_cpu_seconds_total{node=\"node\\\"1\","
                        "mode=\"idle\"} ");
  if (strstr(text, "launch_gpu_utilization_ratio{")) {
    ASSERT_CONTAINS(text, "launch_gpu_memory_total_bytes{node=\"node\\\"1\","
                          "gpu=\"0\"} ");
    printf("GPU series (NVML):\n");
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"))
      if (!strncmp(l, "launch_gpu_", 11))
        printf("  %s\n", l);
  } else {
    ASSERT(want_gpu == NULL || strcmp(want_gpu, "1") != 0);
    printf("no NVML or no GPU here: no GPU series, no error\n");
  }
  free(text);
  test_ib(m);
  test_numa_disk(m);
  text = render(m);
  promtool_check(text);
  free(text);
  test_fake_nvml();
  met_stop(m);
  met_stop(NULL);
  printf("test_metrics_text: ok\n");
  return 0;
}
