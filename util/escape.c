/* escape.c - untrusted text made safe for terminals, logs and JSON (issue
 * #24): job names, host names, file names and worker-supplied text reach
 * the operator's screen and log files, and must never move the cursor,
 * change colours, or start a line that looks like one of launch's. */
#include <string.h>

#include "lu.h"

size_t lu_utf8_seq(const unsigned char *p, size_t n) {
  unsigned cp;
  size_t len;
  if (n == 0)
    return 0;
  if (p[0] < 0x80)
    return 1;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) {
    len = 2;
    cp = p[0] & 0x1f;
  } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
    len = 3;
    cp = p[0] & 0x0f;
  } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
    len = 4;
    cp = p[0] & 0x07;
  } else {
    return 0; /* a continuation byte, an overlong lead, or past U+10FFFF */
  }
  if (n < len)
    return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  /* Overlong forms, UTF-16 surrogates and code points past U+10FFFF. */
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
    return 0;
  return len;
}

/* The code point of a valid sequence of len bytes. */
static unsigned utf8_cp(const unsigned char *p, size_t len) {
  static const unsigned char lead_mask[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
  unsigned cp = p[0] & lead_mask[len];
  for (size_t i = 1; i < len; i++)
    cp = cp << 6 | (p[i] & 0x3f);
  return cp;
}

size_t lu_escape(const char *in, size_t n, char *out, size_t cap,
                 unsigned flags) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)in;
  size_t o = 0, i = 0;
  if (cap == 0)
    return 0;
  while (i < n) {
    size_t len = lu_utf8_seq(p + i, n - i);
    char tmp[8];
    size_t tl;
    unsigned cp = len ? utf8_cp(p + i, len) : 0;
    if (len == 1 && p[i] == '\n' && (flags & LU_ESC_NEWLINE_INDENT)) {
      memcpy(tmp, "\n    ", 5); /* a continuation, never a line of its own */
      tl = 5;
    } else if (len == 1 && p[i] == '\t') {
      tmp[0] = '\t';
      tl = 1;
    } else if (len == 0 || cp < 0x20 || cp == 0x7f ||
               (cp >= 0x80 && cp <= 0x9f)) {
      /* Not UTF-8, C0 and C1 controls (ESC, CSI, BEL, CR, ...): \xNN for
       * each byte. */
      size_t k = len ? len : 1;
      tl = 0;
      for (size_t b = 0; b < k && tl + 4 <= sizeof(tmp); b++) {
        tmp[tl++] = '\\';
        tmp[tl++] = 'x';
        tmp[tl++] = hex[p[i + b] >> 4];
        tmp[tl++] = hex[p[i + b] & 15];
      }
      len = k;
    } else {
      memcpy(tmp, p + i, len);
      tl = len;
    }
    if (o + tl >= cap)
      break; /* cut at a whole character */
    memcpy(out + o, tmp, tl);
    o += tl;
    i += len;
  }
  out[o] = '\0';
  return o;
}

const char *lu_esc(const char *s, char *buf, size_t cap) {
  if (s == NULL)
    s = "";
  lu_escape(s, strlen(s), buf, cap, 0);
  return buf;
}
