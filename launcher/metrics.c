/* metrics.c - the agent's Prometheus endpoint (metrics.h): libevent's
 * evhttp on a thread of its own; the job's text swapped in under a mutex;
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

#ifdef LAUNCH_HAVE_EVHTTP
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

/* The HTTP server: libevent 2.1's evhttp (no TLS: libevent_openssl is a
 * library of its own, not linked) on an event_base of its own, run by a
 * thread of its own. Everything below runs on that thread, but met_start
 * (before the thread) and met_stop (after joining it). */
#define MET_HTTP_CONNS 16 /* connections served at once */

/* A connection served: closed at its deadline unless a request came and
 * was answered (a client that trickles its headers byte by byte resets
 * evhttp's idle timeout with each byte, and 16 of them held every
 * slot). */
typedef struct met_slot_s {
  struct evhttp_connection *evcon; /* NULL: free */
  struct event *deadline;
} met_slot_t;

typedef struct met_http_s {
  struct event_base *base;
  struct evhttp *http;
  struct event *stop;     /* an eventfd met_stop writes: leave the loop */
  pthread_t thread;
  int running;            /* thread started */
  unsigned conns;         /* connections served now (MET_HTTP_CONNS at most) */
  met_slot_t slot[MET_HTTP_CONNS];
} met_http_t;

static void http_stop(met_t *m);
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
  else if (fabs(v) < 9007199254740992.0 && v == (double)(long long)v)
    lu_buf_printf(b, "%lld\n", (long long)v); /* exact below 2^53 */
  else {
    lu_buf_double(b, v);
    lu_buf_puts(b, "\n");
  }
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
#ifdef LAUNCH_HAVE_EVHTTP
  met_http_t http;
#endif
};

int met_parse_stat_cpu(FILE *f, unsigned long long v[8]) {
  char line[512];
  memset(v, 0, 8 * sizeof(v[0]));
  return fgets(line, sizeof(line), f) != NULL &&
         sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) >= 4;
}

void met_parse_meminfo(FILE *f, unsigned long long *total,
                       unsigned long long *avail) {
  unsigned long long kb;
  char line[256], key[64];
  *total = *avail = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "%63[^:]: %llu", key, &kb) == 2) {
      if (!strcmp(key, "MemTotal"))
        *total = kb * 1024;
      else if (!strcmp(key, "MemAvailable"))
        *avail = kb * 1024;
    }
}

static void node_cpu(const met_t *m, lu_buf_t *b) {
  static const char *const modes[] = {"user", "nice", "system", "idle",
                                      "iowait", "irq", "softirq", "steal"};
  unsigned long long v[8] = {0};
  long hz = sysconf(_SC_CLK_TCK);
  char lab[400];
  FILE *f = fopen("/proc/stat", "r");
  int ok;
  if (f == NULL)
    return;
  ok = met_parse_stat_cpu(f, v);
  fclose(f);
  if (!ok)
    return;
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
  unsigned long long total, avail;
  char lab[300];
  FILE *f = fopen("/proc/meminfo", "r");
  if (f == NULL)
    return;
  met_parse_meminfo(f, &total, &avail);
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
#ifdef LAUNCH_HAVE_EVHTTP
  http_stop(m);
#endif
  gs_close(m->gs);
  pthread_mutex_destroy(&m->mu);
  free(m->text);
  free(m->page);
  free(m);
}


#ifdef LAUNCH_HAVE_EVHTTP

/* The limits libmicrohttpd was given: 16 connections, 10 s idle. evhttp
 * has no connection cap of its own: conn_new keeps it. No request here has
 * a body; a scrape's headers are ~300 bytes, a browser's with its cookies
 * a few KB. */
#define MET_HTTP_IDLE_S 10 /* and the time a request may take to arrive */
#define MET_HTTP_MAX_HEADERS 8192
#define MET_HTTP_MAX_BODY 1024
/* Every method evhttp parses reaches answer(), which says 405 to all but
 * GET and HEAD: evhttp's own refusal of a method not allowed is a 501. An
 * unknown method is still evhttp's 501. */
#define MET_HTTP_METHODS                                                     \
  (EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |     \
   EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |               \
   EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH)

static void text_free(const void *data, size_t len, void *arg) {
  (void)len, (void)arg;
  free((void *)data);
}

/* After a scrape's reply went out: the slow values for the next one. */
static void scrape_sent(struct evhttp_request *req, void *arg) {
  (void)req;
  met_refresh(arg);
}

static met_slot_t *slot_of(met_t *m, const struct evhttp_connection *evcon) {
  for (int i = 0; evcon && i < MET_HTTP_CONNS; i++)
    if (m->http.slot[i].evcon == evcon)
      return &m->http.slot[i];
  return NULL;
}

/* A request answered: its connection has MET_HTTP_IDLE_S again for the
 * reply to go out and the next request to come in whole. */
static void slot_rearm(met_t *m, struct evhttp_connection *evcon) {
  met_slot_t *s = slot_of(m, evcon);
  struct timeval tv = {MET_HTTP_IDLE_S, 0};
  if (s && s->deadline)
    event_add(s->deadline, &tv);
}

static void answer(struct evhttp_request *req, void *arg) {
  met_t *m = arg;
  enum evhttp_cmd_type method = evhttp_request_get_command(req);
  const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
  const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
  struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
  struct evbuffer *body = evhttp_request_get_output_buffer(req);
  const char *type = "text/plain; charset=utf-8";
  lu_buf_t b = LU_BUF_INIT;
  int code = HTTP_OK, scrape = 0;
  char *text, n[32];
  size_t len;
  if (path == NULL)
    path = "";
  if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
    lu_buf_puts(&b, "only GET\n");
    code = HTTP_BADMETHOD;
    evhttp_add_header(hdr, "Allow", "GET, HEAD");
  } else if (strcmp(path, "/metrics") == 0) {
    met_render(m, &b);
    type = "text/plain; version=0.0.4; charset=utf-8";
    scrape = 1;
  } else if (strcmp(path, "/") == 0) {
    pthread_mutex_lock(&m->mu);
    if (m->page) {
      lu_buf_puts(&b, m->page);
      type = "text/html; charset=utf-8";
    } else {
      lu_buf_puts(&b, "launch agent: the metrics are at /metrics "
                      "(docs/monitoring.md)\n");
    }
    pthread_mutex_unlock(&m->mu);
  } else {
    lu_buf_puts(&b, "not found: try /metrics\n");
    code = HTTP_NOTFOUND;
  }
  if (lu_buf_finish(&b, &text, &len) != 0) {
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
    return;
  }
  evhttp_add_header(hdr, "Content-Type", type);
  if (method == EVHTTP_REQ_HEAD) {
    /* evhttp 2.1 gives a HEAD reply no length, and sends a body if there
     * is one: the length of the GET's body, and none. */
    snprintf(n, sizeof(n), "%zu", len);
    evhttp_add_header(hdr, "Content-Length", n);
    free(text);
  } else if (evbuffer_add_reference(body, text, len, text_free, NULL) != 0) {
    free(text);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
    return;
  }
  if (scrape)
    evhttp_request_set_on_complete_cb(req, scrape_sent, m);
  slot_rearm(m, evhttp_request_get_connection(req));
  evhttp_send_reply(req, code, NULL, NULL);
}

/* ---- the connection cap ----
 * evhttp calls conn_new for each connection it accepts, before it makes
 * its connection object on the bufferevent returned; conn_adopt runs right
 * after that accept (an event activated now), when the bufferevent's
 * callback argument is evhttp's connection (NULL once evhttp let it go:
 * conn_new holds a reference, so the bufferevent outlives it). It counts
 * the connection until its close callback, or closes it at once when
 * MET_HTTP_CONNS were open already: the client sees its connection
 * closed, as libmicrohttpd closed one over its limit. */
typedef struct met_conn_s {
  met_t *m;
  struct bufferevent *bev;
  int refused;
} met_conn_t;

static void conn_closed(struct evhttp_connection *evcon, void *arg) {
  met_t *m = arg;
  met_slot_t *s = slot_of(m, evcon);
  if (s) {
    if (s->deadline)
      event_free(s->deadline);
    s->deadline = NULL;
    s->evcon = NULL;
  }
  if (m->http.conns > 0)
    m->http.conns--;
}

/* Its deadline passed without a whole request: closed (the close
 * callback frees the slot). */
static void conn_deadline(evutil_socket_t fd, short what, void *arg) {
  met_slot_t *s = arg;
  (void)fd, (void)what;
  if (s->evcon)
    evhttp_connection_free(s->evcon);
}

static void conn_adopt(evutil_socket_t fd, short what, void *arg) {
  met_conn_t *c = arg;
  void *evcon = NULL;
  (void)fd, (void)what;
  bufferevent_getcb(c->bev, NULL, NULL, NULL, &evcon);
  if (evcon == NULL) {
    if (!c->refused)
      conn_closed(NULL, c->m); /* evhttp freed it already */
  } else if (c->refused) {
    evhttp_connection_free(evcon);
  } else {
    met_slot_t *s = NULL;
    struct timeval tv = {MET_HTTP_IDLE_S, 0};
    for (int i = 0; s == NULL && i < MET_HTTP_CONNS; i++)
      if (c->m->http.slot[i].evcon == NULL)
        s = &c->m->http.slot[i];
    evhttp_connection_set_closecb(evcon, conn_closed, c->m);
    if (s) { /* one is free: conns counts this one among the 16 */
      s->evcon = evcon;
      s->deadline = event_new(c->m->http.base, -1, 0, conn_deadline, s);
      if (s->deadline)
        event_add(s->deadline, &tv);
    }
  }
  bufferevent_decref(c->bev);
  free(c);
}

static struct bufferevent *conn_new(struct event_base *base, void *arg) {
  met_t *m = arg;
  met_conn_t *c = malloc(sizeof(*c));
  /* No BEV_OPT_CLOSE_ON_FREE: evhttp closes the socket, as with its own. */
  struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
  if (c == NULL || bev == NULL) {
    free(c);
    return bev; /* out of memory: served, not counted */
  }
  c->m = m;
  c->bev = bev;
  c->refused = m->http.conns >= MET_HTTP_CONNS;
  if (event_base_once(base, -1, EV_TIMEOUT, conn_adopt, c, NULL) != 0) {
    free(c);
    return bev;
  }
  bufferevent_incref(bev);
  if (!c->refused)
    m->http.conns++;
  return bev;
}

/* met_stop wrote the eventfd. loopexit, not loopbreak: the events active
 * now (a conn_adopt) run first, so nothing is left half made. */
static void on_stop(evutil_socket_t fd, short what, void *arg) {
  uint64_t v;
  (void)what;
  if (read(fd, &v, sizeof(v)) < 0)
    v = 0; /* stops all the same */
  event_base_loopexit(arg, NULL);
}

static void *serve(void *arg) {
  met_t *m = arg;
  event_base_dispatch(m->http.base);
  return NULL;
}

static void http_stop(met_t *m) {
  met_http_t *h = &m->http;
  if (h->running) {
    uint64_t one = 1;
    while (write(event_get_fd(h->stop), &one, sizeof(one)) < 0 &&
           errno == EINTR)
      ;
    pthread_join(h->thread, NULL);
  }
  if (h->http)
    evhttp_free(h->http); /* and the connections still open */
  if (h->stop) {
    int fd = event_get_fd(h->stop);
    event_free(h->stop);
    close(fd);
  }
  if (h->base)
    event_base_free(h->base);
  memset(h, 0, sizeof(*h));
}

/* A listening socket on addr ("" or NULL: every IPv4 address, as
 * libmicrohttpd did) and port; *bound its port. RET the socket, -errno. */
static int http_listen(const char *addr, int port, int *bound) {
  struct sockaddr_storage ss;
  struct sockaddr_in *sa4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *sa6 = (struct sockaddr_in6 *)&ss;
  socklen_t len = sizeof(*sa4);
  int fd, one = 1, err;
  memset(&ss, 0, sizeof(ss));
  if (addr == NULL || addr[0] == '\0' ||
      inet_pton(AF_INET, addr, &sa4->sin_addr) == 1) {
    sa4->sin_family = AF_INET;
    sa4->sin_port = htons((uint16_t)port);
  } else if (inet_pton(AF_INET6, addr, &sa6->sin6_addr) == 1) {
    sa6->sin6_family = AF_INET6;
    sa6->sin6_port = htons((uint16_t)port);
    len = sizeof(*sa6);
  } else {
    return -EINVAL;
  }
  fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  /* TCP_NODELAY, which accepted sockets inherit: evhttp writes a reply
   * over 16 kB (a scrape) in two writes, and the short second one would
   * wait for the client's delayed ACK of the first (40 ms). */
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      (ss.ss_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) ||
      bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    err = errno;
    close(fd);
    return -err;
  }
  *bound = ntohs(ss.ss_family == AF_INET ? sa4->sin_port : sa6->sin6_port);
  return fd;
}

int met_start(const char *addr, int port, const char *node, met_t **out) {
  met_t *m;
  met_http_t *h;
  int fd, rc;
  *out = NULL;
  if ((rc = met_local(node, &m)) != 0)
    return rc;
  h = &m->http;
  rc = -ENOMEM;
  if ((h->base = event_base_new()) == NULL ||
      (h->http = evhttp_new(h->base)) == NULL)
    goto fail;
  if ((rc = fd = http_listen(addr, port, &m->port)) < 0)
    goto fail;
  if (evhttp_accept_socket_with_handle(h->http, fd) == NULL) {
    close(fd);
    rc = -ENOMEM;
    goto fail;
  }
  evhttp_set_allowed_methods(h->http, MET_HTTP_METHODS);
  evhttp_set_timeout(h->http, MET_HTTP_IDLE_S);
  evhttp_set_max_headers_size(h->http, MET_HTTP_MAX_HEADERS);
  evhttp_set_max_body_size(h->http, MET_HTTP_MAX_BODY);
  evhttp_set_bevcb(h->http, conn_new, m);
  evhttp_set_gencb(h->http, answer, m);
  if ((fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
    rc = -errno;
    goto fail;
  }
  if ((h->stop = event_new(h->base, fd, EV_READ | EV_PERSIST, on_stop,
                           h->base)) == NULL) {
    close(fd);
    rc = -ENOMEM;
    goto fail;
  }
  if (event_add(h->stop, NULL) != 0) {
    rc = -ENOMEM;
    goto fail;
  }
  if ((rc = pthread_create(&h->thread, NULL, serve, m)) != 0) {
    rc = -rc;
    goto fail;
  }
  h->running = 1;
  *out = m;
  return 0;
fail:
  met_stop(m);
  return rc;
}

#else /* !LAUNCH_HAVE_EVHTTP */

int met_start(const char *addr, int port, const char *node, met_t **out) {
  (void)addr, (void)port, (void)node;
  *out = NULL;
  return RDZV_ENOTSUP;
}

#endif
