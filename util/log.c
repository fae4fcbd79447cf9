/* log.c - leveled logging with a speaker prefix and per-subsystem debug. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lu.h"

static unsigned parse_debug(const char *s) {
  static const struct {
    const char *name;
    unsigned bit;
  } names[] = {{"rounds", LU_DBG_ROUNDS}, {"rdv", LU_DBG_ROUNDS},     {"store", LU_DBG_STORE},
               {"proto", LU_DBG_PROTO}, {"agent", LU_DBG_AGENT},
               {"spawn", LU_DBG_SPAWN}, {"aff", LU_DBG_AFF},
               {"env", LU_DBG_ENV}};
  unsigned mask = 0;
  if (s == NULL)
    return 0;
  if (strcmp(s, "all") == 0 || strcmp(s, "1") == 0)
    return ~0u;
  while (*s) {
    size_t n = strcspn(s, ",");
    for (size_t i = 0; i < LU_ARRAY_SIZE(names); i++)
      if (strlen(names[i].name) == n && strncmp(names[i].name, s, n) == 0)
        mask |= names[i].bit;
    s += n;
    if (*s == ',')
      s++;
  }
  return mask;
}

void lu_log_init(lu_log_t *log, const char *who) {
  const char *lvl = getenv("LAUNCH_LOG_LEVEL");
  memset(log, 0, sizeof(*log));
  log->level = LU_LOG_INFO;
  if (lvl != NULL) {
    if (strcmp(lvl, "error") == 0)
      log->level = LU_LOG_ERROR;
    else if (strcmp(lvl, "warn") == 0)
      log->level = LU_LOG_WARN;
    else if (strcmp(lvl, "debug") == 0)
      log->level = LU_LOG_DEBUG;
  }
  log->debug = parse_debug(getenv("LAUNCH_DEBUG"));
  {
    const char *t = getenv("LAUNCH_LOG_TIME");
    log->time = t == NULL || strcmp(t, "0") != 0;
  }
  if (log->debug)
    log->level = LU_LOG_DEBUG;
  lu_strlcpy(log->who, who ? who : "launch", sizeof(log->who));
}

void lu_log_set_who(lu_log_t *log, const char *fmt, ...) {
  char who[sizeof(log->who)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(who, sizeof(who), fmt, ap);
  va_end(ap);
  /* A host name is anyone's (LAUNCH_HOSTNAME, the scheduler's). */
  lu_escape(who, strlen(who), log->who, sizeof(log->who), 0);
}

void lu_log_write(const lu_log_t *log, int level, const char *fmt, ...) {
  static const char *const tags[] = {"error", "warning", "info", "debug"};
  char line[4096], msg[2048];
  int n;
  va_list ap;
  FILE *out = log->out ? log->out : stderr;

  char when[32] = "";
  if (log->time) {
    lu_iso8601(lu_wall_s(), when, sizeof(when));
    when[23] = ' '; /* "2026-11-30T04:45:16.123 ": the Z goes */
  }
  n = snprintf(line, sizeof(line), "%s[%s] %s: ", when, log->who,
               tags[level < 0 ? 0 : level > 3 ? 3 : level]);
  if (n < 0 || (size_t)n >= sizeof(line))
    n = 0;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* Messages quote what clients, workers and files say (job and host
   * names, paths): no escape code reaches the terminal, and no newline in
   * them starts what would look like a line of launch's own. */
  lu_escape(msg, strlen(msg), line + n, sizeof(line) - 1 - (size_t)n,
            LU_ESC_NEWLINE_INDENT);
  /* One fputs per line so that lines of concurrent writers do not mix. */
  n = (int)strlen(line);
  if (n + 1 < (int)sizeof(line)) {
    line[n] = '\n';
    line[n + 1] = '\0';
  }
  fputs(line, out);
  fflush(out);
}
