/* hang.c - hang detection for the agent (hang.h). One timer: each tick
 * first judges what the last replies showed, then asks the store again:
 * one MGET of the keys known to exist, one CHECK per key form not seen yet
 * (a rank that never reports costs two small requests a tick). Both forms
 * of every rank are read every time: a write of one form never hides the
 * other (issue #24). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "hang.h"
#include "msg.h"
#include "rdzv.h"
#include "summary.h"

enum { K_NATIVE = 0, K_TORCH = 1, K_FORMS }; /* the two key forms */

#define TAG_LEN 16 /* hex digits of a worker's LAUNCH_PROGRESS_TAG */

typedef struct hform_s {
  int exists;           /* a CHECK found it: the MGET reads it */
  uint64_t vhash;       /* of the whole last value seen (any length) */
  size_t vlen;
  int have_val;
  int64_t ms;           /* the time in the last value, -1 none */
} hform_t;

typedef struct hrank_s {
  hform_t f[K_FORMS];
  char tag[TAG_LEN + 1]; /* this round's LAUNCH_PROGRESS_TAG of the worker */
  int fresh;            /* its own worker reported progress in this round */
  int64_t step;         /* its last step (-1: the value has none) */
  uint64_t changed;     /* uv_now when the value last changed */
  int exited;
  int hung;             /* taken for hung; reason says why */
  int killed;
  char reason[512];
  int warned;           /* the value does not parse: said once */
  int warned_foreign;   /* a value not its worker's: said once */
  msg_progress_t prog;  /* the last value that parsed (fresh ones only) */
  int have_prog;
  double rate;          /* steps per second between the last two steps */
} hrank_t;

struct hang_s {
  uv_loop_t *loop;
  hang_config_t cfg;
  hang_hooks_t hooks;
  uv_timer_t timer;
  int timer_live;
  hrank_t *r;
  int base_rank;
  int64_t round;        /* the round (its TCPStore namespace) */
  uint64_t gen;         /* the round's generation: replies of older ones
                           are ignored */
  int64_t spawn_unix_ms;
  uint64_t started;     /* uv_now at the round's start */
  int reporting;        /* a rank of this node has reported, any round */
  int inflight;         /* requests of any generation not answered yet */
  int primary;          /* the hung rank to report, -1 none */
  uint64_t grace_end;   /* uv_now when the primary is reported */
  int reported;
  double found_wall_s;  /* when the primary was found */
  char *st;             /* per rank: the state letter of a silent one */
};

typedef struct req_s {
  hang_t *h;
  uint64_t gen;
  int check;            /* a CHECK of one key (else an MGET) */
  int n;
  int ranks[];          /* MGET: (local rank, key form) of its keys in
                           order; CHECK: the local rank and the key form */
} req_t;

/* ---- signals --------------------------------------------------------------------------- */

int hang_parse_signal(const char *s) {
  static const struct { const char *n; int s; } sigs[] = {
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"QUIT", SIGQUIT},
      {"ABRT", SIGABRT}, {"TERM", SIGTERM}, {"INT", SIGINT},
      {"HUP", SIGHUP},   {"KILL", SIGKILL}, {"TRAP", SIGTRAP}};
  char up[16];
  size_t i, n = strlen(s);
  if (n == 0 || n >= sizeof(up))
    return -1;
  for (i = 0; i <= n; i++)
    up[i] = (char)toupper((unsigned char)s[i]);
  if (!strcmp(up, "NONE") || !strcmp(up, "0"))
    return 0;
  if (isdigit((unsigned char)up[0])) {
    int v;
    return lu_parse_int(up, 1, 64, &v) == 0 ? v : -1;
  }
  for (i = 0; i < LU_ARRAY_SIZE(sigs); i++)
    if (!strcmp(up, sigs[i].n) ||
        (!strncmp(up, "SIG", 3) && !strcmp(up + 3, sigs[i].n)))
      return sigs[i].s;
  return -1;
}

/* ---- what a rank is doing ---------------------------------------------------------------- */

/* The state letter of /proc/PID/stat (R running, S sleeping, D disk, T
 * stopped, t traced, Z zombie), '?' when unreadable. */
static char proc_state(pid_t pid) {
  char path[64], buf[512];
  FILE *f;
  size_t n;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  if ((f = fopen(path, "r")) == NULL)
    return '?';
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return hang__stat_state(buf);
}

char hang__stat_state(const char *buf) {
  const char *p;
  if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ' || p[2] == '\0')
    return '?';
  return p[2];
}

static const char *state_words(char st) {
  switch (st) {
  case 'R': return "running: busy in a loop, or spinning in a collective";
  case 'S': return "sleeping: waiting, e.g. in a collective or on a lock";
  case 'D': return "in uninterruptible I/O";
  case 'T': return "stopped (SIGSTOP)";
  case 't': return "stopped by a debugger";
  case 'Z': return "exited";
  default: return "state unknown";
  }
}

/* ---- values ------------------------------------------------------------------------------ */

/* The decoder of a progress value (msg_progress_decode: the codec's
 * PROGRESS map, or "<step> <unix ms> [<tag>]"): its step, time and tag. */
int hang_parse_value(const char *p, size_t n, int64_t *step, int64_t *ms,
                     char *tag, size_t tagcap) {
  msg_progress_t m;
  char err[128];
  if (tagcap)
    tag[0] = '\0';
  if (msg_progress_decode(p, n, &m, err, sizeof(err)) != 0)
    return -1;
  *step = m.step;
  *ms = m.time_ms;
  if (tagcap && lu_strlcpy(tag, m.tag, tagcap) >= tagcap)
    tag[0] = '?'; /* too long: no worker's */
  return 0;
}

/* A value of key form `form` of local rank lr. Progress is a change of
 * either form; only a value carrying the worker's own LAUNCH_PROGRESS_TAG
 * arms the watch (a key anyone else wrote, or an earlier round's, can keep
 * a rank alive but never get it killed); the step and scalars shown are
 * those of the newest value of its own. */
static void observe(hang_t *h, int lr, int form, const char *p, size_t n) {
  hrank_t *r = &h->r[lr];
  hform_t *f = &r->f[form];
  msg_progress_t pg;
  char err[128];
  int parsed, first = !f->have_val, own;
  /* Any change of any byte is news: a map may carry fields of its own
   * before the step (up to 768 bytes), and its step may be past them. */
  uint64_t hash = lu_fnv1a64(p, n);
  if (f->have_val && n == f->vlen && hash == f->vhash)
    return; /* no news */
  f->vhash = hash;
  f->vlen = n;
  f->have_val = 1;
  parsed = msg_progress_decode(p, n, &pg, err, sizeof(err)) == 0;
  own = parsed && strcmp(pg.tag, r->tag) == 0;
  if (!parsed && !r->warned) {
    r->warned = 1;
    LU_WARN(h->cfg.log, "the progress key of rank %d does not parse (%s; "
            "see docs/events.md#progress): it is not taken as the worker's",
            h->base_rank + lr, err);
  } else if (parsed && !own && !r->warned_foreign &&
             (pg.tag[0] || pg.time_ms >= h->spawn_unix_ms)) {
    r->warned_foreign = 1;
    LU_WARN(h->cfg.log, "the progress key of rank %d (%s) was written by "
            "something other than its worker (%s LAUNCH_PROGRESS_TAG): it "
            "can keep the rank alive, never get it killed",
            h->base_rank + lr, form == K_TORCH ? "TCPStore form" : "native",
            pg.tag[0] ? "a wrong" : "no");
  }
  /* The first value seen may be an earlier round's: written before this
   * round's workers started, it is not their progress. */
  if (first && (!parsed || pg.time_ms < h->spawn_unix_ms) && !own)
    return;
  if (own)
    r->fresh = h->reporting = 1;
  if (!r->fresh)
    return;
  r->changed = uv_now(h->loop);
  /* Both forms may be written (a C and a Python reporter): the newest
   * value's step and scalars are the ones shown. */
  if (parsed && own) {
    f->ms = pg.time_ms;
    if (pg.time_ms >= r->f[!form].ms || !r->f[!form].have_val) {
      r->step = pg.step;
      if (r->have_prog && pg.step > r->prog.step &&
          pg.time_ms > r->prog.time_ms)
        r->rate = (double)(pg.step - r->prog.step) * 1000.0 /
                  (double)(pg.time_ms - r->prog.time_ms);
      r->prog = pg;
      r->have_prog = 1;
    }
  }
}

/* ---- requests ------------------------------------------------------------------------------ */

static req_t *req_new(hang_t *h, int check, int n) {
  req_t *q = malloc(sizeof(*q) + (size_t)n * sizeof(int));
  if (q == NULL)
    return NULL;
  q->h = h;
  q->gen = h->gen;
  q->check = check;
  q->n = 0;
  return q;
}

/* A TCPStore client's key "/launch/progress/N" lies in its round's
 * namespace (RDZV_TORCH_NS). */
static void key_of(const hang_t *h, int key, int rank, char *out, size_t cap) {
  if (key == K_TORCH)
    snprintf(out, cap, RDZV_TORCH_NS "%" PRId64 "//" RDZV_PROGRESS_PREFIX "%d",
             h->round, rank);
  else
    snprintf(out, cap, RDZV_PROGRESS_PREFIX "%d", rank);
}

/* MGET: the values of q->ranks' keys, in order. */
static void got_many(hang_t *h, const req_t *q, int status,
                     const proto_msg_t *m) {
  const msgpack_object *items;
  uint32_t cnt;
  const char *p;
  size_t n;
  if (status == 0 && proto_arg_array(m, 0, &items, &cnt) == 0 &&
      cnt == (uint32_t)q->n) {
    for (int i = 0; i < q->n; i++)
      if (proto_obj_bytes(&items[i], &p, &n) == 0)
        observe(h, q->ranks[2 * i], q->ranks[2 * i + 1], p, n);
  } else if (status != RDZV_ECANCELED && status != RDZV_ECLOSED) {
    /* A key went away (deleted): look for each again. */
    for (int i = 0; i < q->n; i++)
      h->r[q->ranks[2 * i]].f[q->ranks[2 * i + 1]].exists = 0;
  }
}

/* CHECK of one key form (ranks[1]) of a rank not seen yet (ranks[0]): when
 * it exists, the next MGET reads it. */
static void got_one(hang_t *h, const req_t *q, int status,
                    const proto_msg_t *m) {
  hrank_t *r = &h->r[q->ranks[0]];
  if (status == 0 && m->nargs >= 1 &&
      m->args[0].type == MSGPACK_OBJECT_BOOLEAN && m->args[0].via.boolean)
    r->f[q->ranks[1]].exists = 1;
}

static void on_reply(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  req_t *q = arg;
  (void)ac;
  q->h->inflight--;
  if (q->gen == q->h->gen)
    (q->check ? got_one : got_many)(q->h, q, status, m);
  free(q);
}

/* One key form of local rank lr: a CHECK (check: does it exist?), else
 * an MGET of that key alone. */
static void ask_one(hang_t *h, int check, int lr, int form) {
  char key[64];
  msgpack_packer *pk;
  req_t *q = req_new(h, check, 2);
  if (q == NULL)
    return;
  q->ranks[0] = lr;
  q->ranks[1] = form;
  q->n = check ? 2 : 1; /* an MGET's n counts (rank, form) pairs */
  pk = ac_begin(h->cfg.ac, check ? PROTO_OP_CHECK : PROTO_OP_MGET,
                check ? 1 : 2);
  key_of(h, form, h->base_rank + lr, key, sizeof(key));
  msgpack_pack_array(pk, 1);
  proto_pack_str(pk, key);
  if (!check)
    msgpack_pack_int64(pk, 0); /* do not wait */
  if (ac_send(h->cfg.ac, on_reply, q) == 0)
    h->inflight++;
  else
    free(q);
}

static void ask(hang_t *h) {
  int nproc = h->cfg.nproc, nknown = 0;
  req_t *q;
  char key[64];
  for (int i = 0; i < nproc; i++)
    for (int form = 0; form < K_FORMS; form++)
      nknown += h->r[i].f[form].exists && !h->r[i].exited;
  if (nknown > 0 && (q = req_new(h, 0, 2 * nknown)) != NULL) {
    msgpack_packer *pk = ac_begin(h->cfg.ac, PROTO_OP_MGET, 2);
    msgpack_pack_array(pk, (size_t)nknown);
    for (int i = 0; i < nproc; i++)
      for (int form = 0; form < K_FORMS; form++)
        if (h->r[i].f[form].exists && !h->r[i].exited) {
          key_of(h, form, h->base_rank + i, key, sizeof(key));
          proto_pack_str(pk, key);
          q->ranks[2 * q->n] = i;
          q->ranks[2 * q->n + 1] = form;
          q->n++;
        }
    msgpack_pack_int64(pk, 0); /* do not wait */
    if (ac_send(h->cfg.ac, on_reply, q) == 0)
      h->inflight++;
    else
      free(q);
  }
  for (int i = 0; i < nproc; i++) {
    if (h->r[i].exited)
      continue;
    for (int form = 0; form < K_FORMS; form++)
      if (!h->r[i].f[form].exists)
        ask_one(h, 1, i, form);
  }
}

/* ---- judging ---------------------------------------------------------------------------------- */

/* Lower last step first, then the longer silent one. */
static int before(const hrank_t *a, const hrank_t *b) {
  if (a->step != b->step)
    return a->step < b->step;
  return a->changed < b->changed;
}

static void kill_rank(hang_t *h, int lr, int sig) {
  pid_t pid = wk_pid(h->cfg.wg, lr);
  if (pid > 0 && !h->r[lr].exited && kill(pid, sig) != 0 && errno != ESRCH)
    LU_WARN(h->cfg.log, "cannot send %s to rank %d (pid %d): %s",
            sum_signal_name(sig), h->base_rank + lr, (int)pid,
            strerror(errno));
}

/* Take local rank lr for hung: say so, and send the dump signal. */
static void take_hung(hang_t *h, int lr, char st, uint64_t now) {
  hrank_t *r = &h->r[lr];
  pid_t pid = wk_pid(h->cfg.wg, lr);
  int stopped = st == 'T' || st == 't';
  double idle = (double)(now - r->changed) / 1000.0;
  char what[400], steptxt[48];
  r->hung = 1;
  if (r->step >= 0)
    snprintf(steptxt, sizeof(steptxt), "last step %" PRId64, r->step);
  else
    lu_strlcpy(steptxt, "last step unknown", sizeof(steptxt));
  snprintf(what, sizeof(what), "rank %d (local %d, pid %d) on %s made no "
           "progress for %.1f s (%s); it is %s", h->base_rank + lr, lr,
           (int)pid, h->cfg.host, idle, steptxt, state_words(st));
  if (stopped) {
    LU_ERR(h->cfg.log, "hang: %s: it cannot dump its stack until it gets "
           "SIGCONT; killing it (--hang-timeout %.0f s)", what,
           (double)h->cfg.timeout_ms / 1000.0);
  } else if (h->cfg.signal > 0) {
    LU_ERR(h->cfg.log, "hang: %s; sending %s for a stack dump (its output "
           "follows on the rank's stderr), SIGKILL in %.0f s", what,
           sum_signal_name(h->cfg.signal), (double)h->cfg.grace_ms / 1000.0);
    kill_rank(h, lr, h->cfg.signal);
  } else {
    LU_ERR(h->cfg.log, "hang: %s; killing it (--hang-signal none)", what);
  }
  snprintf(r->reason, sizeof(r->reason), "hang: no progress for %.0f s (%s, "
           "%s); launch --hang-timeout %s it", idle, steptxt,
           state_words(st),
           stopped ? "killed"
           : h->cfg.signal > 0 ? "sent the dump signal, then killed"
                               : "killed");
}

/* Report the primary and kill every hung rank still alive. */
static void end_grace(hang_t *h) {
  h->reported = 1;
  if (h->hooks.hung)
    h->hooks.hung(h->hooks.arg, h->primary, h->r[h->primary].reason,
                  h->found_wall_s);
  for (int i = 0; i < h->cfg.nproc; i++)
    if (h->r[i].hung && !h->r[i].exited && !h->r[i].killed) {
      h->r[i].killed = 1;
      kill_rank(h, i, SIGKILL);
    }
}

/* Hung ranks that stopped at the primary's step: the step does not tell
 * which one holds the others up (one stuck in data loading, the others
 * waiting for it in a collective). Say so, and where to look. */
static void say_tie(hang_t *h, int primary) {
  char ranks[256] = "";
  int ntie = 0;
  size_t u;
  if (h->r[primary].step < 0)
    return;
  for (int i = 0; i < h->cfg.nproc; i++)
    if (h->r[i].hung && h->r[i].step == h->r[primary].step) {
      u = strlen(ranks);
      snprintf(ranks + u, sizeof(ranks) - u, "%s%d", ntie ? ", " : "",
               h->base_rank + i);
      ntie++;
    }
  if (ntie < 2)
    return;
  LU_ERR(h->cfg.log, "hang: ranks %s all stopped at step %" PRId64 ": the "
         "step does not tell which one holds up the others, and rank %d is "
         "reported only as the one silent longest; their stack dumps (on "
         "each rank's stderr%s) show which one is not waiting in the "
         "collective", ranks, h->r[primary].step, h->base_rank + primary,
         h->cfg.signal > 0 ? ", after the dump signal" : ": give --hang-signal");
  u = strlen(h->r[primary].reason);
  snprintf(h->r[primary].reason + u, sizeof(h->r[primary].reason) - u,
           "; ranks %s tie at step %" PRId64 ": see their stack dumps", ranks,
           h->r[primary].step);
}

static void judge(hang_t *h, uint64_t now) {
  int nproc = h->cfg.nproc, nstopped = 0, primary = -1;
  if (h->primary >= 0) { /* this round's hang, in its grace */
    if (!h->reported && now >= h->grace_end)
      end_grace(h);
    return;
  }
  if (h->cfg.timeout_ms <= 0 || !h->hooks.running(h->hooks.arg))
    return; /* reading progress for metrics and events only */
  for (int i = 0; i < nproc; i++) {
    hrank_t *r = &h->r[i];
    if (r->fresh && !r->exited && now - r->changed >= (uint64_t)h->cfg.timeout_ms)
      primary = i;
  }
  if (primary < 0)
    return;
  /* A rank past the timeout: those silent for half of it are stuck with it
   * (waiting in the same collective, a step behind or ahead). */
  primary = -1;
  for (int i = 0; i < nproc; i++) {
    hrank_t *r = &h->r[i];
    h->st[i] = 0;
    if (!r->fresh || r->exited ||
        now - r->changed < (uint64_t)h->cfg.timeout_ms / 2)
      continue;
    h->st[i] = proc_state(wk_pid(h->cfg.wg, i));
    nstopped += h->st[i] == 'T' || h->st[i] == 't';
  }
  /* With a stopped rank, the others wait for it: only it is hung. */
  for (int i = 0; i < nproc; i++)
    if (h->st[i] && (nstopped == 0 || h->st[i] == 'T' || h->st[i] == 't') &&
        (primary < 0 || before(&h->r[i], &h->r[primary])))
      primary = i;
  if (primary < 0)
    return;
  h->found_wall_s = lu_wall_s();
  take_hung(h, primary, h->st[primary], now);
  for (int i = 0; i < nproc; i++)
    if (i != primary && h->st[i] &&
        (nstopped == 0 || h->st[i] == 'T' || h->st[i] == 't'))
      take_hung(h, i, h->st[i], now);
  say_tie(h, primary);
  h->primary = primary;
  h->grace_end = now + (nstopped > 0 || h->cfg.signal == 0
                            ? 0 : (uint64_t)h->cfg.grace_ms);
  if (now >= h->grace_end)
    end_grace(h);
}

static void tick(uv_timer_t *t) {
  hang_t *h = t->data;
  judge(h, uv_now(h->loop));
  if (h->primary < 0 && h->inflight == 0 && h->hooks.running(h->hooks.arg))
    ask(h);
}

/* ---- the agent's calls ---------------------------------------------------------------------- */

int hang_new(uv_loop_t *loop, const hang_config_t *cfg,
             const hang_hooks_t *hooks, hang_t **out) {
  hang_t *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return RDZV_ENOMEM;
  h->loop = loop;
  h->cfg = *cfg;
  h->hooks = *hooks;
  h->primary = -1;
  h->r = calloc((size_t)cfg->nproc, sizeof(*h->r));
  h->st = calloc((size_t)cfg->nproc, 1);
  if (h->r == NULL || h->st == NULL) {
    hang_free(h);
    return RDZV_ENOMEM;
  }
  uv_timer_init(loop, &h->timer);
  h->timer.data = h;
  h->timer_live = 1;
  *out = h;
  return 0;
}

void hang_start(hang_t *h, int base_rank, int64_t round) {
  uint64_t every;
  if (h == NULL || !h->timer_live)
    return;
  /* A tick per second, more often for short timeouts (tests). */
  every = h->cfg.timeout_ms > 0
              ? (uint64_t)LU_MAX(100, LU_MIN(1000, h->cfg.timeout_ms / 4))
              : 1000;
  h->gen++;
  h->base_rank = base_rank;
  h->round = round;
  h->spawn_unix_ms = (int64_t)(lu_wall_s() * 1000.0);
  h->started = uv_now(h->loop);
  h->primary = -1;
  h->reported = 0;
  memset(h->r, 0, (size_t)h->cfg.nproc * sizeof(*h->r));
  /* A new secret per worker and round: only the worker knows its own, so
   * only its values (and none of an earlier round's) can arm the watch. */
  for (int i = 0; i < h->cfg.nproc; i++) {
    unsigned char b[TAG_LEN / 2];
    h->r[i].f[K_NATIVE].ms = h->r[i].f[K_TORCH].ms = -1;
    if (lu_random(b, sizeof(b)) != 0)
      for (size_t k = 0; k < sizeof(b); k++) /* no getrandom: still unique */
        b[k] = (unsigned char)((uint64_t)lu_now_ns() >> (k * 3)) ^
               (unsigned char)(i * 131 + (int)h->gen);
    lu_hex(b, sizeof(b), h->r[i].tag);
  }
  uv_timer_start(&h->timer, tick, every, every);
}

const char *hang_tag(const hang_t *h, int local_rank) {
  if (h == NULL || local_rank < 0 || local_rank >= h->cfg.nproc)
    return NULL;
  return h->r[local_rank].tag;
}

/* The worker of local rank lr exited: its keys are read once more, since
 * its last report (a final step, a reporter's flush at exit) may have come
 * after the last tick, and an exited rank is not asked again. One MGET per
 * key form: a key that does not exist fails only its own. */
static void ask_last(hang_t *h, int lr) {
  if (!h->timer_live || h->cfg.ac == NULL)
    return;
  for (int form = 0; form < K_FORMS; form++)
    ask_one(h, 0, lr, form);
}

int hang_exited(hang_t *h, int local_rank) {
  if (h == NULL || local_rank < 0 || local_rank >= h->cfg.nproc)
    return 0;
  if (!h->r[local_rank].exited)
    ask_last(h, local_rank);
  h->r[local_rank].exited = 1;
  return h->r[local_rank].hung;
}

int hang_progress(const hang_t *h, int local_rank, hang_progress_t *out) {
  const hrank_t *r;
  memset(out, 0, sizeof(*out));
  if (h == NULL || local_rank < 0 || local_rank >= h->cfg.nproc)
    return -1;
  r = &h->r[local_rank];
  out->rank = h->base_rank + local_rank;
  out->hung = r->hung;
  out->exited = r->exited;
  if (!r->fresh) {
    /* Silent since the round began, where this node's ranks report: its
     * silence counts from then (a rank stuck before its first report
     * after a restart is as stuck as one that stopped reporting). */
    out->waiting = h->reporting && h->started > 0;
    if (out->waiting)
      out->age_s = (double)(uv_now(h->loop) - h->started) / 1000.0;
    return 0;
  }
  out->seen = 1;
  out->age_s = (double)(uv_now(h->loop) - r->changed) / 1000.0;
  if (r->have_prog) {
    out->has_prog = 1;
    out->prog = r->prog;
    out->steps_per_s = r->rate;
  } else {
    msg_progress_init(&out->prog);
    out->prog.step = r->step;
  }
  return 0;
}

int hang_nproc(const hang_t *h) { return h ? h->cfg.nproc : 0; }

const char *hang_reason(const hang_t *h, int local_rank) {
  if (h == NULL || local_rank < 0 || local_rank >= h->cfg.nproc ||
      !h->r[local_rank].hung)
    return NULL;
  return h->r[local_rank].reason;
}

void hang_set_ac(hang_t *h, ac_t *ac) {
  if (h)
    h->cfg.ac = ac;
}

void hang_close(hang_t *h) {
  if (h == NULL || !h->timer_live)
    return;
  h->timer_live = 0;
  h->gen++; /* replies still on their way are ignored */
  uv_close((uv_handle_t *)&h->timer, NULL);
}

void hang_free(hang_t *h) {
  if (h == NULL)
    return;
  free(h->r);
  free(h->st);
  free(h);
}
