/* page.c - the job's HTML page (page.h): a table per rank and the loss
 * curve as inline SVG, computed on the loop once a second. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lu.h"
#include "msg.h"
#include "page.h"
#include "summary.h"

typedef struct pt_s {
  int64_t step;
  double loss;
  int seg;           /* segment: one more after each step backwards */
} pt_t;

typedef struct mark_s {
  int64_t round, step;
} mark_t;

struct page_s {
  pt_t *pt;
  size_t n;
  int seg;
  mark_t mark[64];
  size_t nmark;
};

page_t *page_new(void) {
  page_t *p = calloc(1, sizeof(*p));
  if (p && (p->pt = calloc(PAGE_MAX_POINTS, sizeof(pt_t))) == NULL) {
    free(p);
    return NULL;
  }
  return p;
}

void page_free(page_t *p) {
  if (p == NULL)
    return;
  free(p->pt);
  free(p);
}

void page_point(page_t *p, int64_t step, double loss) {
  if (p->n > 0 && step == p->pt[p->n - 1].step)
    return;
  if (p->n > 0 && step < p->pt[p->n - 1].step)
    p->seg++;
  if (p->n == PAGE_MAX_POINTS) { /* keep every other, the last included */
    size_t k = 0;
    for (size_t i = 1; i < p->n; i += 2)
      p->pt[k++] = p->pt[i];
    p->n = k;
  }
  p->pt[p->n].step = step;
  p->pt[p->n].loss = loss;
  p->pt[p->n].seg = p->seg;
  p->n++;
}

void page_restart(page_t *p, int64_t round, int64_t step) {
  if (p->nmark == sizeof(p->mark) / sizeof(p->mark[0])) {
    memmove(p->mark, p->mark + 1, (p->nmark - 1) * sizeof(mark_t));
    p->nmark--;
  }
  p->mark[p->nmark].round = round;
  p->mark[p->nmark].step = step;
  p->nmark++;
}

static void esc(lu_buf_t *b, const char *s) {
  for (; *s; s++)
    switch (*s) {
    case '<': lu_buf_puts(b, "&lt;"); break;
    case '>': lu_buf_puts(b, "&gt;"); break;
    case '&': lu_buf_puts(b, "&amp;"); break;
    case '"': lu_buf_puts(b, "&quot;"); break;
    default: lu_buf_put(b, s, 1);
    }
}

/* A number that is not finite as the metrics spell it (met_sample,
 * Prometheus' text format): NaN, +Inf, -Inf. */
static const char *nonfinite(double v) {
  return isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
}

/* v with prec decimals and unit ("" none); "-" for NaN (unknown). */
static void num(lu_buf_t *b, double v, int prec, const char *unit) {
  if (isfinite(v))
    lu_buf_printf(b, "%.*f%s", prec, v, unit);
  else if (isnan(v))
    lu_buf_puts(b, "-");
  else
    lu_buf_puts(b, nonfinite(v));
}

#define W 760.0
#define H 280.0
#define X0 60.0
#define Y0 20.0

/* The curve: each point as (x, y) in a polyline per segment; each point's
 * step and loss also in the polyline's data-points, for tools and tests. */
static void curve(const page_t *p, lu_buf_t *b) {
  int64_t smin = 0, smax = 1;
  double lmin = INFINITY, lmax = -INFINITY;
  size_t nfin = 0;
  for (size_t i = 0; i < p->n; i++) {
    if (i == 0 || p->pt[i].step < smin)
      smin = p->pt[i].step;
    if (i == 0 || p->pt[i].step > smax)
      smax = p->pt[i].step;
    if (isfinite(p->pt[i].loss)) {
      lmin = fmin(lmin, p->pt[i].loss);
      lmax = fmax(lmax, p->pt[i].loss);
      nfin++;
    }
  }
  lu_buf_printf(b, "<svg id=\"loss\" xmlns=\"http://www.w3.org/2000/svg\" "
                   "width=\"%.0f\" height=\"%.0f\" role=\"img\" "
                   "aria-label=\"training loss by step\">\n",
                W + X0 + 20, H + Y0 + 40);
  lu_buf_printf(b, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
                   "fill=\"#fff\" stroke=\"#999\"/>\n", X0, Y0, W, H);
  if (nfin == 0) {
    lu_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\">no loss reported yet</text>"
                     "</svg>\n", X0 + 20, Y0 + H / 2);
    return;
  }
  if (smax <= smin)
    smax = smin + 1;
  if (lmax <= lmin)
    lmax = lmin + 1e-9 + fabs(lmin) * 1e-3;
#define SX(s) (X0 + W * (double)((s) - smin) / (double)(smax - smin))
#define SY(l) (Y0 + H - H * ((l) - lmin) / (lmax - lmin))
  lu_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" "
                   "text-anchor=\"end\">%.4g</text>\n", X0 - 4, Y0 + 10, lmax);
  lu_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" "
                   "text-anchor=\"end\">%.4g</text>\n", X0 - 4, Y0 + H, lmin);
  lu_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">step %lld"
                   "</text>\n", X0, Y0 + H + 16, (long long)smin);
  lu_buf_printf(b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" "
                   "text-anchor=\"end\">step %lld</text>\n", X0 + W,
                Y0 + H + 16, (long long)smax);
  for (size_t m = 0; m < p->nmark; m++) {
    double x = p->mark[m].step >= smin ? SX(p->mark[m].step) : X0;
    lu_buf_printf(b, "<line class=\"restart\" data-round=\"%lld\" "
                     "x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" "
                     "stroke=\"#c00\" stroke-dasharray=\"4 3\"/>\n"
                     "<text x=\"%.1f\" y=\"%.0f\" font-size=\"11\" "
                     "fill=\"#c00\">restart %lld</text>\n",
                  (long long)p->mark[m].round, x, Y0, x, Y0 + H, x + 3,
                  Y0 + 12 + 12.0 * (double)(m % 3), (long long)p->mark[m].round);
  }
  for (size_t i = 0; i < p->n;) {
    size_t j = i;
    lu_buf_puts(b, "<polyline class=\"loss\" fill=\"none\" stroke=\"#06c\" "
                   "stroke-width=\"1.5\" points=\"");
    for (j = i; j < p->n && p->pt[j].seg == p->pt[i].seg; j++)
      if (isfinite(p->pt[j].loss))
        lu_buf_printf(b, "%.1f,%.1f ", SX(p->pt[j].step), SY(p->pt[j].loss));
    lu_buf_puts(b, "\" data-points=\"");
    for (j = i; j < p->n && p->pt[j].seg == p->pt[i].seg; j++) {
      lu_buf_printf(b, "%lld:", (long long)p->pt[j].step);
      if (isfinite(p->pt[j].loss))
        lu_buf_printf(b, "%.9g ", p->pt[j].loss);
      else
        lu_buf_printf(b, "%s ", nonfinite(p->pt[j].loss));
    }
    lu_buf_puts(b, "\"/>\n");
    i = j;
  }
#undef SX
#undef SY
  lu_buf_puts(b, "</svg>\n");
}

void page_render(const page_t *p, const page_info_t *in,
                 const page_rank_t *r, size_t nr, lu_buf_t *b) {
  lu_buf_puts(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
                 "<meta http-equiv=\"refresh\" content=\"5\"><title>launch: ");
  esc(b, in->job);
  lu_buf_puts(b, "</title><style>body{font:14px sans-serif;margin:1.5em}"
                 "table{border-collapse:collapse}td,th{padding:2px 10px;"
                 "border-bottom:1px solid #ddd;text-align:right}"
                 "th{background:#f4f4f4}</style></head><body>\n<h1>job ");
  esc(b, in->job);
  lu_buf_puts(b, "</h1>\n<p id=\"job\">node <b>");
  esc(b, in->node);
  lu_buf_puts(b, "</b>: ");
  esc(b, in->state);
  lu_buf_printf(b, ", round %lld, %d restart%s, %.1f s down, %lld steps "
                   "redone", (long long)in->round, in->restarts,
                in->restarts == 1 ? "" : "s", in->downtime_s,
                (long long)in->steps_redone);
  if (in->checkpoint >= 0)
    lu_buf_printf(b, ", last checkpoint step %lld", (long long)in->checkpoint);
  lu_buf_puts(b, "</p>\n<h2>loss</h2>\n");
  curve(p, b);
  lu_buf_puts(b, "<h2>ranks</h2>\n<table id=\"ranks\"><tr><th>rank</th>"
                 "<th>step</th><th>age</th><th>steps/s</th><th>loss</th>"
                 "<th>step time</th><th>straggler score</th></tr>\n");
  for (size_t i = 0; i < nr; i++) {
    lu_buf_printf(b, "<tr><td>%d</td><td>%lld", r[i].rank,
                  (long long)r[i].step);
    if (r[i].total_steps > 0)
      lu_buf_printf(b, "/%lld", (long long)r[i].total_steps);
    lu_buf_puts(b, "</td><td>");
    num(b, r[i].age_s, 1, " s");
    lu_buf_puts(b, "</td><td>");
    num(b, r[i].steps_per_s, 2, "");
    lu_buf_puts(b, "</td><td>");
    num(b, r[i].loss, 4, "");
    lu_buf_puts(b, "</td><td>");
    num(b, r[i].step_time, 3, " s");
    lu_buf_puts(b, "</td><td>");
    num(b, r[i].score, 2, "");
    lu_buf_puts(b, "</td></tr>\n");
  }
  lu_buf_puts(b, "</table>\n<p>metrics: <a href=\"/metrics\">/metrics</a> "
                 "(Prometheus); events: launch --event-log</p>\n"
                 "</body></html>\n");
}

/* ---- the server's page ---------------------------------------------------------------- */

void page_jobs_begin(lu_buf_t *b, const char *server) {
  lu_buf_puts(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
                 "<meta http-equiv=\"refresh\" content=\"5\"><title>launch "
                 "server ");
  esc(b, server);
  lu_buf_puts(b, "</title><style>body{font:14px sans-serif;margin:1.5em}"
                 "table{border-collapse:collapse}td,th{padding:2px 10px;"
                 "border-bottom:1px solid #ddd;text-align:left}"
                 "th{background:#f4f4f4}.failed{color:#c00}.ok{color:#080}"
                 "</style></head><body>\n<h1>launch server ");
  esc(b, server);
  lu_buf_puts(b, "</h1>\n<table id=\"jobs\"><tr><th>job</th><th>state</th>"
                 "<th>round</th><th>restarts</th><th>nodes: state, exit</th>"
                 "<th>last event</th></tr>\n");
}

/* How a node's workers ended: "exit 3", "SIGKILL", "stopped", "-". */
static void node_exit(lu_buf_t *b, const msg_member_t *m) {
  if (m->signal)
    lu_buf_puts(b, sum_signal_name((int)m->signal));
  else if (m->exit_code >= 0)
    lu_buf_printf(b, "exit %lld", (long long)m->exit_code);
  else
    lu_buf_puts(b, "-");
}

void page_job(lu_buf_t *b, const msg_status_t *st) {
  const char *cls = st->ok == 1 ? "ok" : st->ok == 0 ? "failed" : "";
  lu_buf_printf(b, "<tr class=\"job %s\" data-job=\"", cls);
  esc(b, st->job);
  lu_buf_puts(b, "\"><td>");
  esc(b, st->job);
  lu_buf_puts(b, "</td><td class=\"state\">");
  if (st->ok >= 0)
    lu_buf_printf(b, "%s, ended %.0f s ago (kept %.0f s more)",
                  st->ok == 1 ? "ok" : "failed", lu_wall_s() - st->end_time,
                  (double)st->keep_ms / 1000.0);
  else
    esc(b, st->state);
  lu_buf_printf(b, "</td><td>%lld</td><td>%lld of %lld</td><td>",
                (long long)st->round, (long long)st->restarts,
                (long long)st->max_restarts);
  for (size_t i = 0; i < st->nmembers; i++) {
    const msg_member_t *m = &st->members[i];
    lu_buf_puts(b, i ? "<br>" : "");
    lu_buf_puts(b, "<span class=\"node\" data-host=\"");
    esc(b, m->host);
    lu_buf_puts(b, "\">");
    esc(b, m->host);
    lu_buf_puts(b, ": ");
    esc(b, m->state);
    lu_buf_puts(b, ", <span class=\"exit\">");
    node_exit(b, m);
    lu_buf_puts(b, "</span></span>");
  }
  lu_buf_puts(b, "</td><td>");
  if (st->has_root) {
    lu_buf_printf(b, "root cause: rank %lld on ", (long long)st->root.rank);
    esc(b, st->root.host);
    lu_buf_puts(b, "; ");
  }
  esc(b, st->reason ? st->reason : "");
  lu_buf_puts(b, "</td></tr>\n");
}

void page_jobs_end(lu_buf_t *b, size_t njobs) {
  lu_buf_puts(b, "</table>\n");
  if (njobs == 0)
    lu_buf_puts(b, "<p>no job</p>\n");
  lu_buf_puts(b, "<p>metrics: <a href=\"/metrics\">/metrics</a> "
                 "(Prometheus); ended jobs stay for launch server "
                 "--keep-ended</p>\n</body></html>\n");
}
