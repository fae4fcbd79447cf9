/* metrics.c - the agent's Prometheus endpoint (metrics.h): libmicrohttpd
 * with its own polling thread; the job's text swapped in under a mutex;
 * the node's series read at scrape time on that thread. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "metrics.h"
#include "rdzv.h"
#include "proto.h"
#include "sampler.h"
#include "server.h"
#include "tcpstore.h"

#ifdef LAUNCH_HAVE_MHD
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

/* libmicrohttpd, loaded when a port is served (met_start), like NVML:
 * Debian's links GnuTLS, whose libraries and initialisation are about
 * 2.5 MB of an agent's resident memory (docs/BENCHMARKS.md), so an agent
 * or a server without --metrics-port never maps them. */
typedef struct mhd_s {
  void *lib;
  struct MHD_Daemon *(*start)(unsigned, uint16_t, MHD_AcceptPolicyCallback,
                              void *, MHD_AccessHandlerCallback, void *, ...);
  void (*stop)(struct MHD_Daemon *);
  const union MHD_DaemonInfo *(*info)(struct MHD_Daemon *,
                                      enum MHD_DaemonInfoType, ...);
  struct MHD_Response *(*from_buffer)(size_t, void *,
                                      enum MHD_ResponseMemoryMode);
  enum MHD_Result (*header)(struct MHD_Response *, const char *,
                            const char *);
  enum MHD_Result (*queue)(struct MHD_Connection *, unsigned,
                           struct MHD_Response *);
  void (*destroy)(struct MHD_Response *);
} mhd_t;

/* GnuTLS, which Debian's libmicrohttpd links for HTTPS, is never used
 * here (met_start asks for no MHD_USE_TLS), but loading it initialises it
 * twice over: its own constructor, then libmicrohttpd's (MHD_init of
 * 0.9.75 calls gnutls_global_init() whatever the daemon's flags, so
 * GNUTLS_NO_IMPLICIT_INIT alone saves nothing). That initialisation is
 * ~0.9 MB of the agent's resident memory, a third of what --metrics-port
 * costs (docs/BENCHMARKS.md). launch exports the two functions below
 * (CMakeLists.txt), so that the dynamic linker binds GnuTLS's and
 * libmicrohttpd's references to them:
 * - _gnutls_global_init_skip() is gnutls.h's GNUTLS_SKIP_GLOBAL_INIT: no
 *   implicit initialisation when GnuTLS is loaded; a user of GnuTLS calls
 *   gnutls_global_init() first, as libcurl and libmicrohttpd do;
 * - gnutls_global_init() answers libmicrohttpd's call without
 *   initialising, and hands any other caller (a libcurl built with GnuTLS
 *   for the etcd backend, say) to GnuTLS's own.
 * Binaries that do not export them (the tests) initialise GnuTLS as
 * before. */
#define MET_GNUTLS_E_INTERNAL (-59) /* GNUTLS_E_INTERNAL_ERROR */

#define MET_EXPORTED __attribute__((visibility("default")))
MET_EXPORTED int _gnutls_global_init_skip(void);
MET_EXPORTED int gnutls_global_init(void);

int _gnutls_global_init_skip(void) { return 1; }

int gnutls_global_init(void) {
  Dl_info caller;
  int (*init)(void) = NULL;
  void *lib;
  int rc = MET_GNUTLS_E_INTERNAL;
  if (dladdr(__builtin_return_address(0), &caller) != 0 &&
      caller.dli_fname != NULL &&
      strstr(caller.dli_fname, "libmicrohttpd") != NULL)
    return 0;
  /* The caller's GnuTLS: loaded already, RTLD_LOCAL maybe (not found by
   * RTLD_NEXT), so asked for by its handle. */
  lib = dlopen("libgnutls.so.30", RTLD_LAZY | RTLD_NOLOAD);
  if (lib == NULL)
    return rc;
  *(void **)&init = dlsym(lib, "gnutls_global_init");
  if (init != NULL && init != gnutls_global_init)
    rc = init();
  dlclose(lib);
  return rc;
}

/* RET 0, RDZV_ENOTSUP (no such library, or one without these symbols). */
static int mhd_open(mhd_t *h) {
  const char *lib = getenv("LAUNCH_MHD_LIBRARY");
  int quiet;
  memset(h, 0, sizeof(*h));
  /* GnuTLS's own constructor, at this dlopen, initialises it as well where
   * GnuTLS binds its calls to itself (-Bsymbolic-functions, as Ubuntu
   * builds it): out of reach of _gnutls_global_init_skip above. Its
   * documented variable says no to that, for this dlopen only (the agent
   * runs no other thread yet; a variable the user set is left alone). */
  quiet = getenv("GNUTLS_NO_IMPLICIT_INIT") == NULL &&
          setenv("GNUTLS_NO_IMPLICIT_INIT", "1", 0) == 0;
  h->lib = dlopen(lib && lib[0] ? lib : "libmicrohttpd.so.12",
                  RTLD_NOW | RTLD_LOCAL);
  if (quiet)
    unsetenv("GNUTLS_NO_IMPLICIT_INIT");
  if (h->lib == NULL)
    return RDZV_ENOTSUP;
#define SYM(f, name) *(void **)&h->f = dlsym(h->lib, name)
  SYM(start, "MHD_start_daemon");
  SYM(stop, "MHD_stop_daemon");
  SYM(info, "MHD_get_daemon_info");
  SYM(from_buffer, "MHD_create_response_from_buffer");
  SYM(header, "MHD_add_response_header");
  SYM(queue, "MHD_queue_response");
  SYM(destroy, "MHD_destroy_response");
#undef SYM
  if (!h->start || !h->stop || !h->info || !h->from_buffer || !h->header ||
      !h->queue || !h->destroy) {
    dlclose(h->lib);
    h->lib = NULL;
    return RDZV_ENOTSUP;
  }
  return 0;
}
#endif

/* ---- the text format ------------------------------------------------------------------ */

void met_family(lu_buf_t *b, const char *name, const char *type,
                const char *help) {
  lu_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void met_sample(lu_buf_t *b, const char *name, const char *labels, double v) {
  if (labels && labels[0])
    lu_buf_printf(b, "%s{%s} ", name, labels);
  else
    lu_buf_printf(b, "%s ", name);
  if (isnan(v))
    lu_buf_puts(b, "NaN\n");
  else if (isinf(v))
    lu_buf_puts(b, v > 0 ? "+Inf\n" : "-Inf\n");
  else if (v == (double)(long long)v && fabs(v) < 1e15)
    lu_buf_printf(b, "%lld\n", (long long)v);
  else
    lu_buf_printf(b, "%.9g\n", v);
}

void met_label_escape(const char *s, char *out, size_t cap) {
  size_t o = 0;
  for (; *s && o + 3 < cap; s++) {
    if (*s == '\\' || *s == '"') {
      out[o++] = '\\';
      out[o++] = *s;
    } else if (*s == '\n') {
      out[o++] = '\\';
      out[o++] = 'n';
    } else {
      out[o++] = *s;
    }
  }
  out[o] = '\0';
}

/* ---- the server ------------------------------------------------------------------------ */

/* A TCPStore op's name as a label value: "compare_set", "watch_key". */
static void ts_label(int op, char *out, size_t cap) {
  const char *n = ts_op_name(op == SRV_TS_WATCH ? TS_WATCH_KEY : op);
  size_t i = 0;
  for (; n[i] && i + 1 < cap; i++)
    out[i] = (char)tolower((unsigned char)n[i]);
  out[i] = '\0';
}

/* launch_server_requests_total{op,protocol}: every native op proto.h
 * names and every TCPStore op, so that rate() sees a series from 0. */
static void server_requests(lu_buf_t *b, const char *labels,
                            const srv_stats_t *st) {
  char lab[640], name[32];
  const char *sep = labels && labels[0] ? "," : "";
  met_family(b, "launch_server_requests_total", "counter",
             "requests served, by protocol and op");
  for (int op = 0; op < SRV_NATIVE_OPS; op++) {
    const char *n = proto_op_name(op);
    if (op != 0 && (n == NULL || !strcmp(n, "unknown")))
      continue;
    if (op == 0 && st->native_ops[0] == 0)
      continue; /* the unknown: only once seen */
    snprintf(lab, sizeof(lab), "%s%sprotocol=\"native\",op=\"%s\"",
             labels ? labels : "", sep, op == 0 ? "unknown" : n);
    met_sample(b, "launch_server_requests_total", lab,
               (double)st->native_ops[op]);
  }
  for (int op = 0; op < SRV_TS_OPS; op++) {
    ts_label(op, name, sizeof(name));
    snprintf(lab, sizeof(lab), "%s%sprotocol=\"tcpstore\",op=\"%s\"",
             labels ? labels : "", sep, name);
    met_sample(b, "launch_server_requests_total", lab, (double)st->ts_ops[op]);
  }
}

static void server_refusals(lu_buf_t *b, const char *labels,
                            const srv_stats_t *st) {
  char lab[640];
  const char *sep = labels && labels[0] ? "," : "";
  met_family(b, "launch_server_refusals_total", "counter",
             "connections, jobs or requests refused, by the limit that "
             "refused them");
  for (int l = 0; l < SRV_LIMIT_COUNT; l++) {
    snprintf(lab, sizeof(lab), "%s%slimit=\"%s\"", labels ? labels : "", sep,
             srv_limit_label(l));
    met_sample(b, "launch_server_refusals_total", lab, (double)st->refused[l]);
  }
}

void met_server(lu_buf_t *b, const char *labels, const srv_stats_t *st,
                double max_memory) {
  static const struct { const char *name, *type, *help; } f[] = {
      {"launch_server_connections", "gauge", "client connections open"},
      {"launch_server_connections_total", "counter", "connections accepted"},
      {"launch_server_refused_connections_total", "counter",
       "connections refused by a limit"},
      {"launch_server_bad_input_total", "counter",
       "requests or frames refused as malformed"},
      {"launch_server_pending_waits", "gauge", "WAIT requests not answered yet"},
      {"launch_server_buffered_request_bytes", "gauge",
       "request bytes buffered now"},
      {"launch_server_jobs", "gauge", "jobs the server holds"},
      {"launch_server_memory_bytes", "gauge",
       "memory counted against --max-memory"},
      {"launch_server_memory_limit_bytes", "gauge", "--max-memory"},
      {"launch_server_paused_connections", "gauge",
       "connections waiting for their replies to drain or for memory"}};
  double v[] = {(double)st->conns_open, (double)st->conns_total,
                (double)st->conns_refused, (double)st->bad_input,
                (double)st->waits_pending, (double)st->in_bytes,
                (double)st->jobs, (double)st->mem_used, max_memory,
                (double)st->paused};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
    met_family(b, f[i].name, f[i].type, f[i].help);
    met_sample(b, f[i].name, labels, v[i]);
  }
  server_requests(b, labels, st);
  server_refusals(b, labels, st);
}

/* ---- the node ----------------------------------------------------------------------- */

struct met_s {
  pthread_mutex_t mu;
  char *text;        /* the job's, from the loop */
  char *page;        /* GET /, from the loop */
  char node[256];    /* escaped */
  char sysfs[512];   /* a test's root for /sys, "" the node's */
  int disk;          /* 1: disk_maj:disk_min holds --ckpt-dir */
  unsigned disk_maj, disk_min;
  gs_t *gs;          /* the GPU sampler (sampler.h), NULL: none */
  int port;
#ifdef LAUNCH_HAVE_MHD
  mhd_t mhd;
  struct MHD_Daemon *d;
#endif
};

static void node_cpu(const met_t *m, lu_buf_t *b) {
  static const char *const modes[] = {"user", "nice", "system", "idle",
                                      "iowait", "irq", "softirq", "steal"};
  unsigned long long v[8] = {0};
  long hz = sysconf(_SC_CLK_TCK);
  char line[512], lab[400];
  FILE *f = fopen("/proc/stat", "r");
  if (f == NULL)
    return;
  if (fgets(line, sizeof(line), f) == NULL ||
      sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
             &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 4) {
    fclose(f);
    return;
  }
  fclose(f);
  if (hz <= 0)
    hz = 100;
  met_family(b, "launch_node_cpu_seconds_total", "counter",
             "CPU time of the node (all CPUs), by mode, from /proc/stat");
  for (int i = 0; i < 8; i++) {
    snprintf(lab, sizeof(lab), "node=\"%s\",mode=\"%s\"", m->node, modes[i]);
    met_sample(b, "launch_node_cpu_seconds_total", lab, (double)v[i] / (double)hz);
  }
}

static void node_mem(const met_t *m, lu_buf_t *b) {
  unsigned long long total = 0, avail = 0, kb;
  char line[256], key[64], lab[300];
  FILE *f = fopen("/proc/meminfo", "r");
  if (f == NULL)
    return;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "%63[^:]: %llu", key, &kb) == 2) {
      if (!strcmp(key, "MemTotal"))
        total = kb * 1024;
      else if (!strcmp(key, "MemAvailable"))
        avail = kb * 1024;
    }
  fclose(f);
  if (total == 0)
    return;
  snprintf(lab, sizeof(lab), "node=\"%s\"", m->node);
  met_family(b, "launch_node_memory_total_bytes", "gauge",
             "memory of the node (MemTotal)");
  met_sample(b, "launch_node_memory_total_bytes", lab, (double)total);
  met_family(b, "launch_node_memory_available_bytes", "gauge",
             "memory available for new work (MemAvailable)");
  met_sample(b, "launch_node_memory_available_bytes", lab, (double)avail);
}

/* After a reply went out: a dead sampler is reaped (met_tick starts it
 * again); it reads NVML's slow values (PCIe) itself. */
void met_refresh(met_t *m) { gs_refresh(m->gs, 0); }

void met_tick(met_t *m) {
  if (m)
    gs_refresh(m->gs, 1);
}

pid_t met_sampler_pid(const met_t *m) { return m ? gs_pid(m->gs) : 0; }

void met_set_sysfs_root(met_t *m, const char *root) {
  snprintf(m->sysfs, sizeof(m->sysfs), "%s", root ? root : "");
}

/* The first line of a small sysfs file, "" when unreadable. */
static void read_line(const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  out[0] = '\0';
  if (f == NULL)
    return;
  if (fgets(out, (int)cap, f) == NULL)
    out[0] = '\0';
  fclose(f);
  out[strcspn(out, "\n")] = '\0';
}

/* Each port of /sys/class/infiniband/DEV/ports/N: up (state ACTIVE), its
 * rate ("200 Gb/sec (4X HDR)"), and its data counters (in 4-byte words). */
static void node_ib(const met_t *m, lu_buf_t *b) {
  static const struct { const char *name, *type, *help; } fam[] = {
      {"launch_ib_port_up", "gauge", "1 when the port's state is ACTIVE"},
      {"launch_ib_port_rate_bits_per_second", "gauge",
       "the port's link rate (sysfs rate)"},
      {"launch_ib_port_receive_bytes_total", "counter",
       "bytes received (port_rcv_data x 4)"},
      {"launch_ib_port_transmit_bytes_total", "counter",
       "bytes sent (port_xmit_data x 4)"}};
  char base[600], path[1400], v[128], lab[700], ll[64];
  struct dirent **devs = NULL;
  int ndev;
  lu_buf_t s[4] = {LU_BUF_INIT, LU_BUF_INIT, LU_BUF_INIT, LU_BUF_INIT};
  int any = 0;
  snprintf(base, sizeof(base), "%s/sys/class/infiniband", m->sysfs);
  if ((ndev = scandir(base, &devs, NULL, alphasort)) < 0)
    return; /* no IB/RoCE here: no series */
  for (int d = 0; d < ndev; d++) {
    struct dirent **ports = NULL;
    int np;
    if (devs[d]->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "%s/%s/ports", base, devs[d]->d_name);
    np = scandir(path, &ports, NULL, alphasort);
    for (int p = 0; p < np; p++) {
      const char *dev = devs[d]->d_name, *port = ports[p]->d_name;
      double rate;
      unsigned long long x;
      if (port[0] == '.')
        continue;
      snprintf(path, sizeof(path), "%s/%s/ports/%s/link_layer", base, dev,
               port);
      read_line(path, ll, sizeof(ll));
      snprintf(lab, sizeof(lab), "node=\"%s\",device=\"%.64s\",port=\"%.16s\","
               "link_layer=\"%.32s\"", m->node, dev, port,
               ll[0] ? ll : "unknown");
      snprintf(path, sizeof(path), "%s/%s/ports/%s/state", base, dev, port);
      read_line(path, v, sizeof(v));
      met_sample(&s[0], fam[0].name, lab, strstr(v, "ACTIVE") != NULL);
      snprintf(path, sizeof(path), "%s/%s/ports/%s/rate", base, dev, port);
      read_line(path, v, sizeof(v));
      if (sscanf(v, "%lf", &rate) == 1)
        met_sample(&s[1], fam[1].name, lab, rate * 1e9);
      snprintf(path, sizeof(path), "%s/%s/ports/%s/counters/port_rcv_data",
               base, dev, port);
      read_line(path, v, sizeof(v));
      if (sscanf(v, "%llu", &x) == 1)
        met_sample(&s[2], fam[2].name, lab, (double)x * 4);
      snprintf(path, sizeof(path), "%s/%s/ports/%s/counters/port_xmit_data",
               base, dev, port);
      read_line(path, v, sizeof(v));
      if (sscanf(v, "%llu", &x) == 1)
        met_sample(&s[3], fam[3].name, lab, (double)x * 4);
      any = 1;
    }
    for (int p = 0; p < np; p++)
      free(ports[p]);
    free(ports);
  }
  for (int d = 0; d < ndev; d++)
    free(devs[d]);
  free(devs);
  for (int k = 0; k < 4; k++) {
    char *text;
    if (any && s[k].len > 0) {
      met_family(b, fam[k].name, fam[k].type, fam[k].help);
      lu_buf_put(b, s[k].data, s[k].len);
    }
    if (lu_buf_finish(&s[k], &text, NULL) == 0)
      free(text);
  }
}

/* ---- NUMA and the checkpoint disk -------------------------------------------------- */

int met_parse_numastat(const char *line, met_numa_t *out) {
  static const char *const keys[] = {"numa_hit", "numa_miss", "numa_foreign",
                                     "other_node"};
  unsigned long long *f[] = {&out->hit, &out->miss, &out->foreign,
                             &out->other_node};
  char key[32];
  unsigned long long v;
  if (sscanf(line, "%31s %llu", key, &v) != 2)
    return 0;
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    if (strcmp(key, keys[i]) == 0) {
      *f[i] = v;
      return 1;
    }
  return 0;
}

/* Each NUMA node's page allocation counters (numastat). */
static void node_numa(const met_t *m, lu_buf_t *b) {
  static const struct { const char *name, *help; } fam[] = {
      {"launch_node_numa_hit_pages_total",
       "pages allocated on this NUMA node as intended (numa_hit)"},
      {"launch_node_numa_miss_pages_total",
       "pages allocated here that were meant for another node (numa_miss)"},
      {"launch_node_numa_foreign_pages_total",
       "pages meant for this node allocated on another (numa_foreign)"},
      {"launch_node_numa_other_node_pages_total",
       "pages allocated here by a process running on another node "
       "(other_node)"}};
  char base[600], path[700], line[128], lab[400];
  struct dirent **nodes = NULL;
  met_numa_t v[64];
  unsigned id[64];
  int n, k = 0;
  snprintf(base, sizeof(base), "%s/sys/devices/system/node", m->sysfs);
  if ((n = scandir(base, &nodes, NULL, alphasort)) < 0)
    return; /* no NUMA information: no series */
  for (int i = 0; i < n; i++) {
    char *end;
    unsigned long x;
    FILE *f;
    int got = 0;
    const char *d = nodes[i]->d_name;
    if (strncmp(d, "node", 4) == 0 && d[4] >= '0' && d[4] <= '9' && k < 64 &&
        (x = strtoul(d + 4, &end, 10), *end == '\0')) {
      snprintf(path, sizeof(path), "%s/%.32s/numastat", base, d);
      if ((f = fopen(path, "r")) != NULL) {
        memset(&v[k], 0, sizeof(v[k]));
        while (fgets(line, sizeof(line), f))
          got += met_parse_numastat(line, &v[k]);
        fclose(f);
        if (got > 0)
          id[k++] = (unsigned)x;
      }
    }
    free(nodes[i]);
  }
  free(nodes);
  for (size_t j = 0; j < sizeof(fam) / sizeof(fam[0]) && k > 0; j++) {
    met_family(b, fam[j].name, "counter", fam[j].help);
    for (int i = 0; i < k; i++) {
      unsigned long long x = j == 0   ? v[i].hit
                             : j == 1 ? v[i].miss
                             : j == 2 ? v[i].foreign
                                      : v[i].other_node;
      snprintf(lab, sizeof(lab), "node=\"%s\",numa=\"%u\"", m->node, id[i]);
      met_sample(b, fam[j].name, lab, (double)x);
    }
  }
}

int met_parse_diskstats(const char *line, unsigned maj, unsigned min,
                        met_disk_t *out) {
  unsigned a, b;
  met_disk_t d;
  unsigned long long merged, ms, inflight;
  memset(&d, 0, sizeof(d));
  if (sscanf(line, "%u %u %31s %llu %llu %llu %llu %llu %llu %llu %llu %llu "
             "%llu", &a, &b, d.name, &d.reads, &merged, &d.read_sectors, &ms,
             &d.writes, &merged, &d.write_sectors, &ms, &inflight,
             &d.io_ms) != 13 || a != maj || b != min)
    return 0;
  *out = d;
  return 1;
}

int met_set_ckpt_dir(met_t *m, const char *dir) {
  struct stat st;
  char p[1024];
  char *slash;
  int found = 0, rc;
  /* Not made yet (the first checkpoint makes it): its nearest ancestor. */
  snprintf(p, sizeof(p), "%s", dir ? dir : "");
  while ((rc = stat(p, &st)) != 0 && (slash = strrchr(p, '/')) != NULL &&
         strcmp(p, "/") != 0) {
    if (slash == p)
      p[1] = '\0'; /* "/x": "/" */
    else
      *slash = '\0';
  }
  pthread_mutex_lock(&m->mu);
  m->disk = 0;
  /* Major 0: an anonymous device (tmpfs, overlay, NFS, btrfs subvolumes)
   * that /proc/diskstats does not list. */
  if (p[0] && rc == 0 && major(st.st_dev) != 0) {
    m->disk = found = 1;
    m->disk_maj = major(st.st_dev);
    m->disk_min = minor(st.st_dev);
  }
  pthread_mutex_unlock(&m->mu);
  return found;
}

/* The row of the device holding --ckpt-dir: bytes read and written (512-
 * byte sectors, whatever the device's block size), I/O time. */
static void node_ckpt_disk(met_t *m, lu_buf_t *b) {
  char path[600], line[512], lab[400];
  unsigned maj, min;
  met_disk_t d;
  int have = 0;
  FILE *f;
  pthread_mutex_lock(&m->mu);
  have = m->disk;
  maj = m->disk_maj, min = m->disk_min;
  pthread_mutex_unlock(&m->mu);
  if (!have)
    return;
  snprintf(path, sizeof(path), "%s/proc/diskstats", m->sysfs);
  if ((f = fopen(path, "r")) == NULL)
    return;
  have = 0;
  while (!have && fgets(line, sizeof(line), f))
    have = met_parse_diskstats(line, maj, min, &d);
  fclose(f);
  if (!have)
    return; /* not a device the kernel counts: no series */
  met_label_escape(d.name, path, sizeof(path));
  snprintf(lab, sizeof(lab), "node=\"%s\",device=\"%.64s\"", m->node, path);
  met_family(b, "launch_node_ckpt_disk_read_bytes_total", "counter",
             "bytes read from the device holding --ckpt-dir (/proc/diskstats)");
  met_sample(b, "launch_node_ckpt_disk_read_bytes_total", lab,
             (double)d.read_sectors * 512);
  met_family(b, "launch_node_ckpt_disk_written_bytes_total", "counter",
             "bytes written to the device holding --ckpt-dir");
  met_sample(b, "launch_node_ckpt_disk_written_bytes_total", lab,
             (double)d.write_sectors * 512);
  met_family(b, "launch_node_ckpt_disk_reads_total", "counter",
             "reads completed by the device holding --ckpt-dir");
  met_sample(b, "launch_node_ckpt_disk_reads_total", lab, (double)d.reads);
  met_family(b, "launch_node_ckpt_disk_writes_total", "counter",
             "writes completed by the device holding --ckpt-dir");
  met_sample(b, "launch_node_ckpt_disk_writes_total", lab, (double)d.writes);
  met_family(b, "launch_node_ckpt_disk_io_seconds_total", "counter",
             "time the device holding --ckpt-dir was busy with I/O");
  met_sample(b, "launch_node_ckpt_disk_io_seconds_total", lab,
             (double)d.io_ms / 1000.0);
}

void met_node(met_t *m, lu_buf_t *b) {
  node_cpu(m, b);
  node_mem(m, b);
  node_numa(m, b);
  node_ckpt_disk(m, b);
  node_ib(m, b);
  gs_render(m->gs, b); /* the GPUs: NVML in the sampler process */
}

/* Put text in *slot under the lock, free what was there. */
static void swap_text(met_t *m, char **slot, char *text) {
  char *old;
  if (m == NULL) {
    free(text);
    return;
  }
  pthread_mutex_lock(&m->mu);
  old = *slot;
  *slot = text;
  pthread_mutex_unlock(&m->mu);
  free(old);
}

void met_publish(met_t *m, char *text) {
  swap_text(m, m ? &m->text : NULL, text);
}

void met_publish_page(met_t *m, char *html) {
  swap_text(m, m ? &m->page : NULL, html);
}

int met_port(const met_t *m) { return m ? m->port : 0; }

int met_local(const char *node, met_t **out) {
  met_t *m = calloc(1, sizeof(*m));
  *out = NULL;
  if (m == NULL)
    return -ENOMEM;
  pthread_mutex_init(&m->mu, NULL);
  met_label_escape(node, m->node, sizeof(m->node));
  if (gs_open(m->node, &m->gs) != 0) {
    met_stop(m);
    return -ENOMEM;
  }
  *out = m;
  return 0;
}

void met_render(met_t *m, lu_buf_t *b) {
  pthread_mutex_lock(&m->mu);
  if (m->text)
    lu_buf_puts(b, m->text);
  pthread_mutex_unlock(&m->mu);
  met_node(m, b);
}

void met_stop(met_t *m) {
  if (m == NULL)
    return;
#ifdef LAUNCH_HAVE_MHD
  if (m->d)
    m->mhd.stop(m->d);
  if (m->mhd.lib)
    dlclose(m->mhd.lib);
#endif
  gs_close(m->gs);
  pthread_mutex_destroy(&m->mu);
  free(m->text);
  free(m->page);
  free(m);
}

#ifdef LAUNCH_HAVE_MHD

static enum MHD_Result answer(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_len, void **state) {
  met_t *m = cls;
  lu_buf_t b = LU_BUF_INIT;
  struct MHD_Response *r;
  enum MHD_Result rc;
  unsigned code = MHD_HTTP_OK;
  int html = 0;
  char *text;
  size_t len;
  (void)version, (void)upload, (void)upload_len;
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    lu_buf_puts(&b, "only GET\n");
    code = MHD_HTTP_METHOD_NOT_ALLOWED;
  } else if (strcmp(url, "/metrics") == 0) {
    met_render(m, &b);
    *state = m; /* done(): refresh the slow values once it went out */
  } else if (strcmp(url, "/") == 0) {
    pthread_mutex_lock(&m->mu);
    if (m->page) {
      lu_buf_puts(&b, m->page);
      html = 1;
    } else {
      lu_buf_puts(&b, "launch agent: the metrics are at /metrics "
                      "(docs/monitoring.md)\n");
    }
    pthread_mutex_unlock(&m->mu);
  } else {
    lu_buf_puts(&b, "not found: try /metrics\n");
    code = MHD_HTTP_NOT_FOUND;
  }
  if (lu_buf_finish(&b, &text, &len) != 0)
    return MHD_NO;
  r = m->mhd.from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
  if (r == NULL) {
    free(text);
    return MHD_NO;
  }
  m->mhd.header(r, "Content-Type",
                html ? "text/html; charset=utf-8"
                : code == MHD_HTTP_OK && url[1] == 'm'
                    ? "text/plain; version=0.0.4; charset=utf-8"
                    : "text/plain; charset=utf-8");
  rc = m->mhd.queue(c, code, r);
  m->mhd.destroy(r);
  return rc;
}

/* After a reply went out (or failed): a scrape's reply refreshes the slow
 * values for the next one. */
static void done(void *cls, struct MHD_Connection *c, void **state,
                 enum MHD_RequestTerminationCode why) {
  (void)c, (void)why;
  if (*state == cls)
    met_refresh(cls);
  *state = NULL;
}

int met_start(const char *addr, int port, const char *node, met_t **out) {
  met_t *m;
  struct sockaddr_in6 sa6;
  struct sockaddr_in sa4;
  const struct sockaddr *sa = NULL;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  const union MHD_DaemonInfo *info;
  int rc;
  *out = NULL;
  if ((rc = met_local(node, &m)) != 0)
    return rc;
  if ((rc = mhd_open(&m->mhd)) != 0) {
    met_stop(m);
    return rc;
  }
  memset(&sa4, 0, sizeof(sa4));
  memset(&sa6, 0, sizeof(sa6));
  if (addr && addr[0]) {
    if (inet_pton(AF_INET, addr, &sa4.sin_addr) == 1) {
      sa4.sin_family = AF_INET;
      sa4.sin_port = htons((uint16_t)port);
      sa = (const struct sockaddr *)&sa4;
    } else if (inet_pton(AF_INET6, addr, &sa6.sin6_addr) == 1) {
      sa6.sin6_family = AF_INET6;
      sa6.sin6_port = htons((uint16_t)port);
      sa = (const struct sockaddr *)&sa6;
      flags |= MHD_USE_IPv6;
    } else {
      met_stop(m);
      return -EINVAL;
    }
  }
  m->d = m->mhd.start(flags, (uint16_t)port, NULL, NULL, answer, m,
                       MHD_OPTION_CONNECTION_LIMIT, 16u,
                       MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                       MHD_OPTION_NOTIFY_COMPLETED, done, m,
                       sa ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END, sa,
                       MHD_OPTION_END);
  if (m->d == NULL) {
    int err = errno ? errno : EADDRINUSE;
    met_stop(m);
    return -err;
  }
  info = m->mhd.info(m->d, MHD_DAEMON_INFO_BIND_PORT);
  m->port = info ? info->port : port;
  *out = m;
  return 0;
}

#else /* !LAUNCH_HAVE_MHD */

int met_start(const char *addr, int port, const char *node, met_t **out) {
  (void)addr, (void)port, (void)node;
  *out = NULL;
  return RDZV_ENOTSUP;
}

#endif
