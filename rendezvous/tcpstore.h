/* tcpstore.h - parser of PyTorch's TCPStore requests, in both numberings:
 * 1.13 (no VALIDATE; SET=0 ... WATCH_KEY=7, DELETE_KEY=8) and >= 2.2
 * (VALIDATE=0 ... BARRIER=18). Integers are little-endian; strings are a
 * u64 length and raw bytes. The parser is pure (no I/O, no allocation):
 * it reports one request with pointers into the caller's buffer. */
#ifndef TCPSTORE_H
#define TCPSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum { TS_DIALECT_V1 = 1, /* PyTorch 1.13 */ TS_DIALECT_V2 = 2 /* >= 2.2 */ };

/* Canonical op numbers: the >= 2.2 values, plus WATCH_KEY (1.13 only). */
enum {
  TS_VALIDATE = 0,
  TS_SET = 1,
  TS_COMPARE_SET = 2,
  TS_GET = 3,
  TS_ADD = 4,
  TS_CHECK = 5,
  TS_WAIT = 6,
  TS_GETNUMKEYS = 7,
  TS_DELETE_KEY = 8,
  TS_APPEND = 9,
  TS_MULTI_GET = 10,
  TS_MULTI_SET = 11,
  TS_CANCEL_WAIT = 12,
  TS_PING = 13,
  TS_QUEUE_PUSH = 14,
  TS_QUEUE_POP = 15,
  TS_QUEUE_LEN = 16,
  TS_LIST_KEYS = 17,
  TS_BARRIER = 18,
  TS_WATCH_KEY = 100
};

#define TS_VALIDATION_MAGIC 0x3C85F7CEu

typedef struct ts_limits_s {
  uint64_t max_key;      /* bytes */
  uint64_t max_value;    /* bytes */
  uint64_t max_keys;     /* keys in CHECK/WAIT/MULTI_* */
  uint64_t max_request;  /* bytes of one whole request */
} ts_limits_t;

typedef struct ts_req_s {
  int op;                 /* canonical op */
  const uint8_t *key;     /* first string argument */
  uint64_t klen;
  const uint8_t *v1;      /* value / expected / suffix */
  uint64_t v1len;
  const uint8_t *v2;      /* desired (COMPARE_SET) */
  uint64_t v2len;
  int64_t i64;            /* ADD delta, BARRIER world size */
  uint32_t u32;           /* VALIDATE magic, PING nonce */
  uint64_t count;         /* keys (CHECK/WAIT/MULTI_GET) or pairs (MULTI_SET) */
  const uint8_t *list;    /* start of the key (or key/value) list */
  size_t size;            /* bytes of the whole request */
  int limit;              /* TS_TOO_BIG: the ts_limits_t one it is over */
  uint64_t over;          /* TS_TOO_BIG: what is over it (bytes of the key
                             or value, keys; of the request: the bytes
                             counted when it went over, a lower bound) */
} ts_req_t;

enum { TS_NEED_MORE = 0, TS_BAD_OP = -1, TS_TOO_BIG = -2 };

/* ts_req_t.limit: which of ts_limits_t's refused a request. */
enum {
  TS_LIMIT_NONE = 0,
  TS_LIMIT_KEY,     /* max_key */
  TS_LIMIT_VALUE,   /* max_value */
  TS_LIMIT_KEYS,    /* max_keys */
  TS_LIMIT_REQUEST  /* max_request */
};

/* Parse one request at buf[0..n).
 * RET > 0: bytes of the request (out filled); TS_NEED_MORE; TS_BAD_OP
 * (unknown opcode for the dialect); TS_TOO_BIG (a limit was exceeded:
 * out->op, out->limit and out->over say which and by what).
 * OUT *need: when TS_NEED_MORE, a lower bound of the bytes needed. */
ssize_t ts_parse(int dialect, const uint8_t *buf, size_t n,
                 const ts_limits_t *lim, ts_req_t *out, size_t *need);

/* Walk a validated list: read the next string at *p. */
const uint8_t *ts_next_str(const uint8_t **p, uint64_t *len);

const char *ts_op_name(int op);

/* The integer at the head of p[0..n), read as PyTorch's server reads a
 * counter for ADD and BARRIER (std::stoll, base 10): white space, a sign,
 * then at least one digit; what follows the digits is ignored (" 12\n" and
 * "12x" are 12). RET 0, or -1 with no digit or past int64's range (where
 * stoll throws and PyTorch's server closes the connection). */
int ts_stoll(const uint8_t *p, size_t n, int64_t *out);

#endif /* TCPSTORE_H */
