/* json.c - a small strict JSON reader (RFC 8259: no comments, no trailing
 * commas, valid UTF-8, nesting capped) for what other programs write: the
 * error files of workers, checkpoint manifests, trainer metadata. It builds
 * a tree in one arena freed at once (lu_jv_*, util/lu.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lu.h"

#define JV_DEPTH_MAX 64
#define JV_BLOCK 65536

typedef struct jv_block_s {
  struct jv_block_s *next;
  size_t used, cap;
  max_align_t data[];
} jv_block_t;

struct lu_jdoc_s {
  jv_block_t *blocks;
  lu_jv_t root;
};

typedef struct jv_parser_s {
  const char *p, *start, *end;
  lu_jdoc_t *doc;
  int depth;
  char *err;
  size_t errlen;
  unsigned flags; /* LU_JV_LENIENT */
} jv_parser_t;

static void *jv_alloc(lu_jdoc_t *d, size_t n) {
  jv_block_t *b = d->blocks;
  n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
  if (b == NULL || b->cap - b->used < n) {
    size_t cap = n > JV_BLOCK ? n : JV_BLOCK;
    if ((b = malloc(sizeof(*b) + cap)) == NULL)
      return NULL;
    b->used = 0;
    b->cap = cap;
    b->next = d->blocks;
    d->blocks = b;
  }
  b->used += n;
  return (char *)b->data + b->used - n;
}

static int jv_fail(jv_parser_t *ps, const char *what) {
  lu_errf(ps->err, ps->errlen, "JSON: %s at byte %zu", what,
          (size_t)(ps->p - ps->start));
  return RDZV_EPROTO;
}

static void jv_ws(jv_parser_t *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                             *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static int jv_hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int c = (unsigned char)p[i], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
      d = (c | 0x20) - 'a' + 10;
    else
      return -1;
    v = v << 4 | (unsigned)d;
  }
  *out = v;
  return 0;
}

/* Bytes of the UTF-8 sequence at p, or 0 when it is not valid (overlong,
 * surrogate, beyond U+10FFFF, truncated). */
static size_t jv_utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0], cp, lo;
  size_t n;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F, lo = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F, lo = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07, lo = 0x10000;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n)
    return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80)
      return 0;
    cp = cp << 6 | (p[i] & 0x3F);
  }
  if (cp < lo || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

static size_t jv_put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | cp >> 18);
  o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* A string at ps->p (its opening quote). The decoded text is never longer
 * than the source, which bounds the allocation. \u0000 is refused: every
 * string we read ends up as a C string (a file name, a key). */
static int jv_string(jv_parser_t *ps, const char **out, size_t *outlen) {
  const char *s = ++ps->p;
  char *buf, *o;
  const char *q = s;
  /* Find the end first, to size the buffer. */
  while (q < ps->end && *q != '"') {
    if (*q == '\\') {
      if (ps->end - q < 2)
        break;
      q++;
    }
    q++;
  }
  if (q >= ps->end || *q != '"')
    return jv_fail(ps, "unterminated string");
  if ((buf = jv_alloc(ps->doc, (size_t)(q - s) + 1)) == NULL)
    return RDZV_ENOMEM;
  o = buf;
  while (ps->p < q) {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20)
      return jv_fail(ps, "control character in a string");
    if (c == '\\') {
      char e = ps->p[1];
      ps->p += 2;
      switch (e) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        unsigned cp, lo;
        if (q - ps->p < 4 || jv_hex4(ps->p, &cp) != 0)
          return jv_fail(ps, "bad \\u escape");
        ps->p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && q - ps->p >= 6 &&
            ps->p[0] == '\\' && ps->p[1] == 'u' &&
            jv_hex4(ps->p + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          ps->p += 6;
        } else if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0) {
          /* A lone surrogate (Python writes them) or NUL, which a C string
           * cannot hold: U+FFFD when lenient (no longer than the escape). */
          if (!(ps->flags & LU_JV_LENIENT))
            return jv_fail(ps, cp ? "lone surrogate in \\u escape"
                                  : "\\u0000 in a string");
          cp = 0xFFFD;
        }
        o += jv_put_utf8(o, cp);
        break;
      }
      default:
        return jv_fail(ps, "bad escape");
      }
      continue;
    }
    if (c >= 0x80) {
      size_t k = jv_utf8_len((const unsigned char *)ps->p,
                             (const unsigned char *)q);
      if (k == 0)
        return jv_fail(ps, "invalid UTF-8");
      memcpy(o, ps->p, k);
      o += k;
      ps->p += k;
      continue;
    }
    *o++ = (char)c;
    ps->p++;
  }
  *o = '\0';
  ps->p = q + 1;
  *out = buf;
  *outlen = (size_t)(o - buf);
  return 0;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int jv_number(jv_parser_t *ps, lu_jv_t *v) {
  const char *s = ps->p;
  char tmp[64];
  int integral = 1;
  if (ps->p < ps->end && *ps->p == '-')
    ps->p++;
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
    return jv_fail(ps, "bad number");
  if (*ps->p == '0')
    ps->p++;
  else
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
      ps->p++;
  if (ps->p < ps->end && *ps->p == '.') {
    integral = 0;
    if (++ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
      return jv_fail(ps, "bad number");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
      ps->p++;
  }
  if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
    integral = 0;
    ps->p++;
    if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
      ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
      return jv_fail(ps, "bad number");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
      ps->p++;
  }
  v->type = LU_JV_NUM;
  if ((size_t)(ps->p - s) >= sizeof(tmp)) {
    /* Longer than any number we use: keep the type, not the value. */
    v->d = 0;
    return 0;
  }
  memcpy(tmp, s, (size_t)(ps->p - s));
  tmp[ps->p - s] = '\0';
  v->d = strtod(tmp, NULL);
  if (integral) {
    char *e;
    long long ll;
    errno = 0;
    ll = strtoll(tmp, &e, 10);
    if (errno == 0 && *e == '\0') {
      v->is_int = 1;
      v->i = ll;
    }
  }
  return 0;
}

static int jv_lit(jv_parser_t *ps, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
    return jv_fail(ps, "unexpected character");
  ps->p += n;
  return 0;
}

static int jv_value(jv_parser_t *ps, lu_jv_t *v);

/* Arrays and objects: elements separated by commas up to `close`. */
static int jv_container(jv_parser_t *ps, lu_jv_t *v, char close) {
  lu_jv_t **tail = &v->first;
  int rc;
  if (++ps->depth > JV_DEPTH_MAX)
    return jv_fail(ps, "nested too deeply");
  ps->p++;
  jv_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    ps->depth--;
    return 0;
  }
  for (;;) {
    lu_jv_t *c = jv_alloc(ps->doc, sizeof(*c));
    if (c == NULL)
      return RDZV_ENOMEM;
    memset(c, 0, sizeof(*c));
    jv_ws(ps);
    if (close == '}') {
      size_t klen;
      if (ps->p >= ps->end || *ps->p != '"')
        return jv_fail(ps, "expected a member name");
      if ((rc = jv_string(ps, &c->key, &klen)) != 0)
        return rc;
      jv_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':')
        return jv_fail(ps, "expected ':'");
      ps->p++;
      jv_ws(ps);
    }
    if ((rc = jv_value(ps, c)) != 0)
      return rc;
    *tail = c;
    tail = &c->next;
    v->n++;
    jv_ws(ps);
    if (ps->p >= ps->end)
      return jv_fail(ps, "unterminated array or object");
    if (*ps->p == close) {
      ps->p++;
      ps->depth--;
      return 0;
    }
    if (*ps->p != ',')
      return jv_fail(ps, "expected ',' or the end of an array or object");
    ps->p++;
  }
}

static int jv_value(jv_parser_t *ps, lu_jv_t *v) {
  if (ps->p >= ps->end)
    return jv_fail(ps, "unexpected end");
  switch (*ps->p) {
  case '{':
    v->type = LU_JV_OBJ;
    return jv_container(ps, v, '}');
  case '[':
    v->type = LU_JV_ARR;
    return jv_container(ps, v, ']');
  case '"':
    v->type = LU_JV_STR;
    return jv_string(ps, &v->s, &v->slen);
  case 't':
    v->type = LU_JV_BOOL;
    v->b = 1;
    return jv_lit(ps, "true");
  case 'f':
    v->type = LU_JV_BOOL;
    return jv_lit(ps, "false");
  case 'n':
    v->type = LU_JV_NULL;
    return jv_lit(ps, "null");
  default:
    return jv_number(ps, v);
  }
}

int lu_jv_parse(const char *buf, size_t len, unsigned flags, lu_jdoc_t **doc,
                const lu_jv_t **root, char *err, size_t errlen) {
  jv_parser_t ps;
  int rc;
  lu_jdoc_t *d = calloc(1, sizeof(*d));
  if (d == NULL)
    return RDZV_ENOMEM;
  memset(&ps, 0, sizeof(ps));
  ps.p = ps.start = buf;
  ps.end = buf + len;
  ps.doc = d;
  ps.err = err;
  ps.errlen = errlen;
  ps.flags = flags;
  /* A UTF-8 byte order mark is not JSON, but editors write one. */
  if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
    ps.p += 3;
  jv_ws(&ps);
  if ((rc = jv_value(&ps, &d->root)) == 0) {
    jv_ws(&ps);
    if (ps.p != ps.end)
      rc = jv_fail(&ps, "trailing characters after the value");
  }
  if (rc != 0) {
    if (rc == RDZV_ENOMEM)
      lu_errf(err, errlen, "out of memory");
    lu_jv_free(d);
    return rc;
  }
  *doc = d;
  *root = &d->root;
  return 0;
}

void lu_jv_free(lu_jdoc_t *doc) {
  jv_block_t *b, *n;
  if (doc == NULL)
    return;
  for (b = doc->blocks; b; b = n) {
    n = b->next;
    free(b);
  }
  free(doc);
}

const lu_jv_t *lu_jv_get(const lu_jv_t *obj, const char *key) {
  const lu_jv_t *found = NULL;
  if (obj == NULL || obj->type != LU_JV_OBJ)
    return NULL;
  for (const lu_jv_t *c = obj->first; c; c = c->next)
    if (strcmp(c->key, key) == 0)
      found = c;
  return found;
}

int lu_jv_int(const lu_jv_t *v, int64_t min, int64_t max, int64_t *out) {
  if (v == NULL || v->type != LU_JV_NUM || !v->is_int || v->i < min ||
      v->i > max)
    return -1;
  *out = v->i;
  return 0;
}
