/* test_event_log.c - the event log (launcher/events.c) under log rotation:
 * a file renamed away (logrotate's create: a new empty file in its place,
 * or none yet) or removed gets the next line in a file opened again by
 * its path, not in the rotated one; a file truncated in place
 * (copytruncate) gets it at its start. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "test.h"

static void one(ev_log_t *e, int round) {
  lu_json_t *j = ev_begin(e, EV_round_formed);
  ASSERT(j != NULL);
  lu_json_int(j, "round", round);
  ev_end(e);
}

/* The file's text has exactly the rounds in want ("" none). */
static void has(const char *path, const char *want) {
  char *text = test_read_file(path), got[256] = "", *p = text;
  ASSERT(text != NULL);
  while (p && (p = strstr(p, "\"round\":")) != NULL) {
    size_t n = strlen(got);
    snprintf(got + n, sizeof(got) - n, "%s%d", n ? "," : "", atoi(p + 8));
    p += 8;
  }
  if (strcmp(got, want) != 0)
    TEST_FAIL("%s has rounds [%s], want [%s]:\n%s", path, got, want, text);
  free(text);
}

int main(void) {
  const char *d = test_tmpdir();
  char path[1024], rot[1100], rot2[1100];
  ev_log_t *e;
  FILE *f;
  snprintf(path, sizeof(path), "%s/events.jsonl", d);
  snprintf(rot, sizeof(rot), "%s.1", path);
  snprintf(rot2, sizeof(rot2), "%s.2", path);
  ASSERT_OK(ev_open(path, 0, "j1", "h1", &e));
  one(e, 0);
  /* logrotate create: rename, then an empty file of the same name */
  ASSERT_EQ(0, rename(path, rot));
  ASSERT((f = fopen(path, "w")) != NULL);
  fclose(f);
  one(e, 1);
  has(rot, "0");
  has(path, "1");
  /* renamed with no new file (logrotate nocreate, mv): made again */
  ASSERT_EQ(0, rename(path, rot2));
  one(e, 2);
  has(rot2, "1");
  has(path, "2");
  /* removed */
  ASSERT_EQ(0, unlink(path));
  one(e, 3);
  has(path, "3");
  /* copytruncate: the same file, emptied; O_APPEND writes at its start */
  ASSERT_EQ(0, truncate(path, 0));
  one(e, 4);
  has(path, "4");
  ev_close(e);
  test_cleanup();
  printf("test_event_log: ok\n");
  return 0;
}
