/* ckpt_test.h - what the checkpoint tests share. */
#ifndef CKPT_TEST_H
#define CKPT_TEST_H

#include <stdio.h>
#include <sys/types.h>

#include "test.h"

/* The store in a process of its own (`launch server`): an in-process libuv
 * server closes sockets with a raw syscall that ThreadSanitizer does not
 * see, and a descriptor number then reused by the test's file I/O looks
 * racy. OUT *pid (end it with test_kill), ep: "127.0.0.1:PORT". */
static inline void ckpt_test_store(pid_t *pid, char *ep, size_t n) {
  char log[600];
  snprintf(log, sizeof(log), "%s/server.log", test_tmpdir());
  snprintf(ep, n, "127.0.0.1:%d", test_launch_server(pid, NULL, log));
}

#endif
