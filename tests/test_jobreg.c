/* test_jobreg.c - the node's job registry (launcher/jobreg.c): an agent's
 * start forgets the jobs that ended more than JOBREG_KEEP_S ago
 * (jobreg_prune), keeps the others, walks the folder at most once every
 * JOBREG_PRUNE_EVERY_S, and `launch status`'s listing (jobreg_list) sees
 * what is kept. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jobreg.h"
#include "test.h"

static char regdir[PATH_MAX];

/* A job's file, written as an agent writes it, then dated AGE seconds
 * back (its mtime). ended: seconds since its end, or -1 running (pid). */
static void job(const char *id, int64_t ended_ago, int pid, int age) {
  jobreg_t j;
  char path[PATH_MAX + 64];
  struct timespec ts[2];
  time_t now = time(NULL);
  memset(&j, 0, sizeof(j));
  snprintf(j.job, sizeof(j.job), "%s", id);
  snprintf(j.host, sizeof(j.host), "node0");
  snprintf(j.ep_host, sizeof(j.ep_host), "127.0.0.1");
  j.ep_port = 29400;
  j.pid = pid;
  j.nproc = 1;
  j.started = (int64_t)now - 3600;
  if (ended_ago >= 0) {
    j.state = JOBREG_ENDED;
    j.ended = (int64_t)now - ended_ago;
    j.ok = 1;
  }
  ASSERT_EQ(0, jobreg_write(&j, path, sizeof(path)));
  ts[0].tv_sec = ts[1].tv_sec = now - age;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(0, utimensat(AT_FDCWD, path, ts, 0));
}

static int listed(const char *id) {
  jobreg_t *v;
  size_t n;
  int found = 0;
  ASSERT_EQ(0, jobreg_list(&v, &n));
  for (size_t i = 0; i < n; i++)
    found += strcmp(v[i].job, id) == 0;
  free(v);
  return found;
}

static void mark_age(int age) {
  char mark[PATH_MAX + 16];
  struct timespec ts[2];
  snprintf(mark, sizeof(mark), "%s/launch/.pruned", regdir);
  ts[0].tv_sec = ts[1].tv_sec = time(NULL) - age;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(0, utimensat(AT_FDCWD, mark, ts, 0));
}

int main(void) {
  const int keep = JOBREG_KEEP_S;
  char tmpl[] = "/tmp/launch-test-jobreg.XXXXXX", cmd[PATH_MAX + 32];
  ASSERT(mkdtemp(tmpl) != NULL);
  snprintf(regdir, sizeof(regdir), "%s", tmpl);
  ASSERT_EQ(0, setenv("XDG_RUNTIME_DIR", regdir, 1));

  job("old-ended", keep + 100, 999999, keep + 100);  /* expired */
  job("new-ended", 10, 999999, 10);                  /* within the keep */
  job("running", -1, (int)getpid(), keep + 100);      /* a long job, alive */
  job("gone-long", -1, 999999, keep + 100);           /* agent gone long ago */
  job("gone-now", -1, 999999, 5);                     /* agent gone just now */

  /* the first start of an agent walks: only the expired ones go */
  ASSERT_EQ(2, jobreg_prune());
  ASSERT_EQ(0, listed("old-ended"));
  ASSERT_EQ(0, listed("gone-long"));
  ASSERT_EQ(1, listed("new-ended"));
  ASSERT_EQ(1, listed("running"));
  ASSERT_EQ(1, listed("gone-now"));

  /* the next start within JOBREG_PRUNE_EVERY_S does not walk again */
  job("old-2", keep + 100, 999999, keep + 100);
  ASSERT_EQ(0, jobreg_prune());
  mark_age(JOBREG_PRUNE_EVERY_S + 1);
  ASSERT_EQ(1, jobreg_prune());
  ASSERT_EQ(0, listed("old-2"));
  ASSERT_EQ(1, listed("running"));

  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", regdir);
  ASSERT_EQ(0, system(cmd));
  printf("test_jobreg: ok\n");
  return 0;
}
