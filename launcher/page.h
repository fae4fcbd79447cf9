/* page.h - the job's HTML page on the metrics port (GET /): the job, this
 * node, each local rank's progress, and the loss curve with the restarts
 * marked, drawn here as inline SVG: no JavaScript, no CDN, so it works on
 * an offline cluster (docs/monitoring.md#page). Loop thread only; the
 * rendered text goes to metrics.c like the metrics. Prefix page_. */
#ifndef PAGE_H
#define PAGE_H

#include <stddef.h>
#include <stdint.h>

#include "lu_buf.h"

typedef struct page_s page_t;

/* What the page says besides the curve. */
typedef struct page_info_s {
  const char *job, *node, *state;
  int64_t round;
  int restarts;
  double downtime_s;
  int64_t steps_redone;
  int64_t checkpoint;      /* -1 none */
} page_info_t;

typedef struct page_rank_s {
  int rank;
  int64_t step, total_steps;  /* total -1 unknown */
  double age_s, steps_per_s, loss, step_time, score;  /* NaN unknown */
} page_rank_t;

/* RET NULL when out of memory. */
page_t *page_new(void);
void page_free(page_t *p); /* NULL is a no-op */
/* A point of the curve: the loss at step (the lowest local rank's). A step
 * not after the last point starts a new segment (a resume went back). At
 * most PAGE_MAX_POINTS are kept: then every other one is dropped. */
#define PAGE_MAX_POINTS 4096
void page_point(page_t *p, int64_t step, double loss);
/* A restart: round `round` resumed at step (-1 unknown), marked on the
 * curve at the step where it resumed. */
void page_restart(page_t *p, int64_t round, int64_t step);

/* The whole page into b. */
void page_render(const page_t *p, const page_info_t *info,
                 const page_rank_t *ranks, size_t nranks, lu_buf_t *b);

/* The page of `launch server --metrics-port`: its jobs, running and ended
 * (kept for --keep-ended), each with its state, nodes, and for an ended
 * one ok or failed, each node's exit code and the root cause.
 * page_jobs_begin, page_job (one per job, the STATUS of srv_each_job),
 * page_jobs_end. */
struct msg_status_s;
void page_jobs_begin(lu_buf_t *b, const char *server);
void page_job(lu_buf_t *b, const struct msg_status_s *st);
void page_jobs_end(lu_buf_t *b, size_t njobs);

#endif /* PAGE_H */
