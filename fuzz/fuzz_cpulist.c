/* fuzz_cpulist.c - libFuzzer target for the cpulist syntax (--cpu-bind
 * LIST, LAUNCH_CPUS): parse, format back, parse again to the same set;
 * the per-rank list form and the policy parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s, err[256], out[AFF_CPULIST_LEN * 8];
  aff_cpuset_t a, b;
  aff_cpuset_t *lists;
  aff_policy_t *pol;
  if (size > 4096)
    return 0;
  if ((s = malloc(size + 1)) == NULL)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  if (aff_cpulist_parse(s, &a, err, sizeof(err)) == 0) {
    size_t need = aff_cpulist_format(&a, out, sizeof(out));
    if (need < sizeof(out)) {
      if (aff_cpulist_parse(out, &b, err, sizeof(err)) != 0 ||
          !aff_cpuset_equal(&a, &b))
        abort(); /* format must round-trip */
    }
  } else if (err[0] == '\0') {
    abort();
  }
  lists = malloc(sizeof(*lists) * 16);
  pol = malloc(sizeof(*pol));
  if (lists && pol) {
    int n = aff_cpulists_parse(s, lists, 16, err, sizeof(err));
    if (n > 16)
      abort();
    (void)aff_policy_parse(s, s, pol, err, sizeof(err));
  }
  free(lists);
  free(pol);
  free(s);
  return 0;
}
