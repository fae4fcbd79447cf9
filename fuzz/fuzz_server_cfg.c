/* fuzz_server_cfg.c - cfg_parse() as `launch server` and `launch ckpt` call
 * it: their options are rows of config.c's table (sizes with K/M/G
 * suffixes, durations, fractional milliseconds, ports, choices) and
 * LAUNCH_SERVER_* variables feed the same rows. The input is lines: the
 * first byte picks the command (even: server, odd: ckpt), then each line
 * is an argument, except NAME=VALUE lines, which go to the environment.
 *
 * Invariants checked: the result is -1 with a one-line message, 0 or 1
 * (help, never asked for here); on success every value is in the range its
 * row states, strings are NUL-terminated in their arrays, and
 * cfg_server_config points srv_config_t's strings into the struct. */
#include "config.h"
#include "fuzz.h"

#define MAXARGS 32

static int in(const char *p, const void *base, size_t n) {
  return fuzz_within(p, 1, base, n) && memchr(p, '\0', n - (size_t)(p - (const char *)base));
}

static void check_server(cfg_t *c) {
  srv_config_t *s = &c->srv;
  cfg_server_config(c);
  FUZZ_CHECK(s->port >= 0 && s->port <= 65535);
  FUZZ_CHECK(s->threads >= 1 && s->threads <= 64);
  FUZZ_CHECK(s->turn_us >= 1 && s->pass_us >= 1);
  FUZZ_CHECK(s->lock_spins >= 0 && s->big_cache_mb >= 0);
  FUZZ_CHECK(s->lock_plain == 0 || s->lock_plain == 1);
  FUZZ_CHECK(s->handshake_ms > 0 && s->job_grace_ms > 0);
  FUZZ_CHECK(s->max_memory > 0 && s->max_frame > 0 && s->max_value > 0);
  FUZZ_CHECK(s->tcpstore_job == c->srv_tcpstore_job);
  FUZZ_CHECK(s->host == NULL || in(s->host, c->srv_host, sizeof(c->srv_host)));
  FUZZ_CHECK(s->unix_path == NULL ||
             in(s->unix_path, c->srv_unix, sizeof(c->srv_unix)));
  FUZZ_CHECK(memchr(c->srv_issue_key, '\0', sizeof(c->srv_issue_key)));
  FUZZ_CHECK(memchr(c->srv_port_file, '\0', sizeof(c->srv_port_file)));
  FUZZ_CHECK(c->metrics_port >= -1 && c->metrics_port <= 65535);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf, *argv[MAXARGS + 2], *envp[MAXARGS + 1], err[1024];
  int argc = 1, nenv = 0, rc;
  unsigned flags;
  cfg_t *c;
  if (size == 0)
    return 0;
  flags = data[0] % 2 ? CFG_CKPT_CMD : CFG_SERVER_CMD;
  buf = malloc(size);
  c = malloc(sizeof(*c));
  FUZZ_CHECK(buf != NULL && c != NULL);
  memcpy(buf, data + 1, size - 1);
  buf[size - 1] = '\0';
  argv[0] = (char *)"launch";
  for (char *line = buf, *nl; line && argc <= MAXARGS && nenv < MAXARGS;
       line = nl) {
    if ((nl = strchr(line, '\n')) != NULL)
      *nl++ = '\0';
    /* --help and its prefixes print; the parser's help is not fuzzed */
    if (strncmp(line, "--he", 4) == 0 || strcmp(line, "-h") == 0 ||
        strcmp(line, "--h") == 0)
      continue;
    if (line[0] != '-' && strchr(line, '=') != NULL)
      envp[nenv++] = line;
    else
      argv[argc++] = line;
  }
  argv[argc] = NULL;
  envp[nenv] = NULL;
  err[0] = '\0';
  rc = cfg_parse(argc, argv, envp, flags, c, err, sizeof(err));
  FUZZ_CHECK(rc == -1 || rc == 0);
  if (rc == -1)
    FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL &&
               strchr(err, '\n') == NULL);
  else if (flags & CFG_SERVER_CMD)
    check_server(c);
  else
    FUZZ_CHECK(c->nargs >= 0 && c->nargs <= 4 && c->ckpt_layout >= 0 &&
               c->ckpt_layout <= 5);
  cfg_free(c);
  free(c);
  free(buf);
  return 0;
}
