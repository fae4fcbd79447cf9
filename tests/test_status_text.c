/* test_status_text.c - what `launch status` prints of values other nodes
 * wrote: the ETA column (status__fmt_duration) for any double, as a step
 * time of 1e12 s from a rank's progress makes it. */
#include <math.h>
#include <string.h>

#include "cmd_vals.h"
#include "test.h"

static void expect(double s, const char *want) {
  char out[16]; /* the ETA column's buffer in cmd_status.c */
  memset(out, 'x', sizeof(out));
  status__fmt_duration(s, out, sizeof(out));
  ASSERT_STR_EQ(want, out);
}

int main(void) {
  expect(0, "0s");
  expect(42.4, "42s");
  expect(303, "5m03s");
  expect(3 * 3600 + 7 * 60 + 5, "3h07m");
  expect(99999.0 * 3600 + 59 * 60, "99999h59m");
  /* past int: (int)(s / 3600) was undefined (gcc printed -2147483648h) */
  expect(1e12 * 1000, ">99999h");
  expect(100000.0 * 3600, ">99999h");
  expect(INFINITY, ">99999h");
  expect(-1, "-");
  expect(NAN, "-");
  printf("test_status_text: ok\n");
  return 0;
}
