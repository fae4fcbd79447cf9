/* cmd_vals.h - what `launch status` and `launch ckpt` (files of the launch
 * executable) decode, in the agent's library so that fuzz targets link it
 * (fuzz_status_vals, fuzz_ckpt_ranks). */
#ifndef CMD_VALS_H
#define CMD_VALS_H

#include <stddef.h>

#include "msg.h"
#include "proto.h"

/* One rank's progress key (docs/events.md#progress). */
typedef struct status_rank_s {
  int rank;
  msg_progress_t p;
} status_rank_t;

/* A LIST reply m: its keys appended to *keys (strdup'd; the array grown,
 * one spare slot), at most 65,536 in all. */
void status__keys_add(const proto_msg_t *m, char ***keys, size_t *nkeys);
/* An MGET reply m of the nkeys keys: the values of keys ending in "/RANK"
 * that decode as progress, into *rk (calloc'd, sorted by rank; NULL when
 * the reply is not an array of nkeys), *nrk of them. */
void status__ranks(const proto_msg_t *m, char *const *keys, size_t nkeys,
                   status_rank_t **rk, size_t *nrk);

/* A duration in seconds as `launch status` prints it (42s, 5m03s, 3h07m),
 * ">99999h" beyond and "-" for a negative or NaN; an ETA is another node's
 * step time times the steps left, any double. */
void status__fmt_duration(double s, char *out, size_t cap);

/* `launch ckpt --ranks`: "0-3,8" into *out (malloc'd), *n ranks. RET 0 or
 * -1. */
int ckpt__parse_ranks(const char *s, int **out, size_t *n);

#endif
