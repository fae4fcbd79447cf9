/* fuzz_progress.c - hang_parse_value(), the decoder of a progress key's
 * value (launch/progress/<rank>), which anything with access to the job's
 * store may write (issue #24).
 *
 * The value is the codec's PROGRESS map or the text "<step> <ms>[ <tag>]"
 * (msg_progress_decode). Invariants checked: an accepted text value's two
 * numbers are the step and time returned, followed by nothing or by a space
 * and the tag; an accepted map gives a step and time >= 0; the tag is
 * NUL-terminated within its buffer; a rejected value sets no tag. */
#include <stdlib.h>

#include "fuzz.h"
#include "hang.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *p = (char *)fuzz_dup(data, size), tag[24], *end;
  int64_t step = -7, ms = -7;
  if (p == NULL)
    return 0;
  memset(tag, 'x', sizeof(tag));
  if (hang_parse_value(p, size, &step, &ms, tag, sizeof(tag)) == 0) {
    FUZZ_CHECK(memchr(tag, '\0', sizeof(tag)) != NULL);
    FUZZ_CHECK(step >= 0 && ms >= 0);
    if (size > 0 && p[0] >= '0' && p[0] <= '9') {
      char *z = malloc(size + 1); /* strtoll needs the terminator */
      if (z == NULL)
        abort();
      memcpy(z, p, size);
      z[size] = '\0';
      FUZZ_CHECK(strtoll(z, &end, 10) == step && *end == ' ');
      FUZZ_CHECK(strtoll(end + 1, &end, 10) == ms);
      FUZZ_CHECK(end == z + size || *end == ' ');
      free(z);
    }
  } else {
    FUZZ_CHECK(tag[0] == '\0');
  }
  free(p);
  return 0;
}
