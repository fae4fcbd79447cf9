/* test_workers_output.c - worker output: a prefix on every console line,
 * whole lines only (two chatty workers writing lines in pieces never
 * interleave), redirects (file only), tee (file and console), the local
 * ranks filter, the files at <attempt_dir>/<local_rank>/{stdout,stderr}.log,
 * a last line without newline, a very long line in bounded memory, the
 * stderr tail, and inherited stdout/stderr when output is not piped.
 * The console is this process's fd 1 and fd 2, captured into files. */
#include "wk_test.h"

static uv_loop_t loop;

typedef struct cap_s {
  char out[600], err[600];
  int saved_out, saved_err;
} cap_t;

static void cap_begin(cap_t *c, const char *tag) {
  snprintf(c->out, sizeof(c->out), "%s/%s.console.out", test_tmpdir(), tag);
  snprintf(c->err, sizeof(c->err), "%s/%s.console.err", test_tmpdir(), tag);
  c->saved_out = wt_capture(1, c->out);
  c->saved_err = wt_capture(2, c->err);
}

static void cap_end(cap_t *c) {
  wt_uncapture(1, c->saved_out);
  wt_uncapture(2, c->saved_err);
}

/* Start, wait for every exit, stop, without asserting (the console is
 * captured: a failure message would vanish). RET 1 when all went well. */
static int run_quiet(wk_group_t *g, const wk_spec_t *s, wt_rec_t *r) {
  memset(r, 0, sizeof(*r));
  if (wk_start(g, s, wt_on_exit, r) != 0)
    return 0;
  if (!wt_wait_exits(&loop, r, s->nproc, 20000))
    return 0;
  wk_stop(g, SIGTERM, 1000, wt_on_done, r);
  return wt_run_until(&loop, wt_is_done, r, 5000);
}

/* A new group runs s to its end, the console captured into c's files
 * (tag names them). RET the group (wt_close it). */
static wk_group_t *run_captured(const wk_spec_t *s, const char *tag, cap_t *c,
                                wt_rec_t *r) {
  wk_group_t *g;
  int ok;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  cap_begin(c, tag);
  ok = run_quiet(g, s, r);
  cap_end(c);
  ASSERT(ok);
  return g;
}

static char *slurp(const char *path, size_t *len) {
  char *data = NULL;
  if (lu_read_file(path, 256u << 20, &data, len) != 0)
    return NULL;
  return data;
}

static char *log_of(const char *dir, int rank, const char *name,
                    size_t *len) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%d/%s", dir, rank, name);
  return slurp(path, len);
}

/* Each console line is "[rK]: K:seq:dots" for rank K, seqs in order. */
static void check_chatty(const char *text, size_t len, int n, int fd) {
  int next[2] = {0, 0};
  const char *p = text, *end = text + len;
  ASSERT(len > 0 && text[len - 1] == '\n');
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    int k, seq, dots = 0;
    char want[32];
    ASSERT(nl != NULL);
    if (!(nl - p > 6 && p[0] == '[' && p[1] == 'r' && p[3] == ']' &&
          p[4] == ':' && p[5] == ' '))
      TEST_FAIL("console line without prefix: %.*s", (int)(nl - p), p);
    k = p[2] - '0';
    ASSERT(k == 0 || k == 1);
    /* The next seq of this rank that goes to this fd. */
    while (next[k] < n && (next[k] % 10 == 9) != (fd == 2))
      next[k]++;
    seq = next[k]++;
    snprintf(want, sizeof(want), "%d:%d:", k, seq);
    if (strncmp(p + 6, want, strlen(want)) != 0)
      TEST_FAIL("rank %d: expected \"%s...\", got \"%.*s\"", k, want,
                (int)(nl - p), p);
    for (const char *q = p + 6 + strlen(want); q < nl; q++) {
      if (*q != '.')
        TEST_FAIL("interleaved line: %.*s", (int)(nl - p), p);
      dots++;
    }
    ASSERT_EQ(seq % 97, dots);
    p = nl + 1;
  }
  for (int k = 0; k < 2; k++) {
    while (next[k] < n && (next[k] % 10 == 9) != (fd == 2))
      next[k]++;
    ASSERT_EQ(n, next[k]);
  }
}

static void test_chatty(void) {
  const int n = 3000;
  /* The worker learns its id from the environment. */
  char *e0[] = {"PATH=/usr/bin:/bin", "K=0", NULL};
  char *e1[] = {"PATH=/usr/bin:/bin", "K=1", NULL};
  char *const *envs[] = {e0, e1};
  char *prefix[] = {"[r0]: ", "[r1]: "};
  char script[1024];
  char *argv[] = {"/bin/sh", "-c", script, NULL};
  wk_spec_t s = wt_spec(2, argv);
  wk_group_t *g;
  wt_rec_t r;
  cap_t c;
  int ok;
  size_t lo, le;
  char *out, *err;
  snprintf(script, sizeof(script), "exec %s chatty $K %d",
           wt_helper("wk_child"), n);
  s.envp = envs;
  s.pipe_output = 1;
  s.prefix = prefix;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  cap_begin(&c, "chatty");
  ok = run_quiet(g, &s, &r);
  cap_end(&c);
  ASSERT(ok);
  ASSERT_EQ(0, wt_exit_of(&r, 0)->exit_code);
  ASSERT_EQ(0, wt_exit_of(&r, 1)->exit_code);
  ASSERT((out = slurp(c.out, &lo)) != NULL);
  ASSERT((err = slurp(c.err, &le)) != NULL);
  check_chatty(out, lo, n, 1);
  check_chatty(err, le, n, 2);
  free(out);
  free(err);
  wt_close(&loop, g);
}

static int file_exists(const char *dir, int rank, const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%d/%s", dir, rank, name);
  return access(path, F_OK) == 0;
}

/* rank 0: stdout redirected (file only), stderr on the console.
 * rank 1: tee both (files and console).
 * rank 2: tee both but filtered off the console: files only.
 * rank 3: nothing asked: console only, no files, no directory. */
static void test_routes(void) {
  char dir[600], path[700];
  char *e[4][3] = {{"PATH=/usr/bin:/bin", "R=0", NULL},
                   {"PATH=/usr/bin:/bin", "R=1", NULL},
                   {"PATH=/usr/bin:/bin", "R=2", NULL},
                   {"PATH=/usr/bin:/bin", "R=3", NULL}};
  char *const *envs[] = {e[0], e[1], e[2], e[3]};
  char *prefix[] = {"[n:0]: ", "[n:1]: ", "[n:2]: ", "[n:3]: "};
  char *argv[] = {"/bin/sh", "-c",
                  "echo \"out $R\"; echo \"err $R\" >&2; printf \"last $R\"",
                  NULL};
  unsigned redirects[] = {WK_STDOUT, 0, 0, 0};
  unsigned tee[] = {0, WK_STDOUT | WK_STDERR, WK_STDOUT | WK_STDERR, 0};
  unsigned char console[] = {1, 1, 0, 1};
  wk_spec_t s = wt_spec(4, argv);
  wk_group_t *g;
  wt_rec_t r;
  cap_t c;
  struct stat sb;
  int ok;
  size_t len;
  char *out, *err, *f;
  umask(022);
  snprintf(dir, sizeof(dir), "%s/attempt_0", test_tmpdir());
  s.envp = envs;
  s.pipe_output = 1;
  s.prefix = prefix;
  s.redirects = redirects;
  s.tee = tee;
  s.console = console;
  s.attempt_dir = dir;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  cap_begin(&c, "routes");
  ok = run_quiet(g, &s, &r);
  cap_end(&c);
  ASSERT(ok);
  ASSERT((out = slurp(c.out, &len)) != NULL);
  ASSERT((err = slurp(c.err, &len)) != NULL);
  /* Console stdout: ranks 1 and 3, each line prefixed, the last line
   * without newline printed with one. */
  ASSERT(strstr(out, "out 0") == NULL);
  ASSERT(strstr(out, "last 0") == NULL);
  ASSERT_CONTAINS(out, "[n:1]: out 1\n");
  ASSERT_CONTAINS(out, "[n:1]: last 1\n");
  ASSERT_CONTAINS(out, "[n:3]: out 3\n");
  ASSERT_CONTAINS(out, "[n:3]: last 3\n");
  ASSERT(strstr(out, "2") == NULL);
  ASSERT_EQ(strlen("[n:1]: out 1\n[n:1]: last 1\n") * 2, strlen(out));
  /* Console stderr: ranks 0, 1, 3. */
  ASSERT_CONTAINS(err, "[n:0]: err 0\n");
  ASSERT_CONTAINS(err, "[n:1]: err 1\n");
  ASSERT_CONTAINS(err, "[n:3]: err 3\n");
  ASSERT(strstr(err, "2") == NULL);
  ASSERT_EQ(strlen("[n:0]: err 0\n") * 3, strlen(err));
  free(out);
  free(err);
  /* Files: exactly what the worker wrote, no prefix. */
  ASSERT((f = log_of(dir, 0, "stdout.log", &len)) != NULL);
  ASSERT_STR_EQ("out 0\nlast 0", f);
  free(f);
  ASSERT(!file_exists(dir, 0, "stderr.log"));
  for (int k = 1; k <= 2; k++) {
    char want[32];
    ASSERT((f = log_of(dir, k, "stdout.log", &len)) != NULL);
    snprintf(want, sizeof(want), "out %d\nlast %d", k, k);
    ASSERT_STR_EQ(want, f);
    free(f);
    ASSERT((f = log_of(dir, k, "stderr.log", &len)) != NULL);
    snprintf(want, sizeof(want), "err %d\n", k);
    ASSERT_STR_EQ(want, f);
    free(f);
  }
  snprintf(path, sizeof(path), "%s/3", dir);
  ASSERT(access(path, F_OK) != 0);
  ASSERT_EQ(0, stat(dir, &sb));
  ASSERT_EQ(0755, sb.st_mode & 07777);
  snprintf(path, sizeof(path), "%s/1", dir);
  ASSERT_EQ(0, stat(path, &sb));
  ASSERT_EQ(0755, sb.st_mode & 07777);
  wt_close(&loop, g);
}

/* A 32 MiB line: the console gets 64 KiB chunks, each prefixed; the file
 * gets every byte; the agent's memory does not grow by the line. */
static void test_long_line(void) {
  const long big = 32l << 20;
  char dir[600], nbuf[32];
  char *argv[] = {(char *)wt_helper("wk_child"), "long", nbuf, NULL};
  char *prefix[] = {"[L]: "};
  unsigned tee[] = {WK_STDOUT};
  wk_spec_t s = wt_spec(1, argv);
  wk_group_t *g;
  wt_rec_t r;
  cap_t c;
  int ok;
  long rss0, rss1;
  size_t len, lines = 0;
  char *out, *f;
  snprintf(nbuf, sizeof(nbuf), "%ld", big);
  snprintf(dir, sizeof(dir), "%s/long", test_tmpdir());
  s.pipe_output = 1;
  s.prefix = prefix;
  s.tee = tee;
  s.attempt_dir = dir;
  s.tail_lines = 10;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  rss0 = test_rss_kib(0);
  cap_begin(&c, "long");
  ok = run_quiet(g, &s, &r);
  cap_end(&c);
  rss1 = test_rss_kib(0);
  ASSERT(ok);
  if (rss1 - rss0 > 16 * 1024)
    TEST_FAIL("RSS grew by %ld KiB for one long line", rss1 - rss0);
  ASSERT((out = slurp(c.out, &len)) != NULL);
  for (const char *p = out; p < out + len;) {
    const char *nl = memchr(p, '\n', (size_t)(out + len - p));
    ASSERT(nl != NULL);
    ASSERT(strncmp(p, "[L]: ", 5) == 0);
    if (lines < (size_t)(big / 65536)) {
      ASSERT_EQ(5 + 65536, nl - p);
      for (const char *q = p + 5; q < nl; q++)
        if (*q != 'x')
          TEST_FAIL("chunk %zu holds '%c'", lines, *q);
    } else {
      ASSERT_EQ(5 + 5, nl - p);
      ASSERT(strncmp(p + 5, "after", 5) == 0);
    }
    lines++;
    p = nl + 1;
  }
  ASSERT_EQ(big / 65536 + 1, lines);
  free(out);
  ASSERT((f = log_of(dir, 0, "stdout.log", &len)) != NULL);
  ASSERT_EQ(big + 6, len);
  ASSERT(f[big] == '\n' && strcmp(f + big + 1, "after") == 0);
  free(f);
  wt_close(&loop, g);
}

/* The tail: the last N stderr lines, complete when on_exit runs; stdout
 * lines never in it; tail_lines 0 keeps none. */
static void test_tail(void) {
  char *argv[] = {(char *)wt_helper("wk_child"), "lines", "10", NULL};
  wk_spec_t s = wt_spec(2, argv);
  wk_group_t *g;
  wt_rec_t r;
  unsigned char quiet[] = {0, 0};
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  s.pipe_output = 1;
  s.console = quiet;
  s.tail_lines = 3;
  ASSERT(run_quiet(g, &s, &r));
  for (int k = 0; k < 2; k++) {
    ASSERT_EQ(7, wt_exit_of(&r, k)->exit_code);
    ASSERT_STR_EQ("line 8\nline 9\nline 10", r.tail[k]);
    ASSERT_STR_EQ("line 8\nline 9\nline 10", wk_tail(g, k));
  }
  ASSERT_STR_EQ("", wk_tail(g, 2));
  ASSERT_STR_EQ("", wk_tail(g, -1));
  /* Fewer lines than kept; a partial last line counts. */
  {
    char *a2[] = {"/bin/sh", "-c",
                  "echo one >&2; echo not-stderr; printf two >&2; exit 1",
                  NULL};
    s.argv = a2;
    s.tail_lines = 5;
    s.nproc = 1;
    ASSERT(run_quiet(g, &s, &r));
    ASSERT_STR_EQ("one\ntwo", r.tail[0]);
    ASSERT_STR_EQ("one\ntwo", wk_tail(g, 0));
    s.tail_lines = 0;
    ASSERT(run_quiet(g, &s, &r));
    ASSERT_STR_EQ("", wk_tail(g, 0));
  }
  wt_close(&loop, g);
}

/* Carriage returns: "\r\n" ends a line even when the two bytes come in
 * separate reads (the line reaches the tail, which the failure summary
 * prints); a lone '\r' redraws (a progress bar): the console shows each
 * frame, the tail keeps only whole lines; a last "text\r" at the end of
 * the stream is a line. */
static void test_cr(void) {
  char *argv[] = {"/bin/sh", "-c",
                  "printf 'fatal: CUDA out of memory\\r' >&2; sleep 0.3; "
                  "printf '\\n' >&2; printf 'second\\r\\n' >&2; "
                  "printf '10%%\\r' >&2; sleep 0.2; printf '20%%\\r' >&2; "
                  "sleep 0.2; printf 'done\\n' >&2; printf 'last\\r' >&2; "
                  "exit 1",
                  NULL};
  char *prefix[] = {"[r0]: "};
  wt_rec_t r;
  cap_t c;
  size_t len;
  char *err;
  wk_spec_t s = wt_spec(1, argv);
  wk_group_t *g;
  s.pipe_output = 1;
  s.tail_lines = 10;
  s.prefix = prefix;
  g = run_captured(&s, "cr", &c, &r);
  ASSERT_EQ(1, wt_exit_of(&r, 0)->exit_code);
  ASSERT_STR_EQ("fatal: CUDA out of memory\nsecond\ndone\nlast", r.tail[0]);
  ASSERT((err = slurp(c.err, &len)) != NULL);
  ASSERT_STR_EQ("[r0]: fatal: CUDA out of memory\r\n[r0]: second\r\n"
                "[r0]: 10%\r[r0]: 20%\r[r0]: done\n[r0]: last\r\n", err);
  free(err);
  wt_close(&loop, g);
}

/* pipe_output 0: the worker writes to the agent's own fd 1 and 2. */
static void test_inherit(void) {
  char *argv[] = {"/bin/sh", "-c", "echo hi; echo err >&2", NULL};
  char *prefix[] = {"[never]: "};
  wk_spec_t s = wt_spec(1, argv);
  wk_group_t *g;
  wt_rec_t r;
  cap_t c;
  size_t len;
  char *out, *err;
  s.pipe_output = 0;
  s.prefix = prefix;
  g = run_captured(&s, "inherit", &c, &r);
  ASSERT((out = slurp(c.out, &len)) != NULL);
  ASSERT((err = slurp(c.err, &len)) != NULL);
  ASSERT_STR_EQ("hi\n", out);
  ASSERT_STR_EQ("err\n", err);
  ASSERT_STR_EQ("", wk_tail(g, 0));
  free(out);
  free(err);
  wt_close(&loop, g);
}

int main(void) {
  int fds;
  signal(SIGPIPE, SIG_IGN);
  fds = test_fd_count();
  test_tmpdir();
  ASSERT_EQ(0, uv_loop_init(&loop));
  test_chatty();
  test_routes();
  test_long_line();
  test_tail();
  test_cr();
  test_inherit();
  ASSERT_EQ(0, uv_loop_close(&loop));
  ASSERT_EQ(fds, test_fd_count());
  printf("test_workers_output: ok\n");
  return 0;
}
