/* pickle.c - walk a Python pickle without executing it.
 *
 * The metadata that tells how many shards a peer's checkpoint promises is
 * pickled: DCP's .metadata (the _StorageInfo of every item), DeepSpeed's
 * model states (dp_world_size), Megatron's args (tensor/pipeline sizes).
 * Unpickling would run code named by the file; we only step over the
 * opcodes (every protocol, 0 to 5), report the constants they push, and
 * remember which memo slots hold which constant so that a value fetched
 * back with BINGET is reported as what it was. Nothing is built. */
#include <stdlib.h>
#include <string.h>

#include "ck_int.h"

#define PK_MEMO_MAX (1u << 22) /* memo slots we track */

typedef struct pk_memo_s {
  pk_atom_t *slot;
  size_t cap;
  size_t next;  /* MEMOIZE's implicit index: the memo's length */
  size_t limit; /* the pickle's length: a pickler numbers its memo from 0,
                   one PUT (a byte at least) a slot, so no index of a real
                   pickle reaches it. 14 bytes cannot ask for 128 MiB. */
} pk_memo_t;

static int pk_memo_put(pk_memo_t *m, size_t idx, const pk_atom_t *a) {
  if (idx >= PK_MEMO_MAX || idx >= m->limit)
    return 0; /* beyond what we track: later GETs report PK_OTHER */
  if (idx >= m->cap) {
    size_t cap = m->cap ? m->cap : 64;
    pk_atom_t *n;
    while (cap <= idx)
      cap *= 2;
    if ((n = realloc(m->slot, cap * sizeof(*n))) == NULL)
      return RDZV_ENOMEM;
    for (size_t i = m->cap; i < cap; i++)
      n[i].kind = PK_OTHER;
    m->slot = n;
    m->cap = cap;
  }
  m->slot[idx] = *a;
  if (idx + 1 > m->next)
    m->next = idx + 1;
  return 0;
}

static pk_atom_t pk_memo_get(const pk_memo_t *m, uint64_t idx) {
  pk_atom_t a;
  if (idx < m->cap)
    return m->slot[idx];
  memset(&a, 0, sizeof(a));
  a.kind = PK_OTHER;
  return a;
}

static uint64_t pk_le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = v << 8 | p[i];
  return v;
}

/* A little-endian two's complement integer of n bytes (LONG1/LONG4);
 * beyond 8 bytes it does not fit: PK_OTHER. */
static void pk_long(const unsigned char *p, size_t n, pk_atom_t *a) {
  if (n == 0) {
    a->kind = PK_INT;
    a->i = 0;
    return;
  }
  if (n > 8) {
    a->kind = PK_OTHER;
    return;
  }
  uint64_t v = pk_le(p, n);
  if (n < 8 && (p[n - 1] & 0x80))
    v |= ~(uint64_t)0 << (8 * n);
  a->kind = PK_INT;
  memcpy(&a->i, &v, sizeof(v));
}

/* A protocol-0 decimal line ("123", "123L", "01" for True). */
static void pk_decimal(const char *s, size_t n, pk_atom_t *a) {
  int64_t v;
  if (n > 0 && s[n - 1] == 'L')
    n--;
  if (n == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1')) {
    a->kind = PK_BOOL;
    a->i = s[1] == '1';
    return;
  }
  if (lu_parse_i64(s, n, &v) == 0) {
    a->kind = PK_INT;
    a->i = v;
  } else {
    a->kind = PK_OTHER;
  }
}

/* The line argument of a text opcode, without its newline. */
static int pk_line(const unsigned char *p, const unsigned char *end,
                   size_t *len) {
  const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
  if (nl == NULL)
    return -1;
  *len = (size_t)(nl - p);
  return 0;
}

int pk_walk(const unsigned char *p, size_t n, size_t *used, pk_cb cb,
            void *ud) {
  const unsigned char *s = p, *end = p + n;
  pk_memo_t memo = {NULL, 0, 0, n};
  pk_atom_t last, a;
  int rc = CKPT_EFORMAT;
  memset(&last, 0, sizeof(last));
  last.kind = PK_OTHER;
  while (p < end) {
    unsigned char op = *p++;
    size_t avail = (size_t)(end - p), k, len;
    int pushes = 1; /* does the opcode push a value (reported as `a`)? */
    memset(&a, 0, sizeof(a));
    a.kind = PK_OTHER;
/* NEED(x): x more argument bytes must be there. */
#define NEED(x)                                                                \
  do {                                                                         \
    if (avail < (size_t)(x))                                                   \
      goto out;                                                                \
  } while (0)
    switch (op) {
    case '.': /* STOP */
      rc = 0;
      goto out;
    /* Integers. */
    case 'K': NEED(1); a.kind = PK_INT; a.i = p[0]; p += 1; break;
    case 'M': NEED(2); a.kind = PK_INT; a.i = (int64_t)pk_le(p, 2); p += 2; break;
    case 'J':
      NEED(4);
      a.kind = PK_INT;
      a.i = (int32_t)(uint32_t)pk_le(p, 4);
      p += 4;
      break;
    case 0x8a: /* LONG1 */
      NEED(1);
      k = p[0];
      NEED(1 + k);
      pk_long(p + 1, k, &a);
      p += 1 + k;
      break;
    case 0x8b: /* LONG4 */
      NEED(4);
      k = (size_t)pk_le(p, 4);
      if (k > avail - 4)
        goto out;
      pk_long(p + 4, k, &a);
      p += 4 + k;
      break;
    case 0x88: a.kind = PK_BOOL; a.i = 1; break; /* NEWTRUE */
    case 0x89: a.kind = PK_BOOL; a.i = 0; break; /* NEWFALSE */
    case 'N': a.kind = PK_NONE; break;
    case 'I': case 'L': /* INT, LONG (text) */
      if (pk_line(p, end, &len) != 0)
        goto out;
      pk_decimal((const char *)p, len, &a);
      p += len + 1;
      break;
    /* Strings and bytes with a length. Only unicode strings are reported
     * as PK_STR: keys and file names are str in Python 3. */
    case 0x8c: case 'U': case 'C': /* SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES */
      NEED(1);
      k = p[0];
      NEED(1 + k);
      if (op == 0x8c) {
        a.kind = PK_STR;
        a.s = (const char *)p + 1;
        a.len = k;
      }
      p += 1 + k;
      break;
    case 'X': case 'T': case 'B': /* BINUNICODE, BINSTRING, BINBYTES */
      NEED(4);
      k = (size_t)pk_le(p, 4);
      if (k > avail - 4)
        goto out;
      if (op == 'X') {
        a.kind = PK_STR;
        a.s = (const char *)p + 4;
        a.len = k;
      }
      p += 4 + k;
      break;
    case 0x8d: case 0x8e: case 0x96: { /* BINUNICODE8, BINBYTES8, BYTEARRAY8 */
      uint64_t k8;
      NEED(8);
      k8 = pk_le(p, 8);
      if (k8 > avail - 8)
        goto out;
      if (op == 0x8d) {
        a.kind = PK_STR;
        a.s = (const char *)p + 8;
        a.len = (size_t)k8;
      }
      p += 8 + (size_t)k8;
      break;
    }
    case 'V': /* UNICODE (raw-unicode-escape line); plain ASCII is reported */
      if (pk_line(p, end, &len) != 0)
        goto out;
      if (memchr(p, '\\', len) == NULL) {
        a.kind = PK_STR;
        a.s = (const char *)p;
        a.len = len;
      }
      p += len + 1;
      break;
    case 'S': case 'F': case 'P': /* STRING, FLOAT, PERSID: one line */
      if (pk_line(p, end, &len) != 0)
        goto out;
      p += len + 1;
      break;
    case 'c': case 'i': /* GLOBAL, INST: two lines */
      for (int l = 0; l < 2; l++) {
        if (pk_line(p, end, &len) != 0)
          goto out;
        p += len + 1;
      }
      pushes = op == 'c';
      break;
    case 'G': NEED(8); p += 8; break; /* BINFLOAT */
    case 0x80: NEED(1); p += 1; pushes = 0; break; /* PROTO */
    case 0x95: NEED(8); p += 8; pushes = 0; break; /* FRAME */
    case 0x82: NEED(1); p += 1; break; /* EXT1 */
    case 0x83: NEED(2); p += 2; break; /* EXT2 */
    case 0x84: NEED(4); p += 4; break; /* EXT4 */
    /* The memo. A PUT stores the value on top of the stack: the one the
     * previous opcode pushed when we know it, else PK_OTHER. */
    case 'p': /* PUT (text) */
      if (pk_line(p, end, &len) != 0)
        goto out;
      {
        int64_t idx;
        if (lu_parse_i64((const char *)p, len, &idx) != 0 || idx < 0)
          goto out;
        if ((rc = pk_memo_put(&memo, (size_t)idx, &last)) != 0)
          goto out;
        rc = CKPT_EFORMAT;
      }
      p += len + 1;
      continue;
    case 'q': case 'r': case 0x94: { /* BINPUT, LONG_BINPUT, MEMOIZE */
      size_t idx;
      if (op == 'q') {
        NEED(1);
        idx = p[0];
        p += 1;
      } else if (op == 'r') {
        NEED(4);
        idx = (size_t)pk_le(p, 4);
        p += 4;
      } else {
        idx = memo.next;
      }
      if ((rc = pk_memo_put(&memo, idx, &last)) != 0)
        goto out;
      rc = CKPT_EFORMAT;
      continue; /* the stack is unchanged: `last` stays */
    }
    case 'g': /* GET (text) */
      if (pk_line(p, end, &len) != 0)
        goto out;
      {
        int64_t idx;
        if (lu_parse_i64((const char *)p, len, &idx) != 0 || idx < 0)
          goto out;
        a = pk_memo_get(&memo, (uint64_t)idx);
      }
      p += len + 1;
      break;
    case 'h': NEED(1); a = pk_memo_get(&memo, p[0]); p += 1; break;
    case 'j': NEED(4); a = pk_memo_get(&memo, pk_le(p, 4)); p += 4; break;
    /* Opcodes without argument that build or push something opaque. */
    case ')': case ']': case '}': case 0x8f: /* empty tuple/list/dict/set */
    case 't': case 0x85: case 0x86: case 0x87: case 'l': case 'd': /* tuples, LIST, DICT */
    case 0x91: case 'R': case 0x81: case 0x92: case 0x93: /* FROZENSET, REDUCE, NEWOBJ(_EX), STACK_GLOBAL */
    case 'o': case 'Q': case 0x97: /* OBJ, BINPERSID, NEXT_BUFFER */
      break;
    case '2': /* DUP */
      a = last;
      break;
    /* Opcodes that push nothing new (or only modify what is there). */
    case '(': case '0': case '1': case 'a': case 'e': case 's': case 'u':
    case 0x90: case 'b': case 0x98:
      pushes = 0;
      break;
    default:
      goto out; /* not a pickle opcode */
    }
#undef NEED
    if (pushes) {
      last = a;
      if (cb && (rc = cb(ud, &a)) != 0)
        goto out;
      rc = CKPT_EFORMAT;
    } else {
      last.kind = PK_OTHER;
    }
  }
out:
  free(memo.slot);
  if (used)
    *used = (size_t)(p - s);
  return rc;
}

/* ---- key: int pairs --------------------------------------------------------- */

typedef struct pk_pairs_s {
  pk_keyint_t *keys;
  size_t nkeys;
  int pending; /* index of the key just seen, -1 */
} pk_pairs_t;

static int pk_pairs_cb(void *ud, const pk_atom_t *a) {
  pk_pairs_t *pp = ud;
  if (pp->pending >= 0 && (a->kind == PK_INT || a->kind == PK_BOOL)) {
    pk_keyint_t *k = &pp->keys[pp->pending];
    if (!k->found) {
      k->found = 1;
      k->value = a->i;
    }
  }
  pp->pending = -1;
  if (a->kind == PK_STR)
    for (size_t i = 0; i < pp->nkeys; i++)
      if (strlen(pp->keys[i].key) == a->len &&
          memcmp(pp->keys[i].key, a->s, a->len) == 0) {
        pp->pending = (int)i;
        break;
      }
  return 0;
}

int pk_find_ints(const unsigned char *p, size_t n, pk_keyint_t *keys,
                 size_t nkeys) {
  pk_pairs_t pp = {keys, nkeys, -1};
  for (size_t i = 0; i < nkeys; i++)
    keys[i].found = 0;
  return pk_walk(p, n, NULL, pk_pairs_cb, &pp);
}

/* ---- DCP's _StorageInfo records ------------------------------------------------ */

/* A dataclass is pickled as its __dict__: "relative_path", the path,
 * "offset", an int, "length", an int, in field order. A record is
 * complete when the three were seen; the next "relative_path" starts
 * another. */
typedef struct pk_dcp_s {
  pk_storage_t *recs;
  size_t n, cap;
  int expect;     /* 0 none, 1 path, 2 offset, 3 length */
  pk_storage_t cur;
  unsigned seen;  /* bits: 1 path, 2 offset, 4 length */
} pk_dcp_t;

static int pk_dcp_flush(pk_dcp_t *d) {
  if (d->seen == 7) {
    if (d->n == d->cap) {
      size_t cap = d->cap ? d->cap * 2 : 64;
      pk_storage_t *r = realloc(d->recs, cap * sizeof(*r));
      if (r == NULL)
        return RDZV_ENOMEM;
      d->recs = r;
      d->cap = cap;
    }
    d->recs[d->n++] = d->cur;
  }
  d->seen = 0;
  return 0;
}

static int pk_is(const pk_atom_t *a, const char *s) {
  return a->kind == PK_STR && a->len == strlen(s) &&
         memcmp(a->s, s, a->len) == 0;
}

static int pk_dcp_cb(void *ud, const pk_atom_t *a) {
  pk_dcp_t *d = ud;
  int expect = d->expect;
  d->expect = 0;
  if (expect == 1 && a->kind == PK_STR) {
    d->cur.path = a->s;
    d->cur.plen = a->len;
    d->seen |= 1;
    return 0;
  }
  if ((expect == 2 || expect == 3) && a->kind == PK_INT) {
    if (expect == 2)
      d->cur.offset = a->i;
    else
      d->cur.length = a->i;
    d->seen |= expect == 2 ? 2 : 4;
    return 0;
  }
  if (pk_is(a, "relative_path")) {
    int rc = pk_dcp_flush(d);
    d->expect = 1;
    return rc;
  }
  if (pk_is(a, "offset"))
    d->expect = 2;
  else if (pk_is(a, "length"))
    d->expect = 3;
  return 0;
}

int pk_dcp_storage(const unsigned char *p, size_t n, pk_storage_t **recs,
                   size_t *nrecs) {
  pk_dcp_t d;
  int rc;
  memset(&d, 0, sizeof(d));
  rc = pk_walk(p, n, NULL, pk_dcp_cb, &d);
  if (rc == 0)
    rc = pk_dcp_flush(&d);
  if (rc != 0) {
    free(d.recs);
    return rc;
  }
  *recs = d.recs;
  *nrecs = d.n;
  return 0;
}
