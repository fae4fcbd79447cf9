/* lu.h - small utilities shared by every module: logging, time, endpoint
 * parsing, integer parsing, random bytes. No libuv, no allocation beyond
 * what each function documents. Prefix lu_ ("launch util"). */
#ifndef LU_H
#define LU_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rdzv.h"

#define LU_HIDDEN __attribute__((visibility("hidden")))
#define LU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define LU_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define LU_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LU_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- logging ---------------------------------------------------------- */

enum { LU_LOG_ERROR = 0, LU_LOG_WARN, LU_LOG_INFO, LU_LOG_DEBUG };

/* Debug subsystems, enabled with LAUNCH_DEBUG=rounds,store,agent,... or all. */
enum {
  LU_DBG_ROUNDS = 1u << 0,   /* rendezvous rounds */
  LU_DBG_STORE = 1u << 1, /* store operations */
  LU_DBG_PROTO = 1u << 2, /* frames on the wire */
  LU_DBG_AGENT = 1u << 3, /* agent state machine */
  LU_DBG_SPAWN = 1u << 4, /* process spawning and supervision */
  LU_DBG_AFF = 1u << 5,   /* affinity */
  LU_DBG_ENV = 1u << 6    /* environment and profiles */
};

/* A logger names who is speaking: component, job, host, rank. One per
 * long-lived object; cheap to copy. */
typedef struct lu_log_s {
  int level;         /* messages above this level are dropped unformatted */
  unsigned debug;    /* LU_DBG_* mask */
  FILE *out;         /* NULL = stderr */
  int time;          /* lines start with the UTC time (LAUNCH_LOG_TIME=0:
                        not) */
  char who[96];      /* "launch server", "launch agent host3", ... */
} lu_log_t;

/* Initialise from LAUNCH_LOG_LEVEL (error|warn|info|debug), LAUNCH_DEBUG
 * and LAUNCH_LOG_TIME. */
void lu_log_init(lu_log_t *log, const char *who);
void lu_log_set_who(lu_log_t *log, const char *fmt, ...) LU_PRINTF(2, 3);
void lu_log_write(const lu_log_t *log, int level, const char *fmt, ...)
    LU_PRINTF(3, 4);

#define LU_LOG_AT(log, lvl, ...)                                              \
  do {                                                                         \
    if ((log)->level >= (lvl))                                                 \
      lu_log_write((log), (lvl), __VA_ARGS__);                                 \
  } while (0)
#define LU_ERR(log, ...) LU_LOG_AT(log, LU_LOG_ERROR, __VA_ARGS__)
#define LU_WARN(log, ...) LU_LOG_AT(log, LU_LOG_WARN, __VA_ARGS__)
#define LU_INFO(log, ...) LU_LOG_AT(log, LU_LOG_INFO, __VA_ARGS__)
#define LU_DBG(log, sub, ...)                                                  \
  do {                                                                         \
    if ((log)->debug & (sub))                                                  \
      lu_log_write((log), LU_LOG_DEBUG, __VA_ARGS__);                          \
  } while (0)

/* ---- time --------------------------------------------------------------- */

uint64_t lu_now_ns(void); /* CLOCK_MONOTONIC */
uint64_t lu_now_ms(void);
/* FNV-1a of p[0..n): a cheap 64-bit fingerprint, not a checksum. */
uint64_t lu_fnv1a64(const void *p, size_t n);
double lu_wall_s(void);   /* CLOCK_REALTIME, seconds */
/* "2026-11-30T04:45:16.123Z" into buf (>= 32 bytes). */
void lu_iso8601(double wall_s, char *buf, size_t n);

/* ---- endpoints ------------------------------------------------------------ */

typedef struct lu_endpoint_s {
  int is_unix;
  char host[256]; /* without brackets */
  int port;       /* 0..65535; -1 when absent */
  char path[108]; /* unix socket path */
} lu_endpoint_t;

/* Parse "host", "host:port", "[v6]:port", "v6addr" (no port), "unix:/path".
 * default_port fills a missing port (-1 leaves it absent).
 * RET 0 or RDZV_EADDR. */
int lu_endpoint_parse(const char *s, int default_port, lu_endpoint_t *ep);
/* Format back: "host:port" or "[v6]:port" or "unix:/path". */
void lu_endpoint_format(const lu_endpoint_t *ep, char *buf, size_t n);

/* ---- numbers and strings -------------------------------------------------- */

/* Strict decimal parse of the whole string. RET 0 or RDZV_EINVAL. */
int lu_parse_i64(const char *s, size_t n, int64_t *out);
int lu_parse_int(const char *s, int min, int max, int *out);
/* "30", "30s", "500ms", "2m", "1.5s" -> milliseconds. RET 0 or RDZV_EINVAL. */
int lu_parse_duration_ms(const char *s, int64_t *out_ms);
size_t lu_strlcpy(char *dst, const char *src, size_t n);
/* Write a message into a caller's error buffer (NULL or n == 0: nothing). */
void lu_errf(char *err, size_t n, const char *fmt, ...) LU_PRINTF(3, 4);
/* Fill buf with n bytes from getrandom(). RET 0 or -errno. */
int lu_random(void *buf, size_t n);
/* Lower-case hex of n bytes into out (2n+1 bytes). */
void lu_hex(const void *buf, size_t n, char *out);

/* ---- untrusted text (escape.c) ------------------------------------------ */

/* The length (1-4) of the valid UTF-8 sequence at p (n bytes left), 0 when
 * it is not one (overlong, surrogate, cut, stray continuation byte). */
size_t lu_utf8_seq(const unsigned char *p, size_t n);
#define LU_ESC_NEWLINE_INDENT 1u /* '\n' -> "\n    " (a log message's
                                    continuation), else \x0a */
/* Text anyone may have chosen (job, host and file names, worker output in
 * summaries), for a terminal or a log: valid UTF-8 other than controls is
 * kept; C0/C1 controls (ESC, CR, BEL, ...), DEL and bytes that are not
 * UTF-8 become \xNN; tabs stay. Cut at a whole character to fit cap
 * (> 0). RET the length written. */
size_t lu_escape(const char *in, size_t n, char *out, size_t cap,
                 unsigned flags);
/* lu_escape of a string (NULL: ""), for a printf argument. RET buf. */
const char *lu_esc(const char *s, char *buf, size_t cap);

/* SHA-256 and HMAC-SHA256 (util/sha256.c), without OpenSSL. */
#define LU_SHA256_LEN 32
typedef struct lu_sha256_s {
  uint32_t h[8];
  uint64_t len;
  uint8_t buf[64];
  size_t nbuf;
} lu_sha256_t;
void lu_sha256_init(lu_sha256_t *s);
void lu_sha256_update(lu_sha256_t *s, const void *data, size_t n);
void lu_sha256_final(lu_sha256_t *s, uint8_t out[LU_SHA256_LEN]);
void lu_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n,
                    uint8_t out[LU_SHA256_LEN]);
/* Files that other users and programs write (token files, host files,
 * checkpoint metadata) are opened so that they can never block launch:
 * O_NONBLOCK (a FIFO's open returns at once), fstat, and only regular files
 * go on (FIFOs, devices, sockets and directories are refused, err names the
 * path and its type). Symbolic links are followed unless nofollow.
 * OUT *st (may be NULL). RET the fd (O_NONBLOCK cleared), or -errno,
 * -EISDIR, RDZV_ENOTREG (not a regular file). */
struct stat;
int lu_open_regular(const char *path, int nofollow, struct stat *st,
                    char *err, size_t errlen);
/* "regular file", "FIFO", "character device", ... of an st_mode. */
const char *lu_file_type(unsigned mode);
/* Read a whole small file (<= max bytes) through lu_open_regular: a larger
 * one is refused from its size before anything is read, and memory follows
 * the file's real size. OUT *data malloc'd, NUL-terminated; err (NULL
 * allowed) names the file and the limit or type. RET 0 or -errno,
 * RDZV_ENOTREG (not a regular file), RDZV_ETOOBIG (over max). */
int lu_read_file_safe(const char *path, size_t max, char **data, size_t *len,
                      char *err, size_t errlen);
/* lu_read_file_safe without the message. */
int lu_read_file(const char *path, size_t max, char **data, size_t *len);
/* Append s to the ", "-separated list in out[cap] (cut to fit). */
void lu_list_add(char *out, size_t cap, const char *s);
/* Levenshtein distance of a and b: the "did you mean" of a misspelt name.
 * 99 when either is 79 bytes or longer. */
int lu_edit_distance(const char *a, const char *b);
/* name as execvp finds it: itself when it holds a '/' (and exists), else
 * the first executable regular file named so in path (':'-separated; NULL:
 * "/bin:/usr/bin"; an empty element is the current directory). OUT
 * out[cap]. RET 0, or -1 when there is none. */
int lu_which(const char *name, const char *path, char *out, size_t cap);
/* Trim trailing whitespace/newlines in place, return new length. */
size_t lu_rtrim(char *s, size_t len);
/* The first line (up to n - 1 bytes) of root+path, trailing whitespace cut:
 * /sys and /proc values under a root prefix (NULL = "/") that tests fake.
 * RET its length, or -1. */
int lu_read_line(const char *root, const char *path, char *buf, size_t n);
/* A secret file (--token-file): a regular file of at most LU_TOKEN_MAX
 * bytes (a FIFO or device is refused, never waited on), trailing newlines
 * cut, not empty; a world-writable one is read with a warning on stderr. OUT *tok (malloc'd), *len. RET 0, or an error with err saying
 * what to do. */
#define LU_TOKEN_MAX 4096
int lu_read_token(const char *path, char **tok, size_t *len, char *err,
                  size_t errlen);
/* mkdir -p, mode 0755. RET 0 or -errno (-ENOTDIR: a file is in the way). */
int lu_mkdir_p(const char *path);

/* Raise this process's soft limit on open files to the hard one (a server
 * of many connections), keeping the limit it had: workers get that one
 * back (lu_nofile_given), as torchrun's do, so a job's `ulimit -n` holds. */
void lu_raise_nofile(void);
/* The soft and hard limits the process started with, into cur and max.
 * RET 1 when lu_raise_nofile changed them, else 0. */
int lu_nofile_given(unsigned long long *cur, unsigned long long *max);

/* A TCP connect to a port of this host where nothing listens can connect
 * the socket to itself (the kernel picked the same port as its source:
 * "simultaneous open"), and the caller then reads back what it sent. RET 1
 * when fd's local and peer addresses are the same (treat it as refused;
 * fd is then set to close with a reset, so that no TIME_WAIT holds the
 * port the server will bind), else 0. */
int lu_self_connected(int fd);

/* ---- this node -------------------------------------------------------------------- */

/* ---- JSON (json.c) ---------------------------------------------------------------- */

typedef enum {
  LU_JV_NULL, LU_JV_BOOL, LU_JV_NUM, LU_JV_STR, LU_JV_ARR, LU_JV_OBJ
} lu_jv_type_t;

typedef struct lu_jv_s lu_jv_t;
struct lu_jv_s {
  lu_jv_type_t type;
  int b;            /* LU_JV_BOOL */
  int is_int;       /* LU_JV_NUM: integral and within int64 */
  int64_t i;
  double d;
  const char *s;    /* LU_JV_STR: decoded, NUL-terminated, no NUL inside */
  size_t slen;
  const char *key;  /* member name when inside an object */
  lu_jv_t *first;   /* LU_JV_ARR / LU_JV_OBJ children */
  lu_jv_t *next;
  size_t n;         /* number of children */
};

typedef struct lu_jdoc_s lu_jdoc_t;

/* flags of lu_jv_parse: a lone surrogate or \u0000 in a string becomes
 * U+FFFD instead of an error (error files that Python wrote). */
#define LU_JV_LENIENT 1u

/* Parse a whole document (RFC 8259, UTF-8, nesting <= 64; a leading UTF-8
 * byte order mark is skipped). The caller bounds len. OUT *doc: free with
 * lu_jv_free(); *root inside it. err: position and reason. RET 0,
 * RDZV_EPROTO, RDZV_ENOMEM. */
int lu_jv_parse(const char *buf, size_t len, unsigned flags, lu_jdoc_t **doc,
                const lu_jv_t **root, char *err, size_t errlen);
void lu_jv_free(lu_jdoc_t *doc); /* NULL is a no-op */
/* The member `key` of an object (the last one when repeated), or NULL. */
const lu_jv_t *lu_jv_get(const lu_jv_t *obj, const char *key);
/* RET 0 and *out when v is an integral number in [min, max], else -1. */
int lu_jv_int(const lu_jv_t *v, int64_t min, int64_t max, int64_t *out);

/* ---- host lists ------------------------------------------------------------------- */

/* Expand a Slurm host list: "gpu[01-04,07],login1", "rack[0-1]_blade[0-2]"
 * (several bracket groups form a cartesian product; leading zeros keep the
 * width). OUT *hosts: a malloc'd array of malloc'd names (free with
 * lu_hostlist_free), *n. At most max names. RET 0, RDZV_EINVAL (does not
 * parse), RDZV_ETOOBIG (more than max), RDZV_ENOMEM. */
int lu_hostlist_expand(const char *list, size_t max, char ***hosts, size_t *n);
/* The same, with err saying what is wrong and where ("'[' is never closed
 * at character 4"). */
int lu_hostlist_expand_err(const char *list, size_t max, char ***hosts,
                           size_t *n, char *err, size_t errlen);
void lu_hostlist_free(char **hosts, size_t n);
/* Slurm's task counts per node, in node order with repeats:
 * "2(x3),1" = three nodes of 2 tasks, then one of 1. OUT *ntasks: node's
 * count (node < 0: not asked, -1), *nnodes (may be NULL): the nodes counted.
 * RET 0, or RDZV_EINVAL with err saying why (node not in the list too). */
int lu_tasks_per_node(const char *spec, int node, int *ntasks, int *nnodes,
                      char *err, size_t errlen);

#endif /* LU_H */
