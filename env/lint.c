/* lint.c - the NCCL environment lint: mistakes cluster runbooks make (GID
 * index on pure InfiniBand, NCCL_SOCKET_IFNAME==x, NCCL_DEBUG=INFO left on, the
 * 1.13-era NCCL_ASYNC_ERROR_HANDLING), names NCCL does not read, values it
 * ignores, interfaces and HCAs this node lacks, P2P off where NVLink is. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "env_int.h"

enum { ENV_NV_STR = 0, ENV_NV_INT = 1 };

typedef struct nccl_var_s {
  const char *name;
  int type;
  int first, last;
} nccl_var_t;

static const nccl_var_t nccl_vars[] = {
#define NCCL_VAR(n, t, f, l) {n, t, f, l},
#include "nccl_vars.def"
#undef NCCL_VAR
};

int env_nccl_ref_version(void) { return ENV_NCCL_REF_VERSION; }

static const nccl_var_t *nccl_var(const char *name) {
  size_t lo = 0, hi = LU_ARRAY_SIZE(nccl_vars);
  /* the generator writes them sorted */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(nccl_vars[mid].name, name);
    if (c == 0)
      return &nccl_vars[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

int env_nccl_var_info(const char *name, int *first, int *last, int *is_int) {
  const nccl_var_t *v = nccl_var(name);
  if (v == NULL)
    return 0;
  if (first)
    *first = v->first;
  if (last)
    *last = v->last;
  if (is_int)
    *is_int = v->type == ENV_NV_INT;
  return 1;
}

/* PyTorch's pre-2.2 names in NCCL's namespace (ProcessGroupNCCL reads the
 * TORCH_ one first, the old one with a deprecation warning). */
static const char *const torch_legacy[][2] = {
    {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"},
    {"NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"},
    {"NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG"},
    {"NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"},
};

const char *env_sev_name(env_sev_t s) {
  switch (s) {
  case ENV_SEV_INFO: return "info";
  case ENV_SEV_WARN: return "warning";
  case ENV_SEV_ERROR: return "error";
  }
  return "?";
}

typedef struct lint_s {
  env_finding_t *f;
  int n, cap;
  int oom;
  const env_t *e;
  const env_node_t *node;
} lint_t;

static void add(lint_t *l, env_sev_t sev, const char *rule, const char *var,
                const char *fix, const char *fmt, ...) LU_PRINTF(6, 7);
static void add(lint_t *l, env_sev_t sev, const char *rule, const char *var,
                const char *fix, const char *fmt, ...) {
  env_finding_t *f;
  const env_var_t *v = var ? env_find(l->e, var) : NULL;
  va_list ap;
  if (l->n == l->cap) {
    int ncap = l->cap ? l->cap * 2 : 16;
    env_finding_t *nf = realloc(l->f, sizeof(*nf) * (size_t)ncap);
    if (nf == NULL) {
      l->oom = 1;
      return;
    }
    l->f = nf;
    l->cap = ncap;
  }
  f = &l->f[l->n++];
  memset(f, 0, sizeof(*f));
  f->sev = sev;
  lu_strlcpy(f->rule, rule, sizeof(f->rule));
  if (var)
    lu_strlcpy(f->var, var, sizeof(f->var));
  if (v) {
    lu_strlcpy(f->value, v->value, sizeof(f->value));
    lu_strlcpy(f->where, v->origin ? v->origin : "", sizeof(f->where));
  }
  va_start(ap, fmt);
  vsnprintf(f->why, sizeof(f->why), fmt, ap);
  va_end(ap);
  lu_strlcpy(f->fix, fix ? fix : "", sizeof(f->fix));
}

static int ieq(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return 0;
  return *a == *b;
}

static int is_integer(const char *s) {
  const char *p = s;
  while (isspace((unsigned char)*p))
    p++;
  if (*p == '-' || *p == '+')
    p++;
  if (!isdigit((unsigned char)*p))
    return 0;
  /* strtoll base 0 as NCCL: 0x10 and 010 are numbers too */
  strtoll(s, (char **)&p, 0);
  while (isspace((unsigned char)*p))
    p++;
  return *p == '\0';
}

static void version_str(int v, char *buf, size_t n) {
  snprintf(buf, n, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
}

/* NCCL names: known, removed, newer, integer. */
static void check_names(lint_t *l, int ver) {
  char vs[32], fs[32];
  version_str(ver, vs, sizeof(vs));
  for (int i = 0; i < env_count(l->e); i++) {
    const env_var_t *v = env_at(l->e, i);
    const nccl_var_t *nv;
    int legacy = -1;
    if (strncmp(v->key, "NCCL_", 5) != 0)
      continue;
    /* NVIDIA's container images export NCCL_VERSION as a label of the
     * installed library; NCCL itself never reads it. */
    if (strcmp(v->key, "NCCL_VERSION") == 0 && v->src == ENV_SRC_INHERITED)
      continue;
    for (size_t k = 0; k < LU_ARRAY_SIZE(torch_legacy); k++)
      if (strcmp(v->key, torch_legacy[k][0]) == 0)
        legacy = (int)k;
    if (legacy >= 0)
      continue; /* check_torch_legacy() */
    nv = nccl_var(v->key);
    if (nv == NULL) {
      const char *best = NULL;
      int bd = 99;
      char fix[320];
      size_t kl = strlen(v->key);
      for (size_t k = 0; k < LU_ARRAY_SIZE(nccl_vars); k++) {
        size_t nl = strlen(nccl_vars[k].name);
        int d;
        /* only near names are suggestions; skip the rest cheaply */
        if (kl > nl + 3 || nl > kl + 3)
          continue;
        d = lu_edit_distance(v->key, nccl_vars[k].name);
        if (d < bd) {
          bd = d;
          best = nccl_vars[k].name;
        }
      }
      if (best && bd <= 3)
        snprintf(fix, sizeof(fix), "did you mean %s? otherwise remove it", best);
      else
        snprintf(fix, sizeof(fix), "remove it (env/nccl_vars.def lists what "
                                   "NCCL reads)");
      version_str(ENV_NCCL_NEWEST_SCANNED, fs, sizeof(fs));
      add(l, ENV_SEV_WARN, "unknown-var", v->key, fix,
          "NCCL does not read %s (no NCCL release up to %s has it): it has no "
          "effect",
          v->key, fs);
      continue;
    }
    if (nv->last != 0 && nv->last < ver) {
      version_str(nv->last, fs, sizeof(fs));
      add(l, ENV_SEV_WARN, "removed-var", v->key, "remove it",
          "NCCL stopped reading %s after %s; with NCCL %s it has no effect",
          v->key, fs, vs);
      continue;
    }
    if (nv->first > ver) {
      version_str(nv->first, fs, sizeof(fs));
      add(l, ENV_SEV_INFO, "newer-var", v->key,
          "fine if the workers load a newer NCCL (PyTorch wheels bundle one)",
          "%s exists since NCCL %s; this node's NCCL is %s", v->key, fs, vs);
    }
    if (nv->type == ENV_NV_INT && !is_integer(v->value)) {
      add(l, ENV_SEV_ERROR, "not-integer", v->key,
          "write a decimal number",
          "NCCL reads %s as an integer and ignores '%s' (it keeps its default "
          "and only says so with NCCL_DEBUG=INFO)",
          v->key, v->value);
    }
  }
}

static void check_torch_legacy(lint_t *l) {
  for (size_t k = 0; k < LU_ARRAY_SIZE(torch_legacy); k++) {
    const env_var_t *ov = env_find(l->e, torch_legacy[k][0]);
    const env_var_t *nv = env_find(l->e, torch_legacy[k][1]);
    const char *old = ov ? ov->value : NULL, *neu = nv ? nv->value : NULL;
    char fix[256];
    int old_torch = l->node && l->node->torch_version > 0 &&
                    l->node->torch_version < 202;
    /* The launcher sets the name the workers' PyTorch reads. */
    if (old == NULL || ov->src == ENV_SRC_LAUNCH)
      continue;
    if (neu == NULL && old_torch)
      continue; /* PyTorch < 2.2 reads the old name only: it is right */
    if (neu == NULL || nv->src == ENV_SRC_LAUNCH) {
      /* The launcher set the new name from the old one's value (the user
       * set the old one only): what PyTorch >= 2.2 does with it alone. */
      char carried[192] = "";
      if (neu)
        snprintf(carried, sizeof(carried), "; launch carried its value over "
                 "to %s=%s", torch_legacy[k][1], neu);
      snprintf(fix, sizeof(fix),
               "set %s=%s (keep the old name as well only for PyTorch < 2.2)",
               torch_legacy[k][1], old);
      add(l, ENV_SEV_WARN,
          k == 0 ? "async-error-handling" : "torch-legacy-name",
          torch_legacy[k][0], fix,
          "%s is the PyTorch 1.13-era name; PyTorch >= 2.2 reads %s and only "
          "falls back to the old one with a deprecation warning (NCCL itself "
          "never reads it)%s",
          torch_legacy[k][0], torch_legacy[k][1], carried);
    } else if (strcmp(old, neu) != 0) {
      snprintf(fix, sizeof(fix), "keep only %s%s", torch_legacy[k][old_torch ? 0 : 1],
               old_torch ? " (the workers' PyTorch is older than 2.2)" : "");
      add(l, ENV_SEV_ERROR,
          k == 0 ? "async-error-handling" : "torch-legacy-name",
          torch_legacy[k][0], fix,
          "%s=%s and %s=%s disagree: PyTorch >= 2.2 uses the second, 1.13 the "
          "first",
          torch_legacy[k][0], old, torch_legacy[k][1], neu);
    }
  }
}

/* NCCL's list syntax: [^][=]item,item ; items are prefixes unless '='. */
typedef struct nlist_s {
  int exclude, exact, n;
  char item[32][64];
} nlist_t;

static void parse_list(const char *v, nlist_t *out) {
  char buf[512], *save = NULL, *tok;
  memset(out, 0, sizeof(*out));
  if (*v == '^') {
    out->exclude = 1;
    v++;
  }
  if (*v == '=') {
    out->exact = 1;
    v++;
  }
  lu_strlcpy(buf, v, sizeof(buf));
  for (tok = strtok_r(buf, ",", &save); tok && out->n < 32;
       tok = strtok_r(NULL, ",", &save))
    lu_strlcpy(out->item[out->n++], tok, sizeof(out->item[0]));
}

static int name_matches(const nlist_t *l, const char *item, const char *name) {
  return l->exact ? strcmp(item, name) == 0
                  : strncmp(item, name, strlen(item)) == 0;
}

static void check_ifname(lint_t *l) {
  const char *v = env_get(l->e, "NCCL_SOCKET_IFNAME");
  nlist_t nl;
  int any = 0;
  char missing[256] = "", avail[512] = "";
  if (v == NULL)
    return;
  /* A leading '=' (NCCL_SOCKET_IFNAME==ens1f0 in a shell) is NCCL's
   * documented "exactly this interface": right as it is, and safer than a
   * prefix that also matches ens1f01. Only when it makes a name that exists
   * as a prefix match nothing does ifname-missing say so. */
  if (l->node == NULL || !l->node->probed)
    return;
  parse_list(v, &nl);
  if (nl.exclude)
    return; /* an exclusion list cannot name a missing interface wrongly */
  for (int i = 0; i < nl.n; i++) {
    int hit = 0;
    for (int k = 0; k < l->node->nnetdevs; k++)
      hit |= name_matches(&nl, nl.item[i], l->node->netdevs[k]);
    if (hit)
      any = 1;
    else
      snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
               "%s%s", missing[0] ? ", " : "", nl.item[i]);
  }
  for (int k = 0; k < l->node->nnetdevs; k++)
    snprintf(avail + strlen(avail), sizeof(avail) - strlen(avail), "%s%s",
             avail[0] ? " " : "", l->node->netdevs[k]);
  if (!any && l->node->netdevs_incomplete) {
    /* the node has more interfaces than were listed: the name may be
     * among the others, and a job is not refused on a guess */
    add(l, ENV_SEV_INFO, "ifname-unchecked", "NCCL_SOCKET_IFNAME",
        "check with ip -br link that the interface exists",
        "this node has more network interfaces than launch lists (%d); "
        "'%s' matches none of those listed",
        l->node->nnetdevs, v);
  } else if (!any) {
    char fix[700]; /* the longer text and avail (512) */
    int prefix = 0;
    for (int i = 0; nl.exact && i < nl.n; i++)
      for (int k = 0; k < l->node->nnetdevs; k++)
        prefix |= strncmp(nl.item[i], l->node->netdevs[k],
                          strlen(nl.item[i])) == 0;
    if (prefix)
      snprintf(fix, sizeof(fix),
               "drop the leading '=' (it asks for an interface named exactly "
               "so; without it the name is a prefix), or pick one of this "
               "node's interfaces: %s",
               avail);
    else
      snprintf(fix, sizeof(fix), "pick one of this node's interfaces: %s",
               avail);
    add(l, ENV_SEV_ERROR, "ifname-missing", "NCCL_SOCKET_IFNAME", fix,
        "no interface of this node matches '%s': NCCL finds no socket "
        "interface and the job fails at init",
        v);
  } else if (missing[0] && !l->node->netdevs_incomplete) {
    add(l, ENV_SEV_INFO, "ifname-missing", "NCCL_SOCKET_IFNAME",
        "remove the entries this node lacks if no node has them",
        "%s matches no interface of this node", missing);
  }
}

static const env_hca_t *find_hca(const env_node_t *n, const nlist_t *nl,
                                 const char *item) {
  for (int k = 0; k < n->nhcas; k++)
    if (name_matches(nl, item, n->hcas[k].name))
      return &n->hcas[k];
  return NULL;
}

static void check_hca(lint_t *l) {
  const char *v = env_get(l->e, "NCCL_IB_HCA");
  nlist_t nl;
  char avail[512] = "";
  if (v == NULL || l->node == NULL || !l->node->probed)
    return;
  parse_list(v, &nl);
  if (nl.exclude)
    return;
  for (int k = 0; k < l->node->nhcas; k++)
    snprintf(avail + strlen(avail), sizeof(avail) - strlen(avail), "%s%s",
             avail[0] ? " " : "", l->node->hcas[k].name);
  for (int i = 0; i < nl.n; i++) {
    char name[64], fix[640];
    const char *colon = strchr(nl.item[i], ':');
    int port = colon ? atoi(colon + 1) : 0;
    const env_hca_t *h;
    snprintf(name, sizeof(name), "%.*s",
             (int)(colon ? (size_t)(colon - nl.item[i]) : strlen(nl.item[i])),
             nl.item[i]);
    h = find_hca(l->node, &nl, name);
    if (h == NULL && l->node->hcas_incomplete)
      continue; /* among the devices not listed, maybe */
    if (h == NULL) {
      snprintf(fix, sizeof(fix), "%s%s",
               avail[0] ? "this node's RDMA devices: " : "this node has no RDMA "
                                                        "device (ibv_devices): "
                                                        "use the socket profile",
               avail);
      add(l, ENV_SEV_ERROR, "hca-missing", "NCCL_IB_HCA", fix,
          "NCCL_IB_HCA names %s, which this node does not have: NCCL falls "
          "back to sockets or fails",
          name);
      continue;
    }
    if (port > 0 && port > h->nports) {
      snprintf(fix, sizeof(fix), "%s has %d port%s", h->name, h->nports,
               h->nports == 1 ? "" : "s");
      add(l, ENV_SEV_ERROR, "hca-missing", "NCCL_IB_HCA", fix,
          "NCCL_IB_HCA asks for port %d of %s, which it does not have", port,
          h->name);
      continue;
    }
    for (int p = 1; p <= h->nports; p++)
      if ((port == 0 || port == p) && h->state[p - 1] > 0 &&
          h->state[p - 1] != 4)
        add(l, ENV_SEV_WARN, "hca-port-down", "NCCL_IB_HCA",
            "check the cable, the switch port and the subnet manager (ibstat, "
            "sminfo), or leave this port out",
            "%s port %d is not ACTIVE (state %d)", h->name, p, h->state[p - 1]);
  }
}

/* HCAs NCCL will use: those NCCL_IB_HCA selects, else all. */
static int hca_selected(const lint_t *l, const env_hca_t *h) {
  const char *v = env_get(l->e, "NCCL_IB_HCA");
  nlist_t nl;
  int hit = 0;
  if (v == NULL)
    return 1;
  parse_list(v, &nl);
  for (int i = 0; i < nl.n; i++) {
    char name[64];
    const char *colon = strchr(nl.item[i], ':');
    snprintf(name, sizeof(name), "%.*s",
             (int)(colon ? (size_t)(colon - nl.item[i]) : strlen(nl.item[i])),
             nl.item[i]);
    hit |= name_matches(&nl, name, h->name);
  }
  return nl.exclude ? !hit : hit;
}

static void check_gid(lint_t *l) {
  int ib = 0, eth = 0;
  if (env_get(l->e, "NCCL_IB_GID_INDEX") == NULL || l->node == NULL)
    return;
  for (int k = 0; k < l->node->nhcas; k++) {
    const env_hca_t *h = &l->node->hcas[k];
    if (!hca_selected(l, h))
      continue;
    for (int p = 0; p < h->nports; p++) {
      if (strcmp(h->link_layer[p], "InfiniBand") == 0)
        ib++;
      else if (strcmp(h->link_layer[p], "Ethernet") == 0)
        eth++;
    }
  }
  if (ib > 0 && eth == 0)
    add(l, ENV_SEV_WARN, "gid-on-ib", "NCCL_IB_GID_INDEX",
        "remove NCCL_IB_GID_INDEX (set it only for RoCE)",
        "NCCL_IB_GID_INDEX selects a RoCE GID; these HCAs run InfiniBand, where "
        "some NCCL versions fail to resolve the GID");
}

static void check_p2p(lint_t *l) {
  const char *dis = env_get(l->e, "NCCL_P2P_DISABLE");
  const char *lvl = env_get(l->e, "NCCL_P2P_LEVEL");
  int disabled = dis && (strcmp(dis, "1") == 0 || ieq(dis, "true"));
  if (disabled && lvl)
    add(l, ENV_SEV_INFO, "p2p-level-moot", "NCCL_P2P_LEVEL",
        "remove NCCL_P2P_LEVEL, or NCCL_P2P_DISABLE to use it",
        "NCCL_P2P_DISABLE=1 turns P2P off; NCCL then ignores NCCL_P2P_LEVEL=%s",
        lvl);
  if (l->node == NULL || l->node->has_nvlink != 1)
    return;
  if (disabled)
    add(l, ENV_SEV_WARN, "p2p-nvlink", "NCCL_P2P_DISABLE",
        "remove NCCL_P2P_DISABLE (it is for PCIe-only boxes)",
        "the GPUs here are connected by NVLink; P2P off sends intra-node "
        "traffic through host memory at a fraction of the bandwidth");
  else if (lvl && (ieq(lvl, "LOC") || strcmp(lvl, "0") == 0))
    add(l, ENV_SEV_WARN, "p2p-nvlink", "NCCL_P2P_LEVEL",
        "remove NCCL_P2P_LEVEL or set NVL",
        "NCCL_P2P_LEVEL=%s forbids P2P although the GPUs here have NVLink",
        lvl);
}

static void check_levels(lint_t *l) {
  static const char *const names[] = {"LOC", "PIX", "PXB", "PHB", "SYS"};
  static const char *const keys[] = {"NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL"};
  for (size_t k = 0; k < LU_ARRAY_SIZE(keys); k++) {
    const char *v = env_get(l->e, keys[k]);
    int n;
    char fix[128];
    if (v == NULL || lu_parse_int(v, 0, 4, &n) != 0)
      continue;
    snprintf(fix, sizeof(fix), "write %s=%s", keys[k], names[n]);
    add(l, ENV_SEV_INFO, "numeric-level", keys[k], fix,
        "numeric levels are deprecated and easy to misread: %s means %s "
        "(0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS)",
        v, names[n]);
  }
}

static void check_debug(lint_t *l) {
  const char *d = env_get(l->e, "NCCL_DEBUG");
  const char *s = env_get(l->e, "NCCL_DEBUG_SUBSYS");
  int verbose = d && (ieq(d, "INFO") || ieq(d, "TRACE"));
  const env_var_t *v = env_find(l->e, "NCCL_DEBUG");
  /* From the shell over the profile: one warning, one piece of advice
   * (check_user_debug leaves it to this one). */
  int shell = verbose && v && v->src == ENV_SRC_INHERITED && v->origin &&
              strstr(v->origin, "over the profile") != NULL;
  if (verbose)
    add(l, ENV_SEV_WARN, "debug-info", "NCCL_DEBUG",
        shell ? "fine while debugging the network; once it works, unset "
                "NCCL_DEBUG in your shell (the profile's value then applies)"
              : "set NCCL_DEBUG=WARN once the network works",
        "NCCL_DEBUG=%s prints every rank's init and network details: "
        "slower start, logs that bury real errors", d);
  if (s && !verbose)
    add(l, ENV_SEV_INFO, "debug-subsys-noop", "NCCL_DEBUG_SUBSYS",
        "remove it, or set NCCL_DEBUG=INFO while debugging",
        "NCCL_DEBUG_SUBSYS only filters INFO/TRACE output; with NCCL_DEBUG=%s "
        "it does nothing",
        d ? d : "(unset)");
}

/* Debug and logging variables are the user's: an inherited value beats the
 * profile's (envset.c), and this says so. */
static void check_user_debug(lint_t *l) {
  for (int i = 0; i < env_count(l->e); i++) {
    const env_var_t *v = env_at(l->e, i);
    const char *d = env_get(l->e, "NCCL_DEBUG");
    if (v->src != ENV_SRC_INHERITED || !env_is_user_debug(v->key) ||
        v->origin == NULL || strstr(v->origin, "over the profile") == NULL)
      continue;
    if (!strcmp(v->key, "NCCL_DEBUG") && d &&
        (ieq(d, "INFO") || ieq(d, "TRACE")))
      continue; /* check_debug's warning says it */
    add(l, ENV_SEV_WARN, "user-debug", v->key,
        "unset it in your shell to get the profile's value",
        "%s=%s comes from your shell and is kept %s", v->key, v->value,
        v->origin + strlen("inherited, kept "));
  }
}

static void check_ib_disabled(lint_t *l) {
  const char *v = env_get(l->e, "NCCL_IB_DISABLE");
  int active = 0;
  if (v == NULL || strcmp(v, "1") != 0 || l->node == NULL)
    return;
  for (int k = 0; k < l->node->nhcas; k++)
    for (int p = 0; p < l->node->hcas[k].nports; p++)
      active += l->node->hcas[k].state[p] == 4;
  if (active > 0)
    add(l, ENV_SEV_WARN, "ib-disabled", "NCCL_IB_DISABLE",
        "remove NCCL_IB_DISABLE=1 (or use the socket profile on purpose)",
        "this node has %d active RDMA port%s but NCCL_IB_DISABLE=1 sends "
        "inter-node traffic over TCP sockets",
        active, active == 1 ? "" : "s");
}

static void check_notes(lint_t *l) {
  for (int i = 0; i < env_nnotes(l->e); i++) {
    const env_note_t *n = env_note(l->e, i);
    env_finding_t *f;
    int locked = 0;
    for (int k = 0; k < env_locked_count(); k++)
      locked |= strcmp(env_locked_key(k), n->key) == 0;
    /* The builder already enforced these: the job is safe, the
     * configuration that asked otherwise is what needs fixing. */
    add(l, ENV_SEV_WARN,
        locked ? "locked" : strcmp(n->key, "NCCL_ALGO") == 0 ? "nvls-algo"
                                                              : "refused",
        NULL, NULL, "%s", n->reason);
    if (l->oom)
      return;
    f = &l->f[l->n - 1];
    lu_strlcpy(f->var, n->key, sizeof(f->var));
    lu_strlcpy(f->value, n->value, sizeof(f->value));
    lu_strlcpy(f->where, n->origin, sizeof(f->where));
    snprintf(f->fix, sizeof(f->fix), "remove %s=%s from %s", n->key, n->value,
             n->origin);
  }
}

static int by_severity(const void *a, const void *b) {
  const env_finding_t *x = a, *y = b;
  if (x->sev != y->sev)
    return (int)y->sev - (int)x->sev;
  return strcmp(x->var, y->var);
}

int env_lint(const env_t *e, const env_node_t *node, env_finding_t **out,
             int *n) {
  lint_t l;
  int ver = node && node->nccl_version > 0 ? node->nccl_version
                                           : ENV_NCCL_REF_VERSION;
  memset(&l, 0, sizeof(l));
  l.e = e;
  l.node = node;
  check_notes(&l);
  check_names(&l, ver);
  check_torch_legacy(&l);
  check_ifname(&l);
  check_hca(&l);
  check_gid(&l);
  check_p2p(&l);
  check_levels(&l);
  check_debug(&l);
  check_ib_disabled(&l);
  check_user_debug(&l);
  /* Without a GPU NCCL never runs (a CPU job, gloo): what would break it
   * cannot break this job. */
  for (int i = 0; node && node->no_gpu && i < l.n; i++)
    if (l.f[i].sev == ENV_SEV_ERROR) {
      size_t k = strlen(l.f[i].why);
      l.f[i].sev = ENV_SEV_WARN;
      snprintf(l.f[i].why + k, sizeof(l.f[i].why) - k, "%s",
               " (a warning only: no GPU is used here, so NCCL does not run)");
    }
  if (l.oom) {
    free(l.f);
    return RDZV_ENOMEM;
  }
  if (l.n > 1)
    qsort(l.f, (size_t)l.n, sizeof(*l.f), by_severity);
  *out = l.f;
  *n = l.n;
  return 0;
}
