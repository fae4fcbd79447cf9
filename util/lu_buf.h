/* lu_buf.h - a growable text buffer and a small JSON writer on top of it,
 * for the reports that `launch topo|env|doctor --json` print and that the
 * agent sends over the rendezvous. Prefix lu_buf_ / lu_json_.
 *
 * Errors are sticky: after an allocation failure every later call is a
 * no-op and lu_buf_finish() returns RDZV_ENOMEM, so callers build a whole
 * document and check once. */
#ifndef LU_BUF_H
#define LU_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "lu.h"

typedef struct lu_buf_s {
  char *data; /* NUL-terminated while err == 0 */
  size_t len;
  size_t cap;
  int err; /* 0 or RDZV_ENOMEM */
} lu_buf_t;

#define LU_BUF_INIT {NULL, 0, 0, 0}

void lu_buf_put(lu_buf_t *b, const char *s, size_t n);
void lu_buf_puts(lu_buf_t *b, const char *s);
void lu_buf_printf(lu_buf_t *b, const char *fmt, ...) LU_PRINTF(2, 3);
/* s as a JSON string literal, quotes included. NULL writes null. */
void lu_buf_json_str(lu_buf_t *b, const char *s);
/* s with backslash, newline and carriage return (and tab when tab is set)
 * written as \\ \n \r \t: one line of a line-based wire format. */
void lu_buf_put_escaped(lu_buf_t *b, const char *s, int tab);
/* OUT *out: the text (malloc'd, caller frees), *len (may be NULL).
 * RET 0 or RDZV_ENOMEM; the buffer is empty afterwards either way. */
int lu_buf_finish(lu_buf_t *b, char **out, size_t *len);
void lu_buf_free(lu_buf_t *b);

/* JSON writer: keeps track of commas and nesting. `key` is NULL inside
 * arrays. Indents with two spaces when pretty is set. */
#define LU_JSON_MAX_DEPTH 16
typedef struct lu_json_s {
  lu_buf_t *b;
  int depth;
  int pretty;
  unsigned char count[LU_JSON_MAX_DEPTH]; /* values so far, saturating */
} lu_json_t;

void lu_json_init(lu_json_t *j, lu_buf_t *b, int pretty);
void lu_json_obj(lu_json_t *j, const char *key);  /* opens { */
void lu_json_arr(lu_json_t *j, const char *key);  /* opens [ */
void lu_json_end_obj(lu_json_t *j);
void lu_json_end_arr(lu_json_t *j);
void lu_json_str(lu_json_t *j, const char *key, const char *val);
void lu_json_int(lu_json_t *j, const char *key, long long val);
void lu_json_num(lu_json_t *j, const char *key, double val);
/* A finite double as the shortest text that reads back as it. */
void lu_buf_double(lu_buf_t *b, double v);
void lu_json_bool(lu_json_t *j, const char *key, int val);
void lu_json_null(lu_json_t *j, const char *key);

#endif /* LU_BUF_H */
