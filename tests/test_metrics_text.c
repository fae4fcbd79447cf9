/* test_metrics_text.c - the Prometheus text the agent serves (metrics.c),
 * without a server: HELP and TYPE once per family, label values escaped,
 * NaN and infinities spelled as Prometheus reads them, integers without a
 * fraction, the job's text handed over whole, the node's series (CPU and
 * memory from /proc). GPUs: NVML's series when NVML and a GPU are there
 * (LAUNCH_TEST_EXPECT_GPU=1 demands them: the GPU machine), else none and
 * no error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu_buf.h"
#include "metrics.h"
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

static void test_ib(met_t *m) {
  char root[] = "/tmp/launch-ib-XXXXXX", cmd[200], *text;
  lu_buf_t b = LU_BUF_INIT;
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
  met_render(m, &b);
  ASSERT_EQ(0, lu_buf_finish(&b, &text, NULL));
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
  met_render(m, &b); /* no IB: no series, no error */
  ASSERT_EQ(0, lu_buf_finish(&b, &text, NULL));
  ASSERT(strstr(text, "launch_ib_") == NULL);
  free(text);
  printf("IB/RoCE ports from a fake sysfs: up, rate, byte counters\n");
}

int main(void) {
  lu_buf_t b = LU_BUF_INIT;
  met_t *m;
  char esc[64], *text, *page;
  const char *want_gpu = getenv("LAUNCH_TEST_EXPECT_GPU");
  met_label_escape("a\"b\\c\nd", esc, sizeof(esc));
  ASSERT_STR_EQ("a\\\"b\\\\c\\nd", esc);
  met_family(&b, "launch_rank_loss", "gauge", "loss");
  met_sample(&b, "launch_rank_loss", "rank=\"0\"", NAN);
  met_sample(&b, "launch_rank_loss", "rank=\"1\"", 2.5);
  met_sample(&b, "launch_rank_loss", "rank=\"2\"", INFINITY);
  met_family(&b, "launch_job_restarts_total", "counter", "restarts");
  met_sample(&b, "launch_job_restarts_total", "", 3);
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
  met_render(m, &b);
  ASSERT_EQ(0, lu_buf_finish(&b, &text, NULL));
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
  met_stop(m);
  met_stop(NULL);
  printf("test_metrics_text: ok\n");
  return 0;
}
