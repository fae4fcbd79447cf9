/* fuzz_escape.c - libFuzzer target for untrusted text (util/escape.c, issue
 * #24): lu_escape's output never holds a control byte (but tabs and, with
 * LU_ESC_NEWLINE_INDENT, newlines followed by the indent), is valid UTF-8,
 * fits its buffer; lu_buf_json_str's output is valid UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lu.h"
#include "lu_buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_utf8(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t k = lu_utf8_seq(p + i, n - i);
    if (k == 0)
      abort();
    i += k;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[1024], *s, *text;
  lu_buf_t b = LU_BUF_INIT;
  size_t n;
  if (size > 4096)
    return 0;
  for (unsigned flags = 0; flags <= LU_ESC_NEWLINE_INDENT; flags++) {
    size_t cap = size % sizeof(out) + 1;
    n = lu_escape((const char *)data, size, out, cap, flags);
    if (n >= cap || out[n] != '\0' || strlen(out) != n)
      abort();
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)out[i];
      if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f ||
          (c == '\n' && (!flags || strncmp(out + i + 1, "    ", 4) != 0)))
        abort();
    }
    check_utf8((const unsigned char *)out, n);
  }
  if ((s = malloc(size + 1)) == NULL)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  lu_buf_json_str(&b, s);
  if (lu_buf_finish(&b, &text, &n) == 0) {
    check_utf8((const unsigned char *)text, n);
    free(text);
  }
  free(s);
  return 0;
}
