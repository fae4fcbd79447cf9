/* config.c - the job's configuration: one table of settings (flag, handler,
 * help), the command line and the environment read into it in one pass,
 * and what follows from them. */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "hang.h"
#include "launch.h"
#include "lu.h"

/* T_SIZE: bytes with an optional K, M, G suffix into a size_t or uint32_t
 * field; T_MS into an int64_t, or a uint32_t (then positive). */
typedef enum { T_BOOL, T_STR, T_INT, T_MS, T_CHOICE, T_WORD, T_SIZE, T_FN } type_t;

/* SEC_CMD_DEBUG: knobs for benchmarks and debugging, listed only by
 * --help-debug (as Redis flags its DEBUG_CONFIG rows). */
enum { SEC_NODES, SEC_RDZV, SEC_SUPERVISION, SEC_PROGRAM, SEC_LOGS, SEC_OWN,
       SEC_CMD_ENV, SEC_CMD_STATUS, SEC_CMD_DOCTOR, SEC_CMD_TOPO,
       SEC_CMD_SERVER, SEC_CMD_LIMITS, SEC_CMD_DEBUG, SEC_CMD_CKPT, SEC_ENV };

/* The headings of --help; a command's own without one go under
 * "options". */
static const char *const section_names[SEC_ENV] = {
    [SEC_NODES] = "nodes and processes", [SEC_RDZV] = "rendezvous",
    [SEC_SUPERVISION] = "supervision", [SEC_PROGRAM] = "program",
    [SEC_LOGS] = "logs", [SEC_OWN] = "launch's own",
    [SEC_CMD_LIMITS] = "limits (sizes take K, M, G suffixes; "
                       "docs/protocol.md#limits)",
    [SEC_CMD_DEBUG] = "debugging (benchmarks and bug reports; each also "
                      "from its LAUNCH_SERVER_* variable; not for "
                      "production)"};

typedef int (*set_fn)(cfg_t *c, int id, const char *v, char *err, size_t n);

/* One setting. A row without a flag is set from the environment only
 * (sched.c); a row without help is accepted and not listed. */
typedef struct setting_s {
  const char *flag;    /* "--nnodes" */
  const char *alt;     /* "-m" */
  const char *arg;     /* the value in --help; NULL: a flag without value */
  type_t type;
  size_t off, size;    /* the field (size 0: validated, not kept) */
  int min, max;        /* T_INT range; T_STR: min 1 refuses "" */
  const char *choices; /* T_CHOICE: "agent|rank0", the index is kept;
                          T_WORD: the same, the word is kept */
  set_fn fn;           /* T_FN */
  int section;
  const char *help;
} setting_t;

/* Rows: the setting, its flag (NULL: the environment only), its short form,
 * its value in --help (NULL: a flag without value), how it is set, the
 * section of --help and the help (NULL: accepted, not listed). */
#define ROW(id, flag, alt, arg, type, off, size, min, max, choices, fn, sec,  \
            help)                                                              \
  [CFG_S_##id] = {flag, alt,  arg, type,     off,       size,                  \
                  min,  max,  choices, fn, SEC_##sec, help}
#define OFF(f) offsetof(cfg_t, f)
#define SZ(f) sizeof(((cfg_t *)0)->f)
#define FN(id, flag, alt, arg, fn, sec, help)                                  \
  ROW(id, flag, alt, arg, T_FN, 0, 0, 0, 0, NULL, fn, sec, help)
#define STR(id, flag, alt, arg, f, min, sec, help)                             \
  ROW(id, flag, alt, arg, T_STR, OFF(f), SZ(f), min, 0, NULL, NULL, sec, help)
#define INT(id, flag, arg, f, min, max, sec, help)                             \
  ROW(id, flag, NULL, arg, T_INT, OFF(f), SZ(f), min, max, NULL, NULL, sec,   \
      help)
#define MS(id, flag, f, sec, help)                                             \
  ROW(id, flag, NULL, "SECONDS", T_MS, OFF(f), SZ(f), 0, 0, NULL, NULL, sec,  \
      help)
#define BOOL(id, flag, alt, f, sec, help)                                      \
  ROW(id, flag, alt, NULL, T_BOOL, OFF(f), SZ(f), 0, 0, NULL, NULL, sec, help)
#define CHOICE(id, flag, type, f, choices, sec, help)                          \
  ROW(id, flag, NULL, choices, type, OFF(f), SZ(f), 0, 0, choices, NULL, sec, \
      help)
/* Checked, and nothing kept. */
#define CHECK(id, flag, type, min, choices, sec, help)                         \
  ROW(id, flag, NULL, choices, type, 0, 0, min, 0, choices, NULL, sec, help)
/* `launch server`'s: a field of cfg.srv. */
#define SRV_OFF(f) (OFF(srv) + offsetof(srv_config_t, f))
#define SRV_SZ(f) sizeof(((srv_config_t *)0)->f)
#define SIZE(id, flag, arg, f, sec, help)                                      \
  ROW(id, flag, NULL, arg, T_SIZE, SRV_OFF(f), SRV_SZ(f), 0, 0, NULL, NULL,   \
      sec, help)
#define SRV_MS(id, flag, f, help)                                              \
  ROW(id, flag, NULL, "T", T_MS, SRV_OFF(f), SRV_SZ(f), 1, 0, NULL, NULL,     \
      CMD_LIMITS, help)
#define SRV_INT(id, flag, arg, f, min, max, help)                              \
  ROW(id, flag, NULL, arg, T_INT, SRV_OFF(f), SRV_SZ(f), min, max, NULL,      \
      NULL, CMD_DEBUG, help)
static const setting_t settings[CFG_S_COUNT];

#define fail(err, n, ...) (lu_errf(err, n, __VA_ARGS__), -1)

/* ---- value parsers -------------------------------------------------------------- */

/* "N" or "MIN:MAX". RET 0 or -1. */
static int parse_nnodes(const char *s, int *min, int *max) {
  const char *colon = strchr(s, ':');
  char a[32];
  if (colon == NULL)
    return lu_parse_int(s, 1, 1 << 20, min) == 0 ? (*max = *min, 0) : -1;
  if ((size_t)(colon - s) >= sizeof(a))
    return -1;
  memcpy(a, s, (size_t)(colon - s));
  a[colon - s] = '\0';
  if (lu_parse_int(a, 1, 1 << 20, min) != 0 ||
      lu_parse_int(colon + 1, 1, 1 << 20, max) != 0)
    return -1;
  return 0;
}

/* The items of a comma-separated list, one at a time, into item[cap].
 * RET 1 (an item), 0 (the end), -1 (empty or too long). */
static int next_item(const char **s, char *item, size_t cap) {
  size_t k;
  if (**s == '\0')
    return 0;
  k = strcspn(*s, ",");
  if (k == 0 || k >= cap)
    return -1;
  memcpy(item, *s, k);
  item[k] = '\0';
  *s += k + ((*s)[k] == ',');
  return 1;
}

/* A torchrun std spec "3" or "0:1,1:2" for nproc ranks into out[]. RET 0
 * or -1. */
static int parse_std_spec(const char *s, int nproc, unsigned *out) {
  char item[32], *colon;
  int v, r, got;
  if (strchr(s, ':') == NULL) {
    if (lu_parse_int(s, 0, 3, &v) != 0)
      return -1;
    for (int i = 0; i < nproc; i++)
      out[i] = (unsigned)v;
    return 0;
  }
  for (int i = 0; i < nproc; i++)
    out[i] = 0;
  while ((got = next_item(&s, item, sizeof(item))) > 0) {
    if ((colon = strchr(item, ':')) == NULL)
      return -1;
    *colon = '\0';
    if (lu_parse_int(item, 0, nproc - 1, &r) != 0 ||
        lu_parse_int(colon + 1, 0, 3, &v) != 0)
      return -1;
    out[r] = (unsigned)v;
  }
  return got;
}

/* What torchrun's RendezvousParameters.get_as_bool takes, in any case. */
static int parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"1", "true", "t", "yes", "y"};
  static const char *const no[] = {"0", "false", "f", "no", "n"};
  for (size_t i = 0; i < LU_ARRAY_SIZE(yes); i++) {
    if (!strcasecmp(s, yes[i]) || !strcasecmp(s, no[i])) {
      *out = !strcasecmp(s, yes[i]);
      return 0;
    }
  }
  return -1;
}

/* "agent|rank0" -> "agent or rank0"; "a|b|c" -> "a, b or c". */
static void choice_list(const char *choices, char *out, size_t cap) {
  size_t used = 0;
  int n = 1, i = 0;
  for (const char *p = choices; *p; p++)
    n += *p == '|';
  out[0] = '\0';
  for (const char *p = choices; *p && used < cap; i++) {
    size_t k = strcspn(p, "|");
    int w = snprintf(out + used, cap - used, "%s%.*s",
                     i == 0 ? "" : i == n - 1 ? " or " : ", ", (int)k, p);
    used += w > 0 ? (size_t)w : 0;
    p += k + (p[k] == '|');
  }
}

static int choice_index(const char *choices, const char *v) {
  size_t vl = strlen(v);
  int i = 0;
  for (const char *p = choices; *p; i++) {
    size_t k = strcspn(p, "|");
    if (k == vl && strncmp(p, v, k) == 0)
      return i;
    p += k + (p[k] == '|');
  }
  return -1;
}

/* ---- handlers ------------------------------------------------------------------- */

static int set_nnodes(cfg_t *c, int id, const char *v, char *err, size_t n) {
  if (parse_nnodes(v, &c->min_nodes, &c->max_nodes) != 0)
    return fail(err, n, "--nnodes: '%s' is not N or MIN:MAX with "
                        "0 < MIN <= MAX", v);
  if (c->min_nodes > c->max_nodes)
    return fail(err, n, "--nnodes %s: MIN is larger than MAX", v);
  return 0;
}

/* The number is decided once the GPUs are known (finish). */
static int set_nproc(cfg_t *c, int id, const char *v, char *err, size_t n) {
  int k;
  if (strcmp(v, "gpu") && strcmp(v, "cpu") && strcmp(v, "auto") &&
      lu_parse_int(v, 1, CFG_MAX_NPROC, &k) != 0)
    return fail(err, n, "--nproc-per-node: '%s' is not a number of "
                        "processes (1-%d), 'gpu', 'cpu' or 'auto'", v,
                CFG_MAX_NPROC);
  lu_strlcpy(c->nproc_spec, v, sizeof(c->nproc_spec));
  return 0;
}

static int set_backend(cfg_t *c, int id, const char *v, char *err, size_t n) {
  if (!strcmp(v, "c10d") || !strcmp(v, "launch"))
    c->backend = CFG_BACKEND_C10D;
  else if (!strcmp(v, "static"))
    c->backend = CFG_BACKEND_STATIC;
  else if (!strcmp(v, "etcd") || !strcmp(v, "etcd-v2"))
    c->backend = CFG_BACKEND_ETCD; /* torchrun's names; etcd v3 either way */
  else
    return fail(err, n, "--rdzv-backend: '%s' is not c10d, static or etcd",
                v);
  return 0;
}

static int set_endpoint(cfg_t *c, int id, const char *v, char *err, size_t n) {
  lu_endpoint_t ep;
  if (*v == '\0')
    return fail(err, n, "--rdzv-endpoint is empty: give HOST[:PORT] of the "
                        "launch server, or --standalone for one node");
  if (strlen(v) >= sizeof(c->endpoint_raw))
    return fail(err, n, "--rdzv-endpoint: longer than %zu characters",
                sizeof(c->endpoint_raw) - 1);
  lu_strlcpy(c->endpoint_raw, v, sizeof(c->endpoint_raw));
  c->endpoint_given = 1;
  if (strchr(v, ',') || !strncmp(v, "http://", 7) || !strncmp(v, "https://", 8))
    return 0; /* etcd's member list: checked by finish_rdzv */
  if (lu_endpoint_parse(v, RDZV_DEFAULT_PORT, &ep) != 0 || ep.is_unix)
    return fail(err, n, "--rdzv-endpoint: '%s' does not parse: use HOST, "
                        "HOST:PORT or [IPV6]:PORT (port 0-65535)", v);
  lu_strlcpy(c->endpoint_host, ep.host, sizeof(c->endpoint_host));
  c->endpoint_port = ep.port;
  c->endpoint_given = 1;
  return 0;
}

/* torchrun's --rdzv-conf keys. Durations land in the fields below. */
static const struct {
  const char *key;
  size_t off;   /* an int64_t of cfg_t; 0: see set_conf */
  int64_t min;  /* smallest value, ms */
  int etcd;     /* read by --rdzv-backend etcd only */
} conf_keys[] = {
    {"join_timeout", offsetof(cfg_t, join_timeout_ms), 1, 0},
    {"last_call_timeout", offsetof(cfg_t, last_call_timeout_ms), 0, 0},
    {"close_timeout", offsetof(cfg_t, close_timeout_ms), 0, 0},
    {"heartbeat", offsetof(cfg_t, heartbeat_ms), 10, 0},
    {"keep_alive_interval", offsetof(cfg_t, heartbeat_ms), 10, 0},
    {"read_timeout", offsetof(cfg_t, read_timeout_ms), 1, 0},
    {"timeout", offsetof(cfg_t, static_wait_ms), 1, 0},
    {"heartbeat_timeout", 0, 30, 0},
    {"keep_alive_max_attempt", 0, 0, 0},
    {"rank", 0, 0, 0},
    {"is_host", 0, 0, 0},
    {"store_type", 0, 0, 0},
    /* --rdzv-backend etcd (torchrun's etcd keys, and launch's) */
    {"protocol", 0, 0, 1},
    {"cacert", 0, 0, 1},
    {"cert", 0, 0, 1},
    {"key", 0, 0, 1},
    /* torchrun's etcd-v2 names of the three above */
    {"ca_cert", 0, 0, 1},
    {"ssl_cert", 0, 0, 1},
    {"ssl_cert_key", 0, 0, 1},
    {"user", 0, 0, 1},
    {"etcd_prefix", 0, 0, 1},
    {"lease_ttl", offsetof(cfg_t, etcd_ttl_ms), 2000, 1},
    {"store_port", 0, 0, 1},
};

/* One line of c->notes (a setting accepted that has no effect here). */
static void add_note(cfg_t *c, const char *fmt, ...) LU_PRINTF(2, 3);
static void add_note(cfg_t *c, const char *fmt, ...) {
  size_t u = strlen(c->notes);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->notes + u, sizeof(c->notes) - u, fmt, ap);
  va_end(ap);
  u = strlen(c->notes);
  if (u + 1 < sizeof(c->notes))
    lu_strlcpy(c->notes + u, "\n", sizeof(c->notes) - u);
}

/* s without the blanks around it, as torchrun's strip(). */
static char *trim_blanks(char *s) {
  while (isspace((unsigned char)*s))
    s++;
  lu_rtrim(s, strlen(s));
  return s;
}

/* "join_timeout, ...; with etcd: protocol, ..." from conf_keys. */
static void conf_key_list(char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t k = 0; k < LU_ARRAY_SIZE(conf_keys) && used < cap; k++) {
    int w = snprintf(out + used, cap - used, "%s%s",
                     k == 0                    ? ""
                     : conf_keys[k].etcd && !conf_keys[k - 1].etcd
                         ? "; with etcd: "
                         : ", ",
                     conf_keys[k].key);
    used += w > 0 ? (size_t)w : 0;
  }
}

/* torchrun's etcd_prefix: the path from etcd's root under which the job's
 * keys lie (as torchrun, a '/' is added when it does not end in one). etcd
 * v3 compares keys as bytes, so "/a//b" is no "/a/b": a role granted on
 * the one would refuse the other. RET 0, or -1 when v is not a path. */
static int etcd_prefix_set(cfg_t *c, const char *v) {
  size_t l = strlen(v);
  if (l == 0 || l > CFG_ETCD_PREFIX_MAX || v[0] != '/')
    return -1;
  for (size_t i = 0; i < l; i++)
    if (!isgraph((unsigned char)v[i]))
      return -1;
  for (const char *p = v; *p;) {
    const char *seg = p + 1, *e = strchr(seg, '/');
    size_t sl = e ? (size_t)(e - seg) : strlen(seg);
    /* "/", or a last '/': no empty part; otherwise none may be */
    if ((sl == 0 && e != NULL) || (sl == 1 && seg[0] == '.') ||
        (sl == 2 && seg[0] == '.' && seg[1] == '.'))
      return -1;
    if (e == NULL)
      break;
    p = e;
  }
  snprintf(c->etcd_prefix, sizeof(c->etcd_prefix), "%s%s", v,
           v[l - 1] == '/' ? "" : "/");
  return 0;
}

static int set_conf(cfg_t *c, int id, const char *s, char *err, size_t n) {
  char entry[512], *item, *eq;
  int got;
  while ((got = next_item(&s, entry, sizeof(entry))) != 0) {
    size_t k;
    if (got < 0) {
      if (*s == ',') { /* an empty entry */
        s++;
        continue;
      }
      return fail(err, n, "--rdzv-conf: entry too long");
    }
    /* torchrun strips each key and value: "a=1, b=2" is two keys */
    item = trim_blanks(entry);
    if (*item == '\0')
      continue;
    if ((eq = strchr(item, '=')) == NULL)
      return fail(err, n, "--rdzv-conf: '%s' needs a value (key=value)", item);
    *eq++ = '\0';
    item = trim_blanks(item);
    eq = trim_blanks(eq);
    if (*item == '\0' || *eq == '\0')
      return fail(err, n, "--rdzv-conf: '%s=%s' needs a key and a value "
                          "(key=value)", item, eq);
    for (k = 0; k < LU_ARRAY_SIZE(conf_keys); k++)
      if (!strcmp(item, conf_keys[k].key))
        break;
    if (k == LU_ARRAY_SIZE(conf_keys)) {
      /* torchrun ignores the keys its backend does not read (a job spec
       * written for another backend runs); a typo is said, not fatal */
      char known[512];
      conf_key_list(known, sizeof(known));
      add_note(c, "--rdzv-conf: unknown key '%s' ignored (known: %s)", item,
               known);
      continue;
    }
    if (!strcmp(item, "rank")) {
      char *end;
      long r = strtol(eq, &end, 10);
      if (*end != '\0' || end == eq || r < 0 || r >= (1 << 20))
        return fail(err, n, "--rdzv-conf rank: '%s' is not a node rank "
                            "(0, 1, ...)", eq);
      c->conf_rank = (int)r;
    } else if (!strcmp(item, "keep_alive_max_attempt")) {
      add_note(c, "--rdzv-conf keep_alive_max_attempt=%s has no effect: a "
                  "node silent for 3 heartbeats is dropped (set the bound "
                  "with heartbeat_timeout)", eq);
    } else if (!strcmp(item, "heartbeat_timeout")) {
      int64_t ms;
      if (lu_parse_duration_ms(eq, &ms) != 0 || ms < conf_keys[k].min)
        return fail(err, n, "--rdzv-conf heartbeat_timeout: '%s' is not a "
                            "duration of at least 30 ms (seconds, or with a "
                            "unit: 500ms, 30s, 2m)", eq);
      /* A node silent for 3 heartbeats is dropped: the bound is the
       * timeout, unless heartbeat itself was given. */
      if (!c->conf_heartbeat)
        c->heartbeat_ms = ms / 3;
    } else if (!strcmp(item, "is_host")) {
      if (parse_bool(eq, &c->is_host) != 0)
        return fail(err, n, "--rdzv-conf is_host: '%s' is not true/false "
                            "(1/0, yes/no, t/f, y/n)", eq);
    } else if (!strcmp(item, "protocol")) {
      if (strcmp(eq, "http") != 0 && strcmp(eq, "https") != 0)
        return fail(err, n, "--rdzv-conf protocol=%s: use http or https "
                            "(how etcd is reached)", eq);
      c->etcd_https = !strcmp(eq, "https");
    } else if (!strcmp(item, "cacert") || !strcmp(item, "cert") ||
               !strcmp(item, "key") || !strcmp(item, "ca_cert") ||
               !strcmp(item, "ssl_cert") || !strcmp(item, "ssl_cert_key")) {
      /* torchrun's etcd backend's names, and its etcd-v2's */
      char *dst = !strcmp(item, "cacert") || !strcmp(item, "ca_cert")
                      ? c->etcd_cacert
                  : !strcmp(item, "cert") || !strcmp(item, "ssl_cert")
                      ? c->etcd_cert
                      : c->etcd_key;
      if (strlen(eq) >= PATH_MAX)
        return fail(err, n, "--rdzv-conf %s: path too long", item);
      lu_strlcpy(dst, eq, PATH_MAX);
    } else if (!strcmp(item, "user")) {
      if (strlen(eq) >= sizeof(c->etcd_user))
        return fail(err, n, "--rdzv-conf user: too long");
      lu_strlcpy(c->etcd_user, eq, sizeof(c->etcd_user));
    } else if (!strcmp(item, "etcd_prefix")) {
      if (etcd_prefix_set(c, eq) != 0)
        return fail(err, n, "--rdzv-conf etcd_prefix: '%.60s' is not a key "
                            "prefix: give a path from etcd's root, such as "
                            "/my/prefix (starting with '/', at most %d "
                            "characters, no blanks, no empty, '.' or '..' "
                            "part)", eq, CFG_ETCD_PREFIX_MAX);
    } else if (!strcmp(item, "store_port")) {
      char *end;
      long p = strtol(eq, &end, 10);
      if (*end != '\0' || end == eq || p < 1 || p > 65535)
        return fail(err, n, "--rdzv-conf store_port: '%s' is not a port "
                            "(1-65535)", eq);
      c->store_port = (int)p;
    } else if (!strcmp(item, "store_type")) {
      if (strcmp(eq, "tcp") != 0)
        return fail(err, n, "--rdzv-conf store_type=%s: only tcp is "
                            "supported", eq);
    } else {
      int64_t ms;
      if (lu_parse_duration_ms(eq, &ms) != 0)
        return fail(err, n, "--rdzv-conf %s: '%s' is not a duration "
                            "(seconds, or with a unit: 500ms, 30s, 2m)",
                    item, eq);
      if (ms < conf_keys[k].min)
        return fail(err, n, "--rdzv-conf %s: at least %lld ms", item,
                    (long long)conf_keys[k].min);
      memcpy((char *)c + conf_keys[k].off, &ms, sizeof(ms));
      if (conf_keys[k].off == offsetof(cfg_t, heartbeat_ms))
        c->conf_heartbeat = 1;
      if (conf_keys[k].off == offsetof(cfg_t, static_wait_ms))
        c->conf_timeout = 1;
    }
  }
  return 0;
}

static int set_master_addr(cfg_t *c, int id, const char *v, char *err, size_t n) {
  size_t l = strlen(v);
  if (l == 0 || l >= sizeof(c->master_addr))
    return fail(err, n, "--master-addr: give a host name or address");
  /* [v6] as torchrun writes it */
  if (v[0] == '[') {
    if (v[l - 1] != ']' || l < 3)
      return fail(err, n, "--master-addr: '%s' does not parse", v);
    snprintf(c->master_addr, sizeof(c->master_addr), "%.*s", (int)(l - 2),
             v + 1);
  } else {
    lu_strlcpy(c->master_addr, v, sizeof(c->master_addr));
  }
  return 0;
}

static int set_signals(cfg_t *c, int id, const char *s, char *err, size_t n) {
  static const struct { const char *n; int s; } sigs[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},
      {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
  char item[32];
  int got;
  c->signals_mask = 0;
  lu_strlcpy(c->signals_spec, s, sizeof(c->signals_spec));
  while ((got = next_item(&s, item, sizeof(item))) > 0) {
    size_t i;
    for (char *p = item; *p; p++)
      *p = (char)toupper((unsigned char)*p);
    for (i = 0; i < LU_ARRAY_SIZE(sigs); i++)
      if (!strcmp(item, sigs[i].n) || !strcmp(item, sigs[i].n + 3))
        break;
    if (i == LU_ARRAY_SIZE(sigs))
      return fail(err, n, "--signals-to-handle: '%s' is not one of SIGTERM, "
                          "SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2", item);
    c->signals_mask |= 1u << sigs[i].s;
  }
  if (got < 0)
    return fail(err, n, "--signals-to-handle: empty or long entry");
  return 0;
}

/* --hang-timeout: a duration, 0 or off. */
static int set_hang_timeout(cfg_t *c, int id, const char *v, char *err,
                            size_t n) {
  if (!strcmp(v, "off")) {
    c->hang_timeout_ms = 0;
    return 0;
  }
  if (lu_parse_duration_ms(v, &c->hang_timeout_ms) != 0 ||
      c->hang_timeout_ms < 0)
    return fail(err, n, "--hang-timeout: '%s' is not a duration (seconds, or "
                        "with a unit: 500ms, 30s, 5m) or off", v);
  return 0;
}

/* `launch doctor --timeout`: seconds (or with a unit) as every other
 * duration; it took milliseconds once, so a bare 1000 or more is refused
 * with what to write. */
static int set_doc_timeout(cfg_t *c, int id, const char *v, char *err,
                           size_t n) {
  int64_t ms;
  char *end;
  long bare = strtol(v, &end, 10);
  (void)id;
  if (*end == '\0' && end != v && bare >= 1000)
    return fail(err, n, "--timeout %s: seconds, as for launch status (it "
                        "was milliseconds): write %ld or %ldms", v,
                bare / 1000, bare);
  if (lu_parse_duration_ms(v, &ms) != 0 || ms < 1 || ms > 600000)
    return fail(err, n, "--timeout: '%s' is not a duration from 1 ms to 600 "
                        "s (seconds, or with a unit: 500ms, 30s)", v);
  c->doc_timeout_ms = (int)ms;
  return 0;
}

/* "3", "3,4,10-12" or "none". */
static int set_no_restart(cfg_t *c, int id, const char *v, char *err,
                          size_t n) {
  const char *p = v;
  (void)id;
  memset(c->no_restart, 0, sizeof(c->no_restart));
  if (!strcmp(v, "none"))
    return 0;
  for (;;) {
    char *end;
    long lo = strtol(p, &end, 10), hi = lo;
    if (end == p)
      break;
    if (*end == '-') {
      p = end + 1;
      hi = strtol(p, &end, 10);
      if (end == p)
        break;
    }
    if (lo < 1 || hi > 255 || lo > hi)
      break;
    for (long k = lo; k <= hi; k++)
      c->no_restart[k] = 1;
    if (*end == '\0')
      return 0;
    if (*end != ',')
      break;
    p = end + 1;
  }
  return fail(err, n, "--no-restart-exit-codes: '%s' is not a list of exit "
                      "codes 1-255 (3, 3,4 or 10-12) or none", v);
}

static int set_hang_signal(cfg_t *c, int id, const char *v, char *err,
                           size_t n) {
  if ((c->hang_signal = hang_parse_signal(v)) < 0)
    return fail(err, n, "--hang-signal: '%s' is not a signal (SIGUSR1, "
                        "SIGUSR2, SIGQUIT, SIGABRT, a number) or none", v);
  return 0;
}

static int set_prog_mode(cfg_t *c, int id, const char *v, char *err,
                         size_t n) {
  int b, mode = id == CFG_S_MODULE      ? CFG_PROG_MODULE
                : id == CFG_S_NO_PYTHON ? CFG_PROG_NO_PYTHON
                                        : CFG_PROG_RUN_PATH;
  if (parse_bool(v, &b) != 0)
    return fail(err, n, "%s: '%s' is not 0 or 1", settings[id].flag, v);
  if (!b)
    return 0;
  if (c->prog_mode != CFG_PROG_AUTO && c->prog_mode != mode &&
      c->prog_mode != CFG_PROG_RUN_PATH && mode != CFG_PROG_RUN_PATH)
    return fail(err, n, "--module and --no-python cannot be used together");
  /* --run-path takes precedence over --no-python, as in torchrun */
  if (c->prog_mode != CFG_PROG_RUN_PATH)
    c->prog_mode = mode;
  return 0;
}

static int set_numa_binding(cfg_t *c, int id, const char *v, char *err, size_t n) {
  if (!strcmp(v, "node") || !strcmp(v, "socket"))
    lu_strlcpy(c->cpu_bind, "numa", sizeof(c->cpu_bind));
  else if (!strcmp(v, "exclusive") || !strcmp(v, "core-complex"))
    lu_strlcpy(c->cpu_bind, "cores", sizeof(c->cpu_bind));
  else
    return fail(err, n, "--numa-binding: '%s' is not node, socket, "
                        "exclusive or core-complex", v);
  return 0;
}

static int set_logs_specs(cfg_t *c, int id, const char *v, char *err, size_t n) {
  (void)c;
  (void)v;
  return fail(err, n, "--logs-specs: Python entry points are not "
                      "supported; use --log-dir, --tee and --redirects");
}

static int set_expected(cfg_t *c, int id, const char *v, char *err, size_t n) {
  char why[256];
  lu_hostlist_free(c->expected_hosts, c->nexpected);
  c->expected_hosts = NULL;
  c->nexpected = 0;
  if (lu_hostlist_expand_err(v, 65536, &c->expected_hosts, &c->nexpected,
                             why, sizeof(why)) != 0)
    return fail(err, n, "not a host list like node[01-04],login1: %s", why);
  return 0;
}

static int set_job_hosts(cfg_t *c, int id, const char *v, char *err,
                         size_t n) {
  char why[256];
  lu_hostlist_free(c->sched_job_hosts, c->nsched_job_hosts);
  c->sched_job_hosts = NULL;
  c->nsched_job_hosts = 0;
  if (lu_hostlist_expand_err(v, 65536, &c->sched_job_hosts,
                             &c->nsched_job_hosts, why, sizeof(why)) != 0)
    return fail(err, n, "not a host list like node[01-04],login1: %s", why);
  return 0;
}

/* The scheduler's endpoint, unless the command line or launch's variables
 * named the rendezvous (sched.c skips the row then). */
static int set_sched_endpoint(cfg_t *c, int id, const char *v, char *err,
                              size_t n) {
  if (c->backend == CFG_BACKEND_STATIC || c->backend == CFG_BACKEND_ETCD)
    return 0; /* static: --master-addr says where; etcd: the members */
  if (set_endpoint(c, CFG_S_ENDPOINT, v, err, n) != 0)
    return -1;
  c->sched_endpoint = 1;
  return 0;
}

/* The value stays in the environment, which outlives the configuration. */
static int set_cvd(cfg_t *c, int id, const char *v, char *err, size_t n) {
  c->cuda_visible_devices = v;
  return 0;
}

static int set_root(cfg_t *c, int id, const char *v, char *err, size_t n) {
  struct stat st;
  if (stat(v, &st) != 0 || !S_ISDIR(st.st_mode) ||
      strlen(v) >= sizeof(c->env_root))
    return fail(err, n, "--root %s: not a directory (give the top of a tree "
                        "holding sys/, proc/ and etc/)", v);
  lu_strlcpy(c->env_root, v, sizeof(c->env_root));
  return 0;
}

static int set_program(cfg_t *c, int id, const char *v, char *err, size_t n) {
  if (c->env_nprograms >= 8)
    return fail(err, n, "--program: at most 8 files");
  c->env_programs[c->env_nprograms++] = v;
  return 0;
}

int cfg_parse_metrics_port(const char *v, char *addr, size_t cap, int *port,
                           char *err, size_t n) {
  const char *colon = strrchr(v, ':'), *whole = v;
  addr[0] = '\0';
  if (!strcmp(v, "off")) {
    *port = -1;
    return 0;
  }
  if (colon) {
    size_t len = (size_t)(colon - v);
    if (len > 1 && v[0] == '[' && v[len - 1] == ']')
      v++, len -= 2;
    if (len == 0 || len >= cap)
      return fail(err, n, "--metrics-port: '%s' is not [ADDR:]PORT", whole);
    memcpy(addr, v, len);
    addr[len] = '\0';
    v = colon + 1;
  }
  if (lu_parse_int(v, 0, 65535, port) != 0)
    return fail(err, n, "--metrics-port: '%s' is not a port (0-65535; 0 "
                        "picks a free one)", whole);
  return 0;
}

/* --metrics-port [ADDR:]PORT|off. */
static int set_metrics_port(cfg_t *c, int id, const char *v, char *err,
                            size_t n) {
  return cfg_parse_metrics_port(v, c->metrics_addr, sizeof(c->metrics_addr),
                                &c->metrics_port, err, n);
}

static int set_monitor(cfg_t *c, int id, const char *v, char *err, size_t n) {
  int64_t ms;
  (void)id;
  if (lu_parse_duration_ms(v, &ms) != 0 || ms < 0)
    return fail(err, n, "--monitor-interval: '%s' is not a duration "
                        "(seconds, or with a unit: 500ms, 5s)", v);
  add_note(c, "--monitor-interval %s has no effect: launch learns of each "
              "worker exit at once (SIGCHLD), there is nothing to poll", v);
  return 0;
}

/* "X.Y" or "X.Y.Z+cu121": major * 100 + minor. RET 0 or -1. */
int cfg_parse_torch_version(const char *v, int *out) {
  int major = 0, minor = 0, k = 0;
  const char *p = v;
  while (isdigit((unsigned char)*p) && k++ < 4)
    major = major * 10 + (*p++ - '0');
  if (k == 0 || *p++ != '.')
    return -1;
  k = 0;
  while (isdigit((unsigned char)*p) && k++ < 3)
    minor = minor * 10 + (*p++ - '0');
  if (k == 0 || minor > 99 || (*p && *p != '.' && *p != '+' && *p != 'a' &&
                               *p != 'b' && *p != 'r' && *p != 'd'))
    return -1;
  *out = major * 100 + minor;
  return 0;
}

static int set_torch_version(cfg_t *c, int id, const char *v, char *err,
                             size_t n) {
  if (cfg_parse_torch_version(v, &c->torch_version) != 0 ||
      strlen(v) >= sizeof(c->torch_version_spec))
    return fail(err, n, "--torch-version: '%s' is not a version like 1.13 or "
                        "2.4.1", v);
  lu_strlcpy(c->torch_version_spec, v, sizeof(c->torch_version_spec));
  return 0;
}

/* ---- `launch server`'s and `launch ckpt`'s --------------------------------------- */

/* "512M", "1G", "65536", "4KiB" -> bytes. RET 0 or -1. */
static int parse_size(const char *v, uint64_t *out) {
  char *end;
  unsigned long long x;
  int shift = 0;
  errno = 0;
  x = strtoull(v, &end, 10);
  if (errno || end == v || *v == '-')
    return -1;
  switch (*end) {
  case 'K': case 'k': shift = 10; end++; break;
  case 'M': case 'm': shift = 20; end++; break;
  case 'G': case 'g': shift = 30; end++; break;
  default: break;
  }
  if (shift && *end == 'i')
    end++;
  if (*end == 'B')
    end++;
  if (*end != '\0' || x == 0 || x > (UINT64_MAX >> shift))
    return -1;
  *out = (uint64_t)x << shift;
  return 0;
}

static int set_srv_port(cfg_t *c, int id, const char *v, char *err,
                        size_t n) {
  if (lu_parse_int(v, 0, 65535, &c->srv.port) != 0)
    return fail(err, n, "--port: '%s' is not a port number (0-65535)", v);
  return 0;
}

static int set_srv_threads(cfg_t *c, int id, const char *v, char *err,
                           size_t n) {
  int k;
  if (lu_parse_int(v, 1, 64, &k) != 0)
    return fail(err, n, "--threads: '%s' is not a number of event loops "
                        "(1-64)", v);
  c->srv.threads = (uint32_t)k;
  return 0;
}

/* Milliseconds, fractions too (0.5): the tracing threshold. */
static int set_srv_trace(cfg_t *c, int id, const char *v, char *err,
                         size_t n) {
  char *end;
  double ms;
  errno = 0;
  ms = strtod(v, &end);
  if (errno || end == v || *end != '\0' || !(ms >= 0) || ms > 3600e3)
    return fail(err, n, "--trace-ms: '%s' is not a number of milliseconds "
                        "(0 off, fractions allowed)", v);
  c->srv.trace_us = (uint32_t)(ms * 1000);
  return 0;
}

static int set_ckpt_layout(cfg_t *c, int id, const char *v, char *err,
                           size_t n) {
  int k = choice_index(settings[CFG_S_CKPT_LAYOUT].choices, v);
  if (k < 0)
    return fail(err, n, "--layout: '%s' is not one of auto, launch, "
                        "megatron, deepspeed, hf, dcp", v);
  c->ckpt_layout = k;
  return 0;
}

static const setting_t settings[CFG_S_COUNT] = {
    FN(NNODES, "--nnodes", NULL, "N|MIN:MAX", set_nnodes, NODES,
       "nodes of the job (default 1)"),
    FN(NPROC, "--nproc-per-node", NULL, "N|gpu|cpu|auto", set_nproc, NODES,
       "workers on this node (default 1); gpu: one per visible GPU, cpu: one "
       "per CPU, auto: gpu, else cpu"),
    BOOL(STANDALONE, "--standalone", NULL, standalone, NODES,
         "one node, a private server on a free port"),
    FN(ENDPOINT, "--rdzv-endpoint", NULL, "HOST[:PORT]", set_endpoint, RDZV,
       "the launch server (default port 29400); the agent on HOST hosts it "
       "unless one runs there"),
    FN(BACKEND, "--rdzv-backend", NULL, "c10d|static|etcd", set_backend, RDZV,
       "c10d when an endpoint is given, else static; etcd: the endpoint is "
       "etcd's member list (HOST:PORT,...), etcd elects the agent that "
       "hosts (docs/rendezvous.md#etcd-backend)"),
    STR(ID, "--rdzv-id", NULL, "ID", run_id, 1, RDZV,
        "job id shared by every node"),
    FN(CONF, "--rdzv-conf", NULL, "K=V,...", set_conf, RDZV,
       "join_timeout (600 s): how long the nodes may take to join; "
       "last_call_timeout (30 s): how long a round waits for more than the "
       "minimum; heartbeat (5 s); read_timeout (60 s): how long to keep "
       "trying to reach a server that is not up, and a server that answers "
       "nothing this long (at most 3 heartbeats) is lost; close_timeout "
       "(10 s): how long the hosting node keeps the server for the others "
       "to learn the end; is_host (true|false): host the server here, "
       "whatever the addresses say; heartbeat_timeout: a node silent this "
       "long is dropped (3 heartbeats); timeout (900 s): how long a static "
       "node waits for node 0; rank: the static node rank (as --node-rank); "
       "keep_alive_max_attempt: accepted, no effect. With etcd: lease_ttl "
       "(10 s), store_port (29400): the elected agent's server port, "
       "protocol (http|https), cacert, cert, key (PEM files), user "
       "(NAME[:PASSWORD], else $LAUNCH_ETCD_PASSWORD), etcd_prefix (/launch): "
       "the job's keys lie under <etcd_prefix>/<id>/"),
    INT(NODE_RANK, "--node-rank", "N", node_rank, 0, 1 << 20, RDZV,
        "rank of this node (static backend; a preference with c10d)"),
    FN(MASTER_ADDR, "--master-addr", NULL, "A", set_master_addr, RDZV,
       "static rendezvous: node 0's address (default 127.0.0.1)"),
    INT(MASTER_PORT, "--master-port", "P", master_port, 1, 65535, RDZV,
        "static rendezvous: its port (default 29500)"),
    STR(LOCAL_ADDR, "--local-addr", NULL, "A", local_addr, 0, RDZV,
        "address this node advertises"),
    INT(MAX_RESTARTS, "--max-restarts", "N", max_restarts, 0, 1 << 30,
        SUPERVISION, "job restarts after failures (default 0), counted once "
        "for the whole job"),
    FN(SIGNALS, "--signals-to-handle", NULL, "LIST", set_signals, SUPERVISION,
       "signals forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,"
       "SIGQUIT; add SIGUSR1,SIGUSR2 for Slurm)"),
    MS(STOP_TIMEOUT, "--stop-timeout", stop_grace_ms, SUPERVISION,
       "SIGTERM to SIGKILL grace (default 30)"),
    MS(EXIT_BARRIER, "--exit-barrier-timeout", exit_barrier_ms, SUPERVISION,
       "how long a finished node waits for the others (default 300)"),
    FN(HANG_TIMEOUT, "--hang-timeout", NULL, "SECONDS|off", set_hang_timeout,
       SUPERVISION, "a rank that reported progress (launch/progress/<rank>) "
       "and then none for this long is hung: the job restarts (default off)"),
    FN(HANG_SIGNAL, "--hang-signal", NULL, "SIG|none", set_hang_signal,
       SUPERVISION, "sent to a hung rank for a stack dump (faulthandler, "
       "py-spy-like dumpers) 3 s before it is killed (default SIGUSR1)"),
    BOOL(STANDBY, "--standby", NULL, standby, SUPERVISION,
         "keep one pre-started process of the program per local rank that "
         "takes the rank when the workers restart (faster resume; needs a "
         "program using the runtime's rt_standby_wait, as train_gpt: "
         "docs/launcher.md#standby)"),
    MS(STANDBY_TIMEOUT, "--standby-timeout", standby_ready_ms, SUPERVISION,
       "--standby: a standby that has not said ready by then is killed and "
       "its rank gets none (default 300)"),
    FN(NO_RESTART_CODES, "--no-restart-exit-codes", NULL, "LIST|none",
       set_no_restart, SUPERVISION, "a worker exiting with one of these codes "
       "ends the job at once instead of restarting it: the failure would "
       "repeat (default 3, train_gpt's 'training diverged')"),
    FN(MONITOR, "--monitor-interval", NULL, "SECONDS", set_monitor,
       SUPERVISION, "torchrun's polling period: accepted, no effect (launch "
       "learns of each worker exit at once, through SIGCHLD)"),
    CHECK(START_METHOD, "--start-method", T_CHOICE, 0, "spawn|fork|forkserver",
          SUPERVISION, "accepted for torchrun's scripts, no effect: every "
          "worker is a fresh process (fork and exec), as spawn gives"),
    CHOICE(EXIT_CODE, "--exit-code", T_CHOICE, exit_code_mode,
           "launch|torchrun", SUPERVISION,
           "launch (default): a failed job exits with its failing worker's "
           "code (docs/exit-codes.md); torchrun: 1 for any failure, as "
           "torchrun does, for wrappers that test == 1"),
    STR(ROLE, "--role", NULL, "NAME", role, 1, SUPERVISION,
        "ROLE_NAME of the workers (default default)"),
    FN(MODULE, "--module", "-m", NULL, set_prog_mode, PROGRAM,
       "run PROGRAM as python -m PROGRAM"),
    FN(NO_PYTHON, "--no-python", NULL, NULL, set_prog_mode, PROGRAM,
       "execute PROGRAM directly, even a .py"),
    FN(RUN_PATH, "--run-path", NULL, NULL, set_prog_mode, PROGRAM,
       "run the script through python"),
    STR(LOG_DIR, "--log-dir", NULL, "DIR", log_dir, 0, LOGS,
        "DIR/<run id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log "
        "and error.json"),
    STR(REDIRECTS, "--redirects", "-r", "SPEC", redirects_spec, 0, LOGS,
        "streams to files only: 0 none, 1 stdout, 2 stderr, 3 both, or per "
        "rank 0:1,1:2"),
    STR(TEE, "--tee", "-t", "SPEC", tee_spec, 0, LOGS,
        "streams to files and the console"),
    STR(RANKS_FILTER, "--local-ranks-filter", NULL, "LIST", ranks_filter_spec,
        0, LOGS, "local ranks whose output reaches the console"),
    STR(LINE_PREFIX, "--log-line-prefix", NULL, "TEMPLATE", line_prefix, 0,
        LOGS, "prefix of each line (default '[${host}:${rank}]: '; also "
        "${local_rank}, ${role_name}, ${node_rank}; 'none')"),
    CHOICE(EVENT_LOG, "--event-log-handler", T_CHOICE, event_handler,
           "null|console", LOGS,
           "torchrun's event handler: console writes the job's events "
           "(docs/events.md) to stderr as JSON Lines; null (default) none"),
    FN(METRICS_PORT, "--metrics-port", NULL, "[ADDR:]PORT", set_metrics_port,
       LOGS, "serve Prometheus metrics on http://ADDR:PORT/metrics (0: a "
       "free port, printed; default off; docs/monitoring.md)"),
    STR(EVENT_FILE, "--event-log", NULL, "FILE", event_log, 1, LOGS,
        "append the job's events to FILE as JSON Lines: rounds, workers, "
        "failures, restarts with downtime, checkpoints, resumes, hangs, a "
        "summary (docs/events.md)"),
    FN(LOGS_SPECS, "--logs-specs", NULL, "NAME", set_logs_specs, LOGS, NULL),
    BOOL(QUIET, "--quiet", "-q", quiet, LOGS, "fewer agent messages"),
    BOOL(NO_LOG_TIME, "--no-log-time", NULL, no_log_time, LOGS,
         "the agent's lines without their time (UTC); LAUNCH_LOG_TIME=0 does "
         "it for every command"),
    CHOICE(TORCH_STORE, "--torch-store", T_CHOICE, torch_store,
           "agent|rank0", OWN,
           "agent (default): workers use the launch server as their TCPStore "
           "(TORCHELASTIC_USE_AGENT_STORE=True); rank0: the launch server is "
           "not at MASTER_PORT, which is a free port of node 0: for user code "
           "that hosts its own TCPStore there (it fails with 'Address already "
           "in use' in agent mode)"),
    STR(TOKEN_FILE, "--token-file", NULL, "F", token_file, 0, OWN,
        "the job's key (launch server --issue-key) or the server's secret "
        "(HMAC challenge)"),
    STR(TLS_CA, "--tls-ca", NULL, "F", tls_ca, 0, OWN,
        "TLS: verify the server with this CA"),
    STR(TLS_CERT, "--tls-cert", NULL, "F", tls_cert, 0, OWN,
        "TLS: this node's certificate (mutual TLS; needed to host the server "
        "with TLS)"),
    STR(TLS_KEY, "--tls-key", NULL, "F", tls_key, 0, OWN,
        "TLS: the key of --tls-cert"),
    STR(TCPSTORE_ALLOW, "--tcpstore-allow", NULL, "LIST", tcpstore_allow, 0,
        OWN, "with a token: addresses allowed to use TCPStore, e.g. "
        "10.0.0.0/8"),
    STR(CPU_BIND, "--cpu-bind", NULL, "none|numa|cores|LIST", cpu_bind, 0, OWN,
        "CPUs of each worker: its GPU's NUMA node, a share of its cores, or "
        "one cpulist per local rank separated by ':' (0-7:8-15); default numa "
        "when the node has GPUs, else none"),
    FN(NUMA_BINDING, "--numa-binding", NULL,
       "node|socket|exclusive|core-complex", set_numa_binding, OWN,
       "torchrun's spelling: node and socket are --cpu-bind numa, the others "
       "--cpu-bind cores"),
    CHOICE(MEM_BIND, "--mem-bind", T_WORD, mem_bind,
           "none|local|preferred", OWN,
           "memory of each worker on its NUMA node (default preferred when "
           "CPUs are bound on a node with GPUs)"),
    BOOL(REPORT_BINDINGS, "--report-bindings", NULL, report_bindings, OWN,
         "print each worker's binding"),
    STR(TOPOLOGY, "--topology", NULL, "FILE.xml", topology_file, 0, OWN,
        "plan for an hwloc XML topology"),
    STR(NCCL_PROFILE, "--nccl-profile", NULL, "NAME|FILE", nccl_profile, 1, OWN,
        "locked NCCL environment: auto (default), pcie-ib, nvlink-ib, roce, "
        "socket or a file"),
    BOOL(ALLOW_ENV_OVERRIDE, "--allow-env-override", NULL, allow_env_override,
         OWN, "inherited NCCL_* values beat the profile"),
    CHOICE(LINT, "--lint", T_CHOICE, lint, "error|warn|off", OWN,
           "NCCL environment mistakes stop the job (error, default), are only "
           "reported, or are not checked"),
    FN(TORCH_VERSION, "--torch-version", NULL, "X.Y", set_torch_version, OWN,
       "the workers' PyTorch version, which decides the name of the async "
       "error handling variable (NCCL_ASYNC_ERROR_HANDLING before 2.2, "
       "TORCH_NCCL_ASYNC_ERROR_HANDLING from 2.2); default: read from the "
       "interpreter's site-packages without importing torch"),
    BOOL(ALLOW_MISMATCH, "--allow-mismatch", NULL, allow_mismatch, OWN,
         "run even when nodes differ from node 0 (NCCL env, versions, GPUs, "
         "program)"),
    STR(CKPT_DIR, "--ckpt-dir", NULL, "DIR", ckpt_dir, 1, OWN,
        "checkpoints: every (re)start resumes from the newest step every "
        "node can load; workers get LAUNCH_CKPT_DIR and LAUNCH_RESUME_STEP "
        "(docs/checkpoints.md)"),
    INT(CKPT_KEEP, "--ckpt-keep", "K", ckpt_keep, 1, 1 << 20, OWN,
        "final checkpoint steps kept (default 3; node-local disks: at least 2)"),
    CHOICE(CKPT_LAYOUT, "--ckpt-layout", T_CHOICE, ckpt_layout,
           "auto|launch|megatron|deepspeed|hf|dcp", OWN,
           "the layout of --ckpt-dir (default auto: detected)"),
    CHOICE(CKPT_VERIFY, "--ckpt-verify", T_CHOICE, ckpt_verify, "sha|size",
           OWN, "check the resume step's SHA-256 (default) or sizes only"),
    ROW(HELP, "--help", "-h", NULL, T_BOOL, 0, 0, 0, 0, NULL, NULL, OWN,
        "this text"),
    ROW(VERSION, "--version", NULL, NULL, T_BOOL, 0, 0, 0, 0, NULL, NULL, OWN,
        "launch's version and protocol"),
    BOOL(FROM_TASKS, "--from-tasks", NULL, from_tasks, NODES,
         "the scheduler starts every worker (srun --ntasks-per-node=GPUS "
         "launch --from-tasks PROGRAM): no agent; this task gets its "
         "worker environment, binding and NCCL profile from SLURM_PROCID, "
         "SLURM_LOCALID, SLURM_NTASKS and becomes PROGRAM; task 0 hosts the "
         "job's store (docs/schedulers.md)"),
    INT(ENV_LOCAL_RANK, "--local-rank", "N", env_local_rank, 0,
        CFG_MAX_NPROC - 1, CMD_ENV, "the rank to show (default 0)"),
    STR(ENV_PROFILE, "--profile", NULL, "NAME|FILE", nccl_profile, 1, CMD_ENV,
        "the same as --nccl-profile"),
    BOOL(ENV_ALL, "--all", NULL, env_all, CMD_ENV,
         "print the inherited variables too"),
    BOOL(ENV_LINT, "--lint", NULL, env_lint, CMD_ENV,
         "check the environment (exit 1 on errors)"),
    FN(ENV_ROOT, "--root", NULL, "DIR", set_root, CMD_ENV,
        "read /sys, /proc and /etc under DIR instead of / (a copy of another "
        "node's, or a test's)"),
    BOOL(ENV_FINGERPRINT, "--fingerprint", NULL, env_fingerprint, CMD_ENV,
         "print the node fingerprint instead"),
    FN(ENV_PROGRAM, "--program", NULL, "FILE", set_program, CMD_ENV,
       "a file the fingerprint hashes (at most 8)"),
    BOOL(ENV_LIST, "--list-profiles", NULL, env_list, CMD_ENV,
         "list the built-in profiles"),
    STR(ENV_SHOW, "--show-profile", NULL, "NAME", env_show, 1, CMD_ENV,
        "print a built-in profile (to copy and edit)"),
    BOOL(ENV_JSON, "--json", NULL, env_json, CMD_ENV, "machine-readable output"),
    MS(STATUS_TIMEOUT, "--timeout", status_timeout_ms, CMD_STATUS,
       "give up connecting, or waiting for the answer, after this (default "
       "10)"),
    INT(DOC_NNODES, "--nnodes", "N", doc_nnodes, 1, 1 << 16, CMD_DOCTOR,
        "gather the reports of N nodes through the rendezvous at "
        "--rdzv-endpoint and print what differs (only host name, address and "
        "node rank may); the node whose address is the endpoint hosts the "
        "server"),
    INT(DOC_EXPECT_GPUS, "--expect-gpus", "N", doc_expect_gpus, 0, 1024,
        CMD_DOCTOR, "fail unless exactly N GPUs are present"),
    BOOL(DOC_NO_PROBE, "--no-probe", NULL, doc_no_probe, CMD_DOCTOR,
         "do not load NVML, libcudart, libnccl"),
    FN(DOC_TIMEOUT, "--timeout", NULL, "SECONDS", set_doc_timeout, CMD_DOCTOR,
       "connect timeout for --rdzv-endpoint (default 3; seconds, as `launch "
       "status --timeout`, or with a unit: 500ms)"),
    MS(DOC_JOIN_TIMEOUT, "--join-timeout", doc_join_timeout_ms, CMD_DOCTOR,
       "wait this long for every node (default 60)"),
    BOOL(DOC_COMPACT, "--compact", NULL, doc_compact, CMD_DOCTOR,
         "the line format agents send to node 0"),
    STR(TOPO_CVD, "--cuda-visible-devices", NULL, "L", topo_cvd, 0, CMD_TOPO,
        "plan as if CUDA_VISIBLE_DEVICES=L"),
    CHOICE(TOPO_GPU_PROBE, "--gpu-probe", T_CHOICE, topo_gpu_probe,
           "sysfs|nvml|pci|check", CMD_TOPO,
           "where this machine's GPUs come from: sysfs (default: sysfs and "
           "/proc/driver/nvidia, no GPU library, what the agent uses), nvml "
           "(hwloc's PCI tree and NVML: memory sizes and NVLink too), pci "
           "(hwloc's PCI tree only), or check (load sysfs and nvml, print what "
           "differs, exit 1 if anything does)"),
    STR(TOPO_EXPORT, "--export", NULL, "FILE.xml", topo_export, 1, CMD_TOPO,
        "write this machine's topology as hwloc XML, with the PCIe link "
        "widths/speeds and IB port rates launch reads from sysfs, and exit"),
    STR(SRV_HOST, "--host", NULL, "H", srv_host, 0, CMD_SERVER,
        "listen address (default: every address, IPv4 and IPv6)"),
    FN(SRV_PORT, "--port", NULL, "P", set_srv_port, CMD_SERVER,
       "TCP port (default 29400; 0 picks a free port and prints it)"),
    STR(SRV_UNIX, "--unix", NULL, "PATH", srv_unix, 1, CMD_SERVER,
        "also listen on a unix socket"),
    STR(SRV_PORT_FILE, "--port-file", NULL, "F", srv_port_file, 1,
        CMD_SERVER, "write the bound port to F once listening"),
    STR(SRV_TOKEN_FILE, "--token-file", NULL, "F", token_file, 1, CMD_SERVER,
        "the server's secret: a client proves it holds it, or holds the key "
        "of its job (HMAC-SHA256 challenge; no secret crosses the wire)"),
    STR(SRV_ISSUE_KEY, "--issue-key", NULL, "JOB", srv_issue_key, 0,
        CMD_SERVER, "print the key of JOB (derived from the secret of "
        "--token-file) and exit: give it to that job's agents as their "
        "--token-file; it opens that job and no other"),
    STR(SRV_TLS_CERT, "--tls-cert", NULL, "F", tls_cert, 0, CMD_SERVER,
        "PEM certificate: every TCP client must speak TLS"),
    STR(SRV_TLS_KEY, "--tls-key", NULL, "F", tls_key, 0, CMD_SERVER,
        "its private key (default: in --tls-cert)"),
    STR(SRV_TLS_CA, "--tls-ca", NULL, "F", tls_ca, 0, CMD_SERVER,
        "require client certificates signed by this CA (mutual TLS)"),
    STR(SRV_TCPSTORE_JOB, "--tcpstore-job", NULL, "JOB", srv_tcpstore_job, 0,
        CMD_SERVER, "job whose keys TCPStore clients see (default "
        "\"default\")"),
    STR(SRV_TCPSTORE_ALLOW, "--tcpstore-allow", NULL, "LIST", tcpstore_allow,
        0, CMD_SERVER, "addresses or CIDR ranges allowed to speak TCPStore "
        "while a token or TLS is set, e.g. 127.0.0.0/8,::1. TCPStore has no "
        "authentication (nor TLS): with a token or TLS and no allow list, "
        "TCPStore clients are refused."),
    FN(SRV_METRICS_PORT, "--metrics-port", NULL, "[ADDR:]PORT",
       set_metrics_port, CMD_SERVER, "serve Prometheus metrics there (0: a "
       "free port, printed; docs/monitoring.md)"),
    STR(SRV_EVENT_LOG, "--event-log", NULL, "FILE", srv_event_log, 1,
        CMD_SERVER, "append the server's events (nodes joined, left, "
        "refused; limits hit) as JSON Lines (docs/events.md#server)"),
    FN(SRV_THREADS, "--threads", NULL, "N", set_srv_threads, CMD_SERVER,
       "event loops serving connections (default a quarter of the online "
       "cores, at most 8, at least 1)"),
    SIZE(SRV_MAX_MEMORY, "--max-memory", "B", max_memory, CMD_LIMITS,
         "all the server holds for its clients: stores, buffers, "
         "connections, jobs (default 512M)"),
    SIZE(SRV_MAX_STORE, "--max-store-bytes", "B", max_store_bytes,
         CMD_LIMITS, "keys + values + waits per job (default half of "
         "--max-memory; all jobs together get that half)"),
    SIZE(SRV_MAX_INPUT, "--max-input-bytes", "B", max_in_bytes, CMD_LIMITS,
         "unfinished requests buffered over all connections (default "
         "--max-memory / 8)"),
    SIZE(SRV_MAX_OUT, "--max-out-bytes", "B", max_out_bytes, CMD_LIMITS,
         "unsent replies of one connection before it is paused (default "
         "--max-memory / 8, at most 64M)"),
    SIZE(SRV_MAX_FRAME, "--max-frame", "B", max_frame, CMD_LIMITS,
         "largest request (default 16M)"),
    SIZE(SRV_MAX_VALUE, "--max-value", "B", max_value, CMD_LIMITS,
         "largest value (default 8M)"),
    SIZE(SRV_MAX_WAITS, "--max-waits", "N", max_waits, CMD_LIMITS,
         "pending waits per connection (default 1024)"),
    SIZE(SRV_MAX_CONNS, "--max-conns", "N", max_conns, CMD_LIMITS,
         "connections in all (default 65536)"),
    SIZE(SRV_MAX_CONNS_ADDR, "--max-conns-per-addr", "N", max_conns_per_addr,
         CMD_LIMITS, "connections of one client address (default 1024)"),
    SIZE(SRV_MAX_JOBS, "--max-jobs", "N", max_jobs, CMD_LIMITS,
         "jobs in all (default 4096)"),
    SIZE(SRV_MAX_JOBS_ADDR, "--max-jobs-per-addr", "N", max_jobs_per_addr,
         CMD_LIMITS, "jobs one client address may create (default 64)"),
    SRV_MS(SRV_HANDSHAKE, "--handshake-timeout", handshake_ms,
           "a connection not authenticated after T is closed (default 10s); "
           "one that sent nothing is closed only near a connection limit, "
           "oldest first"),
    SRV_MS(SRV_JOB_GRACE, "--job-grace", job_grace_ms,
           "a job with no connection and no data is forgotten after T "
           "(default 60s)"),
    ROW(SRV_KEEP_ENDED, "--keep-ended", NULL, "T", T_MS,
        SRV_OFF(keep_ended_ms), SRV_SZ(keep_ended_ms), 0, 0, NULL, NULL,
        CMD_LIMITS, "an ended job's state, exit codes and root cause stay "
        "visible to launch status for T after its last node left (default "
        "10m; 0: forgotten at once; sooner when the room is needed)"),
    SRV_MS(SRV_LIMIT_EVENT, "--limit-event-interval", limit_event_ms,
           "at most one limit_hit event per limit per T, with the count of "
           "refusals (default 10s)"),
    FN(SRV_TRACE, "--trace-ms", NULL, "MS", set_srv_trace, CMD_DEBUG,
       "log every event-loop callback that ran this long or longer (wall "
       "time, CPU time, lock waits, the connection), and the longest at "
       "exit (default 0: off; bench/run_adv_latency.sh)"),
    SRV_INT(SRV_TURN, "--turn-us", "US", turn_us, 1, 1000000,
            "how long a connection runs its requests before the others get "
            "a turn (default 500)"),
    SRV_INT(SRV_PASS, "--pass-us", "US", pass_us, 1, 1000000,
            "how long a loop's pass runs large requests after the small ones "
            "(default 1000)"),
    ROW(SRV_PLAIN_LOCK, "--plain-lock", NULL, NULL, T_BOOL,
        SRV_OFF(lock_plain), SRV_SZ(lock_plain), 0, 0, NULL, NULL, CMD_DEBUG,
        "the loops' lock without its hungry waiters (to compare)"),
    SRV_INT(SRV_LOCK_SPINS, "--lock-spins", "N", lock_spins, 0, 1 << 20,
            "pause-spins before a lock waiter sleeps (default 200)"),
    SRV_INT(SRV_BIG_CACHE, "--big-cache-mb", "MB", big_cache_mb, 0, 1 << 20,
            "bound of the cache of freed big buffers (default 16; 0: none, "
            "for tests that measure what the server keeps)"),
    ROW(HELP_DEBUG, "--help-debug", NULL, NULL, T_BOOL, 0, 0, 0, 0, NULL,
        NULL, CMD_SERVER, "this text with the debug knobs"),
    FN(CKPT_CMD_LAYOUT, "--layout", NULL, "L", set_ckpt_layout, CMD_CKPT,
       "auto | launch | megatron | deepspeed | hf | dcp (default auto: "
       "detected from DIR's contents)"),
    STR(CKPT_CMD_RANKS, "--ranks", NULL, "LIST", ckpt_ranks, 1, CMD_CKPT,
        "launch layout on node-local storage: the ranks this node must hold, "
        "e.g. 0-3 (default: all)"),
    STR(HOSTNAME, NULL, NULL, NULL, host, 1, ENV, NULL),
    FN(EXPECTED_HOSTS, NULL, NULL, NULL, set_expected, ENV, NULL),
    INT(NODE_INDEX, NULL, NULL, sched_node_index, 0, 1 << 20, ENV, NULL),
    STR(PYTHON, NULL, NULL, NULL, python, 0, ENV, NULL),
    STR(TMPDIR, NULL, NULL, NULL, tmpdir, 0, ENV, NULL),
    FN(CUDA_VISIBLE, NULL, NULL, NULL, set_cvd, ENV, NULL),
    FN(SCHED_ENDPOINT, NULL, NULL, NULL, set_sched_endpoint, ENV, NULL),
    INT(SCHED_HOST, NULL, NULL, sched_host, 0, 1, ENV, NULL),
    INT(TASK_RANK, NULL, NULL, task_rank, 0, 1 << 24, ENV, NULL),
    INT(TASK_LOCAL_RANK, NULL, NULL, task_local_rank, 0, CFG_MAX_NPROC - 1,
        ENV, NULL),
    INT(TASK_WORLD, NULL, NULL, task_world, 1, 1 << 24, ENV, NULL),
    INT(TASK_LOCAL_WORLD, NULL, NULL, task_local_world, 1, CFG_MAX_NPROC, ENV,
        NULL),
    INT(SCHED_BOUND, NULL, NULL, sched_bound, 0, 1, ENV, NULL),
    INT(SCHED_JOB_INDEX, NULL, NULL, sched_job_index, 0, 1 << 20, ENV, NULL),
    INT(SCHED_TASK_NODES, NULL, NULL, sched_task_nodes, 1, 1 << 20, ENV, NULL),
    FN(SCHED_JOB_HOSTS, NULL, NULL, NULL, set_job_hosts, ENV, NULL),
};

/* The name a setting goes by in messages. */
static const char *setting_name(int id) {
  return settings[id].flag ? settings[id].flag : "the value";
}

/* A run id names the workers' log directory (<log-dir>/<id>_XXXXXX) and
 * the job on the server: no '/', no leading '.', nothing that a terminal
 * or a log line would take for more than text. */
static int run_id_ok(const char *v) {
  size_t n = strlen(v);
  if (n == 0 || n > 255 || v[0] == '.')
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)v[i]) && !strchr("._:@+=-", v[i]))
      return 0;
  return 1;
}

/* Apply value v to setting id. */
static int apply(cfg_t *c, int id, const char *v, char *err, size_t n) {
  const setting_t *s = &settings[id];
  const char *name = setting_name(id);
  char *field = (char *)c + s->off;
  int64_t ms;
  int iv;
  char list[128];
  switch (s->type) {
  case T_BOOL:
    if (parse_bool(v, &iv) != 0)
      return fail(err, n, "%s: '%s' is not 0 or 1", name, v);
    if (s->size)
      memcpy(field, &iv, sizeof(int));
    return 0;
  case T_STR:
    if (s->min > 0 && *v == '\0')
      return fail(err, n, "%s: give a non-empty value", name);
    if (strlen(v) >= s->size)
      return fail(err, n, "%s: '%.40s...' is too long (at most %zu "
                          "characters)", name, v, s->size - 1);
    if (id == CFG_S_ID && !run_id_ok(v))
      return fail(err, n, "%s: '%.60s' is not a job id: use letters, digits "
                          "and . _ : @ + = - (not starting with '.', at "
                          "most 255), as it names files under --log-dir",
                  name, v);
    lu_strlcpy(field, v, s->size);
    return 0;
  case T_INT:
    if (lu_parse_int(v, s->min, s->max, &iv) != 0)
      return fail(err, n, "%s: '%s' is not a number from %d to %d", name, v,
                  s->min, s->max);
    memcpy(field, &iv, sizeof(int));
    return 0;
  case T_MS:
    if (lu_parse_duration_ms(v, &ms) != 0)
      return fail(err, n, "%s: '%s' is not a duration (seconds, or with a "
                          "unit: 500ms, 30s, 2m)", name, v);
    if (s->min > 0 && ms <= 0)
      return fail(err, n, "%s: must be positive", name);
    if (s->size == sizeof(uint32_t)) {
      uint32_t ms32 = (uint32_t)ms;
      if (ms > UINT32_MAX)
        return fail(err, n, "%s: '%s' is too long (at most 49 days)", name, v);
      memcpy(field, &ms32, sizeof(ms32));
    } else if (s->size) {
      memcpy(field, &ms, sizeof(ms));
    }
    return 0;
  case T_SIZE: {
    uint64_t x;
    if (parse_size(v, &x) != 0 ||
        (s->size == sizeof(uint32_t) && x > UINT32_MAX))
      return fail(err, n, "%s: '%s' is not a positive %s", name, v,
                  s->size == sizeof(uint32_t) ? "number" : "size (e.g. 512M)");
    if (s->size == sizeof(uint32_t)) {
      uint32_t x32 = (uint32_t)x;
      memcpy(field, &x32, sizeof(x32));
    } else {
      size_t xs = (size_t)x;
      memcpy(field, &xs, sizeof(xs));
    }
    return 0;
  }
  case T_CHOICE:
  case T_WORD:
    if ((iv = choice_index(s->choices, v)) < 0) {
      choice_list(s->choices, list, sizeof(list));
      return fail(err, n, "%s: '%s' is not %s", name, v, list);
    }
    if (s->type == T_WORD)
      lu_strlcpy(field, v, s->size);
    else if (s->size)
      memcpy(field, &iv, sizeof(int));
    return 0;
  case T_FN:
    return s->fn(c, id, v, err, n);
  }
  return 0;
}

/* ---- the command line ------------------------------------------------------------ */

/* "--nproc_per_node" and "--nproc-per-node" are the same flag: compare the
 * first len bytes of arg with name, '_' as '-' after the leading dashes. */
static int name_prefix(const char *name, const char *arg, size_t len) {
  for (size_t i = 0; i < len; i++) {
    char x = name[i], y = arg[i];
    if (x == '\0')
      return 0;
    if (i >= 2 && y == '_')
      y = '-';
    if (x != y)
      return 0;
  }
  return 1;
}

/* Does the command (flags) take setting id? The agent takes its own; `launch
 * env` those and its own; `launch status` its own and what reaches the
 * server. */
static int takes(int id, unsigned flags) {
  int sec = settings[id].section;
  if (flags & CFG_SERVER_CMD)
    return sec == SEC_CMD_SERVER || sec == SEC_CMD_LIMITS ||
           sec == SEC_CMD_DEBUG || id == CFG_S_HELP;
  if (flags & CFG_CKPT_CMD)
    return sec == SEC_CMD_CKPT || id == CFG_S_ENV_JSON || id == CFG_S_HELP;
  if (flags & CFG_TOPO_CMD)
    return sec == SEC_CMD_TOPO || id == CFG_S_TOPOLOGY || id == CFG_S_NPROC ||
           id == CFG_S_CPU_BIND || id == CFG_S_MEM_BIND ||
           id == CFG_S_ENV_JSON || id == CFG_S_HELP;
  if (flags & CFG_DOCTOR_CMD)
    return sec == SEC_CMD_DOCTOR || id == CFG_S_ENDPOINT || id == CFG_S_ID ||
           id == CFG_S_TOKEN_FILE || id == CFG_S_LOCAL_ADDR ||
           id == CFG_S_NCCL_PROFILE || id == CFG_S_ENV_ROOT ||
           id == CFG_S_ENV_JSON || id == CFG_S_HELP || id == CFG_S_HOSTNAME;
  if (flags & CFG_STATUS_CMD)
    return sec == SEC_CMD_STATUS || id == CFG_S_ENDPOINT || id == CFG_S_ID ||
           id == CFG_S_TOKEN_FILE || id == CFG_S_TLS_CA ||
           id == CFG_S_TLS_CERT || id == CFG_S_TLS_KEY ||
           id == CFG_S_ENV_JSON || id == CFG_S_HELP;
  return sec < SEC_CMD_ENV || sec == SEC_ENV ||
         (sec == SEC_CMD_ENV && (flags & CFG_ENV_CMD));
}

/* The setting arg[0..len) names, or -1 with err saying why. As argparse
 * (torchrun's parser), a long option may be abbreviated to any prefix that
 * names one option only ("--nproc 2"); an ambiguous prefix is refused with
 * the options it could mean. */
static int takes(int id, unsigned flags);

/* The flag the command takes nearest to arg (at most 2 edits, '_' as
 * '-'), like argparse's and git's "did you mean". RET 1 with it in out. */
static int closest_flag(const char *arg, size_t len, unsigned flags,
                        char *out, size_t cap) {
  char want[80];
  int best = 3;
  if (len < 4 || len >= sizeof(want))
    return 0;
  for (size_t i = 0; i < len; i++)
    want[i] = i >= 2 && arg[i] == '_' ? '-' : arg[i];
  want[len] = '\0';
  for (int k = 0; k < CFG_S_COUNT; k++) {
    int d;
    if (settings[k].flag == NULL || !takes(k, flags))
      continue;
    if ((d = lu_edit_distance(want, settings[k].flag)) < best) {
      best = d;
      lu_strlcpy(out, settings[k].flag, cap);
    }
  }
  return best < 3;
}

/* The subcommand of flags, for messages. */
static const char *cmd_word(unsigned flags) {
  return (flags & CFG_SERVER_CMD) ? "server"
         : (flags & CFG_CKPT_CMD) ? "ckpt"
                                  : "launch";
}

static int find_flag(const char *arg, size_t len, unsigned flags, char *err,
                     size_t n) {
  int match = -1, nprefix = 0;
  char cands[512] = "";
  /* `launch env`'s options come first there (its --lint is not the
   * agent's), and are not the agent's. */
  for (int k = 0; k < CFG_S_COUNT; k++) {
    int i = (flags & CFG_ENV_CMD)      ? (k + CFG_S_ENV_LOCAL_RANK) % CFG_S_COUNT
            : (flags & CFG_DOCTOR_CMD) ? (k + CFG_S_DOC_NNODES) % CFG_S_COUNT
                                       : k;
    const setting_t *s = &settings[i];
    if (s->flag == NULL || !takes(i, flags))
      continue;
    if ((strlen(s->flag) == len && name_prefix(s->flag, arg, len)) ||
        (s->alt && strlen(s->alt) == len && !memcmp(s->alt, arg, len)))
      return i;
    if (len > 2 && arg[1] == '-' && name_prefix(s->flag, arg, len)) {
      /* one flag name counts once (the command's own row comes first) */
      if (match >= 0 && strstr(cands, s->flag) != NULL)
        continue;
      size_t u = strlen(cands);
      snprintf(cands + u, sizeof(cands) - u, "%s%s", nprefix ? ", " : "",
               s->flag);
      if (nprefix++ == 0)
        match = i;
    }
  }
  if (nprefix == 1)
    return match;
  if (nprefix > 1)
    lu_errf(err, n, "option '%.*s' is ambiguous: it could be %s; write more "
                 "of its name", (int)len, arg, cands);
  else if (flags & (CFG_SERVER_CMD | CFG_CKPT_CMD))
    lu_errf(err, n, "%s: unknown or incomplete option '%.*s' (see launch %s "
                 "--help)", cmd_word(flags), (int)len, arg, cmd_word(flags));
  else if (closest_flag(arg, len, flags, cands, sizeof(cands)))
    lu_errf(err, n, "unknown option '%.*s': did you mean %s? (see launch "
                 "--help)", (int)len, arg, cands);
  else
    lu_errf(err, n, "unknown option '%.*s' (see launch --help)", (int)len, arg);
  return -1;
}

static void defaults(cfg_t *c, char *const *envp) {
  memset(c, 0, sizeof(*c));
  c->min_nodes = c->max_nodes = 1;
  lu_strlcpy(c->nproc_spec, "1", sizeof(c->nproc_spec));
  c->backend = -1;
  c->endpoint_port = -1;
  lu_strlcpy(c->run_id, "none", sizeof(c->run_id));
  c->node_rank = -1;
  c->pref_node_rank = -1;
  c->sched_node_index = -1;
  c->sched_job_index = c->sched_task_nodes = -1;
  c->sched_host = -1;
  c->task_rank = c->task_local_rank = -1;
  c->task_world = c->task_local_world = -1;
  lu_strlcpy(c->master_addr, "127.0.0.1", sizeof(c->master_addr));
  c->master_port = 29500;
  c->join_timeout_ms = 600000;
  c->last_call_timeout_ms = 30000;
  c->close_timeout_ms = 10000;
  c->heartbeat_ms = 5000;
  c->read_timeout_ms = 60000;
  c->static_wait_ms = 900000;
  c->no_restart[3] = 1; /* train_gpt: training diverged (docs/runtime.md) */
  c->conf_rank = -1;
  c->is_host = -1;
  c->stop_grace_ms = 30000;
  c->standby_ready_ms = 300000;
  c->hang_signal = SIGUSR1;
  c->metrics_port = -1;
  c->exit_barrier_ms = 300000;
  c->ckpt_keep = 3;
  c->signals_mask = (1u << SIGTERM) | (1u << SIGINT) | (1u << SIGHUP) |
                    (1u << SIGQUIT);
  lu_strlcpy(c->signals_spec, "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
             sizeof(c->signals_spec));
  lu_strlcpy(c->role, "default", sizeof(c->role));
  lu_strlcpy(c->line_prefix, "[${host}:${rank}]: ", sizeof(c->line_prefix));
  lu_strlcpy(c->nccl_profile, "auto", sizeof(c->nccl_profile));
  lu_strlcpy(c->python, "python3", sizeof(c->python));
  lu_strlcpy(c->tmpdir, "/tmp", sizeof(c->tmpdir));
  c->status_timeout_ms = 10000;
  c->doc_expect_gpus = -1;
  c->doc_timeout_ms = 3000;
  c->doc_join_timeout_ms = 60000;
  c->srv = (srv_config_t)SRV_CONFIG_INIT;
  lu_strlcpy(c->srv_tcpstore_job, "default", sizeof(c->srv_tcpstore_job));
  c->environ = envp;
}

typedef struct env_ctx_s {
  cfg_t *c;
  unsigned flags;
} env_ctx_t;

/* sched_read's callback: a variable's value for a setting the command
 * takes. */
static int apply_env(void *ctx, int id, const char *var, const char *v,
                     char *err, size_t n) {
  env_ctx_t *e = ctx;
  /* The agent's server takes the debug knobs from LAUNCH_SERVER_* too
   * (only `launch server` has them as flags). */
  int agent_knob = settings[id].section == SEC_CMD_DEBUG &&
                   id != CFG_S_HELP_DEBUG &&
                   !(e->flags & (CFG_SERVER_CMD | CFG_CKPT_CMD | CFG_TOPO_CMD |
                                 CFG_DOCTOR_CMD | CFG_STATUS_CMD | CFG_ENV_CMD));
  if (!takes(id, e->flags) && !agent_knob)
    return 0;
  if (apply(e->c, id, v, err, n) == 0) {
    e->c->given_by[id] = var; /* for the checks that come later */
    return 0;
  }
  if (e->flags & (CFG_SERVER_CMD | CFG_CKPT_CMD)) {
    char why[512];
    lu_strlcpy(why, err, sizeof(why));
    lu_errf(err, n, "%s='%s': %s", var, v, why);
  } else if (settings[id].flag) {
    size_t l = strlen(err);
    snprintf(err + l, n - l, " (from %s)", var);
  } else {
    char why[512];
    lu_strlcpy(why, err, sizeof(why));
    lu_errf(err, n, "%s=%s: %s", var, v, why);
  }
  return -1;
}

/* " (from VAR)" when setting id came from an environment variable. The
 * buffers are static: two calls per message (a check of two settings
 * names both variables). */
static const char *from_var(const cfg_t *c, int id) {
  static __thread char b[2][96];
  static __thread int k;
  if (c->given_by[id] == NULL)
    return "";
  k ^= 1;
  snprintf(b[k], sizeof(b[k]), " (from %.80s)", c->given_by[id]);
  return b[k];
}

/* Per-rank output settings, once nproc is known. */
static int finish_output(cfg_t *c, char *err, size_t n) {
  const char *p = c->ranks_filter_spec;
  char item[16];
  int got, r;
  if (c->redirects_spec[0] &&
      parse_std_spec(c->redirects_spec, c->nproc, c->redirects) != 0)
    return fail(err, n, "--redirects: '%s' is not 0-3 or a list like 0:1,1:2 "
                        "with local ranks below %d%s", c->redirects_spec,
                c->nproc, from_var(c, CFG_S_REDIRECTS));
  if (c->tee_spec[0] && parse_std_spec(c->tee_spec, c->nproc, c->tee) != 0)
    return fail(err, n, "--tee: '%s' is not 0-3 or a list like 0:1,1:2 with "
                        "local ranks below %d%s", c->tee_spec, c->nproc,
                from_var(c, CFG_S_TEE));
  /* --log-dir alone keeps a file per rank for both streams */
  if (c->log_dir[0] && !c->redirects_spec[0] && !c->tee_spec[0])
    for (int i = 0; i < c->nproc; i++)
      c->tee[i] = 3;
  for (int i = 0; i < c->nproc; i++)
    c->console[i] = p[0] == '\0';
  while ((got = next_item(&p, item, sizeof(item))) > 0) {
    if (lu_parse_int(item, 0, c->nproc - 1, &r) != 0)
      return fail(err, n, "--local-ranks-filter: '%s' is not a local rank "
                          "below %d%s", item, c->nproc,
                  from_var(c, CFG_S_RANKS_FILTER));
    c->console[r] = 1;
  }
  if (got < 0)
    return fail(err, n, "--local-ranks-filter: '%s' is not a list of local "
                        "ranks like 0,3%s", c->ranks_filter_spec,
                from_var(c, CFG_S_RANKS_FILTER));
  if (!strcmp(c->line_prefix, "none"))
    c->line_prefix[0] = '\0';
  return 0;
}

/* --rdzv-backend etcd: the members, and what the agent needs besides. */
static int finish_etcd(cfg_t *c, char *err, size_t n) {
  if (!c->endpoint_given)
    return fail(err, n, "--rdzv-backend etcd needs --rdzv-endpoint "
                        "HOST:PORT[,HOST:PORT...] (the etcd members' client "
                        "addresses, port 2379 by default)");
  if (c->etcd_ttl_ms <= 0)
    c->etcd_ttl_ms = 10000;
  if (c->etcd_prefix[0] == '\0')
    lu_strlcpy(c->etcd_prefix, "/launch/", sizeof(c->etcd_prefix));
  if (c->etcd_ttl_ms > 3600000)
    return fail(err, n, "--rdzv-conf lease_ttl: at most an hour");
  if (c->store_port <= 0)
    c->store_port = RDZV_DEFAULT_PORT;
  if ((c->etcd_cert[0] != 0) != (c->etcd_key[0] != 0))
    return fail(err, n, "--rdzv-conf cert and key go together (this node's "
                        "client certificate for etcd)");
  if (c->etcd_cacert[0] || c->etcd_cert[0])
    c->etcd_https = 1;
  /* The embedded server of the elected host: its address comes from etcd
   * when the agent runs (docs/rendezvous.md#etcd-backend). */
  c->endpoint_host[0] = '\0';
  c->endpoint_port = c->store_port;
  c->pref_node_rank = c->node_rank >= 0 ? c->node_rank : c->sched_node_index;
  c->sched_host = -1;
  return 0;
}

/* A Volcano job's tasks as one launch job, its node count more than this
 * pod's task has pods: the pod's node index is its place among every
 * task's pods (the pytorch plugin's order), the expected hosts are theirs,
 * and the scheduler's endpoint is the job's first pod, which hosts. With
 * the task's count (or less) the task is a launch job of its own. */
static void sched_job_wide(cfg_t *c) {
  const char *by = c->given_by[CFG_S_EXPECTED_HOSTS];
  if (c->sched_job_index < 0 || c->sched_task_nodes < 1 ||
      c->nsched_job_hosts == 0 || c->max_nodes <= c->sched_task_nodes)
    return;
  c->sched_node_index = c->sched_job_index;
  if (c->sched_endpoint) {
    lu_strlcpy(c->endpoint_host, c->sched_job_hosts[0],
               sizeof(c->endpoint_host));
    c->sched_host = c->sched_node_index == 0;
  }
  if (by && strcmp(by, "Volcano") == 0) { /* not LAUNCH_EXPECTED_HOSTS */
    lu_hostlist_free(c->expected_hosts, c->nexpected);
    c->expected_hosts = c->sched_job_hosts;
    c->nexpected = c->nsched_job_hosts;
    c->sched_job_hosts = NULL;
    c->nsched_job_hosts = 0;
  }
}

/* The rendezvous: standalone, static or c10d, and where the server is. */
static int finish_rdzv(cfg_t *c, char *err, size_t n) {
  sched_job_wide(c);
  if (c->standalone && c->backend == CFG_BACKEND_ETCD)
    return fail(err, n, "--standalone%s and --rdzv-backend etcd%s: choose one",
                from_var(c, CFG_S_STANDALONE), from_var(c, CFG_S_BACKEND));
  if (c->standalone) {
    uint8_t r[16];
    char hex[33];
    /* Name the variable: a job spec's PET_NNODES is no --nnodes the user
     * sees on the command line. */
    if (c->min_nodes != 1 || c->max_nodes != 1) {
      char nn[32];
      snprintf(nn, sizeof(nn), c->min_nodes == c->max_nodes ? "%d" : "%d:%d",
               c->min_nodes, c->max_nodes);
      return fail(err, n, "--standalone%s runs one node: drop --nnodes %s%s "
                          "or use --rdzv-endpoint for several",
                  from_var(c, CFG_S_STANDALONE), nn, from_var(c, CFG_S_NNODES));
    }
    c->backend = CFG_BACKEND_C10D;
    lu_strlcpy(c->endpoint_host, "127.0.0.1", sizeof(c->endpoint_host));
    c->endpoint_port = 0;
    c->endpoint_given = 1;
    /* A fresh run id, as torchrun's uuid4. */
    if (lu_random(r, sizeof(r)) != 0)
      memset(r, 0, sizeof(r));
    lu_hex(r, sizeof(r), hex);
    snprintf(c->run_id, sizeof(c->run_id), "%.8s-%.4s-%.4s-%.4s-%.12s", hex,
             hex + 8, hex + 12, hex + 16, hex + 20);
  }
  if (c->backend < 0)
    c->backend = c->endpoint_given ? CFG_BACKEND_C10D : CFG_BACKEND_STATIC;
  if (c->backend == CFG_BACKEND_ETCD)
    return finish_etcd(c, err, n);
  if (c->endpoint_given && c->endpoint_host[0] == '\0')
    return fail(err, n, "--rdzv-endpoint %s: a list of members, or a URL, "
                        "is etcd's: give --rdzv-backend etcd, or one "
                        "HOST:PORT of the launch server", c->endpoint_raw);
  if (c->backend == CFG_BACKEND_STATIC) {
    if (c->min_nodes != c->max_nodes)
      return fail(err, n, "--nnodes %d:%d%s: static rendezvous needs a fixed "
                          "number of nodes (use --rdzv-backend c10d for "
                          "elastic jobs)", c->min_nodes, c->max_nodes,
                  from_var(c, CFG_S_NNODES));
    /* A scheduler's node index stands for --node-rank: without either,
     * every node would be node 0. */
    if (c->node_rank < 0 && c->conf_rank >= 0) {
      c->node_rank = c->conf_rank; /* torchrun's static rank key */
      if (c->node_rank >= c->max_nodes)
        return fail(err, n, "--rdzv-conf rank=%d is not below --nnodes %d%s",
                    c->node_rank, c->max_nodes, from_var(c, CFG_S_NNODES));
    }
    if (c->node_rank < 0 && c->sched_node_index >= 0) {
      if (c->sched_node_index >= c->max_nodes)
        return fail(err, n, "the scheduler's node index %d%s is not below "
                            "--nnodes %d%s: give --node-rank",
                    c->sched_node_index, from_var(c, CFG_S_NODE_INDEX),
                    c->max_nodes, from_var(c, CFG_S_NNODES));
      c->node_rank = c->sched_node_index;
    }
    if (c->node_rank < 0)
      c->node_rank = 0;
    if (c->node_rank >= c->max_nodes)
      return fail(err, n, "--node-rank %d%s is not below --nnodes %d%s",
                  c->node_rank, from_var(c, CFG_S_NODE_RANK), c->max_nodes,
                  from_var(c, CFG_S_NNODES));
    if (!c->endpoint_given) {
      lu_strlcpy(c->endpoint_host, c->master_addr, sizeof(c->endpoint_host));
      c->endpoint_port = c->master_port;
      c->endpoint_given = 1;
    }
    c->pref_node_rank = c->node_rank;
  } else if (!c->endpoint_given) {
    return fail(err, n, "--rdzv-backend c10d%s needs --rdzv-endpoint "
                        "HOST:PORT (or --standalone for one node)",
                from_var(c, CFG_S_BACKEND));
  } else {
    /* A scheduler's node index orders the nodes (Slurm, Volcano). */
    c->pref_node_rank = c->node_rank >= 0 ? c->node_rank : c->sched_node_index;
    if (c->conf_rank >= 0)
      add_note(c, "--rdzv-conf rank=%d has no effect with the c10d backend: "
                  "node ranks are given at the rendezvous (--node-rank asks "
                  "for one)", c->conf_rank);
    if (c->conf_timeout)
      add_note(c, "--rdzv-conf timeout has no effect with the c10d backend "
                  "(it is how long a static node waits for node 0): use "
                  "join_timeout");
  }
  if (c->endpoint_port < 0)
    c->endpoint_port = RDZV_DEFAULT_PORT;
  /* The scheduler's node 0 hosts its endpoint (whatever its address says:
   * every node of a test is on loopback); an endpoint given, or is_host,
   * leaves it to the address. */
  if (!c->sched_endpoint || c->is_host >= 0)
    c->sched_host = -1;
  else
    c->is_host = c->sched_host;
  return 0;
}

/* --from-tasks: srun started this worker; its place comes from the
 * scheduler, not from --nproc-per-node. */
static int finish_tasks(cfg_t *c, char *err, size_t n) {
  if (c->task_rank < 0 || c->task_local_rank < 0 || c->task_world < 0 ||
      c->task_local_world < 0)
    return fail(err, n, "--from-tasks: this process is no task of a Slurm "
                        "job step (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS "
                        "and SLURM_STEP_TASKS_PER_NODE are unset): run "
                        "srun --ntasks-per-node=GPUS launch --from-tasks "
                        "PROGRAM, or drop --from-tasks (docs/schedulers.md)");
  if (c->given[CFG_S_NPROC])
    return fail(err, n, "--from-tasks: --nproc-per-node has no meaning, "
                        "srun's --ntasks-per-node decides (this node runs %d "
                        "tasks)", c->task_local_world);
  if (c->task_rank >= c->task_world || c->task_local_rank >= c->task_local_world)
    return fail(err, n, "--from-tasks: task %d (local %d) does not fit %d "
                        "tasks (%d on this node): the scheduler's variables "
                        "disagree", c->task_rank, c->task_local_rank,
                c->task_world, c->task_local_world);
  c->nproc = c->task_local_world;
  /* The scheduler bound this task already: keep its binding unless the
   * command line asks for launch's. */
  if (c->sched_bound == 1 && !c->given[CFG_S_CPU_BIND] &&
      !c->given[CFG_S_NUMA_BINDING])
    lu_strlcpy(c->cpu_bind, "none", sizeof(c->cpu_bind));
  return 0;
}

/* A Slurm step whose nodes launch's own flags contradict, where the
 * rendezvous is the step's (its first node, its port, run id JOB.STEP): no
 * node outside the step can join, so the job would wait out the join
 * timeout or leave nodes behind. Said at once, on every node. */
static int slurm_step_fit(cfg_t *c, char *err, size_t n) {
  const char *ep = c->given_by[CFG_S_SCHED_ENDPOINT];
  const char *hl = c->given_by[CFG_S_EXPECTED_HOSTS];
  const char *tl = c->given_by[CFG_S_TASK_LOCAL_WORLD];
  const char *nn = c->given_by[CFG_S_NNODES];
  int slurm_ep = c->sched_endpoint && ep && !strncmp(ep, "SLURM_", 6);
  char want[32];
  /* srun --ntasks-per-node=8 launch (no --from-tasks): eight agents on a
   * node, each taking the node's place and its GPUs */
  if (!c->from_tasks && c->task_local_world > 1 && tl &&
      !strncmp(tl, "SLURM_", 6) &&
      (slurm_ep || (nn && !strncmp(nn, "SLURM_", 6))))
    return fail(err, n, "srun started %d tasks on this node (%s=%s), each a "
                        "launch agent, but launch runs one agent per node "
                        "and starts the node's workers itself: run `srun "
                        "--ntasks-per-node=1 launch ...`, or `srun "
                        "--ntasks-per-node=%d launch --from-tasks ...` for "
                        "one task per worker (docs/schedulers.md)",
                c->task_local_world, tl, sched_getenv(c->environ, tl),
                c->task_local_world);
  if (!slurm_ep || hl == NULL || strncmp(hl, "SLURM_", 6) != 0 ||
      c->nexpected == 0 ||
      ((int)c->nexpected >= c->min_nodes && (int)c->nexpected <= c->max_nodes))
    return 0;
  snprintf(want, sizeof(want), c->min_nodes == c->max_nodes ? "%d" : "%d:%d",
           c->min_nodes, c->max_nodes);
  return fail(err, n, "--nnodes %s%s, but this Slurm step runs on %zu "
                      "node%s (%s=%s), and its rendezvous (%s:%d, job %s) is "
                      "the step's own: no other node can join it. Run srun "
                      "-N%d (sbatch --nodes), drop --nnodes, or give "
                      "--rdzv-endpoint of a launch server every node of the "
                      "job joins (docs/schedulers.md)",
              want, from_var(c, CFG_S_NNODES), c->nexpected,
              c->nexpected == 1 ? "" : "s", hl, sched_getenv(c->environ, hl),
              c->endpoint_host, c->endpoint_port, c->run_id, c->max_nodes);
}

/* launch in an sbatch script (or salloc shell) of a multi-node allocation,
 * not under srun: it runs on this node alone, which nothing else says. */
static void slurm_outside_step(cfg_t *c) {
  const char *job = sched_getenv(c->environ, "SLURM_JOB_ID");
  const char *nn = sched_getenv(c->environ, "SLURM_JOB_NUM_NODES");
  int nodes = 0;
  if (nn == NULL)
    nn = sched_getenv(c->environ, "SLURM_NNODES");
  if (job == NULL || sched_getenv(c->environ, "SLURM_STEP_ID") ||
      sched_getenv(c->environ, "SLURM_STEPID") || nn == NULL ||
      lu_parse_int(nn, 1, 1 << 24, &nodes) != 0 || nodes < 2 ||
      c->max_nodes >= 2)
    return;
  snprintf(c->warning, sizeof(c->warning),
           "Slurm job %s has %d nodes, but this launch runs outside srun (in "
           "the batch script): only this node runs the job. Start one launch "
           "per node with `srun --ntasks-per-node=1 launch ...` "
           "(examples/slurm/train.sbatch)", job, nodes);
}

/* The GPUs the job's ranks see: this machine's (under --root), or for
 * `launch env --topology` those of the machine planned for, counted as
 * `launch topo` counts them (an unreadable file is node.c's to report). */
static int job_gpus(const cfg_t *c, unsigned flags) {
  aff_topo_opts_t to = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t;
  char why[256];
  int ngpus;
  /* What the topology counts (torchrun: torch.cuda.device_count()): GPUs
   * excluded or not given to this container are not CUDA's, and
   * CUDA_VISIBLE_DEVICES ends at its first entry that names none. */
  if (!(flags & CFG_ENV_CMD) || c->topology_file[0] == '\0')
    return aff_gpu_count(c->env_root[0] ? c->env_root : NULL,
                         c->cuda_visible_devices);
  to.xml = c->topology_file;
  to.cuda_visible_devices = c->cuda_visible_devices;
  if (aff_topo_load(&to, &t, why, sizeof(why)) != 0)
    return 0;
  ngpus = aff_topo_ngpus(t);
  aff_topo_free(t);
  return ngpus;
}

static int finish(cfg_t *c, unsigned flags, char *err, size_t n) {
  const char *s = c->nproc_spec;
  int rc;
  if ((flags & CFG_NEED_PROGRAM) && c->prog_argc == 0)
    return fail(err, n, "no program given: launch [options] PROGRAM [ARGS...] "
                        "(see launch --help)");
  if (c->prog_argc > 0 && c->prog_mode == CFG_PROG_MODULE &&
      c->prog_argv[0][0] == '-')
    return fail(err, n, "--module: '%s' is not a module name",
                c->prog_argv[0]);
  c->ngpus = job_gpus(c, flags);
  if (!strcmp(s, "gpu") && c->ngpus == 0)
    return fail(err, n, "--nproc-per-node gpu%s: no GPU found (no "
                        "/proc/driver/nvidia/gpus, or CUDA_VISIBLE_DEVICES "
                        "hides them); give a number, or 'cpu'",
                from_var(c, CFG_S_NPROC));
  if (!strcmp(s, "gpu") || (!strcmp(s, "auto") && c->ngpus > 0)) {
    c->nproc = LU_MIN(c->ngpus, CFG_MAX_NPROC);
  } else if (!strcmp(s, "cpu") || !strcmp(s, "auto")) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    c->nproc = (int)LU_MAX(1, LU_MIN(ncpu, CFG_MAX_NPROC));
  } else {
    lu_parse_int(s, 1, CFG_MAX_NPROC, &c->nproc);
  }
  if ((c->from_tasks && (rc = finish_tasks(c, err, n)) != 0) ||
      (rc = finish_rdzv(c, err, n)) != 0 ||
      (rc = slurm_step_fit(c, err, n)) != 0 || (rc = finish_output(c, err, n)))
    return rc;
  slurm_outside_step(c);
  /* Binding: each rank on its GPU's NUMA node, memory preferred there, when
   * this node has GPUs; CPU-only jobs are left alone. */
  if (c->cpu_bind[0] == '\0')
    lu_strlcpy(c->cpu_bind, c->ngpus > 0 ? "numa" : "none", sizeof(c->cpu_bind));
  if (c->mem_bind[0] == '\0')
    lu_strlcpy(c->mem_bind,
               c->ngpus > 0 && strcmp(c->cpu_bind, "none") ? "preferred" : "none",
               sizeof(c->mem_bind));
  /* Which async error handling name the workers' PyTorch reads. */
  if (c->torch_version_spec[0] == '\0') {
    char where[PATH_MAX];
    c->torch_version = launch_torch_version(c, where, sizeof(where));
  }
  return 0;
}

int cfg_parse(int argc, char **argv, char *const *envp, unsigned flags,
              cfg_t *c, char *err, size_t errlen) {
  unsigned char *seen = c->given;
  int i;
  defaults(c, envp);
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *eq, *val, *attached = NULL;
    size_t len;
    int id;
    if (a[0] != '-' || a[1] == '\0') {
      if (!(flags & CFG_CKPT_CMD)) {
        /* The program. A "--" right after it is not its argument: torchrun's
         * script positional takes argparse's first "--" with it (PROG --
         * --foo gives --foo; PROG -- -- x gives -- x). argv is permuted, as
         * getopt does, so that prog_argv stays one run of it. */
        if (i + 1 < argc && !strcmp(argv[i + 1], "--")) {
          argv[i + 1] = argv[i];
          i++;
        }
        break;
      }
      if (c->nargs == (int)LU_ARRAY_SIZE(c->args))
        return fail(err, errlen, "%s: unexpected argument '%s'",
                    cmd_word(flags), a);
      c->args[c->nargs++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    eq = strchr(a, '=');
    len = eq ? (size_t)(eq - a) : strlen(a);
    if (a[1] != '-' && !eq && len > 2) {
      /* "-r3": a short option's value attached, as argparse takes it */
      char scratch[8];
      int s2 = find_flag(a, 2, flags, scratch, sizeof(scratch));
      if (s2 >= 0 && settings[s2].arg != NULL) {
        attached = a + 2;
        len = 2;
      }
    }
    if ((id = find_flag(a, len, flags, err, errlen)) < 0)
      return -1;
    if (eq && (id == CFG_S_HELP || id == CFG_S_HELP_DEBUG ||
               id == CFG_S_VERSION))
      return fail(err, errlen, "%s takes no value (got '%s')",
                  settings[id].flag, a);
    if (id == CFG_S_HELP || id == CFG_S_HELP_DEBUG) {
      cfg_help(stdout, flags | (id == CFG_S_HELP_DEBUG ? CFG_HELP_DEBUG : 0));
      return 1;
    }
    if (id == CFG_S_VERSION) {
      printf("launch %d.%d (protocol %d)\n", RDZV_VERSION_MAJOR,
             RDZV_VERSION_MINOR, RDZV_PROTOCOL_VERSION);
      return 1;
    }
    if (attached)
      val = attached;
    else if (eq)
      val = eq + 1;
    else if (settings[id].arg == NULL)
      val = "1";
    else if (i + 1 < argc)
      val = argv[++i];
    else
      return fail(err, errlen, "option '%s' needs a value", settings[id].flag);
    if (apply(c, id, val, err, errlen) != 0)
      return -1;
    seen[id] = 1;
  }
  c->prog_argv = argv + i;
  c->prog_argc = argc - i;
  if (flags & (CFG_SERVER_CMD | CFG_CKPT_CMD)) {
    /* Outside a job: launch's own variables, no scheduler's. */
    for (; i < argc && (flags & CFG_CKPT_CMD); i++) {
      if (c->nargs == (int)LU_ARRAY_SIZE(c->args))
        return fail(err, errlen, "%s: unexpected argument '%s'",
                    cmd_word(flags), argv[i]);
      c->args[c->nargs++] = argv[i];
    }
    if ((flags & CFG_SERVER_CMD) && c->prog_argc > 0)
      return fail(err, errlen, "%s: unexpected argument '%s'",
                  cmd_word(flags), c->prog_argv[0]);
    return sched_read_own(envp, seen, apply_env, &(env_ctx_t){c, flags}, err,
                          errlen);
  }
  if (sched_read(envp, seen, apply_env, &(env_ctx_t){c, flags}, err, errlen))
    return -1;
  if (c->host[0] == '\0' && gethostname(c->host, sizeof(c->host)) != 0)
    lu_strlcpy(c->host, "localhost", sizeof(c->host));
  if (flags & (CFG_DOCTOR_CMD | CFG_TOPO_CMD))
    return c->prog_argc > 0 ? fail(err, errlen, "unexpected argument '%s'",
                                   c->prog_argv[0])
                            : 0;
  if (!(flags & CFG_STATUS_CMD))
    return finish(c, flags, err, errlen);
  /* No endpoint: the jobs of this node's registry (jobreg.h), all of
   * them, or the one of --rdzv-id. */
  if ((c->endpoint_given && !seen[CFG_S_ID]) || c->prog_argc > 0)
    return fail(err, errlen, "status takes --rdzv-endpoint HOST:PORT with "
                             "--rdzv-id ID, --rdzv-id ID alone (a job of this "
                             "node), or nothing (every job of this node), "
                             "and nothing else");
  return 0;
}

void cfg_server_config(cfg_t *c) {
  srv_config_t *s = &c->srv;
  s->host = c->given[CFG_S_SRV_HOST] ? c->srv_host : NULL;
  s->unix_path = c->given[CFG_S_SRV_UNIX] ? c->srv_unix : NULL;
  s->tcpstore_job = c->srv_tcpstore_job;
  s->tcpstore_allow = c->given[CFG_S_SRV_TCPSTORE_ALLOW] ? c->tcpstore_allow
                                                          : NULL;
  s->tls_cert = c->given[CFG_S_SRV_TLS_CERT] ? c->tls_cert : NULL;
  s->tls_key = c->given[CFG_S_SRV_TLS_KEY] ? c->tls_key : NULL;
  s->tls_ca = c->given[CFG_S_SRV_TLS_CA] ? c->tls_ca : NULL;
  if (!c->given[CFG_S_SRV_THREADS])
    s->threads = (uint32_t)srv_default_threads();
}

void cfg_free(cfg_t *c) {
  lu_hostlist_free(c->expected_hosts, c->nexpected);
  c->expected_hosts = NULL;
  c->nexpected = 0;
  lu_hostlist_free(c->sched_job_hosts, c->nsched_job_hosts);
  c->sched_job_hosts = NULL;
  c->nsched_job_hosts = 0;
}

/* ---- --help ----------------------------------------------------------------------- */

/* text wrapped at 79 columns, continuation lines indented by indent. */
static void wrap(FILE *out, const char *text, int indent) {
  int col = indent, first = 1;
  while (*text) {
    int w;
    text += strspn(text, " ");
    if ((w = (int)strcspn(text, " ")) == 0)
      break;
    if (!first && col + 1 + w > 79) {
      fprintf(out, "\n%*s", indent, "");
      col = indent;
    } else if (!first) {
      fputc(' ', out);
      col++;
    }
    fwrite(text, 1, (size_t)w, out);
    col += w;
    text += w;
    first = 0;
  }
  fputc('\n', out);
}

static const char agent_intro[] =
    "usage: launch [options] PROGRAM [ARGS...]\n"
    "       launch server|status|topo|env|doctor|ckpt [options]  (launch help CMD)\n\n"
    "Starts PROGRAM once per local rank on this node, joined with the other\n"
    "nodes of the job through the rendezvous server, and keeps the job alive:\n"
    "a failure on any node restarts every node's workers (up to\n"
    "--max-restarts). A PROGRAM ending in .py runs under python3 (or\n"
    "$PYTHON_EXEC); anything else is executed directly. torchrun's flags are\n"
    "accepted in both spellings (--nproc-per-node, --nproc_per_node) and from\n"
    "their PET_* environment variables; docs/launcher.md has the details.\n"
    "Under Slurm (srun), Volcano or Kubeflow the nodes, the node rank, the run\n"
    "id and the endpoint come from the scheduler (docs/schedulers.md).\n\n";
static const char agent_examples[] =
    "\nexamples:\n"
    "  launch --standalone --nproc-per-node 8 train.py --lr 3e-4\n"
    "  launch --nnodes 4 --nproc-per-node 8 --rdzv-id job42 \\\n"
    "         --rdzv-endpoint node0:29400 train.py\n"
    "  launch --nnodes 2:4 --max-restarts 3 --rdzv-endpoint node0 train.py\n"
    "  launch --standalone --nproc-per-node 2 --exit-code torchrun train.py\n"
    "  srun --ntasks-per-node=1 launch train.py         # every node of a step\n"
    "  launch status --rdzv-endpoint node0:29400 --rdzv-id job42\n";
static const char env_intro[] =
    "usage: launch env [options] [launch's options] [PROGRAM [ARGS...]]\n\n"
    "Prints the environment local rank N would get from `launch` with the\n"
    "same options (launch --help): the inherited environment, torchrun's\n"
    "variables and launch's (LAUNCH_CPUS, LAUNCH_HCA, ...), the NCCL profile\n"
    "on top, and the lock (NCCL_NVLS_ENABLE=0,\n"
    "TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1), each with\n"
    "where it came from. What only the rendezvous decides is shown as the\n"
    "flags promise it: round 0, the node rank asked for (else 0), --nnodes\n"
    "MAX nodes, the store at the endpoint; the attempt directory ends in a\n"
    "random part (XXXXXX here), and --standalone gets a fresh run id and\n"
    "port when it starts.\n\n";
static const char env_examples[] =
    "\nexamples:\n"
    "  launch env --nccl-profile pcie-ib --nproc-per-node 8 --local-rank 3\n"
    "  launch env --profile /etc/profile.d/nccl.sh --lint\n"
    "  launch env --show-profile pcie-ib > my.env\n";

static const char status_intro[] =
    "usage: launch status --rdzv-endpoint HOST[:PORT] --rdzv-id ID [options]\n"
    "       launch status [--rdzv-id ID] [--json]\n\n"
    "Shows a job's rendezvous: its state, round (0, one more at each restart),\n"
    "restarts used, and each node with its ranks, state and last heartbeat.\n"
    "Without --rdzv-endpoint: the jobs this user started on this node (each\n"
    "agent registers its job in $XDG_RUNTIME_DIR/launch), running ones with\n"
    "their server, ended ones with their exit code for 10 minutes; with\n"
    "--rdzv-id alone, that job in full.\n"
    "PET_RDZV_ENDPOINT and PET_RDZV_ID stand for the flags, as for launch.\n\n";

static const char doctor_intro[] =
    "usage: launch doctor [options]\n\n"
    "Checks this node the way the runbooks do by hand (host, OS, kernel,\n"
    "CPUs/NUMA, GPUs and driver, CUDA and NCCL versions, persistence mode,\n"
    "nouveau, NUMA balancing, huge pages, InfiniBand ports, NICs, GPU<->NIC\n"
    "NUMA placement, GPUDirect RDMA, the NCCL environment, the rendezvous\n"
    "port). Every line is PASS, INFO, WARN or FAIL with the reason and the\n"
    "fix. Exit status 1 when any line fails. --rdzv-id names the gathering\n"
    "of --nnodes (default doctor).\n\n";
static const char doctor_examples[] =
    "\nexamples:\n"
    "  launch doctor --rdzv-endpoint 10.10.10.11:29400 --expect-gpus 8\n"
    "  launch doctor --nnodes 4 --rdzv-endpoint 10.10.10.11:29400  # every node\n";

static const char topo_intro[] =
    "usage: launch topo [options]\n\n"
    "Shows how the GPUs, NICs, NUMA nodes and CPUs of a machine connect (in\n"
    "the spirit of nvidia-smi topo -m), the binding every local rank would\n"
    "get, and what is wrong with the topology: a NIC on another NUMA node\n"
    "than its GPUs, a PCIe link narrower or slower than the device supports,\n"
    "an InfiniBand port down, NUMA balancing on. It plans one rank per\n"
    "visible GPU (1 without GPUs) with the binding launch itself applies\n"
    "(the defaults below) unless told otherwise; LIST is one cpulist per\n"
    "local rank separated by ':', e.g. 0-15:16-31.\n\n";
static const char topo_examples[] =
    "\nexamples:\n"
    "  launch topo\n"
    "  launch topo --topology tests/topo/dgx-a100.xml --nproc-per-node 8\n"
    "  launch topo --cpu-bind 0-3:4-7 --mem-bind none --nproc-per-node 2\n";

static const char server_intro[] =
    "usage: launch server [options]\n"
    "       launch server --token-file F --issue-key JOB\n\n"
    "Runs the rendezvous server: a key/value store per job for launch agents,\n"
    "librdzv clients and PyTorch TCPStore clients (1.13 and >= 2.2), all on\n"
    "one port, with the rendezvous of launch agents (docs/rendezvous.md).\n"
    "Stops cleanly on SIGINT or SIGTERM. --threads also comes from\n"
    "LAUNCH_SERVER_THREADS; --help-debug lists the knobs for benchmarks and\n"
    "debugging.\n\n";
static const char server_examples[] =
    "\nexample:\n"
    "  launch server --port 29400 --token-file /etc/launch/token \\\n"
    "                --tcpstore-allow 10.0.0.0/8\n"
    "  launch server --token-file /etc/launch/token --issue-key job42 > k42\n";

static const char ckpt_intro[] =
    "usage: launch ckpt ls|verify DIR [options]\n\n"
    "Lists the checkpoint steps in DIR, newest first, says whether each one\n"
    "is complete, names the first missing or damaged file of each one that\n"
    "is not, and prints the step a restart would resume from.\n\n"
    "  ls       sizes and structure only (fast)\n"
    "  verify   also every shard's SHA-256 against the manifest (launch's\n"
    "           layout); other layouts are checked as far as their metadata\n"
    "           allows (docs/checkpoints.md)\n\n";
static const char ckpt_examples[] =
    "\nexit status: 0 the newest step is complete and is what a restart would\n"
    "use; 1 it is not (the output names the step a restart would use, if\n"
    "any) or there is no step; 2 usage error or DIR unreadable.\n";

/* One row of --help: the flag and its value, the help wrapped beside. */
static void help_row(FILE *out, const setting_t *s, int col) {
  char left[96];
  int w = snprintf(left, sizeof(left), "  %s%s%s%s%s", s->alt ? s->alt : "",
                   s->alt ? ", " : "", s->flag, s->arg ? " " : "",
                   s->arg ? s->arg : "");
  if (w > col - 2)
    fprintf(out, "%s\n%*s", left, col, "");
  else
    fprintf(out, "%s%*s", left, col - w, "");
  wrap(out, s->help, col);
}

void cfg_help(FILE *out, unsigned flags) {
  enum { COL = 30 };
  int agent = !(flags & (CFG_ENV_CMD | CFG_STATUS_CMD | CFG_DOCTOR_CMD |
                          CFG_TOPO_CMD | CFG_SERVER_CMD | CFG_CKPT_CMD));
  fputs(agent                       ? agent_intro
        : (flags & CFG_ENV_CMD)    ? env_intro
        : (flags & CFG_STATUS_CMD) ? status_intro
        : (flags & CFG_TOPO_CMD)   ? topo_intro
        : (flags & CFG_SERVER_CMD) ? server_intro
        : (flags & CFG_CKPT_CMD)   ? ckpt_intro
                                   : doctor_intro,
        out);
  for (int sec = SEC_NODES, any = 0; sec < SEC_ENV; sec++) {
    int header = 0;
    /* the debug knobs only when asked for (Redis' DEBUG_CONFIG) */
    if (sec == SEC_CMD_DEBUG && !(flags & CFG_HELP_DEBUG))
      continue;
    for (int i = 0; i < CFG_S_COUNT; i++) {
      const setting_t *s = &settings[i];
      /* A command's rows go under "options", but for the sections of
       * its own that have a heading (the server's limits). */
      const char *title = agent || sec == SEC_CMD_LIMITS ||
                                  sec == SEC_CMD_DEBUG
                              ? section_names[sec]
                              : NULL;
      /* `launch env` lists its own: launch --help has the others */
      if (s->section != sec || s->help == NULL || !takes(i, flags) ||
          ((flags & CFG_ENV_CMD) && sec != SEC_CMD_ENV))
        continue;
      if (!header++) {
        if (title)
          fprintf(out, "%s%s:\n", !agent && any++ ? "\n" : "", title);
        else if (!any++)
          fputs("options:\n", out);
      }
      help_row(out, s, COL);
      if (sec == SEC_CMD_DEBUG && sched_own_var(i))
        fprintf(out, "%*s(%s)\n", COL, "", sched_own_var(i));
    }
  }
  fputs(agent                       ? agent_examples
        : (flags & CFG_ENV_CMD)    ? env_examples
        : (flags & CFG_DOCTOR_CMD) ? doctor_examples
        : (flags & CFG_TOPO_CMD)   ? topo_examples
        : (flags & CFG_SERVER_CMD) ? server_examples
        : (flags & CFG_CKPT_CMD)   ? ckpt_examples
                                   : "",
        out);
}
