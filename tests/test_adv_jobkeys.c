/* test_adv_jobkeys.c - jobs are security boundaries (#11): the key of job
 * A, printed by `launch server --issue-key A`, opens job A and no other;
 * the server's own secret (the scheduler's, or an admin's) opens every
 * job; a key is refused with a message that says so; --issue-key without
 * the secret is a usage error. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto.h"
#include "rdzv.h"
#include "test.h"

static int port;

static int connect_job(const char *job, const char *token, char *err,
                       size_t errlen, rdzv_client_t **c) {
  return test_rdzv_open(port, job, token, err, errlen, c);
}

/* Run `launch server ARGS` and capture its first output line. RET its
 * exit status. */
static int run_launch(const char *args, char *out, size_t cap) {
  char cmd[1024];
  FILE *p;
  int st;
  snprintf(cmd, sizeof(cmd), "%s server %s 2>&1", test_launch_bin(), args);
  p = popen(cmd, "r");
  ASSERT(p != NULL);
  out[0] = '\0';
  if (fgets(out, (int)cap, p) != NULL)
    out[strcspn(out, "\n")] = '\0';
  st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
  char secret_path[512], args[1024], key_a[256], key_b[256], err[512];
  const char *extra[3];
  rdzv_client_t *c = NULL;
  void *v = NULL;
  size_t vlen = 0;
  pid_t pid;
  FILE *f;

  snprintf(secret_path, sizeof(secret_path), "%s/secret", test_tmpdir());
  f = fopen(secret_path, "w");
  ASSERT(f != NULL);
  fputs("the-scheduler's-secret\n", f);
  fclose(f);

  /* Keys: 64 hex digits, one per job, derived from the secret. */
  snprintf(args, sizeof(args), "--token-file %s --issue-key job-a",
           secret_path);
  ASSERT_EQ(0, run_launch(args, key_a, sizeof(key_a)));
  ASSERT_EQ(PROTO_JOB_KEY_LEN, strlen(key_a));
  snprintf(args, sizeof(args), "--token-file %s --issue-key job-b",
           secret_path);
  ASSERT_EQ(0, run_launch(args, key_b, sizeof(key_b)));
  ASSERT(strcmp(key_a, key_b) != 0);
  ASSERT_EQ(2, run_launch("--issue-key job-a", err, sizeof(err)));
  ASSERT_CONTAINS(err, "--issue-key needs the server's --token-file");

  extra[0] = "--token-file";
  extra[1] = secret_path;
  extra[2] = NULL;
  port = test_launch_server(&pid, extra, NULL);

  /* Job A's key opens job A. */
  ASSERT_OK(connect_job("job-a", key_a, err, sizeof(err), &c));
  ASSERT_OK(rdzv_set(c, "who", "a", 1, test_ms(5000)));
  rdzv_close(c);
  /* ... and not job B, nor any other. */
  ASSERT_EQ(RDZV_EAUTH, connect_job("job-b", key_a, err, sizeof(err), &c));
  ASSERT_CONTAINS(err, "a key of another job does not open this one");
  ASSERT_EQ(RDZV_EAUTH, connect_job("job-c", key_a, err, sizeof(err), &c));
  /* Job B's own key does. */
  ASSERT_OK(connect_job("job-b", key_b, err, sizeof(err), &c));
  ASSERT_EQ(RDZV_ENOKEY, rdzv_get(c, "who", &v, &vlen, 0));
  rdzv_close(c);
  /* The secret itself opens every job (the scheduler, launch status). */
  ASSERT_OK(connect_job("job-a", "the-scheduler's-secret", err, sizeof(err),
                        &c));
  ASSERT_OK(rdzv_get(c, "who", &v, &vlen, test_ms(5000)));
  ASSERT_EQ(1, vlen);
  rdzv_free(v);
  rdzv_close(c);
  /* A made-up key opens nothing. */
  ASSERT_EQ(RDZV_EAUTH,
            connect_job("job-a", "0000000000000000000000000000000000000000"
                                 "000000000000000000000000",
                        err, sizeof(err), &c));

  test_stop_server(pid);
  printf("test_adv_jobkeys: ok\n");
  return 0;
}
