/* metrics.h - Prometheus metrics of the agent (launch --metrics-port,
 * docs/monitoring.md), served by libevent's evhttp on a thread of its own.
 *
 * The job's metrics live on the loop: the agent renders them into text
 * once a second and hands the text over (met_publish); a scrape answers
 * with the last text handed over plus the node's metrics (CPU, memory
 * from /proc), read on the server thread at scrape time; the GPUs' come
 * from the GPU sampler, NVML in a child process (sampler.h: no NVML or no
 * GPU gives no GPU series), waited for GS_WAIT_MS at most. So a scrape
 * never waits for the loop, the loop never for NVML, and NVML's memory is
 * not the agent's.
 *
 * libevent is linked from its static archives where they are found
 * (CMakeLists.txt): its code is in launch, and an agent without
 * --metrics-port runs none of it, nor any thread. Built without libevent
 * (LAUNCH_HAVE_EVHTTP unset), met_start returns RDZV_ENOTSUP. At most 16
 * connections (a 17th is closed once accepted), 10 s idle, 8 KB of request
 * headers. Prefix met_. */
#ifndef METRICS_H
#define METRICS_H

#include <sys/types.h>

#include "lu.h"
#include "lu_buf.h"

typedef struct met_s met_t;

/* Serve on addr ("" or NULL: every address) and port (0: a free one).
 * node: the node label of the node series (copied). OUT *out.
 * RET 0, RDZV_ENOTSUP (built without libevent), -EINVAL (addr not an IPv4
 * or IPv6 literal), -errno. */
int met_start(const char *addr, int port, const char *node, met_t **out);
/* The same object serving nothing (any build): met_render gives what a
 * scrape would answer. For tests, and the GPU's series anywhere. */
int met_local(const char *node, met_t **out);
void met_render(met_t *m, lu_buf_t *b);
/* The port it listens on. */
int met_port(const met_t *m);
/* Take text (malloc'd, NUL-terminated; m owns it) as the job's metrics.
 * Any thread. */
void met_publish(met_t *m, char *text);
/* Take html (malloc'd; m owns it) as the page GET / answers (page.h).
 * Any thread. */
void met_publish_page(met_t *m, char *html);
/* Stop the server (waits for a scrape in flight) and free. NULL no-op. */
void met_stop(met_t *m);

/* Writers for the text format (version 0.0.4). One family: met_family
 * once, then met_sample for each series. labels: `job="x",rank="0"`
 * (already escaped: met_label_escape), "" none. */
void met_family(lu_buf_t *b, const char *name, const char *type,
                const char *help);
void met_sample(lu_buf_t *b, const char *name, const char *labels, double v);
/* s with \ " and newline escaped for a label value, cut to cap. */
void met_label_escape(const char *s, char *out, size_t cap);

/* The rendezvous server's series (server.h's srv_stats_t; max_memory its
 * --max-memory) into b, with labels (met_sample's). */
struct srv_stats_s;
void met_server(lu_buf_t *b, const char *labels,
                const struct srv_stats_s *st, double max_memory);

/* Read the InfiniBand/RoCE ports under root + /sys/class/infiniband,
 * NUMA nodes under root + /sys/devices/system/node and root +
 * /proc/diskstats instead of the node's own (tests). root copied; "" the
 * node's. Before serving, or any thread. */
void met_set_sysfs_root(met_t *m, const char *root);

/* The checkpoint directory (--ckpt-dir): the block device that holds it
 * (stat's st_dev, its /proc/diskstats row: a partition's own row) gives
 * launch_node_ckpt_disk_*; a file system on no block device (tmpfs,
 * overlay, NFS) or a dir that does not exist gives no series. Any thread.
 * RET 1 when a device was found, 0 when none. */
int met_set_ckpt_dir(met_t *m, const char *dir);

/* One /proc/diskstats line: "MAJ MIN NAME reads merged sectors ms writes
 * merged sectors ms inflight io_ms ...". RET 1 when it is the row of
 * maj:min (out filled), else 0. Pure: any input (fuzz_nodestat). */
typedef struct met_disk_s {
  char name[32];
  unsigned long long reads, read_sectors, writes, write_sectors, io_ms;
} met_disk_t;
int met_parse_diskstats(const char *line, unsigned maj, unsigned min,
                        met_disk_t *out);

/* One line of /sys/devices/system/node/nodeN/numastat ("numa_hit 123").
 * RET 1 when it is one of the counters kept (out's field set), else 0. */
typedef struct met_numa_s {
  unsigned long long hit, miss, foreign, other_node;
} met_numa_t;
int met_parse_numastat(const char *line, met_numa_t *out);
/* /proc/stat's first line: v[0..8) the CPU seconds in ticks by mode.
 * RET 1 when it held at least 4 numbers, else 0. */
int met_parse_stat_cpu(FILE *f, unsigned long long v[8]);
/* /proc/meminfo's MemTotal and MemAvailable in bytes (0: absent). */
void met_parse_meminfo(FILE *f, unsigned long long *total,
                       unsigned long long *avail);

/* The node's series (CPU, memory, NUMA, the checkpoint disk, IB/RoCE
 * ports, GPUs through the sampler) into b. The thread that scrapes (one
 * at a time). */
void met_node(met_t *m, lu_buf_t *b);
/* After a scrape's reply went out: a GPU sampler that died is reaped
 * (sampler.h). The thread that scrapes. */
void met_refresh(met_t *m);
/* Once a second from the owner's loop (the agent's, launch server's), on
 * the thread that called met_start: a GPU sampler that died is reaped at
 * once and started again after its backoff, scraped or not; the next GPU
 * sample is asked for, the last one taken (sampler.h: the prefetch). Never
 * blocks. NULL no-op. */
void met_tick(met_t *m);
/* The GPU sampler's pid, 0 when none runs (sampler.h). Any thread: the
 * agent tells its worker containment that this child is its own. */
pid_t met_sampler_pid(const met_t *m);

#endif /* METRICS_H */
