/* tcpstore.c - PyTorch TCPStore protocol: the request parser (pure; the
 * handlers are in srv_tcpstore.c). Wire facts:
 * docs/protocol.md. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tcpstore.h"

/* 1.13 numbering -> canonical op. */
static const int v1_ops[] = {TS_SET,        TS_COMPARE_SET, TS_GET,
                             TS_ADD,        TS_CHECK,       TS_WAIT,
                             TS_GETNUMKEYS, TS_WATCH_KEY,   TS_DELETE_KEY};

const char *ts_op_name(int op) {
  static const char *const names[] = {
      "VALIDATE",   "SET",         "COMPARE_SET", "GET",       "ADD",
      "CHECK",      "WAIT",        "GETNUMKEYS",  "DELETE_KEY", "APPEND",
      "MULTI_GET",  "MULTI_SET",   "CANCEL_WAIT", "PING",      "QUEUE_PUSH",
      "QUEUE_POP",  "QUEUE_LEN",   "LIST_KEYS",   "BARRIER"};
  if (op == TS_WATCH_KEY)
    return "WATCH_KEY";
  if (op >= 0 && op < (int)(sizeof(names) / sizeof(names[0])))
    return names[op];
  return "UNKNOWN";
}

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}

/* The parse cursor: fails with NEED_MORE or TOO_BIG, never reads past n. */
enum { CUR_OK = 0, CUR_MORE = 1, CUR_BIG = 2 };

typedef struct cur_s {
  const uint8_t *b;
  size_t n, pos;
  const ts_limits_t *lim;
  int err; /* CUR_* */
  size_t want; /* CUR_MORE: the bytes the failed read needed in all */
  int limit;    /* CUR_BIG: TS_LIMIT_* */
  uint64_t over; /* CUR_BIG: what went over it */
} cur_t;

/* The request is over a limit: which, and by what. */
static void too_big(cur_t *c, int limit, uint64_t over) {
  c->err = CUR_BIG;
  c->limit = limit;
  c->over = over;
}

static int need(cur_t *c, uint64_t k) {
  if (c->err)
    return 0;
  if ((uint64_t)(c->n - c->pos) < k) {
    c->err = CUR_MORE;
    c->want = k > SIZE_MAX - c->pos ? SIZE_MAX : c->pos + (size_t)k;
    return 0;
  }
  return 1;
}

static int rd_u64(cur_t *c, uint64_t *v) {
  if (!need(c, 8))
    return 0;
  *v = le64(c->b + c->pos);
  c->pos += 8;
  return 1;
}

static int rd_u32(cur_t *c, uint32_t *v) {
  if (!need(c, 4))
    return 0;
  *v = le32(c->b + c->pos);
  c->pos += 4;
  return 1;
}

/* A string: a key (limit TS_LIMIT_KEY) or a value (TS_LIMIT_VALUE). */
static int rd_str(cur_t *c, int limit, const uint8_t **p, uint64_t *len) {
  uint64_t l, max = limit == TS_LIMIT_KEY ? c->lim->max_key
                                          : c->lim->max_value;
  if (!rd_u64(c, &l))
    return 0;
  if (l > max || l > c->lim->max_request) {
    too_big(c, l > max ? limit : TS_LIMIT_REQUEST, l);
    return 0;
  }
  if (!need(c, l))
    return 0;
  *p = c->b + c->pos;
  *len = l;
  c->pos += (size_t)l;
  return 1;
}

ssize_t ts_parse(int dialect, const uint8_t *buf, size_t n,
                 const ts_limits_t *lim, ts_req_t *out, size_t *needp) {
  cur_t c = {buf, n, 1, lim, CUR_OK, 0, TS_LIMIT_NONE, 0};
  int op;
  uint64_t u;

  memset(out, 0, sizeof(*out));
  if (n == 0) {
    if (needp)
      *needp = 1;
    return TS_NEED_MORE;
  }
  if (dialect == TS_DIALECT_V1) {
    if (buf[0] >= sizeof(v1_ops) / sizeof(v1_ops[0]))
      return TS_BAD_OP;
    op = v1_ops[buf[0]];
  } else {
    if (buf[0] > TS_BARRIER)
      return TS_BAD_OP;
    op = buf[0];
  }
  out->op = op;
  switch (op) {
  case TS_VALIDATE:
  case TS_PING:
    rd_u32(&c, &out->u32);
    break;
  case TS_SET:
  case TS_APPEND:
  case TS_QUEUE_PUSH:
    if (rd_str(&c, TS_LIMIT_KEY, &out->key, &out->klen))
      rd_str(&c, TS_LIMIT_VALUE, &out->v1, &out->v1len);
    break;
  case TS_COMPARE_SET:
    if (rd_str(&c, TS_LIMIT_KEY, &out->key, &out->klen) &&
        rd_str(&c, TS_LIMIT_VALUE, &out->v1, &out->v1len))
      rd_str(&c, TS_LIMIT_VALUE, &out->v2, &out->v2len);
    break;
  case TS_GET:
  case TS_DELETE_KEY:
  case TS_QUEUE_POP:
  case TS_QUEUE_LEN:
  case TS_WATCH_KEY:
    rd_str(&c, TS_LIMIT_KEY, &out->key, &out->klen);
    break;
  case TS_ADD:
  case TS_BARRIER:
    if (rd_str(&c, TS_LIMIT_KEY, &out->key, &out->klen) && rd_u64(&c, &u))
      out->i64 = (int64_t)u;
    break;
  case TS_CHECK:
  case TS_WAIT:
  case TS_MULTI_GET:
  case TS_MULTI_SET: {
    int pairs = op == TS_MULTI_SET;
    if (!rd_u64(&c, &u))
      break;
    /* MULTI_SET sends an int64: a negative count reads as huge here. */
    if (u > lim->max_keys) {
      too_big(&c, TS_LIMIT_KEYS, u);
      break;
    }
    out->count = u;
    out->list = buf + c.pos;
    for (uint64_t i = 0; i < u && !c.err; i++) {
      const uint8_t *p;
      uint64_t l;
      if (rd_str(&c, TS_LIMIT_KEY, &p, &l) && pairs)
        rd_str(&c, TS_LIMIT_VALUE, &p, &l);
      if (!c.err && c.pos > lim->max_request)
        too_big(&c, TS_LIMIT_REQUEST, c.pos);
    }
    break;
  }
  case TS_GETNUMKEYS:
  case TS_CANCEL_WAIT:
  case TS_LIST_KEYS:
    break;
  default:
    return TS_BAD_OP;
  }
  if (c.err == CUR_MORE && c.pos > lim->max_request)
    too_big(&c, TS_LIMIT_REQUEST, c.pos);
  if (c.err == CUR_MORE) {
    if (needp)
      *needp = c.want > c.pos + 1 ? c.want : c.pos + 1;
    return TS_NEED_MORE;
  }
  /* Each string was checked alone; bound the whole request too, as the
   * NEED_MORE path above does, so that a request gets the same answer
   * whether it arrives whole or split across reads. */
  if (!c.err && c.pos > lim->max_request)
    too_big(&c, TS_LIMIT_REQUEST, c.pos);
  if (c.err) {
    out->limit = c.limit;
    out->over = c.over;
    return TS_TOO_BIG;
  }
  out->size = c.pos;
  return (ssize_t)c.pos;
}

int ts_stoll(const uint8_t *p, size_t n, int64_t *out) {
  size_t i = 0;
  int neg = 0, digits = 0;
  int64_t v = 0;
  while (i < n && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r')))
    i++;
  if (i < n && (p[i] == '-' || p[i] == '+'))
    neg = p[i++] == '-';
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
    int d = p[i] - '0';
    /* Accumulate negatively so that INT64_MIN reads. */
    if (v < (INT64_MIN + d) / 10)
      return -1;
    v = v * 10 - d;
  }
  if (digits == 0 || (!neg && v == INT64_MIN))
    return -1;
  *out = neg ? v : -v;
  return 0;
}

const uint8_t *ts_next_str(const uint8_t **p, uint64_t *len) {
  const uint8_t *s;
  *len = le64(*p);
  s = *p + 8;
  *p = s + *len;
  return s;
}

