/* test_hostlist.c - Slurm's compressed node facts (util/hostlist.c): host
 * lists as SLURM_JOB_NODELIST writes them (zero padding, several bracket
 * groups, comma lists) expand to the names in Slurm's order; malformed
 * lists are refused saying what is wrong and where; task counts per node
 * ("2(x3),1") give each node's count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu.h"
#include "test.h"

/* list expands to want, space-separated. */
static void expect(const char *list, const char *want) {
  char **h = NULL, err[256] = "", got[4096] = "";
  size_t n = 0;
  int rc = lu_hostlist_expand_err(list, 1000, &h, &n, err, sizeof(err));
  if (rc != 0)
    TEST_FAIL("'%s': rc %d (%s), want '%s'", list, rc, err, want);
  for (size_t i = 0; i < n; i++) {
    if (i)
      strcat(got, " ");
    strcat(got, h[i]);
  }
  lu_hostlist_free(h, n);
  if (strcmp(got, want) != 0)
    TEST_FAIL("'%s' expanded to '%s', want '%s'", list, got, want);
}

/* list is refused with an error containing frag. */
static void refuse(const char *list, int want_rc, const char *frag) {
  char **h = NULL, err[256] = "";
  size_t n = 0;
  int rc = lu_hostlist_expand_err(list, 1000, &h, &n, err, sizeof(err));
  if (rc != want_rc)
    TEST_FAIL("'%s': rc %d, want %d (%s)", list, rc, want_rc, err);
  ASSERT_CONTAINS(err, frag);
}

static void test_expand(void) {
  expect("gpu01", "gpu01");
  expect("gpu[01-04,07]", "gpu01 gpu02 gpu03 gpu04 gpu07");
  expect("linux[0000-0002]", "linux0000 linux0001 linux0002");
  expect("n[8-11]", "n8 n9 n10 n11");           /* no padding without zeros */
  expect("n[08-11]", "n08 n09 n10 n11");        /* the lower bound's width */
  expect("lx[15,18,32-33]", "lx15 lx18 lx32 lx33");
  expect("rack[0-1]_blade[0-2]",                /* cartesian, last fastest */
         "rack0_blade0 rack0_blade1 rack0_blade2 rack1_blade0 rack1_blade1 "
         "rack1_blade2");
  expect("a[1-2]b", "a1b a2b");
  expect("login1,gpu[1-2],io", "login1 gpu1 gpu2 io");
  expect("gpu[1-2],gpu[5]", "gpu1 gpu2 gpu5");
  expect("127.0.0.[1-3]", "127.0.0.1 127.0.0.2 127.0.0.3");
  expect("job-trainer-0.job,job-trainer-1.job",
         "job-trainer-0.job job-trainer-1.job");
  expect("a,b,", "a b"); /* a trailing comma, as some scripts write */
}

static void test_malformed(void) {
  refuse("", RDZV_EINVAL, "empty");
  refuse("gpu[01-", RDZV_EINVAL, "never closed");
  refuse("gpu[01-04", RDZV_EINVAL, "never closed");
  refuse("gpu01]", RDZV_EINVAL, "']' without '['");
  refuse("gpu[]", RDZV_EINVAL, "empty brackets");
  refuse("gpu[[1-2]]", RDZV_EINVAL, "do not nest");
  refuse("gpu[a-b]", RDZV_EINVAL, "numbers and '-' only");
  refuse("gpu[4-1]", RDZV_EINVAL, "goes down");
  refuse("gpu[1-]", RDZV_EINVAL, "number is missing");
  refuse("gpu[,1]", RDZV_EINVAL, "number is missing");
  refuse("gpu[1,]", RDZV_EINVAL, "missing before ']'");
  refuse("gpu[1-2-3]", RDZV_EINVAL, "numbers and '-' only");
  refuse("a,,b", RDZV_EINVAL, "empty host name");
  refuse(",a", RDZV_EINVAL, "empty host name at character 1");
  refuse("gpu01 gpu02", RDZV_EINVAL, "blank");
  refuse("n[0-99999999]", RDZV_ETOOBIG, "more than 1000 hosts");
  refuse("n[0-9][0-9][0-9][0-9]", RDZV_ETOOBIG, "more than 1000 hosts");
  refuse("n[1-99999999999999999999]", RDZV_EINVAL, "too large");
  /* the place is named: character 4 is the '[' */
  refuse("gpu[01-", RDZV_EINVAL, "at character 4");
}

static void tasks(const char *spec, int node, int want, int want_nodes) {
  char err[256] = "";
  int k, nn;
  if (lu_tasks_per_node(spec, node, &k, &nn, err, sizeof(err)) != 0)
    TEST_FAIL("'%s' node %d: %s", spec, node, err);
  if (k != want || nn != want_nodes)
    TEST_FAIL("'%s' node %d: %d tasks of %d nodes, want %d of %d", spec, node,
              k, nn, want, want_nodes);
}

static void tasks_refused(const char *spec, int node, const char *frag) {
  char err[256] = "";
  int k;
  if (lu_tasks_per_node(spec, node, &k, NULL, err, sizeof(err)) == 0)
    TEST_FAIL("'%s' node %d accepted", spec, node);
  ASSERT_CONTAINS(err, frag);
}

static void test_tasks_per_node(void) {
  tasks("8", 0, 8, 1);
  tasks("2(x3),1", 0, 2, 4);
  tasks("2(x3),1", 2, 2, 4);
  tasks("2(x3),1", 3, 1, 4);
  tasks("1,2(x2),4", 3, 4, 4);
  tasks("8(x4)", 3, 8, 4);
  tasks_refused("2(x3),1", 4, "there is no node 4");
  tasks_refused("", 0, "empty");
  tasks_refused("2(3)", 0, "(xN)");
  tasks_refused("2(x0)", 0, "(xN)");
  tasks_refused("2(x3", 0, "(xN)");
  tasks_refused("0", 0, "task count");
  tasks_refused("2,,1", 1, "task count");
  tasks_refused("2,", 0, "','");
  tasks_refused("x", 0, "task count");
}

int main(void) {
  test_expand();
  test_malformed();
  test_tasks_per_node();
  printf("test_hostlist: ok\n");
  return 0;
}
