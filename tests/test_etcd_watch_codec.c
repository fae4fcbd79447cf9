/* test_etcd_watch_codec.c - etcd_watch_decode() on the lines etcd's v3
 * JSON gateway writes for POST /v3/watch (fuzz/corpus/etcd_watch holds the
 * same shapes): what the backend thread reads from each. */
#include "etcd.h"
#include "lu.h"
#include "rdzv.h"
#include "test.h"

static int dec(const char *s, etcd_watch_msg_t *m, char *err, size_t n) {
  return etcd_watch_decode(s, strlen(s), m, err, n);
}

static void test_created_and_events(void) {
  static etcd_watch_msg_t m;
  char err[256];
  ASSERT_EQ(0, dec("{\"result\":{\"header\":{\"revision\":\"5\"},"
                   "\"created\":true}}", &m, err, sizeof(err)));
  ASSERT(m.created && !m.canceled && m.revision == 5 && m.nevents == 0);
  /* /launch/j/host = "127.0.0.1 29500 node1", then deleted */
  ASSERT_EQ(0, dec("{\"result\":{\"header\":{\"revision\":\"7\"},\"events\":["
                   "{\"kv\":{\"key\":\"L2xhdW5jaC9qL2hvc3Q=\",\"create_revision"
                   "\":\"6\",\"mod_revision\":\"6\",\"value\":\"MTI3LjAuMC4xI"
                   "DI5NTAwIG5vZGUx\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":"
                   "\"L2xhdW5jaC9qL2hvc3Q=\",\"mod_revision\":\"7\"}}]}}", &m,
                   err, sizeof(err)));
  ASSERT_EQ(7, m.revision);
  ASSERT_EQ(2, m.nevents);
  ASSERT(!m.more && !m.created);
  ASSERT_STR_EQ("/launch/j/host", m.events[0].key);
  ASSERT_STR_EQ("127.0.0.1 29500 node1", m.events[0].value);
  ASSERT(!m.events[0].deleted && m.events[0].create_rev == 6);
  ASSERT(m.events[1].deleted && m.events[1].mod_rev == 7);
  ASSERT_EQ(0, m.events[1].create_rev);
  ASSERT_STR_EQ("", m.events[1].value);
}

static void test_more_than_kept(void) {
  static etcd_watch_msg_t m;
  char line[4096], err[256];
  size_t o = (size_t)snprintf(line, sizeof(line), "{\"result\":{\"events\":[");
  for (int i = 0; i < ETCD_WATCH_MAX_EVENTS + 1; i++)
    o += (size_t)snprintf(line + o, sizeof(line) - o, "%s{\"kv\":{\"key\":"
                          "\"YQ==\",\"mod_revision\":\"%d\"}}", i ? "," : "",
                          i + 1);
  snprintf(line + o, sizeof(line) - o, "]}}");
  ASSERT_EQ(0, dec(line, &m, err, sizeof(err)));
  ASSERT(m.more && m.nevents == ETCD_WATCH_MAX_EVENTS);
}

/* Keys of any length: one over 255 bytes (a long job id and host name:
 * launch's own) is kept; one too long to keep is decoded and left out
 * (both refused the line, and the watch fell back to polling). */
static void test_long_keys(void) {
  static etcd_watch_msg_t m;
  static char key[3000], b64[4200], line[9000];
  char err[256];
  const size_t lens[] = {700, ETCD_MAX_KEY - 1, ETCD_MAX_KEY, 2999};
  for (size_t i = 0; i < LU_ARRAY_SIZE(lens); i++) {
    memset(key, 'k', lens[i]);
    key[0] = '/';
    key[lens[i]] = '\0';
    ASSERT(etcd_b64(key, lens[i], b64, sizeof(b64)) > 0);
    snprintf(line, sizeof(line), "{\"result\":{\"events\":[{\"type\":"
             "\"DELETE\",\"kv\":{\"key\":\"%s\",\"mod_revision\":\"9\"}}]}}",
             b64);
    ASSERT_EQ(0, dec(line, &m, err, sizeof(err)));
    ASSERT_EQ(1, m.nevents);
    ASSERT_EQ(lens[i], m.events[0].key_len);
    ASSERT(m.events[0].deleted && m.events[0].mod_rev == 9);
    if (lens[i] < ETCD_MAX_KEY)
      ASSERT_STR_EQ(key, m.events[0].key);
    else
      ASSERT_STR_EQ("", m.events[0].key);
  }
}

static void test_cancel_error_and_refusals(void) {
  static etcd_watch_msg_t m;
  char err[256];
  ASSERT_EQ(0, dec("{\"result\":{\"canceled\":true,\"compact_revision\":\"8\""
                   "}}", &m, err, sizeof(err)));
  ASSERT(m.canceled && m.compact_rev == 8);
  ASSERT_EQ(0, dec("{\"error\":{\"grpc_code\":14,\"http_code\":503,"
                   "\"message\":\"etcdserver: no leader\"}}", &m, err,
                   sizeof(err)));
  ASSERT(m.error && m.code == 14);
  ASSERT_STR_EQ("etcdserver: no leader", m.message);
  ASSERT_EQ(RDZV_EPROTO, dec("{\"result\":{\"events\":[{\"type\":\"EXPIRE\","
                             "\"kv\":{\"key\":\"YQ==\"}}]}}", &m, err,
                             sizeof(err)));
  ASSERT_CONTAINS(err, "PUT or DELETE");
  ASSERT_EQ(RDZV_EPROTO, dec("{\"result\":{\"events\":[{\"kv\":{\"key\":\"\""
                             "}}]}}", &m, err, sizeof(err)));
  ASSERT_CONTAINS(err, "\"key\"");
  ASSERT_EQ(RDZV_EPROTO, dec("{\"result\":{\"header\":{\"revision\":\"x\"}}}",
                             &m, err, sizeof(err)));
  ASSERT_CONTAINS(err, "revision");
  ASSERT_EQ(RDZV_EPROTO, dec("{\"result\":", &m, err, sizeof(err)));
  ASSERT_CONTAINS(err, "not JSON");
  ASSERT_EQ(RDZV_EPROTO, dec("[]", &m, err, sizeof(err)));
}

int main(void) {
  test_created_and_events();
  test_more_than_kept();
  test_long_keys();
  test_cancel_error_and_refusals();
  printf("test_etcd_watch_codec: ok\n");
  return 0;
}
