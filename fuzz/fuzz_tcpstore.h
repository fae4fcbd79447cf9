/* fuzz_tcpstore.h - the body of the two TCPStore targets, fuzz_tcpstore_v1.c
 * (PyTorch 1.13 numbering) and fuzz_tcpstore_v2.c (>= 2.2), which define
 * FUZZ_TS_DIALECT and include this file.
 *
 * The input is the byte stream of one TCPStore connection. ts_parse() runs
 * over it request after request, as srv__ts_input() does, once with the
 * server's default limits and once with tight ones, so that both the
 * accepting and the refusing paths are reached. Invariants checked:
 * - a parsed request is never longer than the bytes given, its size is the
 *   bytes consumed, and it stays within max_request;
 * - its op exists in the dialect, and the opcode byte maps to it;
 * - key and values lie inside the request and within their limits;
 * - a key list holds `count` strings (pairs for MULTI_SET), each inside the
 *   request and within its limit, walked with ts_next_str(), and it ends
 *   exactly where the request ends;
 * - every strict prefix of a parsed request asks for more bytes (a request
 *   split across reads parses the same), the lower bound of the bytes
 *   needed never exceeds the real size, and trailing bytes change nothing;
 * - the request is parsed identically from an unaligned copy;
 * - a refused one names the limit (key, value, keys, request) it is over,
 *   and what it says is over that limit is. */
#ifndef FUZZ_TCPSTORE_H
#define FUZZ_TCPSTORE_H

#include "fuzz.h"
#include "tcpstore.h"

/* The limits srv_new() derives from SRV_CONFIG_INIT. */
static const ts_limits_t lim_server = {8192, 8u << 20, 128u * 1024, 16u << 20};
/* Tight limits, so that short inputs reach every TOO_BIG path; max_request
 * is below what a COMPARE_SET of the largest key and values takes. */
static const ts_limits_t lim_tight = {16, 64, 4, 120};

static int op_in_dialect(int op) {
  if (FUZZ_TS_DIALECT == TS_DIALECT_V1)
    return op == TS_SET || op == TS_COMPARE_SET || op == TS_GET ||
           op == TS_ADD || op == TS_CHECK || op == TS_WAIT ||
           op == TS_GETNUMKEYS || op == TS_WATCH_KEY || op == TS_DELETE_KEY;
  return op >= TS_VALIDATE && op <= TS_BARRIER;
}

static int op_of_byte(uint8_t b) {
  static const int v1[] = {TS_SET,        TS_COMPARE_SET, TS_GET,
                           TS_ADD,        TS_CHECK,       TS_WAIT,
                           TS_GETNUMKEYS, TS_WATCH_KEY,   TS_DELETE_KEY};
  if (FUZZ_TS_DIALECT == TS_DIALECT_V1)
    return b < sizeof(v1) / sizeof(v1[0]) ? v1[b] : -1;
  return b <= TS_BARRIER ? b : -1;
}

static int is_list_op(int op) {
  return op == TS_CHECK || op == TS_WAIT || op == TS_MULTI_GET ||
         op == TS_MULTI_SET;
}

static void same_req(const ts_req_t *a, const uint8_t *abuf, const ts_req_t *b,
                     const uint8_t *bbuf) {
#define SAME_PTR(f)                                                            \
  FUZZ_CHECK((a->f == NULL && b->f == NULL) ||                                 \
             (a->f != NULL && b->f != NULL && a->f - abuf == b->f - bbuf))
  FUZZ_CHECK(a->op == b->op && a->klen == b->klen && a->v1len == b->v1len &&
             a->v2len == b->v2len && a->i64 == b->i64 && a->u32 == b->u32 &&
             a->count == b->count && a->size == b->size);
  SAME_PTR(key);
  SAME_PTR(v1);
  SAME_PTR(v2);
  SAME_PTR(list);
#undef SAME_PTR
}

/* Check one successfully parsed request of k bytes at buf. */
static void check_req(const uint8_t *buf, size_t k, const ts_req_t *r,
                      const ts_limits_t *lim) {
  FUZZ_CHECK(r->size == k);
  FUZZ_CHECK(k <= lim->max_request);
  FUZZ_CHECK(op_in_dialect(r->op));
  FUZZ_CHECK(op_of_byte(buf[0]) == r->op);
  FUZZ_CHECK(fuzz_within(r->key, r->klen, buf, k));
  FUZZ_CHECK(fuzz_within(r->v1, r->v1len, buf, k));
  FUZZ_CHECK(fuzz_within(r->v2, r->v2len, buf, k));
  FUZZ_CHECK(r->klen <= lim->max_key);
  FUZZ_CHECK(r->v1len <= lim->max_value && r->v2len <= lim->max_value);
  if (r->key)
    fuzz_touch(r->key, (size_t)r->klen);
  if (r->v1)
    fuzz_touch(r->v1, (size_t)r->v1len);
  if (r->v2)
    fuzz_touch(r->v2, (size_t)r->v2len);
  if (is_list_op(r->op)) {
    const uint8_t *p = r->list;
    uint64_t strings = r->op == TS_MULTI_SET ? 2 * r->count : r->count;
    FUZZ_CHECK(r->count <= lim->max_keys);
    FUZZ_CHECK(p != NULL && fuzz_within(p, 0, buf, k));
    for (uint64_t i = 0; i < strings; i++) {
      uint64_t len;
      const uint8_t *s;
      /* The length itself must be inside the request before it is read. */
      FUZZ_CHECK(fuzz_within(p, 8, buf, k));
      s = ts_next_str(&p, &len);
      FUZZ_CHECK(fuzz_within(s, len, buf, k));
      FUZZ_CHECK(len <= ((r->op == TS_MULTI_SET && i % 2) ? lim->max_value
                                                          : lim->max_key));
      fuzz_touch(s, (size_t)len);
    }
    FUZZ_CHECK(p == buf + k);
  } else {
    FUZZ_CHECK(r->count == 0 && r->list == NULL);
  }
  ts_op_name(r->op);
}

/* A request of k bytes parsed whole: its prefixes and extensions must
 * agree. Costs a few parses, on a copy of exactly the bytes given. */
static void check_split(const uint8_t *buf, size_t k, const ts_req_t *r,
                        const ts_limits_t *lim) {
  size_t cuts[4] = {1, k / 2, k > 1 ? k - 1 : 0, k > 9 ? 9 : 0};
  uint8_t *copy, *ext;
  ts_req_t r2;
  size_t need = 0;
  ssize_t k2;

  for (int i = 0; i < 4; i++) {
    size_t c = cuts[i];
    if (c == 0 || c >= k)
      continue;
    copy = fuzz_dup(buf, c);
    need = 0;
    k2 = ts_parse(FUZZ_TS_DIALECT, copy, c, lim, &r2, &need);
    FUZZ_CHECK(k2 == TS_NEED_MORE);
    FUZZ_CHECK(need >= 1 && need <= k);
    free(copy);
  }
  /* Unaligned, exact-size copy, then the same bytes with a tail. */
  copy = fuzz_dup(buf, k);
  k2 = ts_parse(FUZZ_TS_DIALECT, copy, k, lim, &r2, NULL);
  FUZZ_CHECK(k2 == (ssize_t)k);
  same_req(r, buf, &r2, copy);
  free(copy);
  ext = malloc(k + 3);
  FUZZ_CHECK(ext != NULL);
  memcpy(ext + 1, buf, k);
  memset(ext + 1 + k, 0xff, 2);
  k2 = ts_parse(FUZZ_TS_DIALECT, ext + 1, k + 2, lim, &r2, NULL);
  FUZZ_CHECK(k2 == (ssize_t)k);
  same_req(r, buf, &r2, ext + 1);
  free(ext);
}

static void run_stream(const uint8_t *data, size_t size,
                       const ts_limits_t *lim) {
  uint8_t *buf = fuzz_dup(data, size);
  size_t off = 0;
  while (off < size) {
    ts_req_t r;
    size_t need = 0;
    ssize_t k = ts_parse(FUZZ_TS_DIALECT, buf + off, size - off, lim, &r,
                         &need);
    if (k == TS_NEED_MORE) {
      FUZZ_CHECK(need >= 1);
      break;
    }
    if (k == TS_BAD_OP) {
      FUZZ_CHECK(op_of_byte(buf[off]) < 0);
      break; /* the server closes the connection */
    }
    if (k == TS_TOO_BIG) {
      /* It names the limit, and what is over it is over it. */
      FUZZ_CHECK(op_in_dialect(r.op));
      FUZZ_CHECK(r.limit != TS_LIMIT_NONE);
      FUZZ_CHECK(r.limit != TS_LIMIT_KEY || r.over > lim->max_key);
      FUZZ_CHECK(r.limit != TS_LIMIT_VALUE || r.over > lim->max_value);
      FUZZ_CHECK(r.limit != TS_LIMIT_KEYS || r.over > lim->max_keys);
      FUZZ_CHECK(r.limit != TS_LIMIT_REQUEST || r.over > lim->max_request);
      break;
    }
    FUZZ_CHECK(r.limit == TS_LIMIT_NONE);
    FUZZ_CHECK(k > 0 && (size_t)k <= size - off);
    check_req(buf + off, (size_t)k, &r, lim);
    check_split(buf + off, (size_t)k, &r, lim);
    off += (size_t)k;
  }
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ts_req_t r;
  size_t need = 0;
  /* An empty buffer needs one byte. */
  FUZZ_CHECK(ts_parse(FUZZ_TS_DIALECT, data, 0, &lim_server, &r, &need) ==
                 TS_NEED_MORE &&
             need == 1);
  run_stream(data, size, &lim_server);
  run_stream(data, size, &lim_tight);
  return 0;
}

#endif /* FUZZ_TCPSTORE_H */
