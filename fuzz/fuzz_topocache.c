/* fuzz_topocache.c - libFuzzer target for the topology cache file
 * (affinity/aff_tcache.c), which the agent reads at every start: decoded
 * as it is, then with its "end" line's checksum made right (so that the
 * fuzzer reaches the lines behind it). A file that decodes must encode,
 * decode again and encode to the same bytes; every count stays within its
 * array; the paths between its devices can be computed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aff_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY "key fuzz 1\nkey end\n"

static void check(aff_topo_t *t) {
  aff_topo_t *u;
  char *a = NULL, *b = NULL;
  size_t la = 0, lb = 0;
  if (t->nall > AFF_MAX_GPUS || t->nnics > AFF_MAX_NICS ||
      t->nnuma > AFF_MAX_NUMA || t->ncore_sets > AFF_MAX_CPUS)
    abort();
  for (int i = 0; i < t->nall; i++)
    for (int j = 0; j < t->nnics; j++)
      (void)aff__io_path(&t->all_io[i], &t->nic_io[j], t->all[i].numa,
                         t->nics[j].numa);
  if ((u = calloc(1, sizeof(*u))) == NULL)
    return;
  if (aff__tcache_encode(t, KEY, &a, &la) == 0) {
    if (aff__tcache_decode(u, KEY, a, la) != 0 ||
        aff__tcache_encode(u, KEY, &b, &lb) != 0 || la != lb ||
        memcmp(a, b, la) != 0)
      abort(); /* what it writes it must read back, unchanged */
  }
  free(a);
  free(b);
  aff_topo_free(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  aff_topo_t *t;
  char *fixed;
  size_t body, n;
  if (size > (1u << 20) || (t = calloc(1, sizeof(*t))) == NULL)
    return 0;
  if (aff__tcache_decode(t, KEY, (const char *)data, size) == 0)
    check(t);
  /* the same without its last line (an "end" line, or a part of one),
   * then the right "end" line */
  for (body = size; body > 0 && data[body - 1] != '\n'; body--)
    ;
  if (body == size && body > 0)
    for (body--; body > 0 && data[body - 1] != '\n'; body--)
      ;
  if ((fixed = malloc(body + 32)) != NULL) {
    memcpy(fixed, data, body);
    n = body + (size_t)snprintf(fixed + body, 32, "end %016llx\n",
                                (unsigned long long)aff__tcache_sum(fixed, body));
    if (aff__tcache_decode(t, KEY, fixed, n) == 0)
      check(t);
    free(fixed);
  }
  aff_topo_free(t);
  return 0;
}
