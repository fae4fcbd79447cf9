/* json.c - a small strict JSON reader (RFC 8259) for untrusted input, such
 * as the error files workers write: it validates the whole document and
 * keeps only the values at the paths asked for, building no tree. */
#include <stdlib.h>
#include <string.h>

#include "lu.h"

typedef struct js_s {
  const char *p, *end;
  int depth, max_depth;
  const char *const *paths;
  size_t npaths;
  unsigned numbers;  /* bit i: paths[i] takes numbers too */
  char **out;
  char path[512];    /* where the reader is: "message.extraInfo" */
} js_t;

static void js_ws(js_t *j) {
  while (j->p < j->end &&
         (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

static int js_hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return -1;
  }
  *out = v;
  return 0;
}

static size_t js_utf8(unsigned cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of one valid UTF-8 sequence at p (first byte >= 0x80), or 0:
 * overlong forms, surrogates and code points above U+10FFFF are refused. */
static size_t js_utf8_valid(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0], cp, min;
  size_t n;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
    min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
    min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
    min = 0x10000;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n)
    return 0;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

/* A string at j->p (on the opening quote). With out != NULL the decoded
 * text is returned malloc'd (never longer than the source, which bounds
 * the allocation). \u0000 and lone surrogates become U+FFFD, so that the
 * result is a C string of valid UTF-8. RET 0 or RDZV_EPROTO/ENOMEM. */
static int js_string(js_t *j, char **out) {
  const char *s;
  char *buf = NULL;
  size_t n = 0;
  if (j->p >= j->end || *j->p != '"')
    return RDZV_EPROTO;
  s = ++j->p;
  if (out) {
    /* The decoded text is at most as long as the rest of the input, plus
     * slack for U+FFFD (3 bytes) replacing a 6-byte escape: never longer. */
    if ((buf = malloc((size_t)(j->end - s) + 1)) == NULL)
      return RDZV_ENOMEM;
  }
  while (j->p < j->end) {
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      if (out) {
        buf[n] = '\0';
        *out = buf;
      }
      return 0;
    }
    if (c < 0x20)
      break; /* raw control characters are not allowed in JSON strings */
    if (c == '\\') {
      char e;
      if (j->end - j->p < 2)
        break;
      e = j->p[1];
      j->p += 2;
      if (e == 'u') {
        unsigned cp, lo;
        char tmp[4];
        if (j->end - j->p < 4 || js_hex4(j->p, &cp) != 0)
          break;
        j->p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && j->end - j->p >= 6 &&
            j->p[0] == '\\' && j->p[1] == 'u' && js_hex4(j->p + 2, &lo) == 0 &&
            lo >= 0xDC00 && lo <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          j->p += 6;
        } else if (cp >= 0xD800 && cp <= 0xDFFF) {
          cp = 0xFFFD; /* lone surrogate (Python writes them) */
        }
        if (cp == 0)
          cp = 0xFFFD; /* a C string cannot hold NUL */
        if (out) {
          size_t k = js_utf8(cp, tmp);
          memcpy(buf + n, tmp, k);
          n += k;
        }
        continue;
      }
      switch (e) {
      case '"': c = '"'; break;
      case '\\': c = '\\'; break;
      case '/': c = '/'; break;
      case 'b': c = '\b'; break;
      case 'f': c = '\f'; break;
      case 'n': c = '\n'; break;
      case 'r': c = '\r'; break;
      case 't': c = '\t'; break;
      default:
        goto bad;
      }
      if (out)
        buf[n++] = (char)c;
      continue;
    }
    if (c >= 0x80) {
      size_t k = js_utf8_valid((const unsigned char *)j->p,
                               (const unsigned char *)j->end);
      if (k == 0)
        break;
      if (out) {
        memcpy(buf + n, j->p, k);
        n += k;
      }
      j->p += k;
      continue;
    }
    if (out)
      buf[n++] = (char)c;
    j->p++;
  }
bad:
  free(buf);
  return RDZV_EPROTO;
}

static int js_digits(js_t *j) {
  const char *s = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
    j->p++;
  return j->p > s ? 0 : RDZV_EPROTO;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int js_number(js_t *j) {
  if (j->p < j->end && *j->p == '-')
    j->p++;
  if (j->p >= j->end)
    return RDZV_EPROTO;
  if (*j->p == '0')
    j->p++;
  else if (js_digits(j) != 0)
    return RDZV_EPROTO;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (js_digits(j) != 0)
      return RDZV_EPROTO;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
      j->p++;
    if (js_digits(j) != 0)
      return RDZV_EPROTO;
  }
  return 0;
}

static int js_literal(js_t *j, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
    return RDZV_EPROTO;
  j->p += n;
  return 0;
}

static int js_value(js_t *j);

/* Forget what was read at path or below it: a later duplicate key wins. */
static void js_forget(js_t *j) {
  size_t n = strlen(j->path);
  for (size_t i = 0; i < j->npaths; i++)
    if (strncmp(j->paths[i], j->path, n) == 0 &&
        (j->paths[i][n] == '\0' || j->paths[i][n] == '.' || n == 0)) {
      free(j->out[i]);
      j->out[i] = NULL;
    }
}

/* The capture slot of the current path, or -1. */
static int js_slot(const js_t *j) {
  for (size_t i = 0; i < j->npaths; i++)
    if (strcmp(j->paths[i], j->path) == 0)
      return (int)i;
  return -1;
}

/* Does any capture path lie below the current one? Then keys count. */
static int js_wanted(const js_t *j) {
  size_t n = strlen(j->path);
  for (size_t i = 0; i < j->npaths; i++)
    if (strncmp(j->paths[i], j->path, n) == 0 &&
        (n == 0 || j->paths[i][n] == '.'))
      return 1;
  return 0;
}

/* An object or an array at j->p: members separated by commas. Array
 * elements are never captured ("#" in the path). */
static int js_container(js_t *j) {
  size_t base = strlen(j->path);
  char close = *j->p == '{' ? '}' : ']';
  int rc, wanted = close == '}' && js_wanted(j);
  j->p++;
  js_ws(j);
  if (j->p < j->end && *j->p == close) {
    j->p++;
    return 0;
  }
  for (;;) {
    char *key = NULL;
    js_ws(j);
    if (close == '}') {
      /* Keys are decoded only where they can lead to a value we keep. */
      if ((rc = js_string(j, wanted ? &key : NULL)) != 0)
        return rc;
      js_ws(j);
      if (j->p >= j->end || *j->p != ':') {
        free(key);
        return RDZV_EPROTO;
      }
      j->p++;
      js_ws(j);
    }
    if (key && strlen(key) + base + 2 < sizeof(j->path) && !strchr(key, '.'))
      snprintf(j->path + base, sizeof(j->path) - base, "%s%s",
               base ? "." : "", key);
    else
      snprintf(j->path + base, sizeof(j->path) - base, "%s#", base ? "." : "");
    free(key);
    if ((rc = js_value(j)) != 0)
      return rc;
    j->path[base] = '\0';
    js_ws(j);
    if (j->p >= j->end)
      return RDZV_EPROTO;
    if (*j->p == close) {
      j->p++;
      return 0;
    }
    if (*j->p != ',')
      return RDZV_EPROTO;
    j->p++;
  }
}

static int js_value(js_t *j) {
  int rc, slot;
  if (j->p >= j->end)
    return RDZV_EPROTO;
  js_forget(j);
  slot = js_slot(j);
  switch (*j->p) {
  case '{':
  case '[':
    if (++j->depth > j->max_depth)
      return RDZV_EPROTO;
    rc = js_container(j);
    j->depth--;
    return rc;
  case '"':
    return js_string(j, slot >= 0 ? &j->out[slot] : NULL);
  case 't':
    return js_literal(j, "true");
  case 'f':
    return js_literal(j, "false");
  case 'n':
    return js_literal(j, "null");
  default:
    if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) {
      const char *s = j->p;
      if ((rc = js_number(j)) != 0)
        return rc;
      if (slot >= 0 && (j->numbers & (1u << slot)) &&
          (j->out[slot] = strndup(s, (size_t)(j->p - s))) == NULL)
        return RDZV_ENOMEM;
      return 0;
    }
    return RDZV_EPROTO;
  }
}

int lu_json_read(const char *buf, size_t len, int max_depth,
                 const char *const *paths, size_t npaths, unsigned numbers,
                 char **out) {
  js_t j;
  int rc;
  memset(&j, 0, sizeof(j));
  j.p = buf;
  j.end = buf + len;
  j.max_depth = max_depth;
  j.paths = paths;
  j.npaths = npaths;
  j.numbers = numbers;
  j.out = out;
  for (size_t i = 0; i < npaths; i++)
    out[i] = NULL;
  /* A UTF-8 byte order mark is not JSON, but editors write one. */
  if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
    j.p += 3;
  js_ws(&j);
  rc = js_value(&j);
  js_ws(&j);
  if (rc == 0 && j.p != j.end)
    rc = RDZV_EPROTO; /* trailing bytes */
  if (rc != 0)
    for (size_t i = 0; i < npaths; i++) {
      free(out[i]);
      out[i] = NULL;
    }
  return rc;
}
