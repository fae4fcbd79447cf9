/* fuzz_manifest_stats.c - ev_manifest_stats(), the agent's reader of a
 * checkpoint step's manifest.json for checkpoint_committed's bytes and
 * write time (docs/events.md). Anything that writes into --ckpt-dir may
 * have made the file.
 *
 * Invariants checked: a rejected input leaves both outputs 0; an accepted
 * one gives a write time that is finite and >= 0; the same bytes give the
 * same answer twice. */
#include <math.h>

#include "events.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *p = (char *)fuzz_dup(data, size);
  uint64_t bytes = 7, bytes2 = 9;
  double w = -1, w2 = -2;
  int rc, rc2;
  if (p == NULL)
    return 0;
  rc = ev_manifest_stats(p, size, &bytes, &w);
  rc2 = ev_manifest_stats(p, size, &bytes2, &w2);
  FUZZ_CHECK(rc == rc2 && bytes == bytes2 && w == w2);
  if (rc != 0)
    FUZZ_CHECK(bytes == 0 && w == 0);
  else
    FUZZ_CHECK(isfinite(w) && w >= 0);
  free(p);
  return 0;
}
