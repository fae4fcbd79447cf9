/* test_aff_cpulist.c - the cpulist syntax of --cpu-bind and LAUNCH_CPUS:
 * parse, format back, per-rank lists, and the messages bad input gets. */
#include "aff.h"
#include "test.h"

static void roundtrip(const char *in, const char *want) {
  aff_cpuset_t s;
  char buf[256], err[256];
  ASSERT_EQ(0, aff_cpulist_parse(in, &s, err, sizeof(err)));
  aff_cpulist_format(&s, buf, sizeof(buf));
  ASSERT_STR_EQ(buf, want);
}

static void bad(const char *in, const char *says) {
  aff_cpuset_t s;
  char err[256] = "";
  ASSERT_EQ(RDZV_EINVAL, aff_cpulist_parse(in, &s, err, sizeof(err)));
  ASSERT_CONTAINS(err, says);
}

static void test_parse_format(void) {
  aff_cpuset_t s;
  roundtrip("0-9,20-29", "0-9,20-29");
  roundtrip("3", "3");
  roundtrip("", "");
  roundtrip(" 1 , 2,3 ,7", "1-3,7"); /* adjacent items merge */
  roundtrip("5,4,3", "3-5");          /* order does not matter */
  roundtrip("0-3,2-5", "0-5");        /* overlaps merge */
  roundtrip("4095", "4095");
  ASSERT_EQ(0, aff_cpulist_parse("0-9,20-29", &s, NULL, 0));
  ASSERT_EQ(20, aff_cpuset_count(&s));
  ASSERT(aff_cpuset_isset(&s, 29) && !aff_cpuset_isset(&s, 30));
  ASSERT_EQ(0, aff_cpuset_first(&s));
  ASSERT_EQ(20, aff_cpuset_next(&s, 9));
  ASSERT_EQ(-1, aff_cpuset_next(&s, 29));
}

static void test_errors(void) {
  bad("5-3", "runs backwards; write 3-5");
  bad("0-", "has no end");
  bad("a", "expected a number");
  bad("1,,2", "expected a number");
  bad("1;2", "unexpected ';'");
  bad("0-4096", "too large");
  bad("99999999999999999999", "too large");
  bad("1-2-3", "unexpected '-'");
}

static void test_truncated_format(void) {
  aff_cpuset_t s;
  char small[6];
  size_t need;
  aff_cpuset_zero(&s);
  for (int c = 0; c < 64; c += 2)
    aff_cpuset_set(&s, c);
  need = aff_cpulist_format(&s, small, sizeof(small));
  ASSERT(need > sizeof(small));
  ASSERT_EQ(strlen(small) < sizeof(small), 1); /* NUL-terminated */
}

static void test_per_rank_lists(void) {
  aff_cpuset_t sets[4];
  char err[256] = "";
  char buf[64];
  ASSERT_EQ(3, aff_cpulists_parse("0-3:4-7:8,10", sets, 4, err, sizeof(err)));
  aff_cpulist_format(&sets[2], buf, sizeof(buf));
  ASSERT_STR_EQ(buf, "8,10");
  ASSERT_EQ(1, aff_cpulists_parse("2", sets, 4, err, sizeof(err)));
  /* ';' is a common guess: say which separator to use */
  ASSERT_EQ(RDZV_EINVAL, aff_cpulists_parse("0-3;4-7", sets, 4, err, sizeof(err)));
  ASSERT_CONTAINS(err, "with ':'");
  ASSERT_EQ(RDZV_EINVAL, aff_cpulists_parse("0-3::4", sets, 4, err, sizeof(err)));
  ASSERT_CONTAINS(err, "CPU list 1 of '0-3::4' is empty");
  ASSERT_EQ(RDZV_EINVAL, aff_cpulists_parse("0-3:x", sets, 4, err, sizeof(err)));
  ASSERT_CONTAINS(err, "local rank 1");
  ASSERT_EQ(RDZV_EINVAL, aff_cpulists_parse("0:1:2:3:4", sets, 4, err, sizeof(err)));
  ASSERT_CONTAINS(err, "more than 4");
  ASSERT_EQ(RDZV_EINVAL, aff_cpulists_parse("", sets, 4, err, sizeof(err)));
}

static void test_policy_parse(void) {
  aff_policy_t *p = malloc(sizeof(*p));
  char err[512];
  ASSERT(p != NULL);
  ASSERT_EQ(0, aff_policy_parse(NULL, NULL, p, err, sizeof(err)));
  ASSERT_EQ(AFF_CPU_NONE, p->cpu);
  ASSERT_EQ(AFF_MEM_NONE, p->mem);
  ASSERT_EQ(0, aff_policy_parse("cores", "local", p, err, sizeof(err)));
  ASSERT_EQ(AFF_CPU_CORES, p->cpu);
  ASSERT_EQ(AFF_MEM_LOCAL, p->mem);
  ASSERT_EQ(0, aff_policy_parse("0-1:2-3", "preferred", p, err, sizeof(err)));
  ASSERT_EQ(AFF_CPU_LIST, p->cpu);
  ASSERT_EQ(2, p->nlists);
  ASSERT_EQ(RDZV_EINVAL, aff_policy_parse("socket", NULL, p, err, sizeof(err)));
  ASSERT_CONTAINS(err, "use none, numa");
  ASSERT_EQ(RDZV_EINVAL, aff_policy_parse("numa", "interleave", p, err, sizeof(err)));
  ASSERT_CONTAINS(err, "--mem-bind: 'interleave'");
  ASSERT_EQ(RDZV_EINVAL, aff_policy_parse("0-3;4-7", NULL, p, err, sizeof(err)));
  ASSERT_CONTAINS(err, "--cpu-bind:");
  free(p);
}

int main(void) {
  int fds = test_fd_count();
  test_parse_format();
  test_errors();
  test_truncated_format();
  test_per_rank_lists();
  test_policy_parse();
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  return 0;
}
