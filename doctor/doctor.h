/* doctor.h - `launch doctor`: one node's health, as a cluster's runbook
 * checks it by hand (prefix doc_). Every line is pass / info / warn / fail with the reason and the
 * fix. The report is a value: it serialises to JSON (for people and
 * tools) and to a compact line format that parses back, so that the agent
 * can send it over the rendezvous and node 0 can diff the nodes
 * (doc_diff: what must be identical on every node).
 *
 * Everything is read from /sys, /proc and /etc under a root prefix, so
 * tests use fake trees; NVML, libcudart and libnccl are dlopen'ed when
 * opts.probe_libs is set. Blocking (NVML init, a TCP connect): call it off
 * the loop. */
#ifndef DOCTOR_H
#define DOCTOR_H

#include <stddef.h>

typedef enum { DOC_PASS = 0, DOC_INFO, DOC_WARN, DOC_FAIL } doc_status_t;

const char *doc_status_name(doc_status_t s); /* "pass", "info", "warn", "fail" */

typedef struct doc_item_s {
  char id[128];      /* stable across nodes: "kernel", "ib.mlx5_0.1" */
  char title[96];    /* "Kernel", "IB mlx5_0 port 1" */
  doc_status_t status;
  int same;          /* must be identical on every node */
  char value[256];   /* what was found */
  char reason[400];  /* why this status */
  char fix[400];     /* what to do; "" when nothing */
} doc_item_t;

typedef struct doc_report_s doc_report_t;

typedef struct doc_opts_s {
  size_t size;               /* sizeof(doc_opts_t) */
  unsigned version;          /* 1 */
  const char *root;          /* prefix for /sys, /proc, /etc; NULL = "/" */
  const char *rdzv_endpoint; /* "host:port" to reach; NULL */
  int connect_timeout_ms;    /* 0 = 3000 */
  int probe_libs;            /* ask NVML / libcudart / libnccl */
  int expect_gpus;           /* fail when the count differs; -1 = any */
  const char *nccl_profile;  /* lint this profile over the environment;
                                NULL = the inherited environment alone */
  char *const *environ;      /* environment to lint (NULL = none) */
} doc_opts_t;

#define DOC_OPTS_INIT                                                          \
  { sizeof(doc_opts_t), 1, NULL, NULL, 0, 1, -1, NULL, NULL }

/* Run every check. OUT *out: free with doc_free(). RET 0 or RDZV_ENOMEM
 * (failed checks are items, not errors). */
int doc_collect(const doc_opts_t *o, doc_report_t **out);
void doc_free(doc_report_t *r); /* NULL is a no-op */

const char *doc_host(const doc_report_t *r);
int doc_count(const doc_report_t *r);
const doc_item_t *doc_item(const doc_report_t *r, int i);
const doc_item_t *doc_find(const doc_report_t *r, const char *id);
doc_status_t doc_worst(const doc_report_t *r);

/* Serialisations. OUT *out malloc'd. RET 0 or RDZV_ENOMEM. */
int doc_to_text(const doc_report_t *r, char **out);
int doc_to_json(const doc_report_t *r, char **out);
/* "launch-doctor 1\nhost\t<host>\n" then one line per item:
 * id TAB status TAB same TAB title TAB value TAB reason TAB fix, with tab,
 * newline and backslash escaped. */
int doc_to_compact(const doc_report_t *r, char **out, size_t *len);
/* Parse a compact report from the wire (bounded, strict). RET 0,
 * RDZV_EPROTO, RDZV_ETOOBIG, RDZV_ENOMEM. */
int doc_from_compact(const char *text, size_t len, doc_report_t **out);

/* Items marked `same` whose values differ between the n reports, one line
 * each: "kernel: node0=5.14.0-362 node2=5.14.0-284". RET the count of
 * differing items (report "" when none) or RDZV_ENOMEM. */
int doc_diff(const doc_report_t *const *r, const char *const *names, int n,
             char **report);

#endif /* DOCTOR_H */
