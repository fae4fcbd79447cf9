/* fuzz_progress.c - hang_parse_value(), the decoder of a progress key's
 * value (launch/progress/<rank>), which anything with access to the job's
 * store may write (issue #24).
 *
 * Invariants checked: an accepted value starts with "<step> <ms>" printed
 * back exactly as decimal, followed by nothing or by a space and the tag;
 * the tag is NUL-terminated within its buffer; a rejected value sets no
 * tag. */
#include "fuzz.h"
#include "hang.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *p = (char *)fuzz_dup(data, size), tag[24], back[64];
  int64_t step = -7, ms = -7;
  int n;
  if (p == NULL)
    return 0;
  memset(tag, 'x', sizeof(tag));
  if (hang_parse_value(p, size, &step, &ms, tag, sizeof(tag)) == 0) {
    FUZZ_CHECK(memchr(tag, '\0', sizeof(tag)) != NULL);
    n = snprintf(back, sizeof(back), "%lld %lld", (long long)step,
                 (long long)ms);
    FUZZ_CHECK(n > 0 && (size_t)n <= size && memcmp(back, p, (size_t)n) == 0);
    FUZZ_CHECK((size_t)n == size || p[n] == ' ' || p[n] == '\0');
  } else {
    FUZZ_CHECK(tag[0] == '\0');
  }
  free(p);
  return 0;
}
