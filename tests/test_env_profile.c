/* test_env_profile.c - the profile file format (what /etc/profile.d/nccl.sh
 * files look like), the messages bad lines get, ${VAR} templates, the
 * built-in profiles and their copies in env/profiles/. */
#include "env.h"
#include "test.h"

static prof_t *parse_ok(const char *text) {
  prof_t *p = NULL;
  char err[512] = "";
  if (prof_parse(text, strlen(text), "t.env", &p, err, sizeof(err)) != 0)
    TEST_FAIL("parse failed: %s", err);
  return p;
}

static void parse_bad(const char *text, int want_rc, const char *says) {
  prof_t *p = NULL;
  char err[512] = "";
  int rc = prof_parse(text, strlen(text), "t.env", &p, err, sizeof(err));
  if (rc != want_rc)
    TEST_FAIL("'%s': rc %d, want %d (%s)", text, rc, want_rc, err);
  ASSERT(p == NULL);
  ASSERT_CONTAINS(err, says);
}

static void test_formats(void) {
  prof_t *p = parse_ok(
      "#!/bin/bash\n"
      "# my cluster: IB, one HCA\n"
      "\n"
      "export NCCL_IB_DISABLE=0\n"
      "NCCL_IB_HCA==mlx5_0:1\n"
      "   NCCL_DEBUG=WARN   # quiet once it works\r\n"
      "NCCL_NET_GDR_LEVEL=2      # SYS 级即可\n"
      "A=\"two words\"\n"
      "B='${LITERAL}'\n"
      "C=\"${LAUNCH_HCA}:1\"\n"
      "D=${LAUNCH_NETDEV:-^lo,docker}\n"
      "E=\n"
      "F=a#b\n");
  ASSERT_STR_EQ(prof_summary(p), "my cluster: IB, one HCA");
  ASSERT_EQ(10, prof_count(p));
  ASSERT_STR_EQ(prof_find(p, "NCCL_IB_DISABLE")->value, "0");
  ASSERT_STR_EQ(prof_find(p, "NCCL_IB_HCA")->value, "=mlx5_0:1");
  ASSERT_STR_EQ(prof_find(p, "NCCL_DEBUG")->value, "WARN");
  ASSERT_EQ(6, prof_find(p, "NCCL_DEBUG")->line);
  ASSERT_STR_EQ(prof_find(p, "NCCL_NET_GDR_LEVEL")->value, "2");
  ASSERT_STR_EQ(prof_find(p, "A")->value, "two words");
  ASSERT_STR_EQ(prof_find(p, "B")->value, "${LITERAL}");
  ASSERT_EQ(0, prof_find(p, "B")->templated); /* single quotes: literal */
  ASSERT_EQ(1, prof_find(p, "C")->templated);
  ASSERT_EQ(1, prof_find(p, "D")->templated);
  ASSERT_STR_EQ(prof_find(p, "E")->value, "");
  ASSERT_STR_EQ(prof_find(p, "F")->value, "a#b");
  ASSERT(prof_find(p, "G") == NULL);
  prof_free(p);
  prof_free(NULL);
}

static void test_errors(void) {
  parse_bad("NCCL_DEBUG WARN\n", RDZV_EINVAL, "t.env:1: 'NCCL_DEBUG WARN' is not KEY=VALUE");
  parse_bad("A=1\nunset NCCL_DEBUG\n", RDZV_EINVAL, "t.env:2:");
  parse_bad("NCCL_DEBUG = WARN\n", RDZV_EINVAL, "no spaces around '='");
  parse_bad("1NCCL=1\n", RDZV_EINVAL, "is not a variable name");
  parse_bad("NCCL-X=1\n", RDZV_EINVAL, "is not a variable name");
  parse_bad("A=\"open\n", RDZV_EINVAL, "quote is not closed");
  parse_bad("A=$HOME/x\n", RDZV_EINVAL, "write ${HOME}");
  parse_bad("A=${HOME\n", RDZV_EINVAL, "without a closing '}'");
  parse_bad("A=${1X}\n", RDZV_EINVAL, "does not name a variable");
  parse_bad("A=${X:+y}\n", RDZV_EINVAL, "only ':-'");
  parse_bad("A=1\nB=2\nA=3\n", RDZV_EINVAL, "t.env:3: A is already set on line 1");
  parse_bad("A=two words\n", RDZV_EINVAL, "quote a value with spaces");
  parse_bad("A=x;rm -rf /\n", RDZV_EINVAL, "';' inside an unquoted value");
  parse_bad("A=`id`\n", RDZV_EINVAL, "'`' inside an unquoted value");
  {
    char text[] = "A=1\nB=\0\n";
    prof_t *p = NULL;
    char err[256];
    ASSERT_EQ(RDZV_EINVAL, prof_parse(text, sizeof(text) - 1, "nul", &p, err, sizeof(err)));
    ASSERT_CONTAINS(err, "NUL bytes");
  }
  {
    char *big = malloc(PROF_MAX_LINE + 16);
    prof_t *p = NULL;
    char err[256];
    memset(big, 'x', PROF_MAX_LINE + 10);
    memcpy(big, "A=", 2);
    ASSERT_EQ(RDZV_ETOOBIG,
              prof_parse(big, PROF_MAX_LINE + 10, "big", &p, err, sizeof(err)));
    ASSERT_CONTAINS(err, "longer than");
    free(big);
  }
}

static const char *lookup(void *ctx, const char *name) {
  (void)ctx;
  if (strcmp(name, "LAUNCH_HCA") == 0)
    return "mlx5_3";
  if (strcmp(name, "EMPTY") == 0)
    return "";
  return NULL;
}

static void test_expand(void) {
  char out[64], missing[32];
  ASSERT_EQ(0, prof_expand("=${LAUNCH_HCA}:1", lookup, NULL, out, sizeof(out),
                           missing, sizeof(missing)));
  ASSERT_STR_EQ(out, "=mlx5_3:1");
  ASSERT_EQ(0, prof_expand("${NOPE:-^lo,docker}", lookup, NULL, out,
                           sizeof(out), missing, sizeof(missing)));
  ASSERT_STR_EQ(out, "^lo,docker");
  ASSERT_EQ(0, prof_expand("${EMPTY:-d}", lookup, NULL, out, sizeof(out), NULL, 0));
  ASSERT_STR_EQ(out, "d");
  ASSERT_EQ(RDZV_ENOKEY, prof_expand("${EMPTY}", lookup, NULL, out,
                                     sizeof(out), missing, sizeof(missing)));
  ASSERT_STR_EQ(missing, "EMPTY");
  ASSERT_EQ(RDZV_ENOKEY, prof_expand("a${NOPE}b", lookup, NULL, out,
                                     sizeof(out), missing, sizeof(missing)));
  ASSERT_STR_EQ(missing, "NOPE");
  ASSERT_EQ(RDZV_EINVAL, prof_expand("${", lookup, NULL, out, sizeof(out), NULL, 0));
  ASSERT_EQ(RDZV_ETOOBIG, prof_expand("${LAUNCH_HCA}", lookup, NULL, out, 4, NULL, 0));
  ASSERT_EQ(0, prof_expand("plain", NULL, NULL, out, sizeof(out), NULL, 0));
  ASSERT_STR_EQ(out, "plain");
}

/* The binary's built-in profiles are the bytes of env/profiles/NAME.env,
 * and each one parses. */
static void test_builtins(void) {
  const char *src = getenv("LAUNCH_SOURCE_DIR");
  int n = 0;
  for (const char *const *name = prof_builtin_names(); *name; name++, n++) {
    char path[1024], err[512] = "";
    char *file;
    prof_t *p = NULL;
    snprintf(path, sizeof(path), "%s/env/profiles/%s.env", src ? src : ".", *name);
    file = test_read_file(path);
    if (file == NULL)
      TEST_FAIL("%s is built in but %s is missing", *name, path);
    ASSERT_STR_EQ(prof_builtin_text(*name), file);
    free(file);
    if (prof_load(*name, &p, err, sizeof(err)) != 0)
      TEST_FAIL("built-in %s: %s", *name, err);
    ASSERT(strlen(prof_summary(p)) > 0);
    ASSERT_STR_EQ(prof_find(p, "NCCL_DEBUG")->value, "WARN");
    /* no built-in profile fights the lock */
    ASSERT(prof_find(p, "NCCL_NVLS_ENABLE") == NULL);
    prof_free(p);
  }
  ASSERT_EQ(5, n);
  ASSERT(prof_builtin_text("pcie-ib") != NULL);
  ASSERT(prof_builtin_text("nope") == NULL);
}

static void test_load(void) {
  prof_t *p = NULL;
  char err[512] = "", path[512];
  FILE *f;
  ASSERT_EQ(RDZV_ENOKEY, prof_load("pcie_ib", &p, err, sizeof(err)));
  ASSERT_CONTAINS(err, "auto, pcie-ib, nvlink-ib, roce, socket");
  ASSERT_EQ(-ENOENT, prof_load("/nonexistent/nccl.sh", &p, err, sizeof(err)));
  ASSERT_CONTAINS(err, "/nonexistent/nccl.sh");
  snprintf(path, sizeof(path), "%s/site.env", test_tmpdir());
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs("# site: ours\nNCCL_IB_HCA=mlx5_0\nNCCL_DEBUG WARN\n", f);
  fclose(f);
  ASSERT_EQ(RDZV_EINVAL, prof_load(path, &p, err, sizeof(err)));
  ASSERT_CONTAINS(err, "site.env:3:");
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs("# site: ours\nNCCL_IB_HCA=mlx5_0\n", f);
  fclose(f);
  ASSERT_EQ(0, prof_load(path, &p, err, sizeof(err)));
  ASSERT_STR_EQ(prof_name(p), path);
  ASSERT_STR_EQ(prof_summary(p), "site: ours");
  prof_free(p);
}

int main(void) {
  int fds = test_fd_count();
  test_formats();
  test_errors();
  test_expand();
  test_builtins();
  test_load();
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  return 0;
}
