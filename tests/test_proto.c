/* test_proto.c - native framing: encode/decode round trips, the structure
 * scan that rejects malformed or oversized input before allocating, and the
 * HELLO proof (HMAC-SHA256). */
#include "proto.h"
#include "test.h"

static const proto_limits_t lim = PROTO_LIMITS_DEFAULT;

static void test_roundtrip(void) {
  proto_enc_t e;
  proto_msg_t m;
  const char *p;
  size_t n;
  int64_t v;
  const msgpack_object *items;
  uint32_t cnt;
  proto_enc_init(&e);
  proto_enc_begin(&e, 6);
  msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e.pk, 42);
  msgpack_pack_int64(&e.pk, PROTO_OP_SET);
  proto_pack_str(&e.pk, "key");
  proto_pack_bytes(&e.pk, "\0\1\2", 3);
  msgpack_pack_array(&e.pk, 2);
  msgpack_pack_int64(&e.pk, -5);
  proto_pack_str(&e.pk, "x");
  ASSERT_EQ(0, proto_enc_end(&e));
  ASSERT_EQ(e.len - PROTO_HDR, proto_get_len((const uint8_t *)e.data));
  ASSERT_EQ(0, proto_decode((const uint8_t *)e.data + PROTO_HDR,
                            e.len - PROTO_HDR, &lim, &m));
  ASSERT_EQ(PROTO_REQUEST, m.kind);
  ASSERT_EQ(42, m.id);
  ASSERT_EQ(PROTO_OP_SET, m.op);
  ASSERT_EQ(3, m.nargs);
  ASSERT_EQ(0, proto_arg_bytes(&m, 0, &p, &n));
  ASSERT(n == 3 && memcmp(p, "key", 3) == 0);
  ASSERT_EQ(0, proto_arg_bytes(&m, 1, &p, &n));
  ASSERT(n == 3 && memcmp(p, "\0\1\2", 3) == 0);
  ASSERT_EQ(RDZV_EPROTO, proto_arg_i64(&m, 0, &v));
  ASSERT_EQ(0, proto_arg_array(&m, 2, &items, &cnt));
  ASSERT_EQ(2, cnt);
  ASSERT_EQ(0, proto_obj_i64(&items[0], &v));
  ASSERT_EQ(-5, v);
  ASSERT_EQ(RDZV_EPROTO, proto_arg_bytes(&m, 3, &p, &n)); /* out of range */
  proto_msg_free(&m);
  proto_enc_destroy(&e);
}

/* The scan must refuse these without allocating. */
static void test_scan_rejects(void) {
  proto_limits_t small = {1024, 16, 3};
  static const uint8_t truncated_str[] = {0x93, 0x00, 0x01, 0xa5, 'a', 'b'};
  static const uint8_t trailing[] = {0x90, 0x00};
  static const uint8_t never_used[] = {0x91, 0xc1};
  /* array32 claiming 4 billion elements in 5 bytes */
  static const uint8_t array_bomb[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  /* bin32 claiming 4 GiB */
  static const uint8_t bin_bomb[] = {0xc6, 0xff, 0xff, 0xff, 0xff, 0x00};
  /* nesting deeper than max_depth */
  static const uint8_t deep[] = {0x91, 0x91, 0x91, 0x91, 0x91, 0x00};
  /* 20 objects > max_items 16 */
  uint8_t many[21];
  many[0] = 0xdc;
  ASSERT_EQ(RDZV_EPROTO, proto_scan(truncated_str, sizeof(truncated_str), &lim));
  ASSERT_EQ(RDZV_EPROTO, proto_scan(trailing, sizeof(trailing), &lim));
  ASSERT_EQ(RDZV_EPROTO, proto_scan(never_used, sizeof(never_used), &lim));
  ASSERT_EQ(RDZV_EPROTO, proto_scan(array_bomb, sizeof(array_bomb), &lim));
  ASSERT_EQ(RDZV_EPROTO, proto_scan(bin_bomb, sizeof(bin_bomb), &lim));
  ASSERT_EQ(RDZV_ETOOBIG, proto_scan(deep, sizeof(deep), &small));
  ASSERT_EQ(0, proto_scan(deep + 2, sizeof(deep) - 2, &small));
  ASSERT_EQ(RDZV_EPROTO, proto_scan(NULL, 0, &lim));
  memset(many, 0, sizeof(many));
  many[0] = 0xdc;
  many[1] = 0;
  many[2] = 18; /* array16 of 18 fixints */
  ASSERT_EQ(RDZV_ETOOBIG, proto_scan(many, 3 + 18, &small));
  {
    uint8_t big[2048] = {0};
    ASSERT_EQ(RDZV_ETOOBIG, proto_scan(big, sizeof(big), &small));
  }
}

static void test_decode_shape(void) {
  proto_msg_t m;
  /* not an array */
  static const uint8_t scalar[] = {0x05};
  /* array of 2: too short for [kind, id, op] */
  static const uint8_t two[] = {0x92, 0x00, 0x01};
  /* kind 7 does not exist */
  static const uint8_t badkind[] = {0x93, 0x07, 0x01, 0x02};
  /* id negative */
  static const uint8_t badid[] = {0x93, 0x00, 0xff, 0x02};
  /* op as a string */
  static const uint8_t badop[] = {0x93, 0x00, 0x01, 0xa1, 'x'};
  static const uint8_t ok[] = {0x93, 0x00, 0x01, 0x02};
  ASSERT_EQ(RDZV_EPROTO, proto_decode(scalar, sizeof(scalar), &lim, &m));
  ASSERT_EQ(RDZV_EPROTO, proto_decode(two, sizeof(two), &lim, &m));
  ASSERT_EQ(RDZV_EPROTO, proto_decode(badkind, sizeof(badkind), &lim, &m));
  ASSERT_EQ(RDZV_EPROTO, proto_decode(badid, sizeof(badid), &lim, &m));
  ASSERT_EQ(RDZV_EPROTO, proto_decode(badop, sizeof(badop), &lim, &m));
  ASSERT_EQ(0, proto_decode(ok, sizeof(ok), &lim, &m));
  ASSERT_EQ(0, m.nargs);
  proto_msg_free(&m);
}

/* A request whose first argument is a list of keys decodes in one pass
 * (proto_decode_keylist) to what proto_decode gives: the same header, the
 * same keys in order (str, bin, empty), the same other arguments; other
 * shapes and frames over the limits are left to proto_decode. */
static void test_keylist(void) {
  proto_enc_t e;
  proto_msg_t m, k;
  proto_limits_t small = lim;
  const msgpack_object *items;
  const uint8_t *pos;
  uint32_t n;
  int64_t v;
  proto_enc_init(&e);
  proto_enc_begin_msg(&e, 2, PROTO_REQUEST, 77, PROTO_OP_MGET);
  msgpack_pack_array(&e.pk, 300);
  for (int i = 0; i < 300; i++) {
    char key[16];
    snprintf(key, sizeof(key), "key/%d", i);
    if (i == 5)
      proto_pack_str(&e.pk, "");
    else if (i % 2)
      proto_pack_bytes(&e.pk, key, strlen(key));
    else
      proto_pack_str(&e.pk, key);
  }
  msgpack_pack_int64(&e.pk, -3);
  ASSERT_EQ(0, proto_enc_end(&e));
  ASSERT_EQ(0, proto_decode((uint8_t *)e.data + PROTO_HDR, e.len - PROTO_HDR, &lim, &m));
  ASSERT_EQ(0, proto_decode_keylist((uint8_t *)e.data + PROTO_HDR, e.len - PROTO_HDR, &lim, &k));
  ASSERT_EQ(PROTO_REQUEST, k.kind);
  ASSERT_EQ(77, k.id);
  ASSERT_EQ(PROTO_OP_MGET, k.op);
  ASSERT_EQ(2, k.nargs);
  ASSERT_EQ(300, k.nkeys);
  ASSERT_EQ(0, proto_arg_i64(&k, 1, &v));
  ASSERT_EQ(-3, v);
  ASSERT_EQ(0, proto_arg_array(&m, 0, &items, &n));
  ASSERT_EQ(300, n);
  pos = k.keys;
  for (uint32_t i = 0; i < n; i++) {
    const char *p, *q;
    size_t pl, ql;
    proto_next_bytes(&pos, &p, &pl);
    ASSERT_EQ(0, proto_obj_bytes(&items[i], &q, &ql));
    ASSERT(p != NULL);
    ASSERT_EQ(ql, pl);
    ASSERT(memcmp(p, q, pl) == 0);
  }
  ASSERT(pos == (const uint8_t *)e.data + e.len - 1); /* then the -3 */
  /* proto_decode into a message that held a key list (the server's
   * frame on the stack): no key list left behind, or a CHECK of a bare
   * key (not a list: a flat frame) would walk the old frame's keys, or a
   * garbage pointer. */
  {
    static const uint8_t check[] = {0x94, 0x00, 0x02, 0x05, 0xa1, 'z'};
    ASSERT_EQ(0, proto_decode(check, sizeof(check), &lim, &k));
    ASSERT_EQ(PROTO_OP_CHECK, k.op);
    ASSERT(k.keys == NULL);
    ASSERT_EQ(0, k.nkeys);
    ASSERT_EQ(RDZV_EPROTO, proto_arg_array(&k, 0, &items, &n));
    proto_msg_free(&k);
  }
  /* more items than the limit: proto_decode's to refuse */
  small.max_items = 200;
  ASSERT_EQ(RDZV_EPROTO, proto_decode_keylist((uint8_t *)e.data + PROTO_HDR, e.len - PROTO_HDR, &small, &k));
  ASSERT_EQ(RDZV_ETOOBIG, proto_decode((uint8_t *)e.data + PROTO_HDR, e.len - PROTO_HDR, &small, &k));
  proto_msg_free(&m);
  proto_enc_destroy(&e);
  /* a list with an integer in it, a frame without a list, a cut list */
  {
    static const uint8_t mixed[] = {0x94, 0x00, 0x01, 0x0c, 0x92, 0xa1, 'a', 0x01};
    static const uint8_t nolist[] = {0x94, 0x00, 0x01, 0x0c, 0xa1, 'a'};
    static const uint8_t cut[] = {0x94, 0x00, 0x01, 0x0c, 0x93, 0xa1, 'a'};
    ASSERT_EQ(RDZV_EPROTO, proto_decode_keylist(mixed, sizeof(mixed), &lim, &k));
    ASSERT_EQ(0, proto_decode(mixed, sizeof(mixed), &lim, &m));
    proto_msg_free(&m);
    ASSERT_EQ(RDZV_EPROTO, proto_decode_keylist(nolist, sizeof(nolist), &lim, &k));
    ASSERT_EQ(RDZV_EPROTO, proto_decode_keylist(cut, sizeof(cut), &lim, &k));
  }
}

static void test_mac(void) {
  uint8_t a[32], b[32], c[32], d[32];
  uint8_t nonce[PROTO_NONCE_LEN];
  memset(nonce, 7, sizeof(nonce));
  ASSERT_EQ(0, proto_mac("secret", 6, "rdzv-client", nonce, sizeof(nonce),
                         "job", "agent", a));
  ASSERT_EQ(0, proto_mac("secret", 6, "rdzv-client", nonce, sizeof(nonce),
                         "job", "agent", b));
  ASSERT(proto_mac_equal(a, b, 32));
  /* the token, the label, the job and the role each change the proof */
  ASSERT_EQ(0, proto_mac("secreT", 6, "rdzv-client", nonce, sizeof(nonce),
                         "job", "agent", c));
  ASSERT(!proto_mac_equal(a, c, 32));
  ASSERT_EQ(0, proto_mac("secret", 6, "rdzv-server", nonce, sizeof(nonce),
                         "job", "agent", c));
  ASSERT(!proto_mac_equal(a, c, 32));
  ASSERT_EQ(0, proto_mac("secret", 6, "rdzv-client", nonce, sizeof(nonce),
                         "jo", "bagent", d));
  ASSERT(!proto_mac_equal(a, d, 32)); /* fields are length-prefixed */
  nonce[0] ^= 1;
  ASSERT_EQ(0, proto_mac("secret", 6, "rdzv-client", nonce, sizeof(nonce),
                         "job", "agent", c));
  ASSERT(!proto_mac_equal(a, c, 32));
}

static void test_names(void) {
  ASSERT_STR_EQ("multi_get", proto_op_name(PROTO_OP_MGET));
  ASSERT_STR_EQ("unknown", proto_op_name(999));
  ASSERT_STR_EQ("RDZV_ENOKEY", rdzv_err_name(RDZV_ENOKEY));
  ASSERT_STR_EQ("ETIMEDOUT", rdzv_err_name(-ETIMEDOUT));
  ASSERT_CONTAINS(rdzv_strerror(RDZV_EAUTH), "token");
  ASSERT_CONTAINS(rdzv_strerror(-ECONNREFUSED), "refused");
}

/* A message header written in one piece (proto_enc_begin_msg) is byte for
 * byte what msgpack-c's packer writes, at every width boundary, and
 * decodes back to the same kind, id and op. */
static void test_begin_msg(void) {
  static const uint64_t ids[] = {0, 1, 127, 128, 255, 256, 65535, 65536,
                                 UINT32_MAX, (uint64_t)UINT32_MAX + 1,
                                 UINT64_MAX};
  static const int64_t ops[] = {0, 1, 127, 128, 65536, -1, -32, -33, -128,
                                -129, -32768, -32769, INT32_MIN,
                                (int64_t)INT32_MIN - 1, INT64_MIN, INT64_MAX};
  static const uint32_t nargs[] = {0, 2, 12, 13, 65532, 65533};
  proto_limits_t dlim = PROTO_LIMITS_DEFAULT;
  static uint8_t nils[65533];
  memset(nils, 0xc0, sizeof(nils));
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
    for (size_t j = 0; j < sizeof(ops) / sizeof(ops[0]); j++)
      for (size_t k = 0; k < sizeof(nargs) / sizeof(nargs[0]); k++) {
        proto_enc_t a, b;
        proto_msg_t m;
        int kind = (int)((i + j) % 3);
        proto_enc_init(&a);
        proto_enc_init(&b);
        proto_enc_begin_msg(&a, nargs[k], kind, ids[i], ops[j]);
        proto_enc_begin(&b, 3 + nargs[k]);
        msgpack_pack_uint8(&b.pk, (uint8_t)kind);
        msgpack_pack_uint64(&b.pk, ids[i]);
        msgpack_pack_int64(&b.pk, ops[j]);
        /* nargs nils (0xc0), appended as raw bytes */
        ASSERT_OK(proto_enc_raw(&a, nils, nargs[k]));
        ASSERT_OK(proto_enc_raw(&b, nils, nargs[k]));
        ASSERT_OK(proto_enc_end(&a));
        ASSERT_OK(proto_enc_end(&b));
        ASSERT_EQ(b.len, a.len);
        ASSERT_MEM_EQ(a.data, b.data, a.len);
        ASSERT_OK(proto_decode((const uint8_t *)a.data + PROTO_HDR,
                               a.len - PROTO_HDR, &dlim, &m));
        ASSERT_EQ(kind, m.kind);
        ASSERT(m.id == ids[i] && m.op == ops[j] && m.nargs == nargs[k]);
        proto_msg_free(&m);
        proto_enc_destroy(&a);
        proto_enc_destroy(&b);
      }
}

/* The header of a frame too large to decode, from its first bytes. */
static void test_peek(void) {
  uint64_t id = 0;
  int64_t op = 0;
  /* [0, 7, SET, ...] */
  static const uint8_t a[] = {0x95, 0x00, 0x07, 0x03, 0xa1, 'k'};
  /* array32, uint8 kind, uint64 id, int8 op -1 */
  static const uint8_t b[] = {0xdd, 0, 0, 0, 5, 0xcc, 0x00, 0xcf, 0, 0,
                              0, 1, 0, 0, 0, 2, 0xd0, 0xff};
  ASSERT_EQ(0, proto_peek_request(a, sizeof(a), &id, &op));
  ASSERT_EQ(7, id);
  ASSERT_EQ(PROTO_OP_SET, op);
  for (size_t n = 0; n < 4; n++)
    ASSERT_EQ(PROTO_KL_MORE, proto_peek_request(a, n, &id, &op));
  ASSERT_EQ(0, proto_peek_request(b, sizeof(b), &id, &op));
  ASSERT_EQ(((uint64_t)1 << 32) + 2, id);
  ASSERT_EQ(-1, op);
  for (size_t n = 0; n < sizeof(b); n++)
    ASSERT_EQ(PROTO_KL_MORE, proto_peek_request(b, n, &id, &op));
  /* not requests: a reply, a short array, not an array, a negative id */
  ASSERT_EQ(RDZV_EPROTO, proto_peek_request((const uint8_t[]){0x93, 0x01, 0x07,
                                                              0x03}, 4, &id, &op));
  ASSERT_EQ(RDZV_EPROTO, proto_peek_request((const uint8_t[]){0x92, 0x00, 0x07},
                                            3, &id, &op));
  ASSERT_EQ(RDZV_EPROTO, proto_peek_request((const uint8_t[]){0xc1}, 1, &id, &op));
  ASSERT_EQ(RDZV_EPROTO, proto_peek_request((const uint8_t[]){0x93, 0x00, 0xff,
                                                              0x03}, 4, &id, &op));
  ASSERT_EQ(RDZV_EPROTO, proto_peek_request((const uint8_t[]){0x93, 0x00, 0x01,
                                                              0xa1}, 4, &id, &op));
}

int main(void) {
  test_begin_msg();
  test_roundtrip();
  test_scan_rejects();
  test_decode_shape();
  test_keylist();
  test_mac();
  test_names();
  test_peek();
  printf("test_proto: ok\n");
  return 0;
}
