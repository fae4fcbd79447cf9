/* test_events_write.c - the event log on a full disk (--event-log): a line
 * whose write is cut short (RLIMIT_FSIZE stands in for the full disk, as
 * `ulimit -f` does; SIGXFSZ ignored as the agent does) must not swallow
 * the next one. Before the fix the next event ran on from the torn part:
 * one line that no reader parses, two events lost. After it, the torn part
 * is a line of its own and every later event is a whole line. A write that
 * fails outright leaves nothing to end, and no stray empty line. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "events.h"
#include "lu.h"
#include "test.h"

static void event(ev_log_t *e, int n) {
  lu_json_t *j = ev_begin(e, EV_worker_started);
  ASSERT(j != NULL);
  lu_json_int(j, "local_rank", n);
  lu_json_str(j, "note", "0123456789012345678901234567890123456789");
  ev_end(e);
}

static off_t size_of(const char *path) {
  struct stat st;
  ASSERT_OK(stat(path, &st));
  return st.st_size;
}

static void set_fsize(rlim_t soft) {
  struct rlimit rl;
  ASSERT_OK(getrlimit(RLIMIT_FSIZE, &rl));
  rl.rlim_cur = soft;
  ASSERT_OK(setrlimit(RLIMIT_FSIZE, &rl));
}

/* whole lines that parse, with local_rank; the others counted apart */
static void lines(const char *path, int *ranks, int *nwhole, int *nbad, int *nempty) {
  char *text = test_read_file(path);
  char *p = text, *nl;
  *nwhole = *nbad = *nempty = 0;
  while ((nl = strchr(p, '\n')) != NULL) {
    lu_jdoc_t *doc = NULL;
    const lu_jv_t *root;
    int64_t r;
    if (nl == p)
      (*nempty)++;
    else if (lu_jv_parse(p, (size_t)(nl - p), 0, &doc, &root, NULL, 0) == 0 &&
             lu_jv_int(lu_jv_get(root, "local_rank"), 0, 100, &r) == 0)
      ranks[(*nwhole)++] = (int)r;
    else
      (*nbad)++;
    lu_jv_free(doc);
    p = nl + 1;
  }
  ASSERT_EQ(0, (int)strlen(p)); /* the file ends with a newline */
  free(text);
}

/* the file holds nwhole whole lines, the last of local_rank last, and
 * nbad torn ones, no empty line */
static void expect(const char *path, int nwhole, int last, int nbad) {
  int ranks[16], whole, bad, empty;
  lines(path, ranks, &whole, &bad, &empty);
  ASSERT_EQ(nwhole, whole);
  ASSERT_EQ(last, ranks[whole - 1]);
  ASSERT_EQ(nbad, bad);
  ASSERT_EQ(0, empty);
}

int main(void) {
  char path[4096];
  ev_log_t *e = NULL;
  int ranks[16], whole, bad, empty;
  struct rlimit saved;
  off_t before;

  signal(SIGXFSZ, SIG_IGN);
  ASSERT_OK(getrlimit(RLIMIT_FSIZE, &saved));
  snprintf(path, sizeof(path), "%s/events.jsonl", test_tmpdir());
  ASSERT_OK(ev_open(path, 0, "job", "node", &e));
  event(e, 1);

  /* room for part of the next line only */
  before = size_of(path);
  set_fsize((rlim_t)before + 20);
  event(e, 2);
  ASSERT_EQ(before + 20, size_of(path)); /* written up to the limit */
  set_fsize(saved.rlim_cur);
  event(e, 3);
  event(e, 4);
  lines(path, ranks, &whole, &bad, &empty);
  ASSERT_EQ(3, whole);
  ASSERT_EQ(1, ranks[0]);
  ASSERT_EQ(3, ranks[1]);
  ASSERT_EQ(4, ranks[2]);
  ASSERT_EQ(1, bad); /* the torn part of event 2 */
  ASSERT_EQ(0, empty);

  /* the disk full at a line's start: the write fails outright; the next
   * line follows without an empty one */
  set_fsize((rlim_t)size_of(path));
  event(e, 5);
  set_fsize(saved.rlim_cur);
  event(e, 6);
  expect(path, 4, 6, 1);

  /* still full when the next line comes: the torn part waits for its end */
  set_fsize((rlim_t)size_of(path) + 10);
  event(e, 7);
  event(e, 8);
  set_fsize(saved.rlim_cur);
  event(e, 9);
  expect(path, 5, 9, 2);
  ev_close(e);
  printf("test_events_write: ok\n");
  return 0;
}
