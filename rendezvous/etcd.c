/* etcd.c - the etcd v3 JSON gateway through libcurl (etcd.h). Blocking;
 * one client per thread. Built only when CMake finds libcurl's header:
 * without it, etcd_new says so (etcd_stub.c). libcurl itself is loaded at
 * run time, by the first etcd_new: linked, it and its twenty libraries
 * (GnuTLS, Kerberos, LDAP...) would be loaded by every launch process,
 * with or without etcd. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the functions, not the type-checking macros around them */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

static struct {
  CURLcode (*global_init)(long);
  CURL *(*easy_init)(void);
  void (*easy_cleanup)(CURL *);
  void (*easy_reset)(CURL *);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_perform)(CURL *);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  const char *(*easy_strerror)(CURLcode);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_cleanup)(CURLM *);
  CURLMcode (*multi_add_handle)(CURLM *, CURL *);
  CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
  CURLMcode (*multi_perform)(CURLM *, int *);
  CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned, int,
                          int *);
  CURLMcode (*multi_wakeup)(CURLM *);
  CURLMsg *(*multi_info_read)(CURLM *, int *);
} cu;
static char cu_error[512]; /* why libcurl did not load; "" when it did */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

#define curl_global_init cu.global_init
#define curl_easy_init cu.easy_init
#define curl_easy_cleanup cu.easy_cleanup
#define curl_easy_reset cu.easy_reset
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_easy_setopt cu.easy_setopt
#define curl_easy_perform cu.easy_perform
#define curl_easy_getinfo cu.easy_getinfo
#define curl_easy_strerror cu.easy_strerror
#define curl_slist_append cu.slist_append
#define curl_slist_free_all cu.slist_free_all

/* libcurl (LAUNCH_CURL_LIBRARY names another file), and its global init,
 * which must run once before any thread uses it. */
static void cu_load(void) {
  const char *name = getenv("LAUNCH_CURL_LIBRARY");
  void *h = dlopen(name && name[0] ? name : "libcurl.so.4",
                   RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(cu_error, sizeof(cu_error), "the etcd backend needs libcurl "
             "(Debian's libcurl4): %s", dlerror());
    return;
  }
#define CU_SYM(f, n) *(void **)&cu.f = dlsym(h, n)
  CU_SYM(global_init, "curl_global_init");
  CU_SYM(easy_init, "curl_easy_init");
  CU_SYM(easy_cleanup, "curl_easy_cleanup");
  CU_SYM(easy_reset, "curl_easy_reset");
  CU_SYM(easy_setopt, "curl_easy_setopt");
  CU_SYM(easy_perform, "curl_easy_perform");
  CU_SYM(easy_getinfo, "curl_easy_getinfo");
  CU_SYM(easy_strerror, "curl_easy_strerror");
  CU_SYM(slist_append, "curl_slist_append");
  CU_SYM(slist_free_all, "curl_slist_free_all");
  CU_SYM(multi_init, "curl_multi_init");
  CU_SYM(multi_cleanup, "curl_multi_cleanup");
  CU_SYM(multi_add_handle, "curl_multi_add_handle");
  CU_SYM(multi_remove_handle, "curl_multi_remove_handle");
  CU_SYM(multi_perform, "curl_multi_perform");
  CU_SYM(multi_poll, "curl_multi_poll");
  CU_SYM(multi_wakeup, "curl_multi_wakeup");
  CU_SYM(multi_info_read, "curl_multi_info_read");
#undef CU_SYM
  if (!cu.global_init || !cu.easy_init || !cu.easy_cleanup ||
      !cu.easy_reset || !cu.easy_setopt || !cu.easy_perform ||
      !cu.easy_getinfo || !cu.easy_strerror || !cu.slist_append ||
      !cu.slist_free_all || !cu.multi_init || !cu.multi_cleanup ||
      !cu.multi_add_handle || !cu.multi_remove_handle ||
      !cu.multi_perform || !cu.multi_poll || !cu.multi_wakeup ||
      !cu.multi_info_read) {
    snprintf(cu_error, sizeof(cu_error), "%s is not a libcurl the etcd "
             "backend can use (a function is missing)",
             name && name[0] ? name : "libcurl.so.4");
    return;
  }
  if (cu.global_init(CURL_GLOBAL_DEFAULT) != 0)
    snprintf(cu_error, sizeof(cu_error), "libcurl does not initialise");
}

#include "etcd.h"
#include "lu.h"
#include "rdzv.h"

#define ETCD_MAX_MEMBERS 16
#define ETCD_MAX_BODY (1u << 20)

struct etcd_s {
  CURL *curl;
  char members[ETCD_MAX_MEMBERS][300]; /* "http://host:port" */
  size_t nmembers, cur;
  char cacert[4096], cert[4096], key[4096];
  char user[256], password[256];
  char token[512];
  char auth_header[600];
  int64_t timeout_ms;
  uint64_t budget_end;  /* etcd_set_budget's, 0 none */
  uint64_t cut_at;      /* etcd_cut's, 0 none: atomic (any thread) */
  char last_error[1024];
  /* the reply being read */
  char *body;
  size_t len;
  int too_big;
  /* the watch (etcd_watch): its own handle, in a multi that wake ends */
  CURL *wcurl;
  CURLM *multi;
  char *line;
  size_t llen;
  int wrc;              /* what ended it: 0, or an error */
  int wdone;            /* on() said enough */
  int wgot;             /* the member answered the watch (a byte came) */
  int wsilent;          /* it did not in the watch's time (500 ms or more) */
  int (*won)(void *, const etcd_watch_msg_t *);
  void *warg;
};

int etcd_supported(void) { return 1; }

static size_t on_data(char *p, size_t sz, size_t nm, void *arg) {
  etcd_t *e = arg;
  size_t n = sz * nm;
  char *nb;
  if (e->len + n > ETCD_MAX_BODY) {
    e->too_big = 1;
    return 0;
  }
  nb = realloc(e->body, e->len + n + 1);
  if (nb == NULL)
    return 0;
  e->body = nb;
  memcpy(e->body + e->len, p, n);
  e->len += n;
  e->body[e->len] = '\0';
  return n;
}

/* One member of the list: a URL, or HOST[:PORT] (2379). */
static int add_member(etcd_t *e, const char *item, int https, char *err,
                      size_t n) {
  lu_endpoint_t ep;
  size_t l = strlen(item);
  if (e->nmembers == ETCD_MAX_MEMBERS) {
    snprintf(err, n, "--rdzv-endpoint: more than %d etcd members",
             ETCD_MAX_MEMBERS);
    return RDZV_EINVAL;
  }
  if (!strncmp(item, "http://", 7) || !strncmp(item, "https://", 8)) {
    if (l >= sizeof(e->members[0]) || strpbrk(item, " \"\\") != NULL) {
      snprintf(err, n, "--rdzv-endpoint: etcd member '%s' is not a URL "
                       "(http://HOST:PORT)", item);
      return RDZV_EINVAL;
    }
    lu_strlcpy(e->members[e->nmembers], item, sizeof(e->members[0]));
    l = strlen(e->members[e->nmembers]);
    while (l > 0 && e->members[e->nmembers][l - 1] == '/')
      e->members[e->nmembers][--l] = '\0';
  } else {
    if (lu_endpoint_parse(item, 2379, &ep) != 0 || ep.is_unix ||
        ep.host[0] == '\0' || ep.port == 0) {
      snprintf(err, n, "--rdzv-endpoint: etcd member '%s' does not parse: "
                       "use HOST:PORT (2379 by default), [IPV6]:PORT or a "
                       "URL, comma-separated", item);
      return RDZV_EINVAL;
    }
    snprintf(e->members[e->nmembers], sizeof(e->members[0]),
             strchr(ep.host, ':') ? "%s://[%s]:%d" : "%s://%s:%d",
             https ? "https" : "http", ep.host, ep.port);
  }
  e->nmembers++;
  return 0;
}

int etcd_new(const etcd_config_t *cfg, etcd_t **out, char *err, size_t n) {
  etcd_t *e;
  const char *p = cfg->endpoints, *c;
  char item[300];
  pthread_once(&cu_once, cu_load);
  if (cu_error[0]) {
    snprintf(err, n, "%s", cu_error);
    return RDZV_ENOTSUP;
  }
  if ((e = calloc(1, sizeof(*e))) == NULL)
    return RDZV_ENOMEM;
  for (;;) {
    size_t l;
    c = strchr(p, ',');
    l = c ? (size_t)(c - p) : strlen(p);
    if (l >= sizeof(item)) {
      snprintf(err, n, "--rdzv-endpoint: an etcd member is too long");
      free(e);
      return RDZV_EINVAL;
    }
    if (l > 0) {
      memcpy(item, p, l);
      item[l] = '\0';
      if (add_member(e, item, cfg->https, err, n) != 0) {
        free(e);
        return RDZV_EINVAL;
      }
    }
    if (c == NULL)
      break;
    p = c + 1;
  }
  if (e->nmembers == 0) {
    snprintf(err, n, "--rdzv-endpoint: no etcd member given");
    free(e);
    return RDZV_EINVAL;
  }
  if (cfg->cacert)
    lu_strlcpy(e->cacert, cfg->cacert, sizeof(e->cacert));
  if (cfg->cert)
    lu_strlcpy(e->cert, cfg->cert, sizeof(e->cert));
  if (cfg->key)
    lu_strlcpy(e->key, cfg->key, sizeof(e->key));
  if (cfg->user && cfg->user[0]) {
    const char *colon = strchr(cfg->user, ':');
    size_t ul = colon ? (size_t)(colon - cfg->user) : strlen(cfg->user);
    if (ul >= sizeof(e->user))
      ul = sizeof(e->user) - 1;
    memcpy(e->user, cfg->user, ul);
    e->user[ul] = '\0';
    lu_strlcpy(e->password, colon ? colon + 1
                                  : cfg->password ? cfg->password : "",
               sizeof(e->password));
  }
  e->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 2000;
  if ((e->curl = curl_easy_init()) == NULL ||
      (e->wcurl = curl_easy_init()) == NULL ||
      (e->multi = cu.multi_init()) == NULL) {
    if (e->wcurl)
      curl_easy_cleanup(e->wcurl);
    if (e->curl)
      curl_easy_cleanup(e->curl);
    free(e);
    return RDZV_ENOMEM;
  }
  *out = e;
  return 0;
}

void etcd_free(etcd_t *e) {
  if (e == NULL)
    return;
  curl_easy_cleanup(e->curl);
  cu.multi_cleanup(e->multi);
  curl_easy_cleanup(e->wcurl);
  free(e->line);
  free(e->body);
  free(e);
}

const char *etcd_last_error(const etcd_t *e) { return e->last_error; }
const char *etcd_member(const etcd_t *e) { return e->members[e->cur]; }

/* A JSON string's inside: quote, backslash and control characters
 * escaped. RET 0, -1 when it does not fit. */
static int json_escape(const char *s, char *out, size_t cap) {
  size_t o = 0;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (o + 7 >= cap)
      return -1;
    if (c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
  return 0;
}

void etcd_set_budget(etcd_t *e, uint64_t end_ms) { e->budget_end = end_ms; }

void etcd_cut(etcd_t *e, uint64_t at_ms) {
  __atomic_store_n(&e->cut_at, at_ms, __ATOMIC_SEQ_CST);
  cu.multi_wakeup(e->multi); /* the wait of the moment looks again */
}

static uint64_t cut_at(etcd_t *e) {
  return __atomic_load_n(&e->cut_at, __ATOMIC_SEQ_CST);
}

/* Run handle c, set up, in e->multi until it ends, or until etcd_cut's
 * time (its wakeup ends the wait). RET its CURLcode, or
 * CURLE_ABORTED_BY_CALLBACK when cut short. */
static CURLcode perform(etcd_t *e, CURL *c) {
  CURLcode cc = CURLE_GOT_NOTHING;
  int running = 1, done = 0;
  if (cu.multi_add_handle(e->multi, c) != CURLM_OK)
    return CURLE_OUT_OF_MEMORY;
  while (!done) {
    CURLMsg *msg;
    int left;
    uint64_t cut, now;
    if (cu.multi_perform(e->multi, &running) != CURLM_OK)
      break;
    while ((msg = cu.multi_info_read(e->multi, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == c) {
        cc = msg->data.result;
        done = 1;
      }
    if (done || !running)
      break;
    cut = cut_at(e);
    now = lu_now_ms();
    if (cut && now >= cut) {
      cc = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    if (cu.multi_poll(e->multi, NULL, 0,
                      (int)(cut ? LU_MIN(cut - now, 1000) : 1000),
                      NULL) != CURLM_OK)
      break;
  }
  cu.multi_remove_handle(e->multi, c);
  return cc;
}

/* How long one member may take when `left` members (it included) may still
 * be asked: timeout_ms, or less under a budget (etcd_set_budget). */
static int64_t try_ms(const etcd_t *e, size_t left) {
  uint64_t now = lu_now_ms();
  int64_t rest;
  if (e->budget_end == 0)
    return e->timeout_ms;
  rest = e->budget_end > now ? (int64_t)(e->budget_end - now) : 0;
  rest /= (int64_t)(left > 0 ? left : 1);
  return LU_MIN(e->timeout_ms, LU_MAX(rest, ETCD_MIN_TRY_MS));
}

/* Set handle c up for a POST of body to url (JSON, the token, TLS), its
 * reply to wf, for timeout_ms at most. RET the headers to free after. */
static struct curl_slist *setup(etcd_t *e, CURL *c, const char *url,
                                const char *body, int64_t timeout_ms,
                                size_t (*wf)(char *, size_t, size_t,
                                             void *)) {
  struct curl_slist *h = NULL;
  curl_easy_reset(c);
  h = curl_slist_append(h, "Content-Type: application/json");
  if (e->token[0]) {
    snprintf(e->auth_header, sizeof(e->auth_header), "Authorization: %s",
             e->token);
    h = curl_slist_append(h, e->auth_header);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   (long)LU_MIN(timeout_ms, 1000));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, wf);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
  if (e->cacert[0])
    curl_easy_setopt(c, CURLOPT_CAINFO, e->cacert);
  if (e->cert[0])
    curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert);
  if (e->key[0])
    curl_easy_setopt(c, CURLOPT_SSLKEY, e->key);
  return h;
}

/* POST body to one member, for ms at most. RET 0 (decoded into r),
 * -EHOSTUNREACH (it did not answer), RDZV_EPROTO, -ECANCELED (etcd_cut).
 * last_error says what happened. */
static int post_one(etcd_t *e, size_t m, const char *path, const char *body,
                    int64_t ms, etcd_reply_t *r) {
  char url[400], derr[256];
  struct curl_slist *h = NULL;
  CURLcode cc;
  long status = 0;
  int rc;
  uint64_t cut = cut_at(e), now = lu_now_ms();
  snprintf(url, sizeof(url), "%s%s", e->members[m], path);
  if (cut && now >= cut) {
    snprintf(e->last_error, sizeof(e->last_error), "%s%s: out of time, not "
             "asked", e->members[m], path);
    return -ECANCELED;
  }
  if (cut)
    ms = LU_MIN(ms, (int64_t)(cut - now)); /* 1 or more: 0 is no limit */
  e->len = 0;
  e->too_big = 0;
  h = setup(e, e->curl, url, body, ms, on_data);
  cc = perform(e, e->curl);
  curl_slist_free_all(h);
  if (cc == CURLE_ABORTED_BY_CALLBACK) {
    snprintf(e->last_error, sizeof(e->last_error), "%s%s: out of time, cut "
             "short", e->members[m], path);
    return -ECANCELED;
  }
  if (cc != CURLE_OK) {
    /* a member that wants a client certificate ends the TLS 1.3 session
     * after the handshake: it looks like a network error */
    int no_cert = (cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR) &&
                  e->cert[0] == '\0' &&
                  !strncmp(e->members[m], "https:", 6);
    snprintf(e->last_error, sizeof(e->last_error), "%s: %s%s%s",
             e->members[m], curl_easy_strerror(cc),
             e->too_big ? " (reply over 1 MiB)" : "",
             no_cert ? " (if etcd requires client certificates "
                       "(--client-cert-auth), give --rdzv-conf cert=F,key=F)"
                     : "");
    /* TLS that cannot work (a CA or certificate file, the member's
     * certificate, a handshake the member refuses) is no outage */
    return cc == CURLE_SSL_CACERT_BADFILE || cc == CURLE_SSL_CERTPROBLEM ||
                   cc == CURLE_PEER_FAILED_VERIFICATION ||
                   cc == CURLE_SSL_CONNECT_ERROR
               ? RDZV_EAUTH
               : -EHOSTUNREACH;
  }
  curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
  rc = etcd_decode(e->body ? e->body : "", e->len, r, derr, sizeof(derr));
  if (rc != 0) {
    /* not etcd's v3 JSON gateway (its peer port 2380, another server, an
     * etcd before 3.4 or with the gateway off), or a member still starting
     * (its gateway answers without JSON): the next member is asked, and
     * the wait line says why none would do */
    snprintf(e->last_error, sizeof(e->last_error), "%s%s: HTTP %ld: %s%s",
             e->members[m], path, status, derr,
             status == 404 ? " (not etcd's v3 JSON gateway: give the "
                             "members' client addresses, port 2379 by "
                             "default, of etcd 3.4 or later)" : "");
    return -EHOSTUNREACH;
  }
  if (r->error)
    snprintf(e->last_error, sizeof(e->last_error), "%s%s: %s (code %" PRId64
             ")", e->members[m], path, r->message, r->code);
  return 0;
}

static int authenticate(etcd_t *e, size_t m, int64_t ms);

/* POST to the members, starting with the one that answered last; a member
 * that does not answer, or has no leader, passes it on. */
static int call(etcd_t *e, const char *path, const char *body,
                etcd_reply_t *r) {
  int rc = -EHOSTUNREACH, reauth = 0;
  for (size_t i = 0; i < e->nmembers; i++) {
    size_t m = (e->cur + i) % e->nmembers;
    int64_t ms = try_ms(e, e->nmembers - i);
    if (e->user[0] && e->token[0] == '\0') {
      rc = authenticate(e, m, ms);
      if (rc == -EHOSTUNREACH)
        continue;
      if (rc != 0)
        return rc;
    }
    rc = post_one(e, m, path, body, ms, r);
    if (rc == -EHOSTUNREACH)
      continue;
    if (rc != 0)
      return rc;
    if (r->error && (r->code == 14 || r->code == 4 ||
                     strstr(r->message, "leader") != NULL)) {
      rc = -EHOSTUNREACH; /* unavailable, no leader, timed out: next */
      continue;
    }
    if (r->error && e->user[0] && !reauth &&
        (r->code == 16 || strstr(r->message, "token") != NULL)) {
      e->token[0] = '\0'; /* expired: once more with a new one */
      reauth = 1;
      i--;
      continue;
    }
    e->cur = m;
    if (r->error && e->user[0] == '\0' &&
        strstr(r->message, "user name is empty") != NULL) {
      /* etcd with authentication on, and no user given (code 3) */
      size_t l = strlen(e->last_error);
      snprintf(e->last_error + l, sizeof(e->last_error) - l, " (etcd "
               "requires authentication: give --rdzv-conf user=NAME, the "
               "password in $LAUNCH_ETCD_PASSWORD)");
      return RDZV_EAUTH;
    }
    if (r->error)
      return r->code == 16 || r->code == 7 ? RDZV_EAUTH : RDZV_EPROTO;
    return 0;
  }
  return rc;
}

static int authenticate(etcd_t *e, size_t m, int64_t ms) {
  char u[600], p[600], body[1400];
  etcd_reply_t r;
  int rc;
  if (json_escape(e->user, u, sizeof(u)) != 0 ||
      json_escape(e->password, p, sizeof(p)) != 0)
    return RDZV_EINVAL;
  snprintf(body, sizeof(body), "{\"name\":\"%s\",\"password\":\"%s\"}", u, p);
  rc = post_one(e, m, "/v3/auth/authenticate", body, ms, &r);
  if (rc != 0)
    return rc;
  if (r.error) {
    if (r.code == 14 || strstr(r.message, "leader"))
      return -EHOSTUNREACH;
    return RDZV_EAUTH;
  }
  if (r.token[0] == '\0') {
    snprintf(e->last_error, sizeof(e->last_error), "%s: etcd gave no token "
             "for user %s (is authentication enabled there?)", e->members[m],
             e->user);
    return RDZV_EAUTH;
  }
  lu_strlcpy(e->token, r.token, sizeof(e->token));
  return 0;
}

static int b64s(const char *s, char *out, size_t cap) {
  return etcd_b64(s, strlen(s), out, cap) < 0 ? RDZV_ETOOBIG : 0;
}

int etcd_grant(etcd_t *e, int64_t ttl_s, etcd_reply_t *r) {
  char body[64];
  snprintf(body, sizeof(body), "{\"TTL\":%" PRId64 "}", ttl_s);
  return call(e, "/v3/lease/grant", body, r);
}

int etcd_keepalive(etcd_t *e, int64_t lease, etcd_reply_t *r) {
  char body[64];
  snprintf(body, sizeof(body), "{\"ID\":%" PRId64 "}", lease);
  return call(e, "/v3/lease/keepalive", body, r);
}

int etcd_revoke(etcd_t *e, int64_t lease) {
  char body[64];
  etcd_reply_t r;
  snprintf(body, sizeof(body), "{\"ID\":%" PRId64 "}", lease);
  return call(e, "/v3/lease/revoke", body, &r);
}

int etcd_get(etcd_t *e, const char *key, etcd_reply_t *r) {
  char k[1400], body[1500];
  if (b64s(key, k, sizeof(k)) != 0)
    return RDZV_ETOOBIG;
  snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
  return call(e, "/v3/kv/range", body, r);
}

int etcd_put(etcd_t *e, const char *key, const char *val, int64_t lease) {
  char k[1400], v[1400], body[4096];
  etcd_reply_t r;
  if (b64s(key, k, sizeof(k)) != 0 || b64s(val, v, sizeof(v)) != 0)
    return RDZV_ETOOBIG;
  snprintf(body, sizeof(body),
           "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":%" PRId64 "}", k, v,
           lease);
  return call(e, "/v3/kv/put", body, &r);
}

int etcd_create(etcd_t *e, const char *key, const char *val, int64_t lease,
                etcd_reply_t *r) {
  char k[1400], v[1400], body[8192];
  int rc;
  if (b64s(key, k, sizeof(k)) != 0 || b64s(val, v, sizeof(v)) != 0)
    return RDZV_ETOOBIG;
  snprintf(body, sizeof(body),
           "{\"compare\":[{\"key\":\"%s\",\"result\":\"EQUAL\","
           "\"target\":\"CREATE\",\"create_revision\":0}],"
           "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
           "\"lease\":%" PRId64 "}},{\"request_range\":{\"key\":\"%s\"}}],"
           "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
           k, k, v, lease, k, k);
  rc = call(e, "/v3/kv/txn", body, r);
  return rc;
}

int etcd_put_if(etcd_t *e, const char *guard, int64_t guard_rev,
                const char *key, const char *val, int64_t lease,
                etcd_reply_t *r) {
  char g[1400], k[1400], v[1400], body[8192];
  if (b64s(guard, g, sizeof(g)) != 0 || b64s(key, k, sizeof(k)) != 0 ||
      b64s(val, v, sizeof(v)) != 0)
    return RDZV_ETOOBIG;
  snprintf(body, sizeof(body),
           "{\"compare\":[{\"key\":\"%s\",\"result\":\"EQUAL\","
           "\"target\":\"CREATE\",\"create_revision\":%" PRId64 "}],"
           "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
           "\"lease\":%" PRId64 "}}]}", g, guard_rev, k, v, lease);
  return call(e, "/v3/kv/txn", body, r);
}

int etcd_delete_if(etcd_t *e, const char *key, int64_t rev, etcd_reply_t *r) {
  char k[1400], body[4096];
  if (b64s(key, k, sizeof(k)) != 0)
    return RDZV_ETOOBIG;
  snprintf(body, sizeof(body),
           "{\"compare\":[{\"key\":\"%s\",\"result\":\"EQUAL\","
           "\"target\":\"CREATE\",\"create_revision\":%" PRId64 "}],"
           "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}}]}",
           k, rev, k);
  return call(e, "/v3/kv/txn", body, r);
}

/* ---- the watch ----------------------------------------------------------- */

/* Whole lines of the stream, each decoded and given to won. */
static size_t on_watch_data(char *p, size_t sz, size_t nm, void *arg) {
  etcd_t *e = arg;
  size_t n = sz * nm, start = 0;
  char *nb, derr[256];
  e->wgot = 1;
  if (e->wdone || e->wrc)
    return 0;
  if (e->llen + n > ETCD_MAX_BODY) {
    snprintf(e->last_error, sizeof(e->last_error), "%s/v3/watch: a message "
             "over 1 MiB", e->members[e->cur]);
    e->wrc = RDZV_EPROTO;
    return 0;
  }
  if ((nb = realloc(e->line, e->llen + n + 1)) == NULL) {
    e->wrc = RDZV_ENOMEM;
    return 0;
  }
  e->line = nb;
  memcpy(e->line + e->llen, p, n);
  e->llen += n;
  for (size_t i = 0; i < e->llen && !e->wdone; i++) {
    etcd_watch_msg_t *m;
    if (e->line[i] != '\n')
      continue;
    if (i > start) {
      if ((m = malloc(sizeof(*m))) == NULL) {
        e->wrc = RDZV_ENOMEM;
        return 0;
      }
      if (etcd_watch_decode(e->line + start, i - start, m, derr,
                            sizeof(derr)) != 0) {
        snprintf(e->last_error, sizeof(e->last_error), "%s/v3/watch: %s",
                 e->members[e->cur], derr);
        e->wrc = RDZV_EPROTO;
      } else if (m->error) {
        snprintf(e->last_error, sizeof(e->last_error), "%s/v3/watch: %s "
                 "(code %" PRId64 ")", e->members[e->cur], m->message,
                 m->code);
        e->wrc = m->code == 16 || m->code == 7 ? RDZV_EAUTH : RDZV_EPROTO;
      } else if (e->won(e->warg, m) != 0) {
        e->wdone = 1;
      }
      free(m);
      if (e->wrc)
        return 0;
    }
    start = i + 1;
  }
  memmove(e->line, e->line + start, e->llen - start);
  e->llen -= start;
  return e->wdone ? 0 : n;
}

/* One watch on member cur, for max_ms at most. */
static int watch_one(etcd_t *e, const char *body, int64_t max_ms) {
  char url[400];
  struct curl_slist *h, *more;
  uint64_t start = lu_now_ms(), end = start + (uint64_t)max_ms;
  /* etcd answers a watch's creation at once: a member that does not, in a
   * request's time, is stopped or hung, and would keep the watch silent
   * while it holds the connection (a stopped process's kernel still takes
   * it); the next member is watched instead. A watch shorter than that
   * (until the lease's next renewal) that got no answer in half a second
   * moves the next one on (etcd_watch) without counting as a failure. */
  uint64_t answer_by = start + (uint64_t)LU_MAX(e->timeout_ms, 250);
  CURLcode cc = CURLE_OK;
  int running = 1, ended = 0, silent = 0;
  snprintf(url, sizeof(url), "%s/v3/watch", e->members[e->cur]);
  e->llen = 0;
  e->wrc = 0;
  e->wdone = 0;
  e->wgot = 0;
  e->wsilent = 0;
  h = setup(e, e->wcurl, url, body, max_ms, on_watch_data);
  /* a member cut off from etcd's leader ends the watch (clientv3's
   * WithRequireLeader) instead of keeping it open and silent */
  if ((more = curl_slist_append(h, "Grpc-Metadata-hasleader: true")))
    curl_easy_setopt(e->wcurl, CURLOPT_HTTPHEADER, h = more);
  cu.multi_add_handle(e->multi, e->wcurl);
  while (running && !ended) {
    CURLMsg *msg;
    int left, woken = 0;
    uint64_t now = lu_now_ms(), cut = cut_at(e);
    if (cu.multi_perform(e->multi, &running) != CURLM_OK)
      break;
    while ((msg = cu.multi_info_read(e->multi, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE)
        cc = msg->data.result;
    if (cut && cut < end)
      end = cut; /* etcd_cut: over by then, as max_ms */
    if (!running || now >= end)
      break;
    if (!e->wgot && now >= answer_by) {
      silent = 1;
      break;
    }
    /* curl_multi_wakeup ends the wait: numfds then is 0 and it is early */
    if (cu.multi_poll(e->multi, NULL, 0, (int)LU_MIN(end - now, 1000),
                      &woken) != CURLM_OK)
      break;
    if (e->won(e->warg, NULL) != 0)
      ended = 1; /* woken: etcd_watch_wake, and the caller has work */
  }
  cu.multi_remove_handle(e->multi, e->wcurl);
  curl_slist_free_all(h);
  if (e->wrc)
    return e->wrc;
  if (silent) {
    snprintf(e->last_error, sizeof(e->last_error), "%s/v3/watch: no answer "
             "in %.1f s (a member stopped or hung)", e->members[e->cur],
             (double)LU_MAX(e->timeout_ms, 250) / 1000.0);
    return -EHOSTUNREACH;
  }
  e->wsilent = !e->wgot && lu_now_ms() - start >= 500;
  if (e->wdone || ended || !running || cc == CURLE_OPERATION_TIMEDOUT) {
    if (cc != CURLE_OK && cc != CURLE_OPERATION_TIMEDOUT &&
        cc != CURLE_WRITE_ERROR && !e->wdone) {
      snprintf(e->last_error, sizeof(e->last_error), "%s/v3/watch: %s",
               e->members[e->cur], curl_easy_strerror(cc));
      return -EHOSTUNREACH;
    }
    if (!running && cc == CURLE_OK && !e->wdone && lu_now_ms() < end) {
      snprintf(e->last_error, sizeof(e->last_error), "%s/v3/watch: the "
               "stream ended", e->members[e->cur]);
      return -EHOSTUNREACH;
    }
    return 0;
  }
  return 0; /* max_ms */
}

int etcd_watch(etcd_t *e, const char *prefix, int64_t start_rev,
               int64_t max_ms, int (*on)(void *, const etcd_watch_msg_t *),
               void *arg) {
  char k[1400], end[1400], body[3000], pe[600];
  size_t l = strlen(prefix);
  int rc;
  if (l == 0 || l >= sizeof(pe))
    return RDZV_EINVAL;
  /* the range end of a prefix: its last byte plus one */
  memcpy(pe, prefix, l + 1);
  pe[l - 1] = (char)(pe[l - 1] + 1);
  if (b64s(prefix, k, sizeof(k)) != 0 || b64s(pe, end, sizeof(end)) != 0)
    return RDZV_ETOOBIG;
  snprintf(body, sizeof(body),
           "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\","
           "\"start_revision\":%" PRId64 "}}", k, end, start_rev);
  /* a token from the member watched: one that does not answer is passed
   * over as when it breaks the watch (else each watch would ask it) */
  rc = e->user[0] && e->token[0] == '\0'
           ? authenticate(e, e->cur, try_ms(e, e->nmembers))
           : 0;
  e->won = on;
  e->warg = arg;
  if (rc == 0)
    rc = watch_one(e, body, max_ms);
  if (rc == -EHOSTUNREACH || rc == RDZV_EPROTO || (rc == 0 && e->wsilent))
    e->cur = (e->cur + 1) % e->nmembers; /* the next one, next time */
  if (rc == RDZV_EAUTH)
    e->token[0] = '\0'; /* expired, perhaps: a new one next time */
  return rc;
}

void etcd_watch_wake(etcd_t *e) { cu.multi_wakeup(e->multi); }
