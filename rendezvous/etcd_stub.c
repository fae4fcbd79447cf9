/* etcd_stub.c - the etcd client of a build without libcurl (etcd.h):
 * --rdzv-backend etcd is refused with a message saying so. */
#include <stdio.h>

#include "etcd.h"
#include "rdzv.h"

int etcd_supported(void) { return 0; }

int etcd_new(const etcd_config_t *cfg, etcd_t **out, char *err, size_t n) {
  (void)cfg;
  *out = NULL;
  snprintf(err, n, "--rdzv-backend etcd: this launch was built without "
                   "libcurl (install libcurl's development files, e.g. "
                   "Debian's libcurl4-openssl-dev, and build again), or use "
                   "--rdzv-backend c10d");
  return RDZV_ENOTSUP;
}

void etcd_free(etcd_t *e) { (void)e; }
const char *etcd_last_error(const etcd_t *e) { (void)e; return ""; }
const char *etcd_member(const etcd_t *e) { (void)e; return ""; }
int etcd_grant(etcd_t *e, int64_t t, etcd_reply_t *r) {
  (void)e, (void)t, (void)r;
  return RDZV_ENOTSUP;
}
int etcd_keepalive(etcd_t *e, int64_t l, etcd_reply_t *r) {
  (void)e, (void)l, (void)r;
  return RDZV_ENOTSUP;
}
int etcd_revoke(etcd_t *e, int64_t l) {
  (void)e, (void)l;
  return RDZV_ENOTSUP;
}
int etcd_get(etcd_t *e, const char *k, etcd_reply_t *r) {
  (void)e, (void)k, (void)r;
  return RDZV_ENOTSUP;
}
int etcd_put(etcd_t *e, const char *k, const char *v, int64_t l) {
  (void)e, (void)k, (void)v, (void)l;
  return RDZV_ENOTSUP;
}
int etcd_create(etcd_t *e, const char *k, const char *v, int64_t l,
                etcd_reply_t *r) {
  (void)e, (void)k, (void)v, (void)l, (void)r;
  return RDZV_ENOTSUP;
}
int etcd_put_if(etcd_t *e, const char *g, int64_t gr, const char *k,
                const char *v, int64_t l, etcd_reply_t *r) {
  (void)e, (void)g, (void)gr, (void)k, (void)v, (void)l, (void)r;
  return RDZV_ENOTSUP;
}
int etcd_delete_if(etcd_t *e, const char *k, int64_t rev, etcd_reply_t *r) {
  (void)e, (void)k, (void)rev, (void)r;
  return RDZV_ENOTSUP;
}
int etcd_watch(etcd_t *e, const char *p, int64_t s, int64_t ms,
               int (*on)(void *, const etcd_watch_msg_t *), void *arg) {
  (void)e, (void)p, (void)s, (void)ms, (void)on, (void)arg;
  return RDZV_ENOTSUP;
}
void etcd_watch_wake(etcd_t *e) { (void)e; }
void etcd_set_budget(etcd_t *e, uint64_t end_ms) { (void)e, (void)end_ms; }
void etcd_cut(etcd_t *e, uint64_t at_ms) { (void)e, (void)at_ms; }
