/* agree.c - the step a restarted job resumes from, agreed by every node.
 *
 * Each agent scans its checkpoint directory and reports, per step, which
 * shards it holds that verify. On shared storage every agent sees every
 * shard; on node-local disks each sees its own ranks'. The job resumes
 * from the newest step from which every rank of the new round can load:
 * each node needs the shards of the ranks it will run, or, when the
 * trainer declared its state replicated, any one shard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_int.h"
#include "ck_store.h"
#include "msg.h"
#include "lu_buf.h"

#define CK_VIEW_LINES 10000
#define CK_VIEW_BITS_MAX (64u << 20) /* bytes of bitmaps one view may hold */

static int bit(const unsigned char *b, int r) {
  return b == NULL || (b[r / 8] >> (r % 8) & 1);
}

static const ckpt_have_t *find_step(const ckpt_node_view_t *v, int64_t step) {
  for (size_t i = 0; i < v->nsteps; i++)
    if (v->steps[i].step == step)
      return &v->steps[i];
  return NULL;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static const char *node_name(const ckpt_node_view_t *v, size_t i, char *buf,
                             size_t n) {
  if (v->name && v->name[0])
    return v->name;
  snprintf(buf, n, "node %zu", i);
  return buf;
}

/* Can every node load step s? RET 1 yes, 0 no (why), -1 when its world
 * size differs and it is not replicated but is otherwise whole (why). */
static int step_usable(const ckpt_node_view_t *nodes, size_t n, int world,
                       int64_t s, char *why, size_t whylen) {
  const ckpt_have_t *first = NULL;
  unsigned char *uni = NULL;
  int rc = 1;
  char nb[32];
  for (size_t i = 0; i < n; i++) {
    const ckpt_have_t *h = find_step(&nodes[i], s);
    if (h == NULL)
      continue;
    if (first == NULL) {
      first = h;
    } else if (h->world_size != first->world_size ||
               h->replicated != first->replicated) {
      lu_errf(why, whylen, "step %lld: nodes disagree on its world size or "
              "replication", (long long)s);
      return 0;
    }
  }
  if (first == NULL)
    return 0;
  /* Megatron's model-parallel grid: the data-parallel size may change, the
   * grid may not. */
  if (first->replicated == CKPT_REPL_MULTIPLE && first->world_size > 0 &&
      world % first->world_size != 0) {
    lu_errf(why, whylen, "Megatron step %lld was written with a model-"
            "parallel grid of %d ranks (tensor x pipeline x expert sizes in "
            "its args) and this job has %d ranks, not a multiple of %d: "
            "Megatron cannot load it; run with a multiple of %d ranks "
            "(docs/checkpoints.md)", (long long)s, first->world_size, world,
            first->world_size, first->world_size);
    return -1;
  }
  /* Written by another world size: only replicated state may load. */
  if (first->world_size > 0 && first->world_size != world &&
      !first->replicated) {
    int W = first->world_size;
    if ((uni = calloc((size_t)W, 1)) == NULL)
      return 0;
    for (size_t i = 0; i < n; i++) {
      const ckpt_have_t *h = find_step(&nodes[i], s);
      for (int r = 0; h && r < W; r++)
        uni[r] |= (unsigned char)bit(h->ranks, r);
    }
    for (int r = 0; r < W && rc == 1; r++)
      rc = uni[r] ? 1 : 0;
    free(uni);
    if (rc == 1) {
      lu_errf(why, whylen, "step %lld was written by %d ranks and this job "
              "has %d; its state is not declared replicated, so it cannot be "
              "loaded by a different number of ranks: run with %d ranks, or "
              "have the trainer declare replicated state (docs/checkpoints.md)",
              (long long)s, W, world, W);
      return -1;
    }
    lu_errf(why, whylen, "step %lld: some of its %d shards are on no node",
            (long long)s, W);
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    const ckpt_node_view_t *v = &nodes[i];
    const ckpt_have_t *h = find_step(v, s);
    if (v->nranks == 0)
      continue; /* runs no rank: needs nothing */
    if (h == NULL) {
      lu_errf(why, whylen, "step %lld: %s has none of it", (long long)s,
              node_name(v, i, nb, sizeof(nb)));
      return 0;
    }
    if (h->replicated || h->world_size == 0) {
      int any = h->ranks == NULL;
      for (int r = 0; !any && r < h->world_size; r++)
        any = bit(h->ranks, r);
      if (!any) {
        lu_errf(why, whylen, "step %lld: %s holds no shard of it",
                (long long)s, node_name(v, i, nb, sizeof(nb)));
        return 0;
      }
      continue;
    }
    for (int r = v->first_rank; r < v->first_rank + v->nranks; r++)
      if (!bit(h->ranks, r)) {
        lu_errf(why, whylen, "step %lld: %s runs rank %d but lacks its "
                "shard", (long long)s, node_name(v, i, nb, sizeof(nb)), r);
        return 0;
      }
  }
  return 1;
}

int ckpt_agree(const ckpt_node_view_t *nodes, size_t n, int world_size,
               ckpt_agreement_t *out) {
  int64_t *cand = NULL;
  size_t nc = 0, cap = 0;
  int rc = 0;
  memset(out, 0, sizeof(*out));
  out->step = -1;
  if (world_size < 1 || (n > 0 && nodes == NULL))
    return RDZV_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (nodes[i].first_rank < 0 || nodes[i].nranks < 0 ||
        nodes[i].first_rank > world_size - nodes[i].nranks)
      return RDZV_EINVAL;
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < nodes[i].nsteps; k++) {
      if (nc == cap) {
        int64_t *c = realloc(cand, (cap = cap ? cap * 2 : 16) * sizeof(*c));
        if (c == NULL) {
          free(cand);
          return RDZV_ENOMEM;
        }
        cand = c;
      }
      cand[nc++] = nodes[i].steps[k].step;
    }
  }
  if (nc > 1)
    qsort(cand, nc, sizeof(*cand), cmp_desc);
  for (size_t i = 0; i < nc; i++) {
    char why[CKPT_PROBLEM_MAX];
    int u;
    if (i > 0 && cand[i] == cand[i - 1])
      continue;
    why[0] = '\0';
    u = step_usable(nodes, n, world_size, cand[i], why, sizeof(why));
    if (u == 1) {
      const ckpt_have_t *h = NULL;
      for (size_t k = 0; k < n && h == NULL; k++)
        h = find_step(&nodes[k], cand[i]);
      out->step = cand[i];
      out->elastic = h && h->world_size > 0 && h->world_size != world_size &&
                     h->replicated != CKPT_REPL_MULTIPLE;
      break;
    }
    if (out->why[0] == '\0')
      lu_strlcpy(out->why, why, sizeof(out->why));
    if (u < 0) {
      /* The newest whole step cannot be loaded by this world size: falling
       * back to an older one would silently lose progress. */
      lu_strlcpy(out->why, why, sizeof(out->why));
      rc = CKPT_EWORLD;
      break;
    }
  }
  free(cand);
  return rc;
}

/* ---- the text form ------------------------------------------------------------- */

static void put_ranges(lu_buf_t *b, const unsigned char *bits, int world) {
  int first = 1;
  for (int r = 0; r < world;) {
    int e;
    if (!bit(bits, r)) {
      r++;
      continue;
    }
    for (e = r; e + 1 < world && bit(bits, e + 1); e++)
      ;
    lu_buf_printf(b, e > r ? "%s%d-%d" : "%s%d", first ? "" : ",", r, e);
    first = 0;
    r = e + 1;
  }
}

/* Step i of s as views carry it. RET 0 to leave it out (no good shard),
 * 1 with *world, *repl and *all (every shard good: ranks "*"). */
static int view_step(const ckpt_scan_t *s, size_t i, int *world, int *repl,
                     int *all) {
  const ckpt_step_t *st = &s->steps[i];
  int any = 0;
  *all = 1;
  if (st->step < 0)
    return 0;
  if (st->have && st->world_size > 0) {
    for (int r = 0; r < st->world_size; r++) {
      any |= bit(st->have, r);
      *all &= bit(st->have, r);
    }
  } else {
    any = *all = st->state == CKPT_STEP_COMPLETE;
  }
  /* Other layouts enter with the world size they record (DeepSpeed's
   * dp x mp sizes, DCP's ranks), not 0 ("any"): a step DeepSpeed cannot
   * load at this size must be refused, not handed over (issue #22).
   * Megatron's legacy steps enter with their model-parallel grid (any
   * multiple of it loads); Hugging Face's files say nothing a resume
   * may rely on (it loads at another data-parallel size). */
  *world = st->have || s->layout == CKPT_LAYOUT_DEEPSPEED ||
                   s->layout == CKPT_LAYOUT_DCP ||
                   st->replicated == CKPT_REPL_MULTIPLE
               ? st->world_size
               : 0;
  *repl = st->replicated == CKPT_REPL_MULTIPLE ? CKPT_REPL_MULTIPLE
          : st->replicated                     ? 1
                                               : 0;
  return any;
}

/* The good shards of step i: "*" or ranges. */
static void put_have(lu_buf_t *b, const ckpt_scan_t *s, size_t i, int all) {
  if (all)
    lu_buf_puts(b, "*");
  else
    put_ranges(b, s->steps[i].have, s->steps[i].world_size);
}

int ckpt_view_encode(const ckpt_scan_t *s, char **text) {
  lu_buf_t b = LU_BUF_INIT;
  lu_buf_puts(&b, "");
  for (size_t i = 0; i < s->nsteps; i++) {
    int world, repl, all;
    if (!view_step(s, i, &world, &repl, &all))
      continue;
    lu_buf_printf(&b, "%lld %d %d ", (long long)s->steps[i].step, world,
                  repl);
    put_have(&b, s, i, all);
    lu_buf_puts(&b, "\n");
  }
  return lu_buf_finish(&b, text, NULL);
}

void ckpt_view_free(ckpt_have_t *steps, size_t n) {
  for (size_t i = 0; steps && i < n; i++)
    free((void *)steps[i].ranks);
  free(steps);
}

/* A non-negative decimal of at most 18 digits at *p, ending at a char in
 * stop. */
static int take_num(const char **p, const char *end, int64_t *v) {
  const char *s = *p;
  while (*p < end && **p >= '0' && **p <= '9')
    (*p)++;
  if (*p == s || *p - s > 18 || (*p - s > 1 && *s == '0'))
    return -1;
  return lu_parse_i64(s, (size_t)(*p - s), v) == 0 ? 0 : -1;
}

static int parse_ranks(const char *p, const char *end, int world,
                       unsigned char **out) {
  unsigned char *bits;
  if (end - p == 1 && *p == '*') {
    *out = NULL;
    return 0;
  }
  if (world <= 0 || p == end)
    return CKPT_EFORMAT;
  if ((bits = calloc(((size_t)world + 7) / 8, 1)) == NULL)
    return RDZV_ENOMEM;
  for (;;) {
    int64_t a, b;
    if (take_num(&p, end, &a) != 0)
      break;
    b = a;
    if (p < end && *p == '-') {
      p++;
      if (take_num(&p, end, &b) != 0)
        break;
    }
    if (a > b || b >= world)
      break;
    for (int64_t r = a; r <= b; r++)
      bits[r / 8] |= (unsigned char)(1u << (r % 8));
    if (p == end) {
      *out = bits;
      return 0;
    }
    if (*p != ',')
      break;
    p++;
  }
  free(bits);
  return CKPT_EFORMAT;
}

int ckpt_view_decode(const char *text, size_t len, ckpt_have_t **steps,
                     size_t *n) {
  const char *p = text, *end = text + len;
  ckpt_have_t *v = NULL;
  size_t k = 0, bytes = 0;
  int rc = 0;
  *steps = NULL;
  *n = 0;
  while (p < end && rc == 0) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    int64_t step, world, repl;
    ckpt_have_t *nv;
    unsigned char *bits = NULL;
    if (eol == NULL)
      eol = end;
    if (k == CK_VIEW_LINES ||
        take_num(&p, eol, &step) != 0 || p >= eol || *p++ != ' ' ||
        take_num(&p, eol, &world) != 0 || world > CK_MAX_WORLD ||
        p >= eol || *p++ != ' ' || take_num(&p, eol, &repl) != 0 ||
        repl > CKPT_REPL_MULTIPLE || p >= eol || *p++ != ' ') {
      rc = CKPT_EFORMAT;
      break;
    }
    bytes += ((size_t)world + 7) / 8;
    if (bytes > CK_VIEW_BITS_MAX) {
      rc = CKPT_EFORMAT;
      break;
    }
    if ((rc = parse_ranks(p, eol, (int)world, &bits)) != 0)
      break;
    if ((nv = realloc(v, (k + 1) * sizeof(*v))) == NULL) {
      free(bits);
      rc = RDZV_ENOMEM;
      break;
    }
    v = nv;
    v[k].step = step;
    v[k].world_size = (int)world;
    v[k].replicated = (int)repl;
    v[k].ranks = bits;
    k++;
    p = eol < end ? eol + 1 : end;
  }
  if (rc != 0) {
    ckpt_view_free(v, k);
    return rc;
  }
  *steps = v;
  *n = k;
  return 0;
}

/* ---- the store form: the codec's VIEW and VERDICT maps --------------------------- */

static void msg_steps_free(msg_ckpt_step_t *m, size_t n) {
  for (size_t i = 0; m && i < n; i++)
    msg_ckpt_step_free(&m[i]);
  free(m);
}

int ck_view_pack(const ckpt_scan_t *s, const char *host, int first,
                 int nranks, char **buf, size_t *len) {
  msg_ckpt_view_t m;
  size_t n = s ? s->nsteps : 0;
  int rc = 0;
  msg_ckpt_view_init(&m);
  lu_strlcpy(m.host, host, sizeof(m.host));
  m.first = first;
  m.nranks = nranks;
  if (n > 0 && (m.steps = calloc(n, sizeof(*m.steps))) == NULL)
    return RDZV_ENOMEM;
  for (size_t i = 0; i < n && rc == 0; i++) {
    msg_ckpt_step_t *ms = &m.steps[m.nsteps];
    lu_buf_t b = LU_BUF_INIT;
    int world, repl, all;
    if (!view_step(s, i, &world, &repl, &all))
      continue;
    msg_ckpt_step_init(ms);
    ms->step = s->steps[i].step;
    ms->world_size = world;
    ms->replicated = repl;
    lu_buf_puts(&b, "");
    put_have(&b, s, i, all);
    rc = lu_buf_finish(&b, &ms->ranks, NULL);
    m.nsteps++;
  }
  if (rc == 0)
    rc = msg_ckpt_view_encode(&m, buf, len);
  msg_steps_free(m.steps, m.nsteps);
  return rc;
}

/* One step of another node's view into h; *bytes counts the bitmaps. */
static int have_from(const msg_ckpt_step_t *m, ckpt_have_t *h, size_t *bytes,
                     char *err, size_t errlen) {
  unsigned char *bits = NULL;
  int rc;
  if (m->step < 0 || m->world_size < 0 || m->world_size > CK_MAX_WORLD ||
      m->replicated < 0 || m->replicated > CKPT_REPL_MULTIPLE ||
      m->ranks == NULL) {
    lu_errf(err, errlen, "step %lld: a negative step, a world size outside "
            "0..%d, a replication outside 0..%d or no ranks",
            (long long)m->step, CK_MAX_WORLD, CKPT_REPL_MULTIPLE);
    return CKPT_EFORMAT;
  }
  *bytes += ((size_t)m->world_size + 7) / 8;
  if (*bytes > CK_VIEW_BITS_MAX) {
    lu_errf(err, errlen, "its rank bitmaps exceed %u bytes",
            CK_VIEW_BITS_MAX);
    return CKPT_EFORMAT;
  }
  rc = parse_ranks(m->ranks, m->ranks + strlen(m->ranks), (int)m->world_size,
                   &bits);
  if (rc == CKPT_EFORMAT)
    lu_errf(err, errlen, "step %lld: ranks '%.40s' are neither '*' nor "
            "ranges below its world size %lld", (long long)m->step, m->ranks,
            (long long)m->world_size);
  if (rc != 0)
    return rc;
  h->step = m->step;
  h->world_size = (int)m->world_size;
  h->replicated = (int)m->replicated;
  h->ranks = bits;
  return 0;
}

int ck_view_unpack(const void *p, size_t n, ck_view_t *v, char *err,
                   size_t errlen) {
  msg_ckpt_view_t m;
  size_t bytes = 0;
  int rc;
  memset(v, 0, sizeof(*v));
  if (msg_ckpt_view_decode(p, n, &m, err, errlen) != 0)
    return CKPT_EFORMAT;
  rc = CKPT_EFORMAT;
  if (m.first < 0 || m.nranks < 0 || m.first > (1 << 24) ||
      m.nranks > (1 << 24) || m.host[0] == '\0' ||
      m.nsteps > CK_VIEW_LINES) {
    lu_errf(err, errlen, "VIEW: ranks outside 0..%d, no host name or more "
            "than %d steps", 1 << 24, CK_VIEW_LINES);
    goto out;
  }
  if (m.nsteps > 0 &&
      (v->steps = calloc(m.nsteps, sizeof(*v->steps))) == NULL) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < m.nsteps; i++) {
    if ((rc = have_from(&m.steps[i], &v->steps[i], &bytes, err, errlen)) != 0)
      goto out;
    v->nsteps = i + 1;
  }
  lu_strlcpy(v->host, m.host, sizeof(v->host));
  v->first = (int)m.first;
  v->nranks = (int)m.nranks;
  rc = 0;
out:
  if (rc != 0) {
    ckpt_view_free(v->steps, v->nsteps);
    memset(v, 0, sizeof(*v));
  }
  msg_ckpt_view_free(&m);
  return rc;
}

int ck_verdict_pack(const char *problem, char **buf, size_t *len) {
  msg_ckpt_verdict_t m;
  msg_ckpt_verdict_init(&m);
  m.ok = problem == NULL;
  m.problem = (char *)problem; /* pack only reads it */
  return msg_ckpt_verdict_encode(&m, buf, len);
}

int ck_verdict_unpack(const void *p, size_t n, int *ok, char *problem,
                      size_t plen) {
  msg_ckpt_verdict_t m;
  char err[200];
  *ok = 0;
  if (msg_ckpt_verdict_decode(p, n, &m, err, sizeof(err)) != 0) {
    lu_strlcpy(problem, err, plen);
    return CKPT_EFORMAT;
  }
  *ok = m.ok;
  lu_strlcpy(problem, m.ok || m.problem == NULL ? "" : m.problem, plen);
  msg_ckpt_verdict_free(&m);
  return 0;
}
