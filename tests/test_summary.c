/* test_summary.c - the failure summary: PyTorch's error file (written by a
 * real @record when torch imports, and handwritten good and bad JSON), the
 * printed block (root cause first, signal names, messages, tails), the
 * exit status. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lu.h"
#include "summary.h"
#include "test.h"

static int parse(const char *json, char **msg, double *ts) {
  return sum_parse_error_json(json, strlen(json), msg, ts);
}

static void expect_ok(const char *json, const char *want) {
  char *msg = NULL;
  int rc = parse(json, &msg, NULL);
  if (rc != 0)
    TEST_FAIL("refused (%s): %s", rdzv_strerror(rc), json);
  ASSERT_STR_EQ(want, msg);
  free(msg);
}

static void expect_bad(const char *json, size_t len) {
  char *msg = (char *)"untouched";
  int rc = sum_parse_error_json(json, len, &msg, NULL);
  if (rc != RDZV_EPROTO)
    TEST_FAIL("accepted or wrong error %d for: %.*s", rc, (int)len, json);
  ASSERT(msg == NULL);
}

#define BAD(s) expect_bad(s, sizeof(s) - 1)

static void test_good(void) {
  double ts = -1;
  char *msg;
  /* PyTorch's format, with the traceback appended and the trailing
   * newline dropped; timestamp returned. */
  ASSERT_EQ(0, parse("{\"message\": {\"message\": \"ValueError: bad\", "
                     "\"extraInfo\": {\"py_callstack\": \"Traceback (most "
                     "recent call last):\\n  File \\\"x.py\\\"\\nValueError: "
                     "bad\\n\", \"timestamp\": \"1796015139\"}}}",
                     &msg, &ts));
  ASSERT_STR_EQ("ValueError: bad\nTraceback (most recent call last):\n  File "
                "\"x.py\"\nValueError: bad",
                msg);
  ASSERT(ts == 1796015139.0);
  free(msg);
  /* The short form: message is a string. */
  expect_ok("{\"message\":\"plain\"}", "plain");
  /* Escapes: every simple one, \u to 2, 3 and 4 byte UTF-8, raw UTF-8. */
  expect_ok("{\"message\":{\"message\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\te\"}}",
            "a\"b\\c/d\b\f\n\r\te");
  expect_ok("{\"message\":\"\\u00e9\\u20ac\\ud83d\\ude00 \xc3\xa9\xe2\x82\xac"
            "\xf0\x9f\x98\x80\"}",
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xc3\xa9\xe2\x82\xac\xf0\x9f"
            "\x98\x80");
  /* Lone surrogates (Python writes them) and NUL become U+FFFD. */
  expect_ok("{\"message\":\"a\\ud800b\\udc00c\\u0000d\"}",
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd"
            "c\xef\xbf\xbd"
            "d");
  /* Other fields of every type are validated and skipped; key order free;
   * whitespace anywhere; a BOM. */
  expect_ok("\xEF\xBB\xBF \r\n\t{ \"x\" : [1, -2.5e+3, 0, 0.0, 1E9, true, "
            "false, null, {\"a\": []}, \"s\"], \"message\" : { \"extraInfo\""
            " : { \"timestamp\" : 17, \"py_callstack\" : \"\" }, \"message\""
            " : \"m\", \"errorCode\": 1 } } \n",
            "m");
  /* The last duplicate wins. */
  expect_ok("{\"message\":\"first\",\"message\":\"second\"}", "second");
  /* No callstack: the message alone. */
  expect_ok("{\"message\":{\"message\":\"only\",\"extraInfo\":{}}}", "only");
  /* Nesting up to the limit is fine. */
  {
    char buf[512];
    size_t n = 0;
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "{\"message\":\"d\",\"x\":");
    for (int i = 0; i < 62; i++)
      buf[n++] = '[';
    for (int i = 0; i < 62; i++)
      buf[n++] = ']';
    buf[n++] = '}';
    buf[n] = '\0';
    expect_ok(buf, "d");
  }
}

static void test_bad(void) {
  char *deep, *msg;
  BAD("");
  BAD("   ");
  BAD("null");
  BAD("\"message\"");
  BAD("[{\"message\":\"x\"}]");
  BAD("{}");                                   /* no message */
  BAD("{\"message\": 5}");                     /* not a string */
  BAD("{\"message\": [\"x\"]}");
  BAD("{\"message\": {\"extraInfo\": {}}}");   /* no message.message */
  BAD("{\"message\": {\"message\": 3}}");
  BAD("{\"message\":\"x\",}");                 /* trailing comma */
  BAD("{\"message\":\"x\"");                   /* unterminated object */
  BAD("{\"message\":\"x");                     /* unterminated string */
  BAD("{\"message\":\"x\\");
  BAD("{\"message\":\"x\\u12\"}");             /* short \u */
  BAD("{\"message\":\"x\\u12G4\"}");
  BAD("{\"message\":\"x\\q\"}");               /* unknown escape */
  BAD("{\"message\":\"a\nb\"}");               /* raw control character */
  BAD("{\"message\":\"\xff\"}");               /* invalid UTF-8 */
  BAD("{\"message\":\"\xc0\xaf\"}");           /* overlong */
  BAD("{\"message\":\"\xed\xa0\x80\"}");       /* encoded surrogate */
  BAD("{\"message\":\"\xe2\x82\"}");           /* truncated sequence */
  BAD("{\"message\":\"x\"} x");                /* trailing garbage */
  BAD("{\"message\":\"x\"}{}");
  BAD("{\"message\":\"x\", \"n\": 01}");       /* leading zero */
  BAD("{\"message\":\"x\", \"n\": 1.}");
  BAD("{\"message\":\"x\", \"n\": .5}");
  BAD("{\"message\":\"x\", \"n\": -}");
  BAD("{\"message\":\"x\", \"n\": 1e}");
  BAD("{\"message\":\"x\", \"n\": +1}");
  BAD("{\"message\":\"x\", \"n\": NaN}");
  BAD("{\"message\":\"x\", \"n\": tru}");
  BAD("{\"message\":\"x\", \"n\": [1,]}");
  BAD("{\"message\":\"x\", \"n\": [1 2]}");
  BAD("{\"message\" \"x\"}");                  /* missing colon */
  BAD("{message:\"x\"}");                      /* unquoted key */
  BAD("{'message':'x'}");
  BAD("{\"message\":\"x\"\0}");                /* NUL byte in the input */
  /* Nesting beyond the limit: refused, not a stack overflow. */
  deep = malloc(200000 + 64);
  ASSERT(deep != NULL);
  strcpy(deep, "{\"message\":\"x\",\"d\":");
  for (size_t i = strlen(deep), k = 0; k < 200000; k++, i++)
    deep[i] = '[';
  expect_bad(deep, strlen("{\"message\":\"x\",\"d\":") + 200000);
  free(deep);
  /* Too big: over 1 MiB is refused before parsing. */
  deep = malloc((1u << 20) + 16);
  memset(deep, ' ', (1u << 20) + 16);
  memcpy(deep, "{\"message\":\"x\"}", 15);
  ASSERT_EQ(RDZV_ETOOBIG,
            sum_parse_error_json(deep, (1u << 20) + 16, &msg, NULL));
  /* Exactly 1 MiB (whitespace padded) is accepted. */
  ASSERT_EQ(0, sum_parse_error_json(deep, 1u << 20, &msg, NULL));
  ASSERT_STR_EQ("x", msg);
  free(msg);
  free(deep);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ASSERT(f != NULL);
  fputs(text, f);
  fclose(f);
}

static void test_files(void) {
  char path[600];
  char *msg = (char *)"x";
  snprintf(path, sizeof(path), "%s/none.json", test_tmpdir());
  ASSERT_EQ(-ENOENT, sum_read_error_file(path, &msg));
  ASSERT(msg == NULL);
  snprintf(path, sizeof(path), "%s/good.json", test_tmpdir());
  write_file(path, "{\"message\": {\"message\": \"RuntimeError: boom\", "
                   "\"extraInfo\": {\"py_callstack\": \"tb\", \"timestamp\": "
                   "\"1\"}}}");
  ASSERT_EQ(0, sum_read_error_file(path, &msg));
  ASSERT_STR_EQ("RuntimeError: boom\ntb", msg);
  free(msg);
  snprintf(path, sizeof(path), "%s/bad.json", test_tmpdir());
  write_file(path, "Traceback (most recent call last):\n");
  ASSERT_EQ(RDZV_EPROTO, sum_read_error_file(path, &msg));
  ASSERT(msg == NULL);
}

/* A real error file from torch's @record (python3-torch), when importable. */
static void test_torch_record(void) {
  char script[600], efile[600], log[600];
  char *msg = NULL;
  pid_t pid;
  int status, rc;
  const char *py = getenv("PYTHON_EXEC") ? getenv("PYTHON_EXEC")
                                         : "/usr/bin/python3";
  char *check[] = {(char *)py, "-c",
                   "from torch.distributed.elastic.multiprocessing.errors "
                   "import record",
                   NULL};
  char *run[] = {(char *)py, script, NULL};
  snprintf(log, sizeof(log), "%s/torch.log", test_tmpdir());
  if (access(py, X_OK) != 0) {
    printf("SKIP test_torch_record: no %s\n", py);
    return;
  }
  pid = test_spawn(check, log);
  status = test_wait(pid, test_ms(60000));
  if (status == -1) {
    test_kill(pid);
    printf("SKIP test_torch_record: importing torch timed out\n");
    return;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("SKIP test_torch_record: torch's errors.record does not import\n");
    return;
  }
  snprintf(script, sizeof(script), "%s/rec.py", test_tmpdir());
  snprintf(efile, sizeof(efile), "%s/error.json", test_tmpdir());
  write_file(script,
             "from torch.distributed.elastic.multiprocessing.errors import "
             "record\n"
             "@record\n"
             "def main():\n"
             "    raise ValueError('bad value \\u00e9 \"quoted\"\\nline 2')\n"
             "main()\n");
  setenv("TORCHELASTIC_ERROR_FILE", efile, 1);
  pid = test_spawn(run, log);
  unsetenv("TORCHELASTIC_ERROR_FILE");
  status = test_wait(pid, test_ms(60000));
  ASSERT(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 1);
  rc = sum_read_error_file(efile, &msg);
  if (rc != 0)
    TEST_FAIL("torch's error file refused: %s: %s", rdzv_strerror(rc),
              test_read_file(efile));
  /* message, then the traceback that ends with the exception again. */
  ASSERT(strncmp(msg, "ValueError: bad value \xc3\xa9 \"quoted\"\nline 2\n"
                      "Traceback (most recent call last):\n",
                 strlen("ValueError: bad value \xc3\xa9 \"quoted\"\nline 2\n"
                        "Traceback (most recent call last):\n")) == 0);
  ASSERT_CONTAINS(msg, "rec.py\", line 4, in main");
  ASSERT(strlen(msg) > 0 && msg[strlen(msg) - 1] == '2');
  printf("torch @record error file parsed (%zu bytes of message)\n",
         strlen(msg));
  free(msg);
}

static void test_signal_names(void) {
  ASSERT_STR_EQ("SIGKILL", sum_signal_name(SIGKILL));
  ASSERT_STR_EQ("SIGSEGV", sum_signal_name(SIGSEGV));
  ASSERT_STR_EQ("SIGTERM", sum_signal_name(SIGTERM));
  ASSERT_STR_EQ("SIGBUS", sum_signal_name(SIGBUS));
  ASSERT_STR_EQ("SIGUSR1", sum_signal_name(SIGUSR1));
  ASSERT_STR_EQ("SIGSYS", sum_signal_name(SIGSYS));
  ASSERT_STR_EQ("signal 42", sum_signal_name(42));
  ASSERT_STR_EQ("unknown signal", sum_signal_name(65));
  ASSERT_STR_EQ("unknown signal", sum_signal_name(-1));
}

static char *print_to_string(const char *job, const sum_failure_t *f,
                             size_t n, int restarts, int max, int given) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  ASSERT(out != NULL);
  sum_print(out, job, f, n, restarts, max, given);
  fclose(out);
  return buf;
}

static void test_print(void) {
  sum_failure_t f[3];
  char *text, *root, *others, *p;
  char when[40];
  memset(f, 0, sizeof(f));
  /* [0] SIGTERMed late, [1] the root cause (earliest, SIGSEGV), [2] an
   * exit code with an error file, between them. */
  f[0].wall_s = 1796015200.5;
  snprintf(f[0].host, sizeof(f[0].host), "node0");
  f[0].rank = 0;
  f[0].pid = 100;
  f[0].exit_code = -1;
  f[0].signal = SIGTERM;
  f[1].wall_s = 1796015123.123;
  snprintf(f[1].host, sizeof(f[1].host), "node3");
  f[1].rank = 17;
  f[1].local_rank = 1;
  f[1].node_rank = 2;
  f[1].pid = 12345;
  f[1].exit_code = -1;
  f[1].signal = SIGSEGV;
  f[1].python = 1;
  f[1].stderr_tail = strdup("loading shard 3\nFatal Python error: "
                            "Segmentation fault");
  f[2].wall_s = 1796015150.0;
  snprintf(f[2].host, sizeof(f[2].host), "node1");
  f[2].rank = 9;
  f[2].local_rank = 1;
  f[2].node_rank = 1;
  f[2].pid = 777;
  f[2].exit_code = 1;
  f[2].error_message = strdup("ValueError: bad\nTraceback (most recent call "
                              "last):\n  File \"train.py\"");
  f[2].stderr_tail = strdup("a\nb\nc\nd\ne\nf\ng");
  text = print_to_string("job-7", f, 3, 2, 3, -1);
  fputs(text, stdout);
  ASSERT(strncmp(text, "launch: job job-7 failed (restarts used: 2 of 3)\n",
                 strlen("launch: job job-7 failed (restarts used: 2 of 3)\n"))
         == 0);
  root = strstr(text, "Root cause (first failure):\n");
  others = strstr(text, "Other failures (2");
  ASSERT(root != NULL && others != NULL && root < others);
  /* The root block is rank 17's, complete. */
  lu_iso8601(f[1].wall_s, when, sizeof(when));
  ASSERT(strstr(root, when) < others);
  ASSERT(strstr(root, "node3") < others);
  ASSERT(strstr(root, "17 (local_rank 1, node 2)") < others);
  ASSERT(strstr(root, "12345") < others);
  ASSERT(strstr(root, "SIGSEGV (11)") < others);
  /* no error file, a Python worker: the hint */
  ASSERT(strstr(root, "@record") != NULL && strstr(root, "@record") < others);
  ASSERT(strstr(root, "    | loading shard 3\n    | Fatal Python error: "
                      "Segmentation fault\n") < others);
  /* Others in time order: rank 9 (exit 1, error file) then rank 0. */
  p = strstr(others, "9 (local_rank 1, node 1)");
  ASSERT(p != NULL);
  ASSERT(p < strstr(others, "0 (local_rank 0, node 0)"));
  ASSERT_CONTAINS(others, "exit code  : 1\n");
  ASSERT_CONTAINS(others, "error file : ValueError: bad\n"
                          "               Traceback (most recent call last):\n"
                          "                 File \"train.py\"\n");
  /* The others' tails are cut to their last lines. */
  ASSERT_CONTAINS(others, "    | (2 earlier lines)\n    | c\n");
  ASSERT(strstr(others, "    | b\n") == NULL);
  ASSERT_CONTAINS(others, "SIGTERM (15)");
  free(text);

  /* Ties in time: the lowest rank is the root cause. */
  f[0].wall_s = f[1].wall_s;
  text = print_to_string("j", f, 3, 0, 0, -1);
  root = strstr(text, "Root cause");
  ASSERT(root && strstr(root, "rank       : 0 (") <
                     strstr(root, "Other failures"));
  free(text);
  /* The server's root cause, given, is the root whatever the clocks say
   * (another node's clock behind this one's): the summary names the
   * failure the exit status comes from. */
  text = print_to_string("j", f, 3, 0, 0, 2);
  root = strstr(text, "Root cause");
  ASSERT(root && strstr(root, "rank       : 9 (") != NULL &&
         strstr(root, "rank       : 9 (") < strstr(root, "Other failures"));
  free(text);
  text = print_to_string("j", f, 0, 0, 0, -1);
  ASSERT_CONTAINS(text, "No worker failure was recorded");
  free(text);

  ASSERT_EQ(128 + SIGSEGV, sum_exit_status(&f[1]));
  ASSERT_EQ(1, sum_exit_status(&f[2]));
  f[2].exit_code = 3;
  ASSERT_EQ(3, sum_exit_status(&f[2]));
  f[2].exit_code = 0;
  ASSERT_EQ(1, sum_exit_status(&f[2]));
  ASSERT_EQ(1, sum_exit_status(NULL));
  for (int i = 0; i < 3; i++)
    sum_failure_free(&f[i]);
  sum_failure_free(&f[0]); /* twice is harmless */
  sum_failure_free(NULL);
}

/* The hints say what is known (issue #27): no @record hint for a worker
 * that is not Python (a C binary, /bin/sh); a rank launch killed for a
 * hang says launch did, not "the out-of-memory killer". */
static void test_hints(void) {
  sum_failure_t f;
  char *text;
  memset(&f, 0, sizeof(f));
  snprintf(f.host, sizeof(f.host), "node0");
  f.exit_code = 1;
  text = print_to_string("job-8", &f, 1, 0, 0, -1);
  ASSERT(strstr(text, "@record") == NULL);
  ASSERT_CONTAINS(text, "error file : <none>\n");
  free(text);
  f.exit_code = -1;
  f.signal = SIGKILL;
  f.error_message = strdup("hang: no progress for 60 s (last step 12, "
                           "sleeping); launch --hang-timeout killed it");
  text = print_to_string("job-8", &f, 1, 0, 0, -1);
  ASSERT_CONTAINS(text, "killed by launch for a hang");
  ASSERT(strstr(text, "out-of-memory") == NULL);
  free(text);
  free(f.error_message);
}

int main(void) {
  int fds = test_fd_count();
  test_tmpdir();
  test_good();
  test_bad();
  test_files();
  test_signal_names();
  test_print();
  test_hints();
  test_torch_record();
  ASSERT_EQ(fds, test_fd_count());
  printf("test_summary: ok\n");
  return 0;
}
