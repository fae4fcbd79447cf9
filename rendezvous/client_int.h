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

/* The calls of rdzv_nccl_ids that succeeded on c for one communicator
 * (name, round, rank): the k-th call of every rank meets the k-th of the
 * others, under keys of its own (ncclGetUniqueId's new id each time). */
typedef struct rdzv__nccl_call_s {
  struct rdzv__nccl_call_s *next;
  int64_t round;
  int rank;
  uint32_t done;
  char name[];
} rdzv__nccl_call_t;
/* RET the counter (made at 0), NULL out of memory. */
uint32_t *rdzv__nccl_calls(rdzv_client_t *c, const char *name, int64_t round,
                           int rank);

#endif
