/* test_tcpstore_parse.c - the TCPStore request parser on golden byte
 * sequences of both numberings (reference/torchrun.md section 4): every op,
 * every truncation point, limits, unknown opcodes. */
#include "tcpstore.h"
#include "test.h"

static const ts_limits_t lim = {8192, 8u << 20, 128u * 1024, 16u << 20};

typedef struct { uint8_t b[512]; size_t n; } buf_t;

static void put(buf_t *b, const void *p, size_t n) {
  memcpy(b->b + b->n, p, n);
  b->n += n;
}
static void u8(buf_t *b, uint8_t v) { put(b, &v, 1); }
static void u32le(buf_t *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put(b, x, 4);
}
static void u64le(buf_t *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++)
    x[i] = (uint8_t)(v >> (8 * i));
  put(b, x, 8);
}
static void str(buf_t *b, const char *s) {
  u64le(b, strlen(s));
  put(b, s, strlen(s));
}

/* Parse b whole; also check that every strict prefix asks for more. */
static ts_req_t parse_all(int dialect, const buf_t *b) {
  ts_req_t r;
  size_t need;
  for (size_t i = 0; i < b->n; i++) {
    ASSERT_EQ(TS_NEED_MORE, ts_parse(dialect, b->b, i, &lim, &r, &need));
    /* a lower bound of the whole request: more than is there, never more
     * than the request (the server sizes its buffer by it) */
    ASSERT(need > i && need <= b->n);
  }
  ASSERT_EQ((ssize_t)b->n, ts_parse(dialect, b->b, b->n, &lim, &r, &need));
  ASSERT_EQ(b->n, r.size);
  return r;
}

static void test_v2_golden(void) {
  buf_t b = {{0}, 0};
  ts_req_t r;
  /* VALIDATE: the magic is CE F7 85 3C on the wire */
  u8(&b, 0); u32le(&b, TS_VALIDATION_MAGIC);
  ASSERT_MEM_EQ(b.b, "\x00\xce\xf7\x85\x3c", 5);
  r = parse_all(TS_DIALECT_V2, &b);
  ASSERT_EQ(TS_VALIDATE, r.op);
  ASSERT_EQ(TS_VALIDATION_MAGIC, r.u32);
  /* SET "/k" = "v1" */
  b.n = 0; u8(&b, 1); str(&b, "/k"); str(&b, "v1");
  r = parse_all(TS_DIALECT_V2, &b);
  ASSERT_EQ(TS_SET, r.op);
  ASSERT(r.klen == 2 && memcmp(r.key, "/k", 2) == 0);
  ASSERT(r.v1len == 2 && memcmp(r.v1, "v1", 2) == 0);
  /* COMPARE_SET key expected desired */
  b.n = 0; u8(&b, 2); str(&b, "/k"); str(&b, ""); str(&b, "new");
  r = parse_all(TS_DIALECT_V2, &b);
  ASSERT_EQ(TS_COMPARE_SET, r.op);
  ASSERT_EQ(0, r.v1len);
  ASSERT(r.v2len == 3 && memcmp(r.v2, "new", 3) == 0);
  /* GET, ADD (int64 little-endian, negative) */
  b.n = 0; u8(&b, 3); str(&b, "/k");
  ASSERT_EQ(TS_GET, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 4); str(&b, "/c"); u64le(&b, (uint64_t)-3);
  r = parse_all(TS_DIALECT_V2, &b);
  ASSERT_EQ(TS_ADD, r.op);
  ASSERT_EQ(-3, r.i64);
  /* CHECK / WAIT / MULTI_GET: u64 count + keys */
  for (uint8_t op = 5; op <= 10; op += 5) {
    const uint8_t *p;
    uint64_t l;
    b.n = 0; u8(&b, op); u64le(&b, 2); str(&b, "/x"); str(&b, "/yy");
    r = parse_all(TS_DIALECT_V2, &b);
    ASSERT_EQ(op, r.op);
    ASSERT_EQ(2, r.count);
    p = r.list;
    ASSERT(memcmp(ts_next_str(&p, &l), "/x", 2) == 0 && l == 2);
    ASSERT(memcmp(ts_next_str(&p, &l), "/yy", 3) == 0 && l == 3);
    ASSERT(p == b.b + b.n);
  }
  b.n = 0; u8(&b, 6); u64le(&b, 1); str(&b, "/w");
  ASSERT_EQ(TS_WAIT, parse_all(TS_DIALECT_V2, &b).op);
  /* GETNUMKEYS, DELETE_KEY, APPEND */
  b.n = 0; u8(&b, 7);
  ASSERT_EQ(TS_GETNUMKEYS, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 8); str(&b, "/k");
  ASSERT_EQ(TS_DELETE_KEY, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 9); str(&b, "/k"); str(&b, "more");
  ASSERT_EQ(TS_APPEND, parse_all(TS_DIALECT_V2, &b).op);
  /* MULTI_SET: int64 count of key/value pairs */
  b.n = 0; u8(&b, 11); u64le(&b, 2); str(&b, "/a"); str(&b, "1"); str(&b, "/b"); str(&b, "2");
  r = parse_all(TS_DIALECT_V2, &b);
  ASSERT_EQ(TS_MULTI_SET, r.op);
  ASSERT_EQ(2, r.count);
  /* CANCEL_WAIT, PING */
  b.n = 0; u8(&b, 12);
  ASSERT_EQ(TS_CANCEL_WAIT, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 13); u32le(&b, 4242);
  r = parse_all(TS_DIALECT_V2, &b);
  ASSERT_EQ(TS_PING, r.op);
  ASSERT_EQ(4242, r.u32);
  /* queues, list, barrier */
  b.n = 0; u8(&b, 14); str(&b, "/q"); str(&b, "item");
  ASSERT_EQ(TS_QUEUE_PUSH, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 15); str(&b, "/q");
  ASSERT_EQ(TS_QUEUE_POP, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 16); str(&b, "/q");
  ASSERT_EQ(TS_QUEUE_LEN, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 17);
  ASSERT_EQ(TS_LIST_KEYS, parse_all(TS_DIALECT_V2, &b).op);
  b.n = 0; u8(&b, 18); str(&b, "/bar"); u64le(&b, 8);
  r = parse_all(TS_DIALECT_V2, &b);
  ASSERT_EQ(TS_BARRIER, r.op);
  ASSERT_EQ(8, r.i64);
  /* 19 and up do not exist */
  b.n = 0; u8(&b, 19);
  ASSERT_EQ(TS_BAD_OP, ts_parse(TS_DIALECT_V2, b.b, b.n, &lim, &r, NULL));
}

static void test_v1_golden(void) {
  buf_t b = {{0}, 0};
  ts_req_t r;
  /* 1.13: SET=0 ... WATCH_KEY=7, DELETE_KEY=8; no VALIDATE */
  static const int map[] = {TS_SET, TS_COMPARE_SET, TS_GET, TS_ADD, TS_CHECK,
                            TS_WAIT, TS_GETNUMKEYS, TS_WATCH_KEY, TS_DELETE_KEY};
  b.n = 0; u8(&b, 0); str(&b, "/rawkey"); str(&b, "5");
  r = parse_all(TS_DIALECT_V1, &b);
  ASSERT_EQ(TS_SET, r.op);
  b.n = 0; u8(&b, 1); str(&b, "/k"); str(&b, "a"); str(&b, "b");
  ASSERT_EQ(map[1], parse_all(TS_DIALECT_V1, &b).op);
  b.n = 0; u8(&b, 2); str(&b, "/k");
  ASSERT_EQ(map[2], parse_all(TS_DIALECT_V1, &b).op);
  b.n = 0; u8(&b, 3); str(&b, "/k"); u64le(&b, 5);
  ASSERT_EQ(map[3], parse_all(TS_DIALECT_V1, &b).op);
  b.n = 0; u8(&b, 4); u64le(&b, 1); str(&b, "/k");
  ASSERT_EQ(map[4], parse_all(TS_DIALECT_V1, &b).op);
  b.n = 0; u8(&b, 5); u64le(&b, 1); str(&b, "/k");
  ASSERT_EQ(map[5], parse_all(TS_DIALECT_V1, &b).op);
  b.n = 0; u8(&b, 6);
  ASSERT_EQ(map[6], parse_all(TS_DIALECT_V1, &b).op);
  b.n = 0; u8(&b, 7); str(&b, "/k");
  ASSERT_EQ(map[7], parse_all(TS_DIALECT_V1, &b).op);
  b.n = 0; u8(&b, 8); str(&b, "/k");
  ASSERT_EQ(map[8], parse_all(TS_DIALECT_V1, &b).op);
  /* the 1.13 server closed the connection on opcode 9 */
  b.n = 0; u8(&b, 9); str(&b, "/k");
  ASSERT_EQ(TS_BAD_OP, ts_parse(TS_DIALECT_V1, b.b, b.n, &lim, &r, NULL));
}

static void test_limits(void) {
  buf_t b = {{0}, 0};
  ts_req_t r;
  ts_limits_t small = {4, 8, 2, 64};
  /* key of 5 bytes > 4: refused as soon as the length is read */
  u8(&b, 1); u64le(&b, 5);
  ASSERT_EQ(TS_TOO_BIG, ts_parse(TS_DIALECT_V2, b.b, b.n, &small, &r, NULL));
  ASSERT_EQ(TS_LIMIT_KEY, r.limit);
  ASSERT_EQ(5, r.over);
  /* a 4 GiB key length */
  b.n = 0; u8(&b, 3); u64le(&b, 1ull << 32);
  ASSERT_EQ(TS_TOO_BIG, ts_parse(TS_DIALECT_V2, b.b, b.n, &lim, &r, NULL));
  ASSERT_EQ(TS_GET, r.op);
  ASSERT_EQ(TS_LIMIT_KEY, r.limit);
  /* value over 8 bytes */
  b.n = 0; u8(&b, 1); str(&b, "/k"); u64le(&b, 9);
  ASSERT_EQ(TS_TOO_BIG, ts_parse(TS_DIALECT_V2, b.b, b.n, &small, &r, NULL));
  ASSERT_EQ(TS_LIMIT_VALUE, r.limit);
  ASSERT_EQ(9, r.over);
  /* 3 keys > 2 */
  b.n = 0; u8(&b, 6); u64le(&b, 3);
  ASSERT_EQ(TS_TOO_BIG, ts_parse(TS_DIALECT_V2, b.b, b.n, &small, &r, NULL));
  ASSERT_EQ(TS_LIMIT_KEYS, r.limit);
  ASSERT_EQ(3, r.over);
  /* MULTI_SET with a negative int64 count */
  b.n = 0; u8(&b, 11); u64le(&b, (uint64_t)-1);
  ASSERT_EQ(TS_TOO_BIG, ts_parse(TS_DIALECT_V2, b.b, b.n, &lim, &r, NULL));
  /* many small keys whose total exceeds max_request */
  b.n = 0; u8(&b, 5); u64le(&b, 2); str(&b, "/abc"); str(&b, "/abc");
  {
    ts_limits_t tight = {8, 8, 10, 20};
    ASSERT_EQ(TS_TOO_BIG, ts_parse(TS_DIALECT_V2, b.b, b.n, &tight, &r, NULL));
    ASSERT_EQ(TS_LIMIT_REQUEST, r.limit);
    ASSERT(r.over > 20);
  }
  /* a value within max_value in a request over max_request */
  b.n = 0; u8(&b, 1); str(&b, "/k"); u64le(&b, 30);
  {
    ts_limits_t frame = {8, 64, 10, 20};
    ASSERT_EQ(TS_TOO_BIG, ts_parse(TS_DIALECT_V2, b.b, b.n, &frame, &r, NULL));
    ASSERT_EQ(TS_LIMIT_REQUEST, r.limit);
    ASSERT_EQ(30, r.over);
  }
}

static void test_pipelined(void) {
  buf_t b = {{0}, 0};
  ts_req_t r;
  size_t off = 0;
  int ops[4], n = 0;
  u8(&b, 0); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, 13); u32le(&b, 1);
  u8(&b, 1); str(&b, "/k"); str(&b, "v");
  u8(&b, 3); str(&b, "/k");
  while (off < b.n) {
    ssize_t k = ts_parse(TS_DIALECT_V2, b.b + off, b.n - off, &lim, &r, NULL);
    ASSERT(k > 0);
    ops[n++] = r.op;
    off += (size_t)k;
  }
  ASSERT_EQ(4, n);
  ASSERT_EQ(TS_VALIDATE, ops[0]);
  ASSERT_EQ(TS_PING, ops[1]);
  ASSERT_EQ(TS_SET, ops[2]);
  ASSERT_EQ(TS_GET, ops[3]);
}

int main(void) {
  test_v2_golden();
  test_v1_golden();
  test_limits();
  test_pipelined();
  printf("test_tcpstore_parse: ok\n");
  return 0;
}
