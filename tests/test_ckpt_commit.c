/* test_ckpt_commit.c - launch's checkpoint layout end to end:
 *  - one rank: save, keep-K pruning, load back, background save;
 *  - a flipped byte and a truncated shard: detected, named, skipped;
 *  - four ranks committing through a real store (`launch server`) on
 *    shared storage, then on node-local storage where the nodes end up
 *    with different newest steps: the agreed step is the newest every
 *    rank has, rollback makes it `latest`, saving again works;
 *  - elastic resume: refused for sharded state, allowed for replicated;
 *  - completion files committed by the agent (with and without a store),
 *    and bad completion files reported;
 *  - what an agent already knows: a shard learnt from a commit or a
 *    verification is trusted while its stat identity is unchanged, hashed
 *    again after any write (a flipped byte is then caught); ckpt_load
 *    skips the hash only for the step $LAUNCH_CKPT_VERIFIED names;
 *  - the shard writer, O_DIRECT (aligned buffers or not, sizes that are not
 *    a multiple of the block) and through the page cache;
 *  - bad input: a missing directory, a bad LAUNCH_RESUME_STEP. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_int.h"
#include "ckpt_test.h"
#include "test.h"

static pid_t store_pid;
static char store_ep[64];

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[65536];

static void log_cb(void *data, int level, const char *msg) {
  (void)data;
  pthread_mutex_lock(&log_mu);
  size_t n = strlen(log_text);
  snprintf(log_text + n, sizeof(log_text) - n, "[%d] %s\n", level, msg);
  pthread_mutex_unlock(&log_mu);
}

static void log_clear(void) {
  pthread_mutex_lock(&log_mu);
  log_text[0] = '\0';
  pthread_mutex_unlock(&log_mu);
}

/* The state of rank r at step s: bytes any test can predict. */
static void fill(unsigned char *b, size_t n, int64_t s, int r) {
  uint32_t x = (uint32_t)(s * 2654435761u) ^ (uint32_t)(r * 40503u + 1);
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b[i] = (unsigned char)x;
  }
}

static const char *path(const char *a, const char *b) {
  static char buf[8][4096];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 4096, "%s/%s", a, b);
  return p;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static void check_load(ckpt_t *c, int64_t step, int rank, size_t n) {
  unsigned char *want = malloc(n), *got = malloc(n);
  struct iovec iov[2];
  uint64_t size;
  fill(want, n, step, rank);
  memset(got, 0, n);
  iov[0].iov_base = got;
  iov[0].iov_len = n / 3;
  iov[1].iov_base = got + n / 3;
  iov[1].iov_len = n - n / 3;
  ASSERT_OK(ckpt_shard_size(c, step, &size));
  ASSERT_EQ(n, size);
  ASSERT_OK(ckpt_load(c, step, iov, 2));
  ASSERT_MEM_EQ(want, got, n);
  free(want);
  free(got);
}

/* gen: the restart generation; each scenario has its own, as each
 * restart of a real job does, so that store keys never collide. */
static ckpt_t *open_ckpt(const char *dir, int rank, int world, int local,
                         rdzv_client_t *cl, int replicated, int64_t gen) {
  ckpt_options_t o = CKPT_OPTIONS_INIT;
  ckpt_t *c;
  o.dir = dir;
  o.job = "testjob";
  o.rank = rank;
  o.world_size = world;
  o.local_rank = local;
  o.generation = gen;
  o.keep = 2;
  o.client = cl;
  o.replicated = replicated;
  o.commit_timeout_ms = test_ms(30000);
  o.log = log_cb;
  ASSERT_OK(ckpt_open(&o, &c));
  return c;
}

static ckpt_scan_t *scan(const char *dir, unsigned flags, const int *ranks,
                         size_t nranks) {
  ckpt_scan_options_t o = CKPT_SCAN_OPTIONS_INIT;
  ckpt_scan_t *s;
  char err[512] = "";
  o.flags = flags;
  o.ranks = ranks;
  o.nranks = nranks;
  if (ckpt_scan(dir, &o, &s, err, sizeof(err)) != 0)
    TEST_FAIL("scan %s: %s", dir, err);
  ASSERT_EQ(CKPT_LAYOUT_LAUNCH, s->layout);
  return s;
}

/* ---- one rank ------------------------------------------------------------------- */

static void test_single(const char *root) {
  char dir[512];
  size_t n = 100000, big = 20u << 20;
  unsigned char *buf = malloc(big);
  ckpt_t *c;
  ckpt_scan_t *s;
  int64_t step;
  char *latest;
  snprintf(dir, sizeof(dir), "%s/single/nested", root);
  c = open_ckpt(dir, 0, 1, 0, NULL, 0, 0);
  for (int64_t st = 1; st <= 4; st++) {
    struct iovec iov = {buf, n};
    fill(buf, n, st, 0);
    ASSERT_OK(ckpt_save(c, st, &iov, 1));
  }
  latest = test_read_file(path(dir, "latest"));
  ASSERT_STR_EQ("step-4\n", latest);
  free(latest);
  /* keep 2: steps 1 and 2 are gone. */
  ASSERT(!exists(path(dir, "step-1")) && !exists(path(dir, "step-2")));
  ASSERT(exists(path(dir, "step-3/manifest.json")));
  ASSERT_OK(ckpt_resume_step(c, &step));
  ASSERT_EQ(4, step);
  check_load(c, 4, 0, n);

  /* A background save of a shard large enough for the hashing thread and
   * several write-back chunks. */
  {
    struct iovec iov[2] = {{buf, big / 2}, {buf + big / 2, big - big / 2}};
    fill(buf, big, 5, 0);
    ASSERT_OK(ckpt_save_async(c, 5, iov, 2));
    ASSERT_OK(ckpt_wait(c, test_ms(60000)));
    ASSERT_EQ(0, ckpt_poll(c));
    check_load(c, 5, 0, big);
  }

  /* One flipped byte: verify names the file, the resume step is the one
   * before, and loading the bad step fails. */
  {
    int fd = open(path(dir, "step-5/rank-0.bin"), O_RDWR);
    unsigned char b;
    ASSERT(fd >= 0);
    ASSERT_EQ(1, pread(fd, &b, 1, 12345));
    b ^= 0x20;
    ASSERT_EQ(1, pwrite(fd, &b, 1, 12345));
    close(fd);
    s = scan(dir, 0, NULL, 0); /* sizes only: not noticed */
    ASSERT_EQ(CKPT_STEP_COMPLETE, s->steps[0].state);
    ckpt_scan_free(s);
    s = scan(dir, CKPT_SCAN_SHA, NULL, 0);
    ASSERT_EQ(5, s->steps[0].step);
    ASSERT_EQ(CKPT_STEP_CORRUPT, s->steps[0].state);
    ASSERT_CONTAINS(s->steps[0].problem, "rank-0.bin: SHA-256");
    ASSERT_EQ(1, s->resume);
    ASSERT_EQ(4, s->steps[1].step);
    ASSERT_CONTAINS(s->latest_problem, "names step-5, which is corrupt");
    ckpt_scan_free(s);
    log_clear();
    ASSERT_OK(ckpt_resume_step(c, &step));
    ASSERT_EQ(4, step);
    ASSERT_CONTAINS(log_text, "step-5 skipped: rank-0.bin: SHA-256");
    {
      unsigned char *got = malloc(big);
      struct iovec iov = {got, big};
      ASSERT_EQ(CKPT_ECORRUPT, ckpt_load(c, 5, &iov, 1));
      ASSERT_EQ(CKPT_ESIZE, ckpt_load(c, 4, &iov, 1));
      free(got);
    }
    ASSERT_EQ(0, ckpt_verify_step(dir, 4, NULL, 0, NULL, 0));
    ASSERT_EQ(CKPT_ECORRUPT, ckpt_verify_step(dir, 5, NULL, 0, NULL, 0));
  }
  /* A shard that cannot be read (here a symlink loop: ELOOP, as EIO or
   * EMFILE would be) is no verdict on its step: verify and the scan fail,
   * saying so, instead of calling step 4 incomplete, which would roll it
   * back and prune it. */
  {
    ckpt_scan_options_t o = CKPT_SCAN_OPTIONS_INIT;
    char problem[1024], keep[600];
    snprintf(keep, sizeof(keep), "%s.keep", path(dir, "step-4/rank-0.bin"));
    ASSERT_EQ(0, rename(path(dir, "step-4/rank-0.bin"), keep));
    ASSERT_EQ(0, symlink("rank-0.bin", path(dir, "step-4/rank-0.bin")));
    ASSERT_EQ(-ELOOP, ckpt_verify_step(dir, 4, NULL, 0, problem,
                                       sizeof(problem)));
    ASSERT_CONTAINS(problem, "read error, not a bad checkpoint");
    o.flags = 0;
    ASSERT_EQ(-ELOOP, ckpt_scan(dir, &o, &s, problem, sizeof(problem)));
    ASSERT_CONTAINS(problem, "step-4/rank-0.bin");
    ASSERT_EQ(0, unlink(path(dir, "step-4/rank-0.bin")));
    ASSERT_EQ(0, rename(keep, path(dir, "step-4/rank-0.bin")));
  }
  /* A shard cut short: seen by sizes alone. */
  ASSERT_EQ(0, truncate(path(dir, "step-4/rank-0.bin"), 1000));
  s = scan(dir, 0, NULL, 0);
  ASSERT_EQ(CKPT_STEP_CORRUPT, s->steps[1].state);
  ASSERT_CONTAINS(s->steps[1].problem, "rank-0.bin: 1000 bytes, the manifest "
                                       "says 100000");
  ASSERT_EQ(0, s->resume); /* step 5's flipped byte needs SHA-256 */
  ckpt_scan_free(s);

  /* LAUNCH_RESUME_STEP wins over the scan. */
  setenv("LAUNCH_RESUME_STEP", "3", 1);
  ASSERT_OK(ckpt_resume_step(c, &step));
  ASSERT_EQ(3, step);
  setenv("LAUNCH_RESUME_STEP", "", 1);
  ASSERT_OK(ckpt_resume_step(c, &step));
  ASSERT_EQ(-1, step);
  setenv("LAUNCH_RESUME_STEP", "3x", 1);
  ASSERT_EQ(CKPT_EFORMAT, ckpt_resume_step(c, &step));
  unsetenv("LAUNCH_RESUME_STEP");
  ckpt_close(c);
  free(buf);
}

/* ---- several ranks through the store -------------------------------------------- */

typedef struct rank_arg_s {
  const char *dir;
  int rank, world, local;
  int64_t steps[4];
  int nsteps;
  size_t n;
  int replicated;
  int async;
  int64_t gen;
} rank_arg_t;

static rdzv_client_t *conn(void) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  o.endpoint = store_ep;
  o.job = "ckpt";
  ASSERT_OK(rdzv_connect(&o, &c));
  return c;
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  rdzv_client_t *cl = conn();
  ckpt_t *c = open_ckpt(a->dir, a->rank, a->world, a->local, cl,
                        a->replicated, a->gen);
  unsigned char *buf = malloc(a->n);
  for (int i = 0; i < a->nsteps; i++) {
    struct iovec iov = {buf, a->n};
    int rc;
    /* The buffer may change once the previous save is done. */
    if (a->async)
      ASSERT_OK(ckpt_wait(c, test_ms(60000)));
    fill(buf, a->n, a->steps[i], a->replicated ? 0 : a->rank);
    rc = a->async ? ckpt_save_async(c, a->steps[i], &iov, 1)
                  : ckpt_save(c, a->steps[i], &iov, 1);
    if (rc != 0)
      TEST_FAIL("rank %d step %lld: %s", a->rank, (long long)a->steps[i],
                ckpt_strerror(rc));
  }
  ASSERT_OK(ckpt_wait(c, test_ms(60000)));
  free(buf);
  ckpt_close(c);
  rdzv_close(cl);
  return NULL;
}

/* World 4, two "nodes" of two ranks; dirs[k] is node k's directory (the
 * same for shared storage). */
static void run_ranks(const char *dirs[2], const int64_t *steps, int nsteps,
                      int replicated, int async, int64_t gen) {
  pthread_t t[4];
  rank_arg_t a[4];
  for (int r = 0; r < 4; r++) {
    memset(&a[r], 0, sizeof(a[r]));
    a[r].dir = dirs[r / 2];
    a[r].rank = r;
    a[r].world = 4;
    a[r].local = r % 2;
    memcpy(a[r].steps, steps, (size_t)nsteps * sizeof(*steps));
    a[r].nsteps = nsteps;
    a[r].n = 50000 + 1000u * (unsigned)r;
    a[r].replicated = replicated;
    a[r].async = async;
    a[r].gen = gen;
    ASSERT_EQ(0, pthread_create(&t[r], NULL, rank_main, &a[r]));
  }
  for (int r = 0; r < 4; r++)
    pthread_join(t[r], NULL);
}

static void test_shared(const char *root) {
  char dir[512];
  const char *dirs[2];
  int64_t steps[2] = {10, 20};
  ckpt_scan_t *s;
  snprintf(dir, sizeof(dir), "%s/shared", root);
  dirs[0] = dirs[1] = dir;
  run_ranks(dirs, steps, 2, 0, 1, 1);
  s = scan(dir, CKPT_SCAN_SHA, NULL, 0);
  ASSERT_EQ(2, s->nsteps);
  ASSERT_EQ(0, s->resume);
  ASSERT_EQ(20, s->steps[0].step);
  ASSERT_EQ(4, s->steps[0].world_size);
  ASSERT_EQ(4, s->steps[0].files);
  ASSERT_EQ(0, s->latest);
  ASSERT_STR_EQ("", s->latest_problem);
  ckpt_scan_free(s);
  {
    char *m = test_read_file(path(dir, "step-20/manifest.json"));
    ASSERT_CONTAINS(m, "\"job\": \"testjob\"");
    ASSERT_CONTAINS(m, "\"world_size\": 4");
    ASSERT_CONTAINS(m, "\"file\": \"rank-3.bin\"");
    free(m);
  }
}

static void view_of(const char *dir, const int *ranks, size_t nranks,
                    ckpt_have_t **h, size_t *n) {
  ckpt_scan_t *s = scan(dir, CKPT_SCAN_SHA, ranks, nranks);
  char *text;
  ASSERT_OK(ckpt_view_encode(s, &text));
  ASSERT_OK(ckpt_view_decode(text, strlen(text), h, n));
  free(text);
  ckpt_scan_free(s);
}

static void test_node_local(const char *root) {
  char da[512], db[512];
  const char *dirs[2] = {da, db};
  int64_t steps[2] = {10, 20};
  int ra[2] = {0, 1}, rb[2] = {2, 3};
  ckpt_have_t *ha, *hb;
  size_t na, nb;
  ckpt_agreement_t ag;
  char err[256];
  snprintf(da, sizeof(da), "%s/nodeA", root);
  snprintf(db, sizeof(db), "%s/nodeB", root);
  run_ranks(dirs, steps, 2, 0, 0, 2);
  /* Each node holds its own ranks' shards and a manifest of all four. */
  ASSERT(exists(path(da, "step-20/rank-1.bin")));
  ASSERT(!exists(path(da, "step-20/rank-2.bin")));
  ASSERT(exists(path(db, "step-20/manifest.json")));
  /* Node B loses rank 3's newest shard: the nodes' newest steps differ. */
  ASSERT_EQ(0, unlink(path(db, "step-20/rank-3.bin")));
  view_of(da, ra, 2, &ha, &na);
  view_of(db, rb, 2, &hb, &nb);
  ASSERT_EQ(2, na);
  ASSERT_EQ(2, nb);
  {
    ckpt_node_view_t nodes[2] = {{"hostA", ha, na, 0, 2},
                                 {"hostB", hb, nb, 2, 2}};
    ASSERT_OK(ckpt_agree(nodes, 2, 4, &ag));
    ASSERT_EQ(10, ag.step);
    ASSERT_CONTAINS(ag.why, "step 20: hostB runs rank 3 but lacks its shard");
    /* Four ranks wrote it, not replicated: two cannot resume from it. */
    nodes[0].nranks = 1;
    nodes[1].first_rank = 1;
    nodes[1].nranks = 1;
    ASSERT_EQ(CKPT_EWORLD, ckpt_agree(nodes, 2, 2, &ag));
    ASSERT_CONTAINS(ag.why, "written by 4 ranks and this job has 2");
  }
  ckpt_view_free(ha, na);
  ckpt_view_free(hb, nb);
  /* Every node rolls back to the agreed step, then the job saves step 20
   * again. */
  ASSERT_OK(ckpt_rollback(da, 10, err, sizeof(err)));
  ASSERT_STR_EQ("", err); /* a warning only where the directory refused */
  ASSERT_OK(ckpt_rollback(db, 10, err, sizeof(err)));
  ASSERT_STR_EQ("", err);
  {
    char none[600];
    snprintf(none, sizeof(none), "%s/never-made", test_tmpdir());
    ASSERT_OK(ckpt_rollback(none, -1, err, sizeof(err)));
    ASSERT_STR_EQ("", err); /* no directory yet: nothing to say */
  }
  ASSERT(!exists(path(da, "step-20")));
  {
    char *l = test_read_file(path(db, "latest"));
    ASSERT_STR_EQ("step-10\n", l);
    free(l);
  }
  {
    int64_t again[1] = {20};
    run_ranks(dirs, again, 1, 0, 1, 3);
  }
  view_of(da, ra, 2, &ha, &na);
  view_of(db, rb, 2, &hb, &nb);
  {
    ckpt_node_view_t nodes[2] = {{"hostA", ha, na, 0, 2},
                                 {"hostB", hb, nb, 2, 2}};
    ASSERT_OK(ckpt_agree(nodes, 2, 4, &ag));
    ASSERT_EQ(20, ag.step);
  }
  ckpt_view_free(ha, na);
  ckpt_view_free(hb, nb);
  /* The abandoned copy of step 20 was pruned when 20 was final again. */
  {
    ckpt_scan_t *s = scan(da, 0, ra, 2);
    ASSERT_EQ(2, s->nsteps);
    ckpt_scan_free(s);
  }
}

static void test_elastic(const char *root) {
  char dir[512];
  const char *dirs[2] = {dir, dir};
  int64_t steps[1] = {7};
  ckpt_t *c;
  int64_t step;
  snprintf(dir, sizeof(dir), "%s/elastic", root);
  run_ranks(dirs, steps, 1, 1, 0, 4);
  /* Replicated state written by 4 ranks loads into a job of 2. */
  c = open_ckpt(dir, 1, 2, 1, NULL, 1, 5);
  ASSERT_OK(ckpt_resume_step(c, &step));
  ASSERT_EQ(7, step);
  {
    size_t n = 50000 + 1000; /* rank 1's shard: replicated state, any shard */
    unsigned char *want = malloc(n), *got = malloc(n);
    struct iovec iov = {got, n};
    fill(want, n, 7, 0);
    ASSERT_OK(ckpt_load(c, 7, &iov, 1));
    ASSERT_MEM_EQ(want, got, n);
    free(want);
    free(got);
  }
  ckpt_close(c);
  /* The sharded state of test_shared cannot. */
  snprintf(dir, sizeof(dir), "%s/shared", root);
  c = open_ckpt(dir, 0, 2, 0, NULL, 0, 5);
  log_clear();
  ASSERT_EQ(CKPT_EWORLD, ckpt_resume_step(c, &step));
  ASSERT_CONTAINS(log_text, "written by 4 ranks, this job has 2");
  ckpt_close(c);
}

/* ---- completion files and the agent ----------------------------------------------- */

static void write_file(const char *p, const void *data, size_t n) {
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT(fd >= 0);
  ASSERT_EQ((ssize_t)n, write(fd, data, n));
  close(fd);
}

static void test_agent(const char *root) {
  char dir[512], sdir[600], err[512];
  ckpt_commit_options_t o = CKPT_COMMIT_OPTIONS_INIT;
  int64_t fin;
  snprintf(dir, sizeof(dir), "%s/agent", root);
  /* Ranks 0 and 1 link the library without a store: they leave completion
   * files. Rank 2 is "Python": its shard and a done file with the size
   * only. */
  for (int r = 0; r < 2; r++) {
    ckpt_t *c = open_ckpt(dir, r, 3, r, NULL, 0, 0);
    unsigned char buf[3000];
    struct iovec iov = {buf, sizeof(buf)};
    fill(buf, sizeof(buf), 5, r);
    ASSERT_OK(ckpt_save(c, 5, &iov, 1));
    ckpt_close(c);
  }
  snprintf(sdir, sizeof(sdir), "%s/step-5", dir);
  ASSERT(exists(path(sdir, "rank-0.done")));
  ASSERT(!exists(path(sdir, "manifest.json")));
  o.dir = dir;
  o.job = "agentjob";
  o.world_size = 3;
  /* Not all three yet: nothing happens. */
  ASSERT_OK(ckpt_agent_scan_commit(&o, &fin, err, sizeof(err)));
  ASSERT_EQ(-1, fin);
  {
    unsigned char buf[777];
    fill(buf, sizeof(buf), 5, 2);
    write_file(path(sdir, "rank-2.bin"), buf, sizeof(buf));
    write_file(path(sdir, "rank-2.done"), "{\"size\": 999}", 13);
    ASSERT_OK(ckpt_agent_scan_commit(&o, &fin, err, sizeof(err)));
    ASSERT_EQ(-1, fin);
    ASSERT_CONTAINS(err, "rank-2.done says 999 bytes, its shard rank-2.bin "
                         "has 777");
    write_file(path(sdir, "rank-2.done"), "{\"size\": 777,", 13);
    ASSERT_OK(ckpt_agent_scan_commit(&o, &fin, err, sizeof(err)));
    ASSERT_EQ(-1, fin);
    ASSERT_CONTAINS(err, "rank-2.done does not parse");
    ASSERT_CONTAINS(err, "docs/checkpoints.md");
    write_file(path(sdir, "rank-2.done"), "{\"size\": 777}", 13);
  }
  ASSERT_OK(ckpt_agent_scan_commit(&o, &fin, err, sizeof(err)));
  ASSERT_EQ(5, fin);
  ASSERT_STR_EQ("", err);
  ASSERT_EQ(0, ckpt_verify_step(dir, 5, NULL, 0, err, sizeof(err)));
  {
    /* The agent kept the checksum it computed. */
    char *d = test_read_file(path(sdir, "rank-2.done"));
    ASSERT_CONTAINS(d, "\"sha256\":");
    free(d);
    d = test_read_file(path(dir, "latest"));
    ASSERT_STR_EQ("step-5\n", d);
    free(d);
  }
  /* Again: nothing left to do. */
  ASSERT_OK(ckpt_agent_scan_commit(&o, &fin, err, sizeof(err)));
  ASSERT_EQ(-1, fin);

  /* Two agents on node-local disks, through the store: each commits its
   * own ranks; each finalises its own directory once all are in. */
  {
    char da[512], db[512];
    int ra[2] = {0, 1}, rb[2] = {2, 3};
    rdzv_client_t *ca = conn(), *cb = conn();
    ckpt_commit_options_t oa = CKPT_COMMIT_OPTIONS_INIT, ob;
    snprintf(da, sizeof(da), "%s/agentA", root);
    snprintf(db, sizeof(db), "%s/agentB", root);
    for (int r = 0; r < 4; r++) {
      ckpt_t *c = open_ckpt(r < 2 ? da : db, r, 4, r % 2, NULL, 0, 0);
      unsigned char buf[1000];
      struct iovec iov = {buf, sizeof(buf)};
      fill(buf, sizeof(buf), 9, r);
      ASSERT_OK(ckpt_save(c, 9, &iov, 1));
      ckpt_close(c);
    }
    oa.job = "agentjob";
    oa.world_size = 4;
    oa.generation = 3;
    ob = oa;
    oa.dir = da;
    oa.ranks = ra;
    oa.nranks = 2;
    oa.client = ca;
    ob.dir = db;
    ob.ranks = rb;
    ob.nranks = 2;
    ob.client = cb;
    ASSERT_OK(ckpt_agent_scan_commit(&oa, &fin, err, sizeof(err)));
    ASSERT_EQ(-1, fin); /* B has not committed yet */
    ASSERT_OK(ckpt_agent_scan_commit(&ob, &fin, err, sizeof(err)));
    ASSERT_EQ(9, fin);
    ASSERT_OK(ckpt_agent_scan_commit(&oa, &fin, err, sizeof(err)));
    ASSERT_EQ(9, fin);
    ASSERT_EQ(0, ckpt_verify_step(da, 9, ra, 2, err, sizeof(err)));
    ASSERT_EQ(0, ckpt_verify_step(db, 9, rb, 2, err, sizeof(err)));
    ASSERT_EQ(CKPT_EINCOMPLETE, ckpt_verify_step(db, 9, ra, 2, err,
                                                 sizeof(err)));
    ASSERT_CONTAINS(err, "rank-0.bin (and 1 more shards) missing");
    rdzv_close(ca);
    rdzv_close(cb);
  }
}

static void test_bad_input(const char *root) {
  ckpt_scan_t *s;
  ckpt_options_t o = CKPT_OPTIONS_INIT;
  ckpt_t *c;
  char err[512], dir[512];
  ASSERT_EQ(-ENOENT, ckpt_scan(path(root, "nope"), NULL, &s, err,
                               sizeof(err)));
  ASSERT_CONTAINS(err, "nope: no such directory");
  o.dir = path(root, "bad");
  o.rank = 2;
  o.world_size = 2;
  o.log = log_cb;
  log_clear();
  ASSERT_EQ(RDZV_EINVAL, ckpt_open(&o, &c));
  ASSERT_CONTAINS(log_text, "rank 2 of world size 2");
  o.dir = NULL;
  unsetenv("LAUNCH_CKPT_DIR");
  ASSERT_EQ(RDZV_EINVAL, ckpt_open(&o, &c));
  ASSERT_CONTAINS(log_text, "no checkpoint directory");
  /* A manifest that does not parse: the step is corrupt, named. */
  snprintf(dir, sizeof(dir), "%s/garbage/step-3", root);
  ASSERT_OK(ck_mkdir_durable(path(root, "garbage")));
  ASSERT_OK(ck_mkdir_durable(dir));
  write_file(path(dir, "manifest.json"), "{\"format\": ", 11);
  s = scan(path(root, "garbage"), 0, NULL, 0);
  ASSERT_EQ(CKPT_STEP_CORRUPT, s->steps[0].state);
  ASSERT_CONTAINS(s->steps[0].problem, "manifest.json does not parse");
  ASSERT_EQ(-1, s->resume);
  ckpt_scan_free(s);
  write_file(path(root, "garbage/latest"), "nonsense", 8);
  s = scan(path(root, "garbage"), 0, NULL, 0);
  ASSERT_CONTAINS(s->latest_problem, "latest does not name a step");
  ckpt_scan_free(s);
}

/* ---- what an agent already verified ------------------------------------------------- */

static void flip(const char *p, off_t at) {
  unsigned char b;
  int fd = open(p, O_RDWR);
  ASSERT(fd >= 0);
  ASSERT_EQ(1, pread(fd, &b, 1, at));
  b ^= 0x01;
  ASSERT_EQ(1, pwrite(fd, &b, 1, at));
  close(fd);
}

static int verify_t(const char *dir, ckpt_trust_t *t, ckpt_verify_stats_t *vs,
                    char *problem, size_t n) {
  return ckpt_verify_step_trusted(dir, 5, NULL, 0, t, vs, problem, n);
}

static void test_trust(const char *root) {
  char dir[512], problem[CKPT_PROBLEM_MAX];
  size_t n = (1u << 20) + 4321;
  unsigned char *buf = malloc(n);
  struct iovec iov = {buf, n};
  ckpt_verify_stats_t vs;
  ckpt_trust_t *t, *t2;
  const char *shard;
  int learnt;
  ckpt_t *c;
  snprintf(dir, sizeof(dir), "%s/trust", root);
  shard = path(dir, "step-5/rank-0.bin");
  c = open_ckpt(dir, 0, 1, 0, NULL, 0, 0);
  fill(buf, n, 5, 0);
  ASSERT_OK(ckpt_save(c, 5, &iov, 1));
  {
    int64_t latest;
    ASSERT_OK(ckpt_latest_step(dir, &latest));
    ASSERT_EQ(5, latest);
    ASSERT_EQ(-ENOENT, ckpt_latest_step(path(dir, "step-5"), &latest));
    ASSERT_EQ(-1, latest);
    ASSERT_EQ(0, mkdir(path(root, "trust-bad"), 0755));
    write_file(path(root, "trust-bad/latest"), "step-x\n", 7);
    ASSERT_EQ(CKPT_EFORMAT, ckpt_latest_step(path(root, "trust-bad"), &latest));
  }

  /* Learnt from the commit (its manifest is always younger than its
   * shards, even within a tick of the clock): trusted without reading. */
  ASSERT_OK(ckpt_trust_new(&t));
  ASSERT_OK(ckpt_trust_learn(t, dir, 5, NULL, 0, &learnt));
  ASSERT_EQ(1, learnt);
  ASSERT_OK(verify_t(dir, t, &vs, problem, sizeof(problem)));
  ASSERT_EQ(1u, vs.trusted);
  ASSERT_EQ(0u, vs.hashed);
  ASSERT_EQ((uint64_t)n, vs.trusted_bytes);
  /* Without a cache, or with a new one: hashed. */
  ASSERT_OK(ckpt_verify_step_trusted(dir, 5, NULL, 0, NULL, &vs, NULL, 0));
  ASSERT_EQ(1u, vs.hashed);
  ASSERT_EQ(0u, vs.trusted);

  /* A byte flipped by a write: the identity moved, hashed, caught. */
  flip(shard, 1000);
  ASSERT_EQ(CKPT_ECORRUPT, verify_t(dir, t, &vs, problem, sizeof(problem)));
  ASSERT_CONTAINS(problem, "rank-0.bin: SHA-256");
  ASSERT_EQ(0u, vs.trusted);
  /* Flipped back: hashed once, good, then trusted again. */
  flip(shard, 1000);
  ASSERT_OK(verify_t(dir, t, &vs, problem, sizeof(problem)));
  ASSERT_EQ(1u, vs.hashed);
  ASSERT_EQ(0u, vs.trusted);
  ASSERT_OK(verify_t(dir, t, &vs, problem, sizeof(problem)));
  ASSERT_EQ(0u, vs.hashed);
  ASSERT_EQ(1u, vs.trusted);
  /* Any change of the inode (here only its times) costs a hash. */
  ASSERT_EQ(0, utimensat(AT_FDCWD, shard, NULL, 0));
  ASSERT_OK(verify_t(dir, t, &vs, problem, sizeof(problem)));
  ASSERT_EQ(1u, vs.hashed);

  /* A shard changed after its manifest is not learnt from the commit. */
  ASSERT_OK(ckpt_trust_new(&t2));
  ASSERT_OK(ckpt_trust_learn(t2, dir, 5, NULL, 0, &learnt));
  ASSERT_EQ(0, learnt);
  ASSERT_OK(verify_t(dir, t2, &vs, problem, sizeof(problem)));
  ASSERT_EQ(1u, vs.hashed);
  ASSERT_EQ(CKPT_EINCOMPLETE, ckpt_trust_learn(t2, dir, 6, NULL, 0, NULL));
  ckpt_trust_free(t2);
  ckpt_trust_free(t);

  /* ckpt_load: the hash is skipped only for the step launch verified. */
  flip(shard, 1000);
  ASSERT_OK(setenv("LAUNCH_CKPT_VERIFIED", "5", 1));
  memset(buf, 0, n);
  ASSERT_OK(ckpt_load(c, 5, &iov, 1));
  {
    unsigned char *want = malloc(n);
    fill(want, n, 5, 0);
    want[1000] ^= 0x01; /* what the file holds, read without a hash */
    ASSERT_MEM_EQ(want, buf, n);
    free(want);
  }
  ASSERT_OK(setenv("LAUNCH_CKPT_VERIFIED", "4", 1));
  ASSERT_EQ(CKPT_ECORRUPT, ckpt_load(c, 5, &iov, 1));
  ASSERT_OK(setenv("LAUNCH_CKPT_VERIFIED", "", 1));
  ASSERT_EQ(CKPT_ECORRUPT, ckpt_load(c, 5, &iov, 1));
  ASSERT_OK(unsetenv("LAUNCH_CKPT_VERIFIED"));
  ASSERT_EQ(CKPT_ECORRUPT, ckpt_load(c, 5, &iov, 1));
  ckpt_close(c);
  free(buf);
}

/* ---- the shard writer's paths ---------------------------------------------------------- */

/* Every way the buffers can meet the O_DIRECT writer ($LAUNCH_CKPT_DIRECT=1:
 * aligned or not, one buffer or several straddling its chunks, a size that
 * is or is not a multiple of the block, below its threshold) and the
 * page-cache path (the default): the file holds exactly the bytes, its SHA-256
 * is the manifest's, and it loads back. */
static void test_writer_paths(const char *root) {
  static const size_t sizes[] = {100000, (8u << 20), (20u << 20) + 123,
                                 (3u << 20) + 4096};
  char dir[512];
  unsigned char *mem, *got;
  size_t cap = (21u << 20) + 8192;
  int64_t step = 1;
  ASSERT_EQ(0, posix_memalign((void **)&mem, 4096, cap));
  got = malloc(cap);
  snprintf(dir, sizeof(dir), "%s/writer", root);
  for (int direct = 1; direct >= 0; direct--) {
    ckpt_t *c;
    ASSERT_OK(setenv("LAUNCH_CKPT_DIRECT", direct ? "1" : "0", 1));
    c = open_ckpt(dir, 0, 1, 0, NULL, 0, 0);
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
      for (int shape = 0; shape < 3; shape++, step++) {
        size_t n = sizes[si];
        /* 0: one aligned buffer; 1: one buffer 16 bytes off; 2: three
         * pieces whose borders fall inside the writer's chunks. */
        unsigned char *b = mem + (shape == 1 ? 16 : 0);
        struct iovec iov[3], back = {got, n};
        int cnt = shape == 2 ? 3 : 1;
        struct stat st;
        char leaf[64];
        fill(b, n, step, 0);
        iov[0].iov_base = b;
        iov[0].iov_len = shape == 2 ? n / 3 + 5 : n;
        iov[1].iov_base = b + iov[0].iov_len;
        iov[1].iov_len = n / 3;
        iov[2].iov_base = b + iov[0].iov_len + iov[1].iov_len;
        iov[2].iov_len = n - iov[0].iov_len - iov[1].iov_len;
        ASSERT_OK(ckpt_save(c, step, iov, cnt));
        snprintf(leaf, sizeof(leaf), "step-%lld/rank-0.bin", (long long)step);
        ASSERT_EQ(0, stat(path(dir, leaf), &st));
        ASSERT_EQ((long long)n, (long long)st.st_size);
        ASSERT_EQ(0, ckpt_verify_step(dir, step, NULL, 0, NULL, 0));
        memset(got, 0, n);
        ASSERT_OK(ckpt_load(c, step, &back, 1));
        ASSERT_MEM_EQ(b, got, n);
      }
    ckpt_close(c);
  }
  ASSERT_OK(unsetenv("LAUNCH_CKPT_DIRECT"));
  free(mem);
  free(got);
}

/* A shard the agents verified (LAUNCH_CKPT_VERIFIED) and large enough for
 * the parallel read (4 readers taking 8 MiB pieces): the bytes land where
 * they belong across buffers whose borders fall inside the pieces; a file
 * cut short is a size error, never a silent partial load. */
static void test_parallel_read(const char *root) {
  size_t n = (41u << 20) + 123;
  unsigned char *b = malloc(n), *got = malloc(n);
  struct iovec iov = {b, n}, back[3];
  char dir[512];
  ckpt_t *c;
  ASSERT(b != NULL && got != NULL);
  snprintf(dir, sizeof(dir), "%s/parread", root);
  c = open_ckpt(dir, 0, 1, 0, NULL, 0, 0);
  fill(b, n, 7, 0);
  ASSERT_OK(ckpt_save(c, 7, &iov, 1));
  back[0].iov_base = got;
  back[0].iov_len = (5u << 20) + 7;
  back[1].iov_base = got + back[0].iov_len;
  back[1].iov_len = (17u << 20) + 1;
  back[2].iov_base = got + back[0].iov_len + back[1].iov_len;
  back[2].iov_len = n - back[0].iov_len - back[1].iov_len;
  memset(got, 0, n);
  ASSERT_OK(setenv("LAUNCH_CKPT_VERIFIED", "7", 1));
  ASSERT_OK(ckpt_load(c, 7, back, 3));
  ASSERT_MEM_EQ(b, got, n);
  ASSERT_EQ(0, truncate(path(dir, "step-7/rank-0.bin"), (off_t)(n - 4096)));
  ASSERT(ckpt_load(c, 7, back, 3) != 0);
  ASSERT_OK(unsetenv("LAUNCH_CKPT_VERIFIED"));
  ckpt_close(c);
  free(b);
  free(got);
}

int main(void) {
  int fds = test_fd_count();
  const char *root = test_tmpdir();
  ckpt_test_store(&store_pid, store_ep, sizeof(store_ep));
  test_single(root);
  test_shared(root);
  test_node_local(root);
  test_elastic(root);
  test_agent(root);
  test_trust(root);
  test_writer_paths(root);
  test_parallel_read(root);
  test_bad_input(root);
  test_kill(store_pid);
  ASSERT_EQ(fds, test_fd_count());
  printf("ok\n");
  return 0;
}
