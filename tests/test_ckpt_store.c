/* test_ckpt_store.c - launch's checkpoints in the job's store
 * (checkpoint/ck_store.h): the keys that agents of one job must spell
 * alike, a node's view packed as the codec's VIEW map and read back as
 * the same steps and shards as the text form gives, verdicts, and the
 * refusal of views another node could not have written, each with a
 * message saying what is wrong. */
#include <stdlib.h>
#include <string.h>

#include "ck_int.h"
#include "msg.h"
#include "test.h"

static void test_keys(void) {
  char k[CK_KEY_MAX];
  ck_key_view(k, sizeof(k), 3, 2);
  ASSERT_STR_EQ("launch/ckpt/g3/view/2", k);
  ck_key_verdict(k, sizeof(k), 3, 1, 255);
  ASSERT_STR_EQ("launch/ckpt/g3/v1/255", k);
  ck_key_rolled(k, sizeof(k), 7, 0);
  ASSERT_STR_EQ("launch/ckpt/g7/rolled", k);
  ck_key_rolled(k, sizeof(k), 7, 1);
  ASSERT_STR_EQ("launch/ckpt/g7/rolled_all", k);
  ck_store_key(k, sizeof(k), 7, 300, "r5");
  ASSERT_STR_EQ("launch/ckpt/g7/s300/r5", k);
  /* the longest: every number at its widest */
  ck_store_key(k, sizeof(k), INT64_MAX, INT64_MAX, "r2147483647");
  ASSERT(strlen(k) < sizeof(k) - 1);
}

static void same_steps(const ckpt_have_t *a, size_t na, const ckpt_have_t *b,
                       size_t nb) {
  ASSERT_EQ(na, nb);
  for (size_t i = 0; i < na; i++) {
    ASSERT_EQ(a[i].step, b[i].step);
    ASSERT_EQ(a[i].world_size, b[i].world_size);
    ASSERT_EQ(a[i].replicated, b[i].replicated);
    ASSERT_EQ(a[i].ranks == NULL, b[i].ranks == NULL);
    if (a[i].ranks)
      ASSERT_MEM_EQ(a[i].ranks, b[i].ranks, ((size_t)a[i].world_size + 7) / 8);
  }
}

static void test_view(void) {
  unsigned char part[1] = {0x4f}, all[1] = {0xff}, none[1] = {0};
  ckpt_step_t st[4];
  ckpt_scan_t s;
  ckpt_have_t *h;
  ck_view_t v;
  char *buf, *text, err[300];
  size_t len, n;
  memset(st, 0, sizeof(st));
  memset(&s, 0, sizeof(s));
  st[0] = (ckpt_step_t){.step = 300, .world_size = 8, .have = part,
                        .state = CKPT_STEP_INCOMPLETE};
  st[1] = (ckpt_step_t){.step = 200, .world_size = 8, .have = all,
                        .replicated = 1, .state = CKPT_STEP_COMPLETE};
  st[2] = (ckpt_step_t){.step = 100, .world_size = 8, .have = none,
                        .state = CKPT_STEP_CORRUPT};
  st[3] = (ckpt_step_t){.step = 50, .world_size = 4,
                        .replicated = CKPT_REPL_MULTIPLE,
                        .state = CKPT_STEP_COMPLETE};
  s.layout = CKPT_LAYOUT_LAUNCH;
  s.steps = st;
  s.nsteps = 4;
  ASSERT_OK(ck_view_pack(&s, "node007", 4, 4, &buf, &len));
  ASSERT_OK(ck_view_unpack(buf, len, &v, err, sizeof(err)));
  free(buf);
  ASSERT_STR_EQ("node007", v.host);
  ASSERT_EQ(4, v.first);
  ASSERT_EQ(4, v.nranks);
  ASSERT_EQ(3, v.nsteps); /* step 100: no good shard, left out */
  ASSERT_EQ(0x4f, v.steps[0].ranks[0]);
  ASSERT(v.steps[1].ranks == NULL && v.steps[1].replicated == 1);
  ASSERT_EQ(CKPT_REPL_MULTIPLE, v.steps[2].replicated);
  /* the same steps as the text form of the same scan */
  ASSERT_OK(ckpt_view_encode(&s, &text));
  ASSERT_OK(ckpt_view_decode(text, strlen(text), &h, &n));
  free(text);
  same_steps(h, n, v.steps, v.nsteps);
  ckpt_view_free(h, n);
  ckpt_view_free(v.steps, v.nsteps);
  /* no checkpoint directory yet: a view without steps */
  ASSERT_OK(ck_view_pack(NULL, "h", 0, 1, &buf, &len));
  ASSERT_OK(ck_view_unpack(buf, len, &v, err, sizeof(err)));
  free(buf);
  ASSERT_EQ(0, v.nsteps);
  ASSERT(v.steps == NULL);
}

/* A view map built by hand, as another node (or anything) might. */
static int unpack_one(const char *host, int64_t first, int64_t step,
                      int64_t world, int64_t repl, const char *ranks,
                      char *err, size_t errlen) {
  msg_ckpt_view_t m;
  msg_ckpt_step_t st;
  ck_view_t v;
  char *buf;
  size_t len;
  int rc;
  msg_ckpt_view_init(&m);
  msg_ckpt_step_init(&st);
  lu_strlcpy(m.host, host, sizeof(m.host));
  m.first = first;
  m.nranks = 1;
  st.step = step;
  st.world_size = world;
  st.replicated = repl;
  st.ranks = (char *)ranks;
  m.steps = &st;
  m.nsteps = 1;
  ASSERT_OK(msg_ckpt_view_encode(&m, &buf, &len));
  err[0] = '\0';
  rc = ck_view_unpack(buf, len, &v, err, errlen);
  free(buf);
  if (rc == 0)
    ckpt_view_free(v.steps, v.nsteps);
  else
    ASSERT(v.steps == NULL && v.nsteps == 0);
  return rc;
}

static void test_view_refused(void) {
  static const struct {
    const char *host;
    int64_t first, step, world, repl;
    const char *ranks, *says;
  } bad[] = {
      {"h", 0, -1, 4, 0, "*", "negative step"},
      {"h", 0, 1, 4, 3, "*", "replication"},
      {"h", 0, 1, (1 << 20) + 1, 0, "*", "world size"},
      {"h", 0, 1, 4, 0, "3-1", "ranges below its world size 4"},
      {"h", 0, 1, 4, 0, "0-4", "ranges below its world size 4"},
      {"h", 0, 1, 0, 0, "0", "ranges below its world size 0"},
      {"h", 0, 1, 4, 0, NULL, "no ranks"},
      {"", 0, 1, 4, 0, "*", "no host name"},
      {"h", -1, 1, 4, 0, "*", "ranks outside"},
  };
  char err[300];
  for (size_t i = 0; i < LU_ARRAY_SIZE(bad); i++) {
    int rc = unpack_one(bad[i].host, bad[i].first, bad[i].step, bad[i].world,
                        bad[i].repl, bad[i].ranks, err, sizeof(err));
    if (rc != CKPT_EFORMAT)
      TEST_FAIL("view %zu accepted (rc %d)", i, rc);
    ASSERT_CONTAINS(err, bad[i].says);
  }
  ASSERT_OK(unpack_one("h", 0, 1, 4, 0, "0-1,3", err, sizeof(err)));
  /* the text form of earlier releases, and bytes that are no map */
  {
    ck_view_t v;
    const char *text = "0 2 h2\n15 4 1 *\n";
    ASSERT_EQ(CKPT_EFORMAT, ck_view_unpack(text, strlen(text), &v, err,
                                           sizeof(err)));
    ASSERT_CONTAINS(err, "VIEW");
    ASSERT_EQ(CKPT_EFORMAT, ck_view_unpack("", 0, &v, err, sizeof(err)));
    ASSERT_EQ(CKPT_EFORMAT, ck_view_unpack("\x81\xa4host", 6, &v, err,
                                           sizeof(err)));
  }
}

static void test_verdict(void) {
  char *buf, problem[256];
  size_t len;
  int ok;
  ASSERT_OK(ck_verdict_pack(NULL, &buf, &len));
  ASSERT_OK(ck_verdict_unpack(buf, len, &ok, problem, sizeof(problem)));
  free(buf);
  ASSERT(ok && problem[0] == '\0');
  ASSERT_OK(ck_verdict_pack("rank-3.bin: SHA-256 differs", &buf, &len));
  ASSERT_OK(ck_verdict_unpack(buf, len, &ok, problem, sizeof(problem)));
  free(buf);
  ASSERT(!ok);
  ASSERT_STR_EQ("rank-3.bin: SHA-256 differs", problem);
  /* "bad PROBLEM", the text of earlier releases: refused, not taken as ok */
  ASSERT_EQ(CKPT_EFORMAT, ck_verdict_unpack("bad x", 5, &ok, problem,
                                            sizeof(problem)));
  ASSERT(!ok);
  ASSERT_CONTAINS(problem, "VERDICT");
}

int main(void) {
  test_keys();
  test_view();
  test_view_refused();
  test_verdict();
  printf("ok\n");
  return 0;
}
