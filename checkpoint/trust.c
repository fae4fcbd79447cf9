/* trust.c - what a long-lived agent already knows to be intact (ckpt.h,
 * "what an agent already knows to be intact").
 *
 * Per shard path: the identity from stat(2) (device, inode, size, mtime and
 * ctime in ns) and the SHA-256 the file was seen to hold with it. A write
 * to the file moves its ctime (the kernel sets it; utimensat cannot set it
 * back), a replacement by rename changes the inode: either way the entry
 * no longer matches and the shard is hashed again.
 *
 * Entries are learnt two ways: a verification that hashed the file with
 * the same identity before and after the read, or a commit this process
 * saw (ckpt_trust_learn), for shards whose ctime is older than their
 * manifest's. The cache is bounded: the oldest entry goes first. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_int.h"

#define CK_TRUST_MAX 4096 /* shards remembered */

typedef struct ck_trust_ent_s {
  char *path;
  ck_fid_t id;
  char sha[CK_SHA_HEX];
  uint64_t age; /* insertion order */
} ck_trust_ent_t;

struct ckpt_trust_s {
  pthread_mutex_t mu;
  ck_trust_ent_t *ents;
  size_t n, cap;
  uint64_t clock;
};

int ckpt_trust_new(ckpt_trust_t **out) {
  ckpt_trust_t *t = calloc(1, sizeof(*t));
  *out = NULL;
  if (t == NULL)
    return RDZV_ENOMEM;
  pthread_mutex_init(&t->mu, NULL);
  *out = t;
  return 0;
}

void ckpt_trust_free(ckpt_trust_t *t) {
  if (t == NULL)
    return;
  for (size_t i = 0; i < t->n; i++)
    free(t->ents[i].path);
  free(t->ents);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

static ck_trust_ent_t *ck_trust_find(ckpt_trust_t *t, const char *path) {
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->ents[i].path, path) == 0)
      return &t->ents[i];
  return NULL;
}

int ck_trust_has(ckpt_trust_t *t, const char *path, const ck_fid_t *id,
                 const char *sha) {
  const ck_trust_ent_t *e;
  int ok;
  if (t == NULL || sha == NULL || sha[0] == '\0')
    return 0;
  pthread_mutex_lock(&t->mu);
  e = ck_trust_find(t, path);
  ok = e != NULL && memcmp(&e->id, id, sizeof(*id)) == 0 &&
       strcmp(e->sha, sha) == 0;
  pthread_mutex_unlock(&t->mu);
  return ok;
}

void ck_trust_put(ckpt_trust_t *t, const char *path, const ck_fid_t *id,
                  const char *sha) {
  ck_trust_ent_t *e;
  if (t == NULL || sha == NULL || strlen(sha) != CK_SHA_HEX - 1)
    return;
  pthread_mutex_lock(&t->mu);
  e = ck_trust_find(t, path);
  if (e == NULL && t->n == CK_TRUST_MAX) {
    size_t old = 0; /* full: reuse the oldest entry */
    for (size_t i = 1; i < t->n; i++)
      if (t->ents[i].age < t->ents[old].age)
        old = i;
    e = &t->ents[old];
    free(e->path);
    e->path = NULL;
  }
  if (e == NULL) {
    if (t->n == t->cap) {
      size_t cap = t->cap ? t->cap * 2 : 16;
      ck_trust_ent_t *v = realloc(t->ents, cap * sizeof(*v));
      if (v == NULL)
        goto out; /* not remembered: hashed again next time */
      t->ents = v;
      t->cap = cap;
    }
    e = &t->ents[t->n++];
    e->path = NULL;
  }
  if (e->path == NULL && (e->path = strdup(path)) == NULL) {
    *e = t->ents[--t->n]; /* drop the slot */
    goto out;
  }
  e->id = *id;
  memcpy(e->sha, sha, CK_SHA_HEX);
  e->age = ++t->clock;
out:
  pthread_mutex_unlock(&t->mu);
}
