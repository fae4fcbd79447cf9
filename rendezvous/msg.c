/* msg.c - the rendezvous messages: one field table per message, walked by
 * one generic packer, unpacker and destructor. A field's key is its name
 * in the struct unless the row says otherwise. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu.h"
#include "msg.h"
#include "proto.h"

/* F_OI64, F_OF64: optional numbers, packed only when the int at aux (the
 * has_ flag) is set; unpack sets it. */
typedef enum {
  F_I64, F_BOOL, F_F64, F_STR, F_DSTR, F_STRV, F_SUB, F_ARR, F_OI64, F_OF64,
  F_OSTR /* as F_STR, left out when empty */
} ftype_t;

typedef struct mdesc_s mdesc_t;

typedef struct mfield_s {
  const char *key;
  ftype_t type;
  size_t off;          /* the member */
  size_t size;         /* F_STR: its size; F_SUB, F_ARR: the element's */
  size_t aux;          /* F_STRV, F_ARR: the size_t count; F_SUB: int has_ */
  const mdesc_t *sub;  /* F_SUB, F_ARR */
  int64_t dflt;        /* F_I64 */
} mfield_t;

struct mdesc_s {
  const char *name;    /* in messages: "JOIN" */
  const mfield_t *f;
  size_t n;
};

#define MEMBER(T, f) offsetof(T, f), sizeof(((T *)0)->f)
#define I64(T, f, d) {#f, F_I64, offsetof(T, f), 0, 0, NULL, d}
#define BOOL(T, f) {#f, F_BOOL, offsetof(T, f), 0, 0, NULL, 0}
#define F64(T, f) {#f, F_F64, offsetof(T, f), 0, 0, NULL, 0}
#define STR(T, f) {#f, F_STR, MEMBER(T, f), 0, NULL, 0}
#define OSTR(T, f) {#f, F_OSTR, MEMBER(T, f), 0, NULL, 0}
#define DSTR(T, f) {#f, F_DSTR, offsetof(T, f), 0, 0, NULL, 0}
#define STRV(T, f) {#f, F_STRV, offsetof(T, f), 0, offsetof(T, n##f), NULL, 0}
#define SUB(T, f, has, D)                                                      \
  {#f, F_SUB, MEMBER(T, f), offsetof(T, has), &D, 0}
#define ARR(T, f, E, D)                                                        \
  {#f, F_ARR, offsetof(T, f), sizeof(E), offsetof(T, n##f), &D, 0}
#define OI64(T, f) {#f, F_OI64, offsetof(T, f), 0, offsetof(T, has_##f), NULL, 0}
#define OF64(T, f) {#f, F_OF64, offsetof(T, f), 0, offsetof(T, has_##f), NULL, 0}
#define DESC(name, rows) {name, rows, sizeof(rows) / sizeof(rows[0])}

static const mfield_t failure_f[] = {
    STR(msg_failure_t, host),         I64(msg_failure_t, rank, -1),
    I64(msg_failure_t, local_rank, -1), I64(msg_failure_t, node_rank, -1),
    I64(msg_failure_t, pid, 0),       I64(msg_failure_t, exit_code, -1),
    I64(msg_failure_t, signal, 0),    F64(msg_failure_t, time),
    DSTR(msg_failure_t, tail),        DSTR(msg_failure_t, error),
    DSTR(msg_failure_t, attempt_dir), I64(msg_failure_t, no_restart, 0),
};
static const mdesc_t failure_d = DESC("failure", failure_f);

static const mfield_t join_f[] = {
    STR(msg_join_t, host),           STR(msg_join_t, addr),
    I64(msg_join_t, nproc, 1),       I64(msg_join_t, rank, -1),
    I64(msg_join_t, min, 1),         I64(msg_join_t, max, 1),
    I64(msg_join_t, last_call_ms, 30000),
    I64(msg_join_t, join_timeout_ms, 600000),
    I64(msg_join_t, heartbeat_ms, 5000),
    I64(msg_join_t, max_restarts, 0),
    {"static", F_BOOL, offsetof(msg_join_t, is_static), 0, 0, NULL, 0},
    BOOL(msg_join_t, allow_mismatch), I64(msg_join_t, master_port, 0),
    STRV(msg_join_t, expected),      DSTR(msg_join_t, fingerprint),
    BOOL(msg_join_t, hosting),       I64(msg_join_t, prev_round, -1),
    I64(msg_join_t, prev_restarts, 0), I64(msg_join_t, survivors, 0),
    I64(msg_join_t, quorum, 0),
};
static const mdesc_t join_d = DESC("JOIN", join_f);

static const mfield_t round_f[] = {
    I64(msg_round_t, round, 0),     I64(msg_round_t, node_rank, 0),
    I64(msg_round_t, nnodes, 1),    I64(msg_round_t, world_size, 1),
    I64(msg_round_t, base_rank, 0), I64(msg_round_t, master_port, 0),
    STR(msg_round_t, addr),         STR(msg_round_t, node0_addr),
    STR(msg_round_t, node0_host),   I64(msg_round_t, restarts, 0),
    STRV(msg_round_t, succ_hosts),  STRV(msg_round_t, succ_addrs),
};
static const mdesc_t round_d = DESC("round", round_f);

static const mfield_t report_f[] = {
    I64(msg_report_t, round, -1), BOOL(msg_report_t, ok),
    SUB(msg_report_t, failure, has_failure, failure_d),
};
static const mdesc_t report_d = DESC("REPORT", report_f);

static const mfield_t leave_f[] = {STR(msg_leave_t, reason)};
static const mdesc_t leave_d = DESC("LEAVE", leave_f);

static const mfield_t restart_f[] = {I64(msg_restart_t, round, 0),
                                     DSTR(msg_restart_t, reason)};
static const mdesc_t restart_d = DESC("RESTART", restart_f);

static const mfield_t shutdown_f[] = {
    BOOL(msg_shutdown_t, ok), DSTR(msg_shutdown_t, reason),
    SUB(msg_shutdown_t, root, has_root, failure_d),
    I64(msg_shutdown_t, restarts, 0), I64(msg_shutdown_t, max_restarts, 0),
};
static const mdesc_t shutdown_d = DESC("SHUTDOWN", shutdown_f);

static const mfield_t member_f[] = {
    STR(msg_member_t, host),          STR(msg_member_t, addr),
    I64(msg_member_t, node_rank, -1), I64(msg_member_t, nproc, 1),
    I64(msg_member_t, base_rank, -1), STR(msg_member_t, state),
    I64(msg_member_t, heartbeat_age_ms, 0), BOOL(msg_member_t, in_round),
    I64(msg_member_t, exit_code, -1), I64(msg_member_t, signal, 0),
};
static const mdesc_t member_d = DESC("member", member_f);

static const mfield_t status_f[] = {
    STR(msg_status_t, job),           STR(msg_status_t, state),
    I64(msg_status_t, round, -1),     I64(msg_status_t, restarts, 0),
    I64(msg_status_t, max_restarts, 0), I64(msg_status_t, min, 0),
    I64(msg_status_t, max, 0),        I64(msg_status_t, waited_ms, 0),
    DSTR(msg_status_t, reason),       STRV(msg_status_t, expected),
    ARR(msg_status_t, members, msg_member_t, member_d),
    I64(msg_status_t, ok, -1),        F64(msg_status_t, end_time),
    I64(msg_status_t, keep_ms, 0),
    SUB(msg_status_t, root, has_root, failure_d),
};
static const mdesc_t status_d = DESC("STATUS", status_f);

static const mfield_t progress_f[] = {
    I64(msg_progress_t, step, 0),      I64(msg_progress_t, time_ms, 0),
    OF64(msg_progress_t, loss),        OF64(msg_progress_t, grad_norm),
    OF64(msg_progress_t, lr),          OF64(msg_progress_t, step_time),
    OI64(msg_progress_t, tokens),      OI64(msg_progress_t, total_steps),
    OF64(msg_progress_t, compute_time), OSTR(msg_progress_t, tag),
};
static const mdesc_t progress_d = DESC("PROGRESS", progress_f);

/* Lists longer than this are refused (a job of this many nodes). */
#define MSG_MAX_LIST 65536

#define AT(m, f, type) ((type *)((char *)(m) + (f)->off))
#define COUNT(m, f) ((size_t *)((char *)(m) + (f)->aux))
#define HAS(m, f) ((int *)((char *)(m) + (f)->aux))

static void init(const mdesc_t *d, void *m) {
  for (size_t i = 0; i < d->n; i++)
    if (d->f[i].type == F_I64)
      *AT(m, &d->f[i], int64_t) = d->f[i].dflt;
    else if (d->f[i].type == F_SUB)
      init(d->f[i].sub, AT(m, &d->f[i], char));
}

static void release(const mdesc_t *d, void *m) {
  for (size_t i = 0; i < d->n; i++) {
    const mfield_t *f = &d->f[i];
    switch (f->type) {
    case F_DSTR:
      free(*AT(m, f, char *));
      *AT(m, f, char *) = NULL;
      break;
    case F_STRV: {
      char **v = *AT(m, f, char **);
      for (size_t k = 0; v && k < *COUNT(m, f); k++)
        free(v[k]);
      free(v);
      *AT(m, f, char **) = NULL;
      *COUNT(m, f) = 0;
      break;
    }
    case F_SUB:
      if (*HAS(m, f))
        release(f->sub, AT(m, f, char));
      *HAS(m, f) = 0;
      break;
    case F_ARR: {
      char *v = *AT(m, f, char *);
      for (size_t k = 0; v && k < *COUNT(m, f); k++)
        release(f->sub, v + k * f->size);
      free(v);
      *AT(m, f, char *) = NULL;
      *COUNT(m, f) = 0;
      break;
    }
    default:
      break;
    }
  }
}

static int present(const mfield_t *f, const void *m) {
  if (f->type == F_DSTR)
    return *AT(m, f, char *const) != NULL;
  if (f->type == F_SUB || f->type == F_OI64 || f->type == F_OF64)
    return *HAS(m, f);
  if (f->type == F_OSTR)
    return AT(m, f, const char)[0] != '\0';
  return 1;
}

static void pack(msgpack_packer *pk, const mdesc_t *d, const void *m) {
  uint32_t n = 0;
  for (size_t i = 0; i < d->n; i++)
    n += (uint32_t)present(&d->f[i], m);
  msgpack_pack_map(pk, n);
  for (size_t i = 0; i < d->n; i++) {
    const mfield_t *f = &d->f[i];
    if (!present(f, m))
      continue;
    proto_pack_str(pk, f->key);
    switch (f->type) {
    case F_I64:
    case F_OI64:
      msgpack_pack_int64(pk, *AT(m, f, const int64_t));
      break;
    case F_BOOL:
      if (*AT(m, f, const int))
        msgpack_pack_true(pk);
      else
        msgpack_pack_false(pk);
      break;
    case F_F64:
    case F_OF64:
      msgpack_pack_double(pk, *AT(m, f, const double));
      break;
    case F_STR:
    case F_OSTR:
      proto_pack_str(pk, AT(m, f, const char));
      break;
    case F_DSTR:
      proto_pack_str(pk, *AT(m, f, char *const));
      break;
    case F_STRV: {
      char *const *v = *AT(m, f, char *const *);
      size_t k, cnt = *COUNT(m, f);
      msgpack_pack_array(pk, (uint32_t)cnt);
      for (k = 0; k < cnt; k++)
        proto_pack_str(pk, v[k]);
      break;
    }
    case F_SUB:
      pack(pk, f->sub, AT(m, f, const char));
      break;
    case F_ARR: {
      const char *v = *AT(m, f, const char *const);
      size_t cnt = *COUNT(m, f);
      msgpack_pack_array(pk, (uint32_t)cnt);
      for (size_t k = 0; k < cnt; k++)
        pack(pk, f->sub, v + k * f->size);
      break;
    }
    }
  }
}

static int bad(char *err, size_t n, const char *fmt, ...) LU_PRINTF(3, 4);
static int bad(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  if (err && n) {
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return RDZV_EPROTO;
}

/* A string without NUL bytes: they would cut it in C. */
static int text(const msgpack_object *o, const char **p, size_t *len) {
  return proto_obj_bytes(o, p, len) == 0 && memchr(*p, '\0', *len) == NULL
             ? 0
             : -1;
}

static char *dup_text(const char *p, size_t len) {
  char *s = malloc(len + 1);
  if (s) {
    memcpy(s, p, len);
    s[len] = '\0';
  }
  return s;
}

static int unpack(const msgpack_object *o, const mdesc_t *d, void *m,
                  char *err, size_t n);

static int unpack_field(const msgpack_object *v, const mdesc_t *d,
                        const mfield_t *f, void *m, char *err, size_t n) {
  const char *p;
  size_t len;
  int rc;
  switch (f->type) {
  case F_I64:
  case F_OI64:
    if (proto_obj_i64(v, AT(m, f, int64_t)) != 0)
      return bad(err, n, "%s: '%s' is not an integer", d->name, f->key);
    if (f->type == F_OI64)
      *HAS(m, f) = 1;
    return 0;
  case F_BOOL:
    if (v->type == MSGPACK_OBJECT_BOOLEAN)
      *AT(m, f, int) = v->via.boolean;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      *AT(m, f, int) = v->via.u64 != 0;
    else
      return bad(err, n, "%s: '%s' is not true or false", d->name, f->key);
    return 0;
  case F_F64:
  case F_OF64:
    if (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32)
      *AT(m, f, double) = v->via.f64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      *AT(m, f, double) = (double)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
      *AT(m, f, double) = (double)v->via.i64;
    else
      return bad(err, n, "%s: '%s' is not a number", d->name, f->key);
    if (f->type == F_OF64)
      *HAS(m, f) = 1;
    return 0;
  case F_STR:
  case F_OSTR:
    if (text(v, &p, &len) != 0 || len >= f->size)
      return bad(err, n, "%s: '%s' is not a string of at most %zu bytes",
                 d->name, f->key, f->size - 1);
    memcpy(AT(m, f, char), p, len);
    AT(m, f, char)[len] = '\0';
    return 0;
  case F_DSTR:
    if (text(v, &p, &len) != 0)
      return bad(err, n, "%s: '%s' is not a string", d->name, f->key);
    return (*AT(m, f, char *) = dup_text(p, len)) ? 0 : RDZV_ENOMEM;
  case F_STRV: {
    char **list;
    if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > MSG_MAX_LIST)
      return bad(err, n, "%s: '%s' is not a list of strings", d->name, f->key);
    if ((list = calloc(v->via.array.size + 1, sizeof(char *))) == NULL)
      return RDZV_ENOMEM;
    *AT(m, f, char **) = list;
    for (uint32_t k = 0; k < v->via.array.size; k++) {
      if (text(&v->via.array.ptr[k], &p, &len) != 0)
        return bad(err, n, "%s: '%s' is not a list of strings", d->name,
                   f->key);
      if ((list[k] = dup_text(p, len)) == NULL)
        return RDZV_ENOMEM;
      *COUNT(m, f) = k + 1;
    }
    return 0;
  }
  case F_SUB:
    *HAS(m, f) = 1;
    return unpack(v, f->sub, AT(m, f, char), err, n);
  case F_ARR: {
    char *arr;
    if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > MSG_MAX_LIST)
      return bad(err, n, "%s: '%s' is not a list", d->name, f->key);
    if ((arr = calloc(v->via.array.size + 1, f->size)) == NULL)
      return RDZV_ENOMEM;
    *AT(m, f, char *) = arr;
    for (uint32_t k = 0; k < v->via.array.size; k++) {
      *COUNT(m, f) = k + 1;
      if ((rc = unpack(&v->via.array.ptr[k], f->sub, arr + k * f->size, err,
                       n)) != 0)
        return rc;
    }
    return 0;
  }
  }
  return 0;
}

/* On failure m holds what was read so far: the caller releases it. */
static int unpack(const msgpack_object *o, const mdesc_t *d, void *m,
                  char *err, size_t n) {
  init(d, m);
  if (o == NULL || o->type != MSGPACK_OBJECT_MAP)
    return bad(err, n, "%s: expected a map", d->name);
  for (size_t i = 0; i < d->n; i++) {
    const msgpack_object *v = proto_map_get(o, d->f[i].key);
    int rc;
    if (v == NULL || v->type == MSGPACK_OBJECT_NIL)
      continue;
    if ((rc = unpack_field(v, d, &d->f[i], m, err, n)) != 0)
      return rc;
  }
  return 0;
}

#define MSG_DEFINE(name, type, desc)                                           \
  void msg_##name##_init(type *m) {                                            \
    memset(m, 0, sizeof(*m));                                                  \
    init(&desc, m);                                                            \
  }                                                                            \
  void msg_##name##_pack(msgpack_packer *pk, const type *m) {                  \
    pack(pk, &desc, m);                                                        \
  }                                                                            \
  int msg_##name##_unpack(const msgpack_object *o, type *m, char *err,         \
                          size_t errlen) {                                     \
    int rc;                                                                    \
    memset(m, 0, sizeof(*m));                                                  \
    if ((rc = unpack(o, &desc, m, err, errlen)) != 0)                          \
      msg_##name##_free(m);                                                    \
    return rc;                                                                 \
  }                                                                            \
  void msg_##name##_free(type *m) { release(&desc, m); }

MSG_DEFINE(failure, msg_failure_t, failure_d)
MSG_DEFINE(join, msg_join_t, join_d)
MSG_DEFINE(round, msg_round_t, round_d)
MSG_DEFINE(report, msg_report_t, report_d)
MSG_DEFINE(leave, msg_leave_t, leave_d)
MSG_DEFINE(restart, msg_restart_t, restart_d)
MSG_DEFINE(shutdown, msg_shutdown_t, shutdown_d)
MSG_DEFINE(member, msg_member_t, member_d)
MSG_DEFINE(status, msg_status_t, status_d)
MSG_DEFINE(progress, msg_progress_t, progress_d)

/* "<step> <unix ms>[ <tag>]", the writers before scalars (the tag:
 * LAUNCH_PROGRESS_TAG, no space in it). */
static int progress_text(const char *p, size_t n, msg_progress_t *m) {
  int64_t v[2] = {0, 0};
  size_t i = 0;
  for (int k = 0; k < 2; k++) {
    size_t start = i;
    if (k == 1) {
      if (i >= n || p[i] != ' ')
        return -1;
      start = ++i;
    }
    while (i < n && p[i] >= '0' && p[i] <= '9') {
      if (v[k] > (INT64_MAX - 9) / 10)
        return -1;
      v[k] = v[k] * 10 + (p[i++] - '0');
    }
    if (i == start)
      return -1;
  }
  if (i < n && p[i] == ' ') {
    size_t t = n - i - 1;
    if (t == 0 || t >= sizeof(m->tag) || memchr(p + i + 1, ' ', t) ||
        memchr(p + i + 1, '\0', t))
      return -1;
    memcpy(m->tag, p + i + 1, t);
    m->tag[t] = '\0';
    i = n;
  }
  if (i != n)
    return -1;
  m->step = v[0];
  m->time_ms = v[1];
  return 0;
}

int msg_progress_decode(const void *p, size_t n, msg_progress_t *m,
                        char *err, size_t errlen) {
  msgpack_unpacked u;
  size_t off = 0;
  int rc;
  msg_progress_init(m);
  if (n > 0 && ((const char *)p)[0] >= '0' && ((const char *)p)[0] <= '9')
    return progress_text(p, n, m) == 0
               ? 0
               : bad(err, errlen, "PROGRESS: '%.*s' is not '<step> <unix ms> "
                     "[<tag>]'",
                     (int)LU_MIN(n, 40), (const char *)p);
  /* A map of at most 8 small fields: checked before decoding. */
  if (n == 0 || n > 4 * MSG_PROGRESS_MAX ||
      (((const uint8_t *)p)[0] & 0xf0) != 0x80)
    return bad(err, errlen, "PROGRESS: neither a msgpack map of at most 15 "
               "fields nor '<step> <unix ms>'");
  /* Walked before msgpack-c allocates: a field declaring an array of 2^31
   * items in a few bytes must not make it allocate for them. */
  {
    proto_limits_t lim = {4 * MSG_PROGRESS_MAX, 64, 2};
    if (proto_scan(p, n, &lim) != 0)
      return bad(err, errlen, "PROGRESS: not one msgpack map of scalars");
  }
  msgpack_unpacked_init(&u);
  if (msgpack_unpack_next(&u, p, n, &off) != MSGPACK_UNPACK_SUCCESS ||
      off != n) {
    msgpack_unpacked_destroy(&u);
    return bad(err, errlen, "PROGRESS: not one msgpack map");
  }
  rc = msg_progress_unpack(&u.data, m, err, errlen);
  msgpack_unpacked_destroy(&u);
  if (rc == 0 && (m->step < 0 || m->time_ms < 0))
    rc = bad(err, errlen, "PROGRESS: a negative step or time");
  return rc;
}

size_t msg_progress_encode(const msg_progress_t *m, void *buf, size_t cap) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  size_t n = 0;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msg_progress_pack(&pk, m);
  if (sb.data != NULL && sb.size <= cap) {
    memcpy(buf, sb.data, sb.size);
    n = sb.size;
  }
  msgpack_sbuffer_destroy(&sb);
  return n;
}

int msg_failure_copy(msg_failure_t *dst, const msg_failure_t *src) {
  *dst = *src;
  dst->tail = src->tail ? strdup(src->tail) : NULL;
  dst->error = src->error ? strdup(src->error) : NULL;
  dst->attempt_dir = src->attempt_dir ? strdup(src->attempt_dir) : NULL;
  if ((src->tail && !dst->tail) || (src->error && !dst->error) ||
      (src->attempt_dir && !dst->attempt_dir)) {
    msg_failure_free(dst);
    return RDZV_ENOMEM;
  }
  return 0;
}
