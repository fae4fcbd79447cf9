/* test_page_text.c - the agent's HTML page (page.c) without a server: the
 * curve's data-points spell each loss as the metrics do (metrics.c,
 * docs/monitoring.md#page), NaN, +Inf and -Inf apart, so that a loss that
 * overflowed is not read back as one that was never a number. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu_buf.h"
#include "page.h"
#include "test.h"

int main(void) {
  page_t *p = page_new();
  lu_buf_t b = LU_BUF_INIT;
  page_info_t in = {"job", "node", "running", 0, 0, 0.0, 0, -1};
  page_rank_t r = {0, 5, -1, 1.0, NAN, INFINITY, NAN, NAN};
  char *html;
  ASSERT(p != NULL);
  page_point(p, 1, 2.5);
  page_point(p, 2, INFINITY);
  page_point(p, 3, -INFINITY);
  page_point(p, 4, NAN);
  page_point(p, 5, 2.0);
  page_render(p, &in, &r, 1, &b);
  ASSERT_EQ(0, lu_buf_finish(&b, &html, NULL));
  ASSERT_CONTAINS(html, "data-points=\"1:2.5 2:+Inf 3:-Inf 4:NaN 5:2 \"");
  /* the table too */
  ASSERT_CONTAINS(html, "<td>+Inf</td>");
  free(html);
  page_free(p);
  printf("test_page_text: ok\n");
  return 0;
}
