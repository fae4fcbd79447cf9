/* fuzz_allow.c - the TCPStore allow list (launch server --tcpstore-allow,
 * LAUNCH_SERVER_TCPSTORE_ALLOW): srv__parse_allow, then srv__ts_allowed
 * (the prefix match) for peers of both families.
 * Input: the list up to the first newline, then one peer address a line
 * (an IPv4 or IPv6 literal; others are skipped).
 * Invariants checked:
 * - a list that parses has 1..16 entries, IPv4 prefixes <= 32, IPv6 <= 128;
 * - every entry's own address is allowed (an IPv4 one also as ::ffff:a.b.c.d);
 * - with no token and no TLS every peer is allowed. */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "fuzz.h"
#include "srv_int.h"

static int allowed(srv_t *s, const struct sockaddr_storage *ss) {
  conn_t *c = calloc(1, sizeof(*c));
  int r;
  FUZZ_CHECK(c != NULL);
  c->peer_addr = *ss;
  r = srv__ts_allowed(s, c);
  free(c);
  return r;
}

static int peer(const char *a, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof(*ss));
  if (inet_pton(AF_INET, a, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
    ss->ss_family = AF_INET;
    return 1;
  }
  if (inet_pton(AF_INET6, a, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
    ss->ss_family = AF_INET6;
    return 1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1), *nl, *line;
  srv_t *s = calloc(1, sizeof(*s));
  static uint8_t token[] = "t";
  int rc;
  FUZZ_CHECK(text != NULL && s != NULL);
  memcpy(text, data, size);
  text[size] = '\0';
  nl = strchr(text, '\n');
  if (nl)
    *nl = '\0';
  s->token = token; /* the list matters only with a token or TLS */
  rc = srv__parse_allow(s, text);
  FUZZ_CHECK(s->nallow >= 0 && s->nallow <= 16);
  if (rc == 0) {
    FUZZ_CHECK(s->nallow >= 1 || text[0] == '\0');
    for (int i = 0; i < s->nallow; i++) {
      struct sockaddr_storage m;
      int fam = s->allow[i].net.ss_family;
      FUZZ_CHECK(fam == AF_INET || fam == AF_INET6);
      FUZZ_CHECK(s->allow[i].prefix >= 0 &&
                 s->allow[i].prefix <= (fam == AF_INET ? 32 : 128));
      FUZZ_CHECK(allowed(s, &s->allow[i].net));
      if (fam == AF_INET) {
        struct sockaddr_in6 *m6 = (struct sockaddr_in6 *)&m;
        memset(&m, 0, sizeof(m));
        m6->sin6_family = AF_INET6;
        m6->sin6_addr.s6_addr[10] = m6->sin6_addr.s6_addr[11] = 0xff;
        memcpy(m6->sin6_addr.s6_addr + 12,
               &((struct sockaddr_in *)&s->allow[i].net)->sin_addr, 4);
        FUZZ_CHECK(allowed(s, &m));
      }
    }
  }
  for (line = nl ? nl + 1 : NULL; line && *line; line = nl ? nl + 1 : NULL) {
    struct sockaddr_storage ss;
    nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    if (!peer(line, &ss))
      continue;
    (void)allowed(s, &ss);
    s->token = NULL;
    FUZZ_CHECK(allowed(s, &ss));
    s->token = token;
  }
  free(s);
  free(text);
  return 0;
}
