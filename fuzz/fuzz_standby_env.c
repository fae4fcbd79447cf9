/* fuzz_standby_env.c - libFuzzer target for the rank environment a
 * standby is handed by its agent (runtime/rt_standby.c,
 * rt__standby_check): accepted input is NUL-terminated KEY=VALUE strings
 * with a key; refused input says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *blob, why[128];
  if (size > 65536 || (blob = malloc(size ? size : 1)) == NULL)
    return 0;
  memcpy(blob, data, size);
  why[0] = '\0';
  if (rt__standby_check(blob, size, why, sizeof(why)) == 0) {
    if (size == 0 || blob[size - 1] != '\0')
      abort();
    for (size_t at = 0; at < size; at += strlen(blob + at) + 1) {
      const char *eq = strchr(blob + at, '=');
      if (eq == NULL || eq == blob + at)
        abort();
    }
  } else if (why[0] == '\0') {
    abort();
  }
  free(blob);
  return 0;
}
