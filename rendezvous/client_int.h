/* client_int.h - librdzv internals shared between its files. */
#ifndef CLIENT_INT_H
#define CLIENT_INT_H

#include "lu.h"
#include "rdzv.h"

/* Set the message rdzv_last_error() returns. */
void rdzv__set_error(rdzv_client_t *c, const char *fmt, ...) LU_PRINTF(2, 3);

/* rdzv_set(key) then rdzv_multi_get(keys), both sent in one write: one
 * round trip (a root publishing its NCCL id and reading every root's). */
int rdzv__set_multi_get(rdzv_client_t *c, const char *key, const void *val,
                        size_t len, const char *const *keys, size_t n,
                        rdzv_value_t *vals, int timeout_ms);

#endif
