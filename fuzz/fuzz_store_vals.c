/* fuzz_store_vals.c - values the agent reads from its store or etcd that
 * another node (or another launch version) wrote, each parser apart from
 * the reply it arrives in (the replies themselves: fuzz_frame, fuzz_msg,
 * fuzz_etcd_reply, fuzz_etcd_watch):
 *   0 etb__host_parse: the etcd host key "ADDR PORT [NAME]" (etb_host);
 *   1 etb__round_parse: the etcd round key "ROUND REV" (on_event,
 *     check_round);
 *   2 agent__lost_steps: rank 0's progress value (agent.c lost_reply);
 *   3 agent__moved_addr: the moved key (agent.c moved_reply);
 *   4 resume__foreign_world: the checkpoint agreement's why, as the views
 *     of other nodes made it (resume.c foreign_world), for each layout.
 * The input is the selector byte (mod 5), then the value's bytes.
 *
 * Invariants checked: a host value gives a port in 1..65535 and
 * NUL-terminated address and name within their buffers; a moved address
 * is of the allowed bytes only and as long as the value; the refusal is
 * NUL-terminated within its buffer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "ckpt.h"
#include "etcd_backend.h"
#include "fuzz.h"
#include "resume.h"

static char *str(const uint8_t *d, size_t n) {
  char *s = malloc(n + 1);
  if (s == NULL)
    abort();
  memcpy(s, d, n);
  s[n] = '\0';
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *d = data + 1;
  size_t n;
  char *s;
  if (size < 1 || size > 8192)
    return 0;
  n = size - 1;
  s = str(d, n);
  switch (data[0] % 5) {
  case 0: {
    char addr[64], name[256];
    int port = 0;
    memset(addr, 'x', sizeof(addr));
    memset(name, 'x', sizeof(name));
    if (etb__host_parse(s, addr, sizeof(addr), &port, name, sizeof(name)) == 0)
      FUZZ_CHECK(port > 0 && port <= 65535 && memchr(addr, 0, sizeof(addr)) &&
                 memchr(name, 0, sizeof(name)));
    break;
  }
  case 1: {
    long long round, rev;
    (void)etb__round_parse(s, &round, &rev);
    break;
  }
  case 2: {
    long long step, ms;
    uint8_t *p = fuzz_dup(d, n);
    if (agent__lost_steps((const char *)p, n, &step, &ms) == 0)
      FUZZ_CHECK(step > 0);
    free(p);
    break;
  }
  case 3: {
    char addr[54];
    uint8_t *p = fuzz_dup(d, n);
    if (agent__moved_addr((const char *)p, n, addr, sizeof(addr)) == 0)
      FUZZ_CHECK(strlen(addr) == n && n > 0 && n < sizeof(addr));
    free(p);
    break;
  }
  default: {
    static const int layouts[] = {CKPT_LAYOUT_DEEPSPEED, CKPT_LAYOUT_DCP,
                                  CKPT_LAYOUT_LAUNCH, CKPT_LAYOUT_AUTO};
    char why[512];
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
      memset(why, 'x', sizeof(why));
      resume__foreign_world(layouts[i], (int)(n % 17), s, why, sizeof(why));
      FUZZ_CHECK(memchr(why, 0, sizeof(why)) != NULL);
    }
    break;
  }
  }
  free(s);
  return 0;
}
