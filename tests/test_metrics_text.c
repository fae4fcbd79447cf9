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
  met_stop(m);
  met_stop(NULL);
  printf("test_metrics_text: ok\n");
  return 0;
}
