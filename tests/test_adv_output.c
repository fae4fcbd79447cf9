/* test_adv_output.c - untrusted text reaching people and programs (#24):
 * - lu_escape: controls, DEL, C1 and bytes that are not UTF-8 become \xNN,
 *   valid UTF-8 stays, a log message's newline only continues its line;
 * - lu_buf_json_str: always valid UTF-8 (U+FFFD for a stray byte);
 * - a client that never authenticated, with a job name carrying a fake log
 *   line and terminal escape codes: the server's log holds neither. */
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lu.h"
#include "lu_buf.h"
#include "rdzv.h"
#include "test.h"

static void test_escape(void) {
  char out[256];
  const char hostile[] = "job\x1b[31mred\x07\r\x7f\xc2\x9b" "2J\xff\xfe"
                         "caf\xc3\xa9 \xe2\x82\xac\tend";
  lu_escape(hostile, strlen(hostile), out, sizeof(out), 0);
  ASSERT_STR_EQ("job\\x1b[31mred\\x07\\x0d\\x7f\\xc2\\x9b2J\\xff\\xfe"
                "caf\xc3\xa9 \xe2\x82\xac\tend", out);
  /* Overlong, surrogate, cut sequences. */
  lu_escape("\xc0\xaf|\xed\xa0\x80|\xe2\x82", 9, out, sizeof(out), 0);
  ASSERT_STR_EQ("\\xc0\\xaf|\\xed\\xa0\\x80|\\xe2\\x82", out);
  lu_escape("a\nb", 3, out, sizeof(out), LU_ESC_NEWLINE_INDENT);
  ASSERT_STR_EQ("a\n    b", out);
  lu_escape("a\nb", 3, out, sizeof(out), 0);
  ASSERT_STR_EQ("a\\x0ab", out);
  /* Cut at a whole character: never half an escape. */
  ASSERT_EQ(3, (int)lu_escape("abc\x1b", 4, out, 7, 0));
  ASSERT_STR_EQ("abc", out);
}

static void test_json_utf8(void) {
  lu_buf_t b = LU_BUF_INIT;
  char *text;
  lu_buf_json_str(&b, "ok\xc3\xa9\xff\x1b");
  ASSERT_OK(lu_buf_finish(&b, &text, NULL));
  ASSERT_STR_EQ("\"ok\xc3\xa9\\ufffd\\u001b\"", text);
  free(text);
}

static void test_server_log(void) {
  const char *extra[] = {"--token-file", NULL, NULL};
  char tok[512], log[512], *text;
  const char job[] = "x\n2026-12-02T00:00:00.000 [launch server] info: "
                     "fake line\x1b]0;pwned\x07\x1b[2J";
  int64_t st = 0;
  pid_t pid;
  int port, fd;
  FILE *f;
  snprintf(tok, sizeof(tok), "%s/token", test_tmpdir());
  snprintf(log, sizeof(log), "%s/server.log", test_tmpdir());
  ASSERT((f = fopen(tok, "w")) != NULL);
  fputs("the-secret\n", f);
  fclose(f);
  chmod(tok, 0600);
  extra[1] = tok;
  port = test_launch_server(&pid, extra, log);
  /* No proof: the HELLO is refused and logged with its job name. */
  fd = test_native_hello("127.0.0.1", port, job, "wrong-secret", &st);
  ASSERT(st != 0);
  close(fd);
  usleep(300000);
  test_stop_server(pid);
  ASSERT((text = test_read_file(log)) != NULL);
  printf("server log:\n%s", text);
  ASSERT(strchr(text, '\x1b') == NULL);
  ASSERT(strchr(text, '\x07') == NULL);
  ASSERT(strstr(text, "\n2026-12-02T00:00:00.000 [launch server] info: "
                      "fake line") == NULL);
  ASSERT(strstr(text, "\\x1b]0;pwned") != NULL);
  free(text);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  test_escape();
  test_json_utf8();
  test_server_log();
  test_cleanup();
  printf("test_adv_output: ok\n");
  return 0;
}
