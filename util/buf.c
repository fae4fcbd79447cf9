/* buf.c - growable text buffer and JSON writer (lu_buf.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu_buf.h"

static int grow(lu_buf_t *b, size_t need) {
  size_t ncap;
  char *nd;
  if (b->err)
    return -1;
  if (b->len + need + 1 <= b->cap)
    return 0;
  ncap = b->cap ? b->cap : 256;
  while (ncap < b->len + need + 1) {
    if (ncap > ((size_t)-1) / 2) {
      b->err = RDZV_ENOMEM;
      return -1;
    }
    ncap *= 2;
  }
  nd = realloc(b->data, ncap);
  if (nd == NULL) {
    b->err = RDZV_ENOMEM;
    return -1;
  }
  b->data = nd;
  b->cap = ncap;
  return 0;
}

void lu_buf_put(lu_buf_t *b, const char *s, size_t n) {
  if (grow(b, n) != 0)
    return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void lu_buf_puts(lu_buf_t *b, const char *s) { lu_buf_put(b, s, strlen(s)); }

void lu_buf_printf(lu_buf_t *b, const char *fmt, ...) {
  va_list ap;
  int n;
  char small[256];
  va_start(ap, fmt);
  n = vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n < sizeof(small)) {
    lu_buf_put(b, small, (size_t)n);
    return;
  }
  if (grow(b, (size_t)n) != 0)
    return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void lu_buf_json_str(lu_buf_t *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  if (s == NULL) {
    lu_buf_puts(b, "null");
    return;
  }
  lu_buf_put(b, "\"", 1);
  for (; *p; p++) {
    /* Always valid UTF-8: a byte that is not part of a UTF-8 sequence (a
     * file name in another encoding) becomes U+FFFD. */
    if (*p >= 0x80) {
      size_t len = lu_utf8_seq(p, strnlen((const char *)p, 4));
      if (len == 0) {
        lu_buf_put(b, "\\ufffd", 6);
      } else {
        lu_buf_put(b, (const char *)p, len);
        p += len - 1;
      }
      continue;
    }
    switch (*p) {
    case '"': lu_buf_put(b, "\\\"", 2); break;
    case '\\': lu_buf_put(b, "\\\\", 2); break;
    case '\n': lu_buf_put(b, "\\n", 2); break;
    case '\r': lu_buf_put(b, "\\r", 2); break;
    case '\t': lu_buf_put(b, "\\t", 2); break;
    default:
      if (*p < 0x20 || *p == 0x7f)
        lu_buf_printf(b, "\\u%04x", *p);
      else
        lu_buf_put(b, (const char *)p, 1);
    }
  }
  lu_buf_put(b, "\"", 1);
}

int lu_buf_finish(lu_buf_t *b, char **out, size_t *len) {
  int err = b->err;
  if (err == 0 && b->data == NULL && grow(b, 0) == 0)
    b->data[0] = '\0';
  err = b->err;
  if (err != 0) {
    lu_buf_free(b);
    return err;
  }
  *out = b->data;
  if (len)
    *len = b->len;
  b->data = NULL;
  b->len = b->cap = 0;
  return 0;
}

void lu_buf_free(lu_buf_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
  b->err = 0;
}

/* ---- JSON --------------------------------------------------------------- */

void lu_json_init(lu_json_t *j, lu_buf_t *b, int pretty) {
  memset(j, 0, sizeof(*j));
  j->b = b;
  j->pretty = pretty;
}

static void newline(lu_json_t *j) {
  if (!j->pretty)
    return;
  lu_buf_put(j->b, "\n", 1);
  for (int i = 0; i < j->depth; i++)
    lu_buf_put(j->b, "  ", 2);
}

/* Separator and key of the next value at the current depth. */
static void pre(lu_json_t *j, const char *key) {
  if (j->depth > 0) {
    if (j->count[j->depth] > 0)
      lu_buf_put(j->b, ",", 1);
    if (j->count[j->depth] < 255)
      j->count[j->depth]++;
    newline(j);
  }
  if (key != NULL) {
    lu_buf_json_str(j->b, key);
    lu_buf_put(j->b, j->pretty ? ": " : ":", j->pretty ? 2 : 1);
  }
}

static void open_(lu_json_t *j, const char *key, char c) {
  pre(j, key);
  lu_buf_put(j->b, &c, 1);
  if (j->depth + 1 < LU_JSON_MAX_DEPTH)
    j->depth++;
  j->count[j->depth] = 0;
}

static void close_(lu_json_t *j, char c) {
  int had = j->count[j->depth] > 0;
  if (j->depth > 0)
    j->depth--;
  if (had)
    newline(j);
  lu_buf_put(j->b, &c, 1);
  if (j->depth == 0 && j->pretty)
    lu_buf_put(j->b, "\n", 1);
}

void lu_json_obj(lu_json_t *j, const char *key) { open_(j, key, '{'); }
void lu_json_arr(lu_json_t *j, const char *key) { open_(j, key, '['); }
void lu_json_end_obj(lu_json_t *j) { close_(j, '}'); }
void lu_json_end_arr(lu_json_t *j) { close_(j, ']'); }

void lu_json_str(lu_json_t *j, const char *key, const char *val) {
  pre(j, key);
  lu_buf_json_str(j->b, val);
}

void lu_json_int(lu_json_t *j, const char *key, long long val) {
  pre(j, key);
  lu_buf_printf(j->b, "%lld", val);
}

/* The shortest of %.15g, %.16g, %.17g that reads back as v: every digit
 * that matters (a counter of 123456789 tokens, 1e15 bytes and more), none
 * that do not (0.1, not 0.10000000000000001). */
void lu_buf_double(lu_buf_t *b, double v) {
  char s[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(s, sizeof(s), "%.*g", prec, v);
    if (prec == 17 || strtod(s, NULL) == v)
      break;
  }
  lu_buf_puts(b, s);
}

void lu_json_num(lu_json_t *j, const char *key, double val) {
  pre(j, key);
  /* JSON has no NaN or infinity. */
  if (isnan(val) || isinf(val))
    lu_buf_puts(j->b, "null");
  else
    lu_buf_double(j->b, val);
}

void lu_json_bool(lu_json_t *j, const char *key, int val) {
  pre(j, key);
  lu_buf_puts(j->b, val ? "true" : "false");
}

void lu_json_null(lu_json_t *j, const char *key) {
  pre(j, key);
  lu_buf_puts(j->b, "null");
}

void lu_buf_put_escaped(lu_buf_t *b, const char *s, int tab) {
  for (; *s; s++) {
    if (*s == '\\')
      lu_buf_put(b, "\\\\", 2);
    else if (*s == '\n')
      lu_buf_put(b, "\\n", 2);
    else if (*s == '\r')
      lu_buf_put(b, "\\r", 2);
    else if (*s == '\t' && tab)
      lu_buf_put(b, "\\t", 2);
    else
      lu_buf_put(b, s, 1);
  }
}
