/* prof.c - NCCL profiles: the KEY=VALUE file parser, built-in profiles,
 * ${VAR} templates. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "env.h"
#include "env_int.h"

struct prof_s {
  char *name;
  char *summary;
  int n;
  prof_entry_t e[PROF_MAX_ENTRIES];
};

int env__valid_key(const char *k, size_t n) {
  if (n == 0 || !(isalpha((unsigned char)k[0]) || k[0] == '_'))
    return 0;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)k[i]) || k[i] == '_'))
      return 0;
  return 1;
}

/* Check the ${...} syntax of an unquoted or double-quoted value: RET 1
 * when it has templates, 0 when none, -1 on error (err filled). */
static int check_templates(const char *v, const char *where, char *err,
                           size_t errlen) {
  int any = 0;
  for (const char *p = v; *p; p++) {
    const char *close, *name;
    size_t nl;
    if (*p != '$')
      continue;
    if (p[1] != '{') {
      lu_errf(err, errlen,
             "%s: '$' must start a ${NAME} template (write ${%.*s} for a "
             "variable, or single-quote the value for a literal '$')",
             where, (int)strspn(p + 1,
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"),
             p + 1);
      return -1;
    }
    close = strchr(p + 2, '}');
    if (close == NULL) {
      lu_errf(err, errlen, "%s: '${' without a closing '}'", where);
      return -1;
    }
    name = p + 2;
    nl = strcspn(name, ":}");
    if (!env__valid_key(name, nl)) {
      lu_errf(err, errlen,
             "%s: '${%.*s}' does not name a variable (letters, digits, '_')",
             where, (int)(close - name), name);
      return -1;
    }
    if (name[nl] == ':' && name[nl + 1] != '-') {
      lu_errf(err, errlen,
             "%s: in '${%.*s}' only ':-' (a default) may follow the name",
             where, (int)(close - name), name);
      return -1;
    }
    if (name[nl] == ':' && memchr(name + nl + 2, '$', (size_t)(close - name - (ptrdiff_t)nl - 2))) {
      lu_errf(err, errlen, "%s: a default may not hold another template",
             where);
      return -1;
    }
    any = 1;
    p = close;
  }
  return any;
}

static int add_entry(prof_t *p, const char *key, size_t kl, const char *val,
                     size_t vl, int line, int templated) {
  char *k = malloc(kl + 1), *v = malloc(vl + 1);
  if (k == NULL || v == NULL) {
    free(k);
    free(v);
    return RDZV_ENOMEM;
  }
  memcpy(k, key, kl);
  k[kl] = '\0';
  memcpy(v, val, vl);
  v[vl] = '\0';
  p->e[p->n].key = k;
  p->e[p->n].value = v;
  p->e[p->n].line = line;
  p->e[p->n].templated = templated;
  p->n++;
  return 0;
}

/* One logical line [s, end), already without the newline. */
static int parse_line(prof_t *p, const char *s, const char *end, int line,
                      const char *name, char *err, size_t errlen) {
  char where[320], val[PROF_MAX_LINE];
  const char *key, *eq, *v;
  size_t kl, vl = 0;
  int quoted = 0, t;
  while (s < end && (*s == ' ' || *s == '\t'))
    s++;
  while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
    end--;
  if (s == end || *s == '#')
    return 0;
  snprintf(where, sizeof(where), "%s:%d", name, line);
  if ((size_t)(end - s) > 7 && strncmp(s, "export", 6) == 0 &&
      (s[6] == ' ' || s[6] == '\t')) {
    s += 7;
    while (s < end && (*s == ' ' || *s == '\t'))
      s++;
  }
  key = s;
  eq = memchr(s, '=', (size_t)(end - s));
  if (eq == NULL) {
    lu_errf(err, errlen,
           "%s: '%.*s' is not KEY=VALUE: a profile holds only KEY=VALUE lines "
           "and # comments",
           where, (int)LU_MIN(end - s, 60), s);
    return RDZV_EINVAL;
  }
  kl = (size_t)(eq - key);
  if (kl > 0 && (key[kl - 1] == ' ' || key[kl - 1] == '\t')) {
    lu_errf(err, errlen,
           "%s: no spaces around '=' (write %.*s=VALUE, as a shell needs)",
           where, (int)strcspn(key, " \t="), key);
    return RDZV_EINVAL;
  }
  if (!env__valid_key(key, kl)) {
    lu_errf(err, errlen,
           "%s: '%.*s' is not a variable name (letters, digits and '_', not "
           "starting with a digit)",
           where, (int)LU_MIN(kl, 60), key);
    return RDZV_EINVAL;
  }
  v = eq + 1;
  if (v < end && (*v == '"' || *v == '\'')) {
    char q = *v++;
    quoted = q == '\'' ? 2 : 1;
    while (v < end && *v != q) {
      if (q == '"' && *v == '\\' && v + 1 < end &&
          (v[1] == '"' || v[1] == '\\' || v[1] == '$')) {
        if (v[1] == '$') {
          /* \$ inside double quotes: a literal '$' is not supported
           * because templates use '$'; single quotes are the way. */
          lu_errf(err, errlen,
                 "%s: write a literal '$' with single quotes ('...')", where);
          return RDZV_EINVAL;
        }
        v++;
      }
      if (vl + 1 >= sizeof(val)) {
        lu_errf(err, errlen, "%s: line longer than %d bytes", where, PROF_MAX_LINE);
        return RDZV_ETOOBIG;
      }
      val[vl++] = *v++;
    }
    if (v >= end) {
      lu_errf(err, errlen, "%s: the value's %c quote is not closed on this line",
             where, q);
      return RDZV_EINVAL;
    }
    v++; /* closing quote */
  } else {
    while (v < end && *v != ' ' && *v != '\t') {
      if (*v == '"' || *v == '\'' || *v == '`' || *v == ';' || *v == '|' ||
          *v == '&' || *v == '\\') {
        lu_errf(err, errlen,
               "%s: '%c' inside an unquoted value: quote the whole value "
               "(KEY=\"...\")",
               where, *v);
        return RDZV_EINVAL;
      }
      if (vl + 1 >= sizeof(val)) {
        lu_errf(err, errlen, "%s: line longer than %d bytes", where, PROF_MAX_LINE);
        return RDZV_ETOOBIG;
      }
      val[vl++] = *v++;
    }
  }
  val[vl] = '\0';
  /* after the value only whitespace and a comment */
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  if (v < end && *v != '#') {
    lu_errf(err, errlen,
           "%s: unexpected '%.*s' after the value of %.*s: quote a value with "
           "spaces, start a comment with '#'",
           where, (int)LU_MIN(end - v, 40), v, (int)kl, key);
    return RDZV_EINVAL;
  }
  t = 0;
  if (quoted != 2) {
    t = check_templates(val, where, err, errlen);
    if (t < 0)
      return RDZV_EINVAL;
  }
  for (int i = 0; i < p->n; i++)
    if (strlen(p->e[i].key) == kl && strncmp(p->e[i].key, key, kl) == 0) {
      lu_errf(err, errlen,
             "%s: %.*s is already set on line %d: keep one (a locked profile "
             "says each value once)",
             where, (int)kl, key, p->e[i].line);
      return RDZV_EINVAL;
    }
  if (p->n >= PROF_MAX_ENTRIES) {
    lu_errf(err, errlen, "%s: more than %d variables", where, PROF_MAX_ENTRIES);
    return RDZV_ETOOBIG;
  }
  return add_entry(p, key, kl, val, vl, line, t);
}

int prof_parse(const char *text, size_t len, const char *name, prof_t **out,
               char *err, size_t errlen) {
  prof_t *p;
  const char *s = text, *end = text + len;
  int line = 0, rc = 0, in_header = 1;
  *out = NULL;
  if (name == NULL)
    name = "profile";
  if (len > PROF_MAX_BYTES) {
    lu_errf(err, errlen, "%s: larger than %u bytes: not a profile", name,
           PROF_MAX_BYTES);
    return RDZV_ETOOBIG;
  }
  if (len > 0 && memchr(text, '\0', len) != NULL) {
    lu_errf(err, errlen, "%s: holds NUL bytes: not a text file", name);
    return RDZV_EINVAL;
  }
  if ((p = calloc(1, sizeof(*p))) == NULL)
    return RDZV_ENOMEM;
  if ((p->name = strdup(name)) == NULL) {
    free(p);
    return RDZV_ENOMEM;
  }
  while (s < end && rc == 0) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *le = nl ? nl : end;
    line++;
    if ((size_t)(le - s) >= PROF_MAX_LINE) {
      lu_errf(err, errlen, "%s:%d: line longer than %d bytes", name, line,
             PROF_MAX_LINE);
      rc = RDZV_ETOOBIG;
      break;
    }
    /* The first comment of the leading block says what the profile is. */
    if (in_header) {
      const char *c = s;
      while (c < le && (*c == ' ' || *c == '\t'))
        c++;
      if (c < le && *c == '#' && p->summary == NULL) {
        size_t n;
        c++;
        while (c < le && (*c == ' ' || *c == '!'))
          c++;
        n = (size_t)(le - c);
        while (n > 0 && (c[n - 1] == '\r' || c[n - 1] == ' '))
          n--;
        /* skip a shebang line */
        if (!(n > 3 && c[0] == '/' && memcmp(c, "/bin", 4) == 0)) {
          if ((p->summary = strndup(c, n)) == NULL)
            rc = RDZV_ENOMEM;
        }
      } else if (c < le && *c != '#') {
        in_header = 0;
      }
    }
    if (rc == 0)
      rc = parse_line(p, s, le, line, name, err, errlen);
    s = nl ? nl + 1 : end;
  }
  if (rc != 0) {
    prof_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

void prof_free(prof_t *p) {
  if (p == NULL)
    return;
  for (int i = 0; i < p->n; i++) {
    free((char *)p->e[i].key);
    free((char *)p->e[i].value);
  }
  free(p->name);
  free(p->summary);
  free(p);
}

const char *prof_name(const prof_t *p) { return p->name; }
const char *prof_summary(const prof_t *p) { return p->summary ? p->summary : ""; }
int prof_count(const prof_t *p) { return p->n; }

const prof_entry_t *prof_entry(const prof_t *p, int i) {
  return i >= 0 && i < p->n ? &p->e[i] : NULL;
}

const prof_entry_t *prof_find(const prof_t *p, const char *key) {
  for (int i = 0; i < p->n; i++)
    if (strcmp(p->e[i].key, key) == 0)
      return &p->e[i];
  return NULL;
}

const char *const *prof_builtin_names(void) { return env__builtin_names; }

const char *prof_builtin_text(const char *name) {
  for (int i = 0; env__builtin_names[i]; i++)
    if (strcmp(env__builtin_names[i], name) == 0)
      return env__builtin_texts[i];
  return NULL;
}

static int looks_like_path(const char *s) {
  size_t n = strlen(s);
  struct stat st;
  return strchr(s, '/') != NULL || (n > 4 && strcmp(s + n - 4, ".env") == 0) ||
         (n > 3 && strcmp(s + n - 3, ".sh") == 0) ||
         (stat(s, &st) == 0 && S_ISREG(st.st_mode));
}

int prof_load(const char *what, prof_t **out, char *err, size_t errlen) {
  const char *text;
  *out = NULL;
  if (what == NULL || *what == '\0') {
    lu_errf(err, errlen, "no profile named");
    return RDZV_EINVAL;
  }
  if ((text = prof_builtin_text(what)) != NULL && !looks_like_path(what))
    return prof_parse(text, strlen(text), what, out, err, errlen);
  if (looks_like_path(what)) {
    char *data = NULL;
    size_t len = 0;
    int rc = lu_read_file(what, PROF_MAX_BYTES, &data, &len);
    if (rc != 0) {
      lu_errf(err, errlen, "profile file %s: %s", what,
             rc == RDZV_ETOOBIG ? "larger than 1 MiB, not a profile"
                                : rdzv_strerror(rc));
      return rc;
    }
    rc = prof_parse(data, len, what, out, err, errlen);
    free(data);
    return rc;
  }
  {
    char names[256] = "";
    for (int i = 0; env__builtin_names[i]; i++)
      snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
               i ? ", " : "", env__builtin_names[i]);
    lu_errf(err, errlen,
           "no profile '%s': use a built-in one (%s) or a file path",
           what, names);
  }
  return RDZV_ENOKEY;
}

int prof_expand(const char *tmpl, prof_lookup_fn lookup, void *ctx, char *out,
                size_t outlen, char *missing, size_t missinglen) {
  size_t o = 0;
  if (missing && missinglen)
    missing[0] = '\0';
  if (outlen == 0)
    return RDZV_ETOOBIG;
  for (const char *p = tmpl; *p;) {
    const char *val = NULL;
    size_t vl;
    if (p[0] == '$' && p[1] == '{') {
      const char *close = strchr(p + 2, '}');
      const char *name = p + 2, *def = NULL;
      size_t nl, dl = 0;
      char key[256];
      if (close == NULL)
        return RDZV_EINVAL;
      nl = strcspn(name, ":}");
      if (!env__valid_key(name, nl) || nl >= sizeof(key))
        return RDZV_EINVAL;
      if (name[nl] == ':') {
        if (name[nl + 1] != '-')
          return RDZV_EINVAL;
        def = name + nl + 2;
        dl = (size_t)(close - def);
      }
      memcpy(key, name, nl);
      key[nl] = '\0';
      val = lookup ? lookup(ctx, key) : NULL;
      if (val == NULL || *val == '\0') {
        if (def == NULL) {
          if (missing && missinglen)
            lu_strlcpy(missing, key, missinglen);
          return RDZV_ENOKEY;
        }
        val = def;
        vl = dl;
      } else {
        vl = strlen(val);
      }
      p = close + 1;
    } else {
      val = p;
      vl = 1;
      p++;
    }
    if (o + vl >= outlen)
      return RDZV_ETOOBIG;
    memcpy(out + o, val, vl);
    o += vl;
  }
  out[o] = '\0';
  return 0;
}
