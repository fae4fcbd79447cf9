/* cmd_vals.c - what `launch status` (cmd_status.c) reads back from the
 * server and `launch ckpt` (cmd_ckpt.c) reads from its command line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_vals.h"
#include "lu.h"

static int by_rank(const void *x, const void *y) {
  const status_rank_t *a = x, *b = y;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

void status__keys_add(const proto_msg_t *m, char ***keys, size_t *nkeys) {
  const msgpack_object *items;
  uint32_t cnt;
  if (proto_arg_array(m, 0, &items, &cnt) == 0 && cnt > 0) {
    char **k = realloc(*keys, (*nkeys + cnt + 1) * sizeof(char *));
    if (k != NULL) {
      *keys = k;
      for (uint32_t i = 0; i < cnt && *nkeys < 65536; i++) {
        const char *p;
        size_t n;
        if (proto_obj_bytes(&items[i], &p, &n) != 0 ||
            (k[*nkeys] = strndup(p, n)) == NULL)
          continue;
        (*nkeys)++;
      }
    }
  }
}

void status__ranks(const proto_msg_t *m, char *const *keys, size_t nkeys,
                   status_rank_t **rk, size_t *nrk) {
  const msgpack_object *items;
  uint32_t cnt;
  if (proto_arg_array(m, 0, &items, &cnt) == 0 && cnt == nkeys &&
      (*rk = calloc(cnt + 1, sizeof(status_rank_t))) != NULL) {
    for (uint32_t i = 0; i < cnt; i++) {
      const char *p, *k = strrchr(keys[i], '/');
      size_t n;
      int r;
      if (proto_obj_bytes(&items[i], &p, &n) != 0 || k == NULL ||
          lu_parse_int(k + 1, 0, 1 << 30, &r) != 0 ||
          msg_progress_decode(p, n, &(*rk)[*nrk].p, NULL, 0) != 0)
        continue;
      (*rk)[(*nrk)++].rank = r;
    }
    qsort(*rk, *nrk, sizeof(status_rank_t), by_rank);
  }
}

int ckpt__parse_ranks(const char *s, int **out, size_t *n) {
  int *v = NULL;
  size_t k = 0, cap = 0;
  const char *p = s;
  *out = NULL;
  *n = 0;
  while (*p) {
    char *e;
    long a = strtol(p, &e, 10), b;
    if (e == p || a < 0 || a > 1 << 20)
      goto bad;
    b = a;
    p = e;
    if (*p == '-') {
      b = strtol(p + 1, &e, 10);
      if (e == p + 1 || b < a || b > 1 << 20)
        goto bad;
      p = e;
    }
    for (long r = a; r <= b; r++) {
      if (k == cap) {
        int *nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof(*v));
        if (nv == NULL)
          goto bad;
        v = nv;
      }
      v[k++] = (int)r;
    }
    if (*p == ',')
      p++;
    else if (*p)
      goto bad;
  }
  if (k == 0)
    goto bad;
  *out = v;
  *n = k;
  return 0;
bad:
  free(v);
  return -1;
}

void status__fmt_duration(double s, char *out, size_t cap) {
  if (s < 0 || s != s)
    snprintf(out, cap, "-");
  else if (s < 120)
    snprintf(out, cap, "%.0fs", s);
  else if (s < 7200)
    snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else if (s < 100000.0 * 3600)
    snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
  else /* and +Inf: past int, (int) is undefined */
    snprintf(out, cap, ">99999h");
}
