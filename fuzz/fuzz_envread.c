/* fuzz_envread.c - libFuzzer target for the reader of the worker contract
 * (rendezvous/envread.c, rdzv_env_parse). The environment is the user's
 * and the scheduler's: any strings must give 0 or RDZV_EINVAL with a
 * NUL-terminated message, every field unset or parsed from its own
 * variable, never a crash or a read out of bounds. The input is split at
 * newlines into "NAME=VALUE" strings. Seeds: fuzz/corpus/envread/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1), **envp, err[160];
  size_t n = 1;
  rdzv_env_t e;
  int rc;
  if (buf == NULL)
    return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  for (size_t i = 0; i < size; i++)
    n += buf[i] == '\n';
  if ((envp = calloc(n + 1, sizeof(*envp))) == NULL) {
    free(buf);
    return 0;
  }
  n = 0;
  for (char *p = buf, *q; p; p = q) {
    if ((q = strchr(p, '\n')) != NULL)
      *q++ = '\0';
    envp[n++] = p;
  }
  rc = rdzv_env_parse(envp, &e, err, sizeof(err));
  if (rc != 0 && (rc != RDZV_EINVAL || memchr(err, '\0', sizeof(err)) == NULL))
    abort();
  /* numbers are unset (-1) or >= 0 */
  if (e.rank < -1 || e.world_size < -1 || e.round < -1 || e.master_port < -1)
    abort();
  /* a string field points inside the input */
  if (e.endpoint && (e.endpoint < buf || e.endpoint > buf + size))
    abort();
  free(envp);
  free(buf);
  return 0;
}
