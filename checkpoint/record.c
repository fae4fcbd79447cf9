/* record.c - the small documents of launch's layout (docs/checkpoints.md):
 * a rank's record (completion file, store value), the manifest, `latest`.
 * All are read back from disk or from the store, so every decoder checks
 * every field it uses and says which one is wrong. */
#include <stdlib.h>
#include <string.h>

#include "ck_int.h"
#include "lu_buf.h"

#define CK_FORMAT "launch-checkpoint"
#define CK_VERSION 1

int ck_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= CKPT_NAME_MAX || strcmp(s, ".") == 0 ||
      strcmp(s, "..") == 0)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '/' || (unsigned char)s[i] < 0x20)
      return 0;
  return 1;
}

void ck_shard_name(int rank, char *buf, size_t n) {
  snprintf(buf, n, "rank-%d.bin", rank);
}

static int ck_sha_ok(const char *s, size_t len) {
  if (len != 64)
    return 0;
  for (size_t i = 0; i < 64; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return 0;
  return 1;
}

static int64_t ck_ms(double t) { return (int64_t)(t * 1000.0 + 0.5); }

/* ---- a rank's record ----------------------------------------------------------- */

int ck_record_encode(const ck_record_t *r, char **out, size_t *len) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  lu_json_init(&j, &b, 0);
  lu_json_obj(&j, NULL);
  lu_json_int(&j, "rank", r->rank);
  lu_json_str(&j, "file", r->file);
  lu_json_int(&j, "size", (long long)r->size);
  if (r->sha[0])
    lu_json_str(&j, "sha256", r->sha);
  if (r->time > 0)
    lu_json_int(&j, "time_ms", (long long)ck_ms(r->time));
  if (r->world_size > 0)
    lu_json_int(&j, "world_size", r->world_size);
  lu_json_bool(&j, "replicated", r->replicated);
  if (r->write_s > 0)
    lu_json_int(&j, "write_ms", (long long)ck_ms(r->write_s));
  lu_json_end_obj(&j);
  return lu_buf_finish(&b, out, len);
}

/* The optional fields common to records and manifests. */
static int ck_opt_bool(const cj_t *o, const char *key, int *out, char *why,
                       size_t n) {
  const cj_t *v = cj_get(o, key);
  if (v == NULL)
    return 0;
  if (v->type != CJ_BOOL) {
    lu_errf(why, n, "\"%s\" is not true or false", key);
    return CKPT_EFORMAT;
  }
  *out = v->b;
  return 0;
}

static int ck_get_sha(const cj_t *o, char *sha, int required, char *why,
                      size_t n) {
  const cj_t *v = cj_get(o, "sha256");
  sha[0] = '\0';
  if (v == NULL) {
    if (!required)
      return 0;
    lu_errf(why, n, "\"sha256\" is missing");
    return CKPT_EFORMAT;
  }
  if (v->type != CJ_STR || !ck_sha_ok(v->s, v->slen)) {
    lu_errf(why, n, "\"sha256\" is not 64 lower-case hex digits");
    return CKPT_EFORMAT;
  }
  memcpy(sha, v->s, 65);
  return 0;
}

static int ck_get_file(const cj_t *o, int rank, char *file, char *why,
                       size_t n) {
  const cj_t *v = cj_get(o, "file");
  if (v == NULL) {
    ck_shard_name(rank, file, CKPT_NAME_MAX);
    return 0;
  }
  if (v->type != CJ_STR || !ck_name_ok(v->s)) {
    lu_errf(why, n, "\"file\" is not a plain file name in the step "
            "directory");
    return CKPT_EFORMAT;
  }
  memcpy(file, v->s, v->slen + 1);
  return 0;
}

/* Parse a document that must be a JSON object. */
static int ck_parse_object(const char *buf, size_t len, cj_doc_t **doc,
                           const cj_t **root, char *why, size_t whylen) {
  int rc = cj_parse(buf, len, doc, root, why, whylen);
  if (rc == 0 && (*root)->type != CJ_OBJ) {
    lu_errf(why, whylen, "not a JSON object");
    cj_free(*doc);
    return CKPT_EFORMAT;
  }
  return rc;
}

/* "time_ms" when present. */
static int ck_opt_time(const cj_t *o, double *t, char *why, size_t n) {
  const cj_t *v = cj_get(o, "time_ms");
  int64_t x;
  if (v == NULL)
    return 0;
  if (cj_int(v, 0, INT64_MAX, &x) != 0) {
    lu_errf(why, n, "\"time_ms\" is not a non-negative integer");
    return CKPT_EFORMAT;
  }
  *t = (double)x / 1000.0;
  return 0;
}

int ck_record_decode(const char *buf, size_t len, int rank_hint,
                     ck_record_t *r, char *why, size_t whylen) {
  cj_doc_t *doc;
  const cj_t *root, *v;
  int64_t x;
  int rc;
  memset(r, 0, sizeof(*r));
  if ((rc = ck_parse_object(buf, len, &doc, &root, why, whylen)) != 0)
    return rc;
  rc = CKPT_EFORMAT;
  v = cj_get(root, "rank");
  if (v != NULL) {
    if (cj_int(v, 0, CK_MAX_WORLD - 1, &x) != 0) {
      lu_errf(why, whylen, "\"rank\" is not an integer in 0..%d",
              CK_MAX_WORLD - 1);
      goto out;
    }
    if (rank_hint >= 0 && x != rank_hint) {
      lu_errf(why, whylen, "\"rank\" is %lld but the file is rank %d's",
              (long long)x, rank_hint);
      goto out;
    }
    r->rank = (int)x;
  } else if (rank_hint >= 0) {
    r->rank = rank_hint;
  } else {
    lu_errf(why, whylen, "\"rank\" is missing");
    goto out;
  }
  if (cj_int(cj_get(root, "size"), 0, INT64_MAX, &x) != 0) {
    lu_errf(why, whylen, "\"size\" is missing or not a non-negative integer");
    goto out;
  }
  r->size = (uint64_t)x;
  if (ck_get_file(root, r->rank, r->file, why, whylen) != 0 ||
      ck_get_sha(root, r->sha, 0, why, whylen) != 0 ||
      ck_opt_bool(root, "replicated", &r->replicated, why, whylen) != 0)
    goto out;
  if (ck_opt_time(root, &r->time, why, whylen) != 0)
    goto out;
  if ((v = cj_get(root, "write_ms")) != NULL) {
    if (cj_int(v, 0, INT64_MAX, &x) != 0) {
      lu_errf(why, whylen, "\"write_ms\" is not a non-negative integer");
      goto out;
    }
    r->write_s = (double)x / 1000.0;
  }
  if ((v = cj_get(root, "world_size")) != NULL) {
    if (cj_int(v, 1, CK_MAX_WORLD, &x) != 0) {
      lu_errf(why, whylen, "\"world_size\" is not an integer in 1..%d",
              CK_MAX_WORLD);
      goto out;
    }
    r->world_size = (int)x;
  }
  rc = 0;
out:
  cj_free(doc);
  return rc;
}

/* ---- the manifest ------------------------------------------------------------------ */

int ck_manifest_encode(const ck_manifest_t *m, char **out, size_t *len) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  char iso[40];
  lu_iso8601(m->time, iso, sizeof(iso));
  lu_json_init(&j, &b, 1);
  lu_json_obj(&j, NULL);
  lu_json_str(&j, "format", CK_FORMAT);
  lu_json_int(&j, "version", CK_VERSION);
  lu_json_str(&j, "job", m->job);
  lu_json_int(&j, "step", (long long)m->step);
  lu_json_int(&j, "generation", (long long)m->round);
  lu_json_int(&j, "world_size", m->world_size);
  lu_json_bool(&j, "replicated", m->replicated);
  lu_json_str(&j, "time", iso);
  lu_json_int(&j, "time_ms", (long long)ck_ms(m->time));
  lu_json_arr(&j, "shards");
  for (int r = 0; r < m->world_size; r++) {
    const ck_record_t *s = &m->shards[r];
    lu_json_obj(&j, NULL);
    lu_json_int(&j, "rank", r);
    lu_json_str(&j, "file", s->file);
    lu_json_int(&j, "size", (long long)s->size);
    lu_json_str(&j, "sha256", s->sha);
    if (s->write_s > 0)
      lu_json_int(&j, "write_ms", (long long)ck_ms(s->write_s));
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  lu_json_end_obj(&j);
  return lu_buf_finish(&b, out, len);
}

void ck_manifest_free(ck_manifest_t *m) {
  free(m->shards);
  m->shards = NULL;
}

int ck_manifest_decode(const char *buf, size_t len, ck_manifest_t *m,
                       char *why, size_t whylen) {
  cj_doc_t *doc;
  const cj_t *root, *v, *sh;
  int64_t x;
  int rc;
  memset(m, 0, sizeof(*m));
  if ((rc = ck_parse_object(buf, len, &doc, &root, why, whylen)) != 0)
    return rc;
  rc = CKPT_EFORMAT;
  v = cj_get(root, "format");
  if (v == NULL || v->type != CJ_STR || strcmp(v->s, CK_FORMAT) != 0) {
    lu_errf(why, whylen, "\"format\" is not \"%s\"", CK_FORMAT);
    goto out;
  }
  if (cj_int(cj_get(root, "version"), 1, INT64_MAX, &x) != 0) {
    lu_errf(why, whylen, "\"version\" is missing");
    goto out;
  }
  if (x > CK_VERSION) {
    lu_errf(why, whylen, "manifest version %lld is newer than this launch "
            "reads (%d): upgrade launch", (long long)x, CK_VERSION);
    goto out;
  }
  if (cj_int(cj_get(root, "step"), 0, INT64_MAX, &m->step) != 0) {
    lu_errf(why, whylen, "\"step\" is missing or negative");
    goto out;
  }
  if (cj_int(cj_get(root, "world_size"), 1, CK_MAX_WORLD, &x) != 0) {
    lu_errf(why, whylen, "\"world_size\" is not an integer in 1..%d",
            CK_MAX_WORLD);
    goto out;
  }
  m->world_size = (int)x;
  if ((v = cj_get(root, "job")) != NULL) {
    if (v->type != CJ_STR || v->slen >= sizeof(m->job)) {
      lu_errf(why, whylen, "\"job\" is not a string of at most %zu bytes",
              sizeof(m->job) - 1);
      goto out;
    }
    memcpy(m->job, v->s, v->slen + 1);
  }
  if ((v = cj_get(root, "generation")) != NULL &&
      cj_int(v, 0, INT64_MAX, &m->round) != 0) {
    lu_errf(why, whylen, "\"generation\" is not a non-negative integer");
    goto out;
  }
  if (ck_opt_time(root, &m->time, why, whylen) != 0)
    goto out;
  if (ck_opt_bool(root, "replicated", &m->replicated, why, whylen) != 0)
    goto out;
  sh = cj_get(root, "shards");
  if (sh == NULL || sh->type != CJ_ARR || sh->n != (size_t)m->world_size) {
    lu_errf(why, whylen, "\"shards\" is not an array of world_size (%d) "
            "entries", m->world_size);
    goto out;
  }
  if ((m->shards = calloc((size_t)m->world_size, sizeof(*m->shards))) ==
      NULL) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  for (const cj_t *s = sh->first; s; s = s->next) {
    ck_record_t *r;
    if (s->type != CJ_OBJ ||
        cj_int(cj_get(s, "rank"), 0, m->world_size - 1, &x) != 0) {
      lu_errf(why, whylen, "a shard has no \"rank\" in 0..%d",
              m->world_size - 1);
      goto out;
    }
    r = &m->shards[x];
    if (r->file[0]) {
      lu_errf(why, whylen, "rank %lld is listed twice", (long long)x);
      goto out;
    }
    r->rank = (int)x;
    if (ck_get_file(s, r->rank, r->file, why, whylen) != 0 ||
        ck_get_sha(s, r->sha, 1, why, whylen) != 0)
      goto out;
    if (cj_int(cj_get(s, "size"), 0, INT64_MAX, &x) != 0) {
      lu_errf(why, whylen, "rank %d's \"size\" is missing or negative",
              r->rank);
      goto out;
    }
    r->size = (uint64_t)x;
  }
  rc = 0;
out:
  if (rc != 0)
    ck_manifest_free(m);
  cj_free(doc);
  return rc;
}

/* ---- latest --------------------------------------------------------------------- */

int ck_parse_step_name(const char *name, int64_t *step) {
  const char *d;
  size_t n;
  if (strncmp(name, "step-", 5) != 0)
    return -1;
  d = name + 5;
  n = strlen(d);
  if (n == 0 || n > 18 || (n > 1 && d[0] == '0'))
    return -1;
  for (size_t i = 0; i < n; i++)
    if (d[i] < '0' || d[i] > '9')
      return -1;
  return lu_parse_i64(d, n, step) == 0 ? 0 : -1;
}

int ck_latest_decode(const char *buf, size_t len, int64_t *step) {
  char tmp[64];
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
                     buf[len - 1] == ' ' || buf[len - 1] == '\t'))
    len--;
  if (len == 0 || len >= sizeof(tmp) || memchr(buf, '\0', len))
    return CKPT_EFORMAT;
  memcpy(tmp, buf, len);
  tmp[len] = '\0';
  return ck_parse_step_name(tmp, step) == 0 ? 0 : CKPT_EFORMAT;
}
