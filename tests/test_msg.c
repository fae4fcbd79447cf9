/* test_msg.c - the rendezvous messages (rendezvous/msg.c): every message
 * comes back from pack and unpack as it was, missing keys take their
 * defaults, unknown keys are ignored (a newer peer's fields), and a field of
 * the wrong type is refused with a message naming it. */
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "msg.h"
#include "rdzv.h"
#include "test.h"

/* Packed bytes of one message, and the object they decode to. */
typedef struct wire_s {
  msgpack_sbuffer buf;
  msgpack_packer pk;
  msgpack_unpacked u;
} wire_t;

static void wire_init(wire_t *w) {
  msgpack_sbuffer_init(&w->buf);
  msgpack_packer_init(&w->pk, &w->buf, msgpack_sbuffer_write);
  msgpack_unpacked_init(&w->u);
}

static const msgpack_object *wire_obj(wire_t *w) {
  ASSERT_EQ(MSGPACK_UNPACK_SUCCESS,
            msgpack_unpack_next(&w->u, w->buf.data, w->buf.size, NULL));
  return &w->u.data;
}

static void wire_free(wire_t *w) {
  msgpack_unpacked_destroy(&w->u);
  msgpack_sbuffer_destroy(&w->buf);
}

static void fill_failure(msg_failure_t *f) {
  msg_failure_init(f);
  strcpy(f->host, "node3");
  f->rank = 27;
  f->local_rank = 3;
  f->node_rank = 3;
  f->pid = 4242;
  f->exit_code = -1;
  f->signal = 9;
  f->time = 1764477916.25;
  f->tail = (char *)"Traceback (most recent call last):\n  ...\n";
  f->error = (char *)"ValueError: bad batch";
  f->attempt_dir = (char *)"/tmp/launch_j_abc123/attempt_2";
}

static void same_failure(const msg_failure_t *a, const msg_failure_t *b) {
  ASSERT_STR_EQ(a->host, b->host);
  ASSERT_EQ(a->rank, b->rank);
  ASSERT_EQ(a->local_rank, b->local_rank);
  ASSERT_EQ(a->node_rank, b->node_rank);
  ASSERT_EQ(a->pid, b->pid);
  ASSERT_EQ(a->exit_code, b->exit_code);
  ASSERT_EQ(a->signal, b->signal);
  ASSERT(a->time == b->time);
  ASSERT_STR_EQ(a->tail, b->tail);
  ASSERT_STR_EQ(a->error, b->error);
  ASSERT_STR_EQ(a->attempt_dir, b->attempt_dir);
}

static void test_join(void) {
  msg_join_t j, back;
  wire_t w;
  char *hosts[] = {(char *)"node0", (char *)"node1", (char *)"node2"};
  char err[256];
  msg_join_init(&j);
  strcpy(j.host, "node1");
  strcpy(j.addr, "10.0.0.2");
  j.nproc = 8;
  j.rank = 1;
  j.min = 2;
  j.max = 4;
  j.last_call_ms = 1234;
  j.join_timeout_ms = 99000;
  j.heartbeat_ms = 250;
  j.max_restarts = 3;
  j.is_static = 1;
  j.allow_mismatch = 1;
  j.master_port = 29511;
  j.expected = hosts;
  j.nexpected = 3;
  j.fingerprint = (char *)"launch-fingerprint 1\nprofile=auto\n";
  j.hosting = 1;
  j.prev_round = 4;
  j.prev_restarts = 2;
  j.survivors = 3;
  wire_init(&w);
  msg_join_pack(&w.pk, &j);
  ASSERT_EQ(0, msg_join_unpack(wire_obj(&w), &back, err, sizeof(err)));
  ASSERT_STR_EQ("node1", back.host);
  ASSERT_STR_EQ("10.0.0.2", back.addr);
  ASSERT_EQ(8, back.nproc);
  ASSERT_EQ(1, back.rank);
  ASSERT_EQ(2, back.min);
  ASSERT_EQ(4, back.max);
  ASSERT_EQ(1234, back.last_call_ms);
  ASSERT_EQ(99000, back.join_timeout_ms);
  ASSERT_EQ(250, back.heartbeat_ms);
  ASSERT_EQ(3, back.max_restarts);
  ASSERT_EQ(1, back.is_static);
  ASSERT_EQ(1, back.allow_mismatch);
  ASSERT_EQ(29511, back.master_port);
  ASSERT_EQ(3, (int)back.nexpected);
  ASSERT_STR_EQ("node2", back.expected[2]);
  ASSERT_STR_EQ(j.fingerprint, back.fingerprint);
  ASSERT_EQ(1, back.hosting);
  ASSERT_EQ(4, back.prev_round);
  ASSERT_EQ(2, back.prev_restarts);
  ASSERT_EQ(3, back.survivors);
  msg_join_free(&back);
  ASSERT(back.expected == NULL && back.fingerprint == NULL);
  wire_free(&w);
  /* the wire key of is_static is "static", as older agents send it */
  wire_init(&w);
  msgpack_pack_map(&w.pk, 1);
  msgpack_pack_str_with_body(&w.pk, "static", 6);
  msgpack_pack_true(&w.pk);
  ASSERT_EQ(0, msg_join_unpack(wire_obj(&w), &back, err, sizeof(err)));
  ASSERT_EQ(1, back.is_static);
  ASSERT_EQ(-1, back.rank); /* defaults for the rest */
  ASSERT_EQ(-1, back.prev_round);
  ASSERT_EQ(0, back.survivors);
  ASSERT_EQ(1, back.nproc);
  ASSERT_EQ(600000, back.join_timeout_ms);
  ASSERT(back.fingerprint == NULL);
  msg_join_free(&back);
  wire_free(&w);
}

static void test_round_and_restart(void) {
  msg_round_t r, rb;
  msg_restart_t x, xb;
  msg_leave_t l, lb;
  wire_t w;
  msg_round_init(&r);
  r.round = 5;
  r.node_rank = 2;
  r.nnodes = 3;
  r.world_size = 24;
  r.base_rank = 16;
  r.master_port = 40000;
  strcpy(r.addr, "10.0.0.3");
  strcpy(r.node0_addr, "10.0.0.1");
  strcpy(r.node0_host, "node0");
  wire_init(&w);
  msg_round_pack(&w.pk, &r);
  ASSERT_EQ(0, msg_round_unpack(wire_obj(&w), &rb, NULL, 0));
  ASSERT_EQ(0, memcmp(&r, &rb, offsetof(msg_round_t, succ_hosts)));
  ASSERT_EQ(0, rb.nsucc_hosts);
  ASSERT_EQ(0, rb.nsucc_addrs);
  msg_round_free(&rb);
  wire_free(&w);
  {
    /* the successor hosts of a host failover: by node rank, with the
     * addresses they were reached at */
    char *hosts[] = {(char *)"node1", (char *)"node2"};
    char *addrs[] = {(char *)"192.0.2.2", (char *)"192.0.2.3"};
    r.succ_hosts = hosts;
    r.nsucc_hosts = 2;
    r.succ_addrs = addrs;
    r.nsucc_addrs = 2;
    wire_init(&w);
    msg_round_pack(&w.pk, &r);
    ASSERT_EQ(0, msg_round_unpack(wire_obj(&w), &rb, NULL, 0));
    ASSERT_EQ(2, rb.nsucc_hosts);
    ASSERT_EQ(2, rb.nsucc_addrs);
    ASSERT_STR_EQ("node2", rb.succ_hosts[1]);
    ASSERT_STR_EQ("192.0.2.2", rb.succ_addrs[0]);
    msg_round_free(&rb);
    wire_free(&w);
    r.succ_hosts = r.succ_addrs = NULL;
    r.nsucc_hosts = r.nsucc_addrs = 0;
  }
  x.round = 7;
  x.reason = (char *)"lost node node2 (connection closed)";
  wire_init(&w);
  msg_restart_pack(&w.pk, &x);
  ASSERT_EQ(0, msg_restart_unpack(wire_obj(&w), &xb, NULL, 0));
  ASSERT_EQ(7, xb.round);
  ASSERT_STR_EQ(x.reason, xb.reason);
  msg_restart_free(&xb);
  wire_free(&w);
  msg_leave_init(&l);
  strcpy(l.reason, "agent received SIGTERM");
  wire_init(&w);
  msg_leave_pack(&w.pk, &l);
  ASSERT_EQ(0, msg_leave_unpack(wire_obj(&w), &lb, NULL, 0));
  ASSERT_STR_EQ(l.reason, lb.reason);
  wire_free(&w);
}

static void test_report_and_shutdown(void) {
  msg_report_t r, rb;
  msg_shutdown_t s, sb;
  msg_failure_t copy;
  wire_t w;
  /* success: no failure travels */
  msg_report_init(&r);
  r.round = 3;
  r.ok = 1;
  wire_init(&w);
  msg_report_pack(&w.pk, &r);
  ASSERT_EQ(0, msg_report_unpack(wire_obj(&w), &rb, NULL, 0));
  ASSERT_EQ(3, rb.round);
  ASSERT_EQ(1, rb.ok);
  ASSERT_EQ(0, rb.has_failure);
  ASSERT_EQ(-1, rb.failure.rank);
  wire_free(&w);
  /* a failure */
  r.ok = 0;
  r.has_failure = 1;
  fill_failure(&r.failure);
  wire_init(&w);
  msg_report_pack(&w.pk, &r);
  ASSERT_EQ(0, msg_report_unpack(wire_obj(&w), &rb, NULL, 0));
  ASSERT_EQ(0, rb.ok);
  ASSERT_EQ(1, rb.has_failure);
  same_failure(&r.failure, &rb.failure);
  /* the server keeps a copy as the root cause */
  ASSERT_EQ(0, msg_failure_copy(&copy, &rb.failure));
  msg_report_free(&rb);
  same_failure(&r.failure, &copy);
  wire_free(&w);
  /* SHUTDOWN with the root cause, and without */
  msg_shutdown_init(&s);
  s.ok = 0;
  s.reason = (char *)"rank 27 on node3 failed (signal 9); 2 of 2 restarts used";
  s.has_root = 1;
  s.root = copy;
  s.restarts = 2;
  s.max_restarts = 2;
  wire_init(&w);
  msg_shutdown_pack(&w.pk, &s);
  ASSERT_EQ(0, msg_shutdown_unpack(wire_obj(&w), &sb, NULL, 0));
  ASSERT_EQ(0, sb.ok);
  ASSERT_STR_EQ(s.reason, sb.reason);
  ASSERT_EQ(1, sb.has_root);
  same_failure(&copy, &sb.root);
  ASSERT_EQ(2, sb.restarts);
  ASSERT_EQ(2, sb.max_restarts);
  msg_shutdown_free(&sb);
  msg_failure_free(&copy);
  wire_free(&w);
  msg_shutdown_init(&s);
  s.ok = 1;
  wire_init(&w);
  msg_shutdown_pack(&w.pk, &s);
  ASSERT_EQ(0, msg_shutdown_unpack(wire_obj(&w), &sb, NULL, 0));
  ASSERT_EQ(1, sb.ok);
  ASSERT_EQ(0, sb.has_root);
  ASSERT(sb.reason == NULL);
  msg_shutdown_free(&sb);
  wire_free(&w);
}

static void test_status(void) {
  msg_status_t s, sb;
  msg_member_t m[2];
  char *exp[] = {(char *)"node0", (char *)"node9"};
  wire_t w;
  msg_status_init(&s);
  strcpy(s.job, "job42");
  strcpy(s.state, "running");
  s.round = 1;
  s.restarts = 1;
  s.max_restarts = 3;
  s.min = 2;
  s.max = 4;
  s.waited_ms = 77;
  s.reason = (char *)"node node1 joined";
  s.expected = exp;
  s.nexpected = 2;
  for (int i = 0; i < 2; i++) {
    msg_member_init(&m[i]);
    snprintf(m[i].host, sizeof(m[i].host), "node%d", i);
    snprintf(m[i].addr, sizeof(m[i].addr), "10.0.0.%d", i + 1);
    m[i].node_rank = i ? -1 : 0;
    m[i].nproc = 8;
    m[i].base_rank = i ? -1 : 0;
    strcpy(m[i].state, i ? "joining" : "running");
    m[i].heartbeat_age_ms = 100 * i;
    m[i].in_round = !i;
  }
  s.members = m;
  s.nmembers = 2;
  wire_init(&w);
  msg_status_pack(&w.pk, &s);
  ASSERT_EQ(0, msg_status_unpack(wire_obj(&w), &sb, NULL, 0));
  ASSERT_STR_EQ("job42", sb.job);
  ASSERT_STR_EQ("running", sb.state);
  ASSERT_EQ(1, sb.round);
  ASSERT_EQ(1, sb.restarts);
  ASSERT_EQ(3, sb.max_restarts);
  ASSERT_EQ(2, sb.min);
  ASSERT_EQ(4, sb.max);
  ASSERT_EQ(77, sb.waited_ms);
  ASSERT_STR_EQ(s.reason, sb.reason);
  ASSERT_EQ(2, (int)sb.nexpected);
  ASSERT_STR_EQ("node9", sb.expected[1]);
  ASSERT_EQ(2, (int)sb.nmembers);
  ASSERT_EQ(0, memcmp(m, sb.members, sizeof(m)));
  msg_status_free(&sb);
  wire_free(&w);
}

/* Keys a newer peer adds are ignored; a known key of the wrong type is
 * refused, naming the message and the key. */
static void test_strict_and_lenient(void) {
  msg_join_t j;
  msg_status_t s;
  wire_t w;
  char err[256];
  wire_init(&w);
  msgpack_pack_map(&w.pk, 2);
  msgpack_pack_str_with_body(&w.pk, "ckpt_steps", 10);
  msgpack_pack_array(&w.pk, 1);
  msgpack_pack_int(&w.pk, 100);
  msgpack_pack_str_with_body(&w.pk, "nproc", 5);
  msgpack_pack_int(&w.pk, 4);
  ASSERT_EQ(0, msg_join_unpack(wire_obj(&w), &j, err, sizeof(err)));
  ASSERT_EQ(4, j.nproc);
  msg_join_free(&j);
  wire_free(&w);
  wire_init(&w);
  msgpack_pack_map(&w.pk, 1);
  msgpack_pack_str_with_body(&w.pk, "nproc", 5);
  msgpack_pack_str_with_body(&w.pk, "8", 1);
  ASSERT_EQ(RDZV_EPROTO, msg_join_unpack(wire_obj(&w), &j, err, sizeof(err)));
  ASSERT_CONTAINS(err, "JOIN: 'nproc' is not an integer");
  wire_free(&w);
  wire_init(&w);
  msgpack_pack_array(&w.pk, 0);
  ASSERT_EQ(RDZV_EPROTO, msg_join_unpack(wire_obj(&w), &j, err, sizeof(err)));
  ASSERT_CONTAINS(err, "expected a map");
  wire_free(&w);
  /* a bad member after good ones: everything read so far is released */
  wire_init(&w);
  msgpack_pack_map(&w.pk, 2);
  msgpack_pack_str_with_body(&w.pk, "reason", 6);
  msgpack_pack_str_with_body(&w.pk, "r", 1);
  msgpack_pack_str_with_body(&w.pk, "members", 7);
  msgpack_pack_array(&w.pk, 2);
  msgpack_pack_map(&w.pk, 1);
  msgpack_pack_str_with_body(&w.pk, "host", 4);
  msgpack_pack_str_with_body(&w.pk, "a", 1);
  msgpack_pack_int(&w.pk, 3);
  ASSERT_EQ(RDZV_EPROTO, msg_status_unpack(wire_obj(&w), &s, err, sizeof(err)));
  ASSERT_CONTAINS(err, "member: expected a map");
  ASSERT(s.members == NULL && s.reason == NULL);
  wire_free(&w);
}

static int unhex(const char *h, uint8_t *out) {
  int n = 0;
  for (; h[0] && h[1]; h += 2)
    out[n++] = (uint8_t)strtol((char[]){h[0], h[1], 0}, NULL, 16);
  return n;
}

/* The progress key: the map with its optional scalars, the bare text of
 * older writers, the bytes examples/torch_progress.py writes. */
static void test_progress(void) {
  msg_progress_t a, b;
  uint8_t buf[MSG_PROGRESS_MAX], py[256];
  char err[256];
  size_t n;
  int np;
  msg_progress_init(&a);
  a.step = 42;
  a.time_ms = 1700000000123;
  a.loss = 3.25, a.has_loss = 1;
  a.grad_norm = 0.5, a.has_grad_norm = 1;
  a.lr = 6e-4, a.has_lr = 1;
  a.step_time = 0.125, a.has_step_time = 1;
  a.tokens = 65536, a.has_tokens = 1;
  a.total_steps = 1000, a.has_total_steps = 1;
  a.compute_time = 0.0625, a.has_compute_time = 1;
  n = msg_progress_encode(&a, buf, sizeof(buf));
  ASSERT(n > 0 && n <= MSG_PROGRESS_MAX);
  ASSERT_EQ(0, msg_progress_decode(buf, n, &b, err, sizeof(err)));
  ASSERT_EQ(42, b.step);
  ASSERT_EQ(1700000000123, b.time_ms);
  ASSERT(b.has_loss && b.loss == 3.25 && b.has_grad_norm && b.grad_norm == 0.5);
  ASSERT(b.has_lr && b.lr == 6e-4 && b.has_step_time && b.step_time == 0.125);
  ASSERT(b.has_tokens && b.tokens == 65536);
  ASSERT(b.has_total_steps && b.total_steps == 1000);
  ASSERT(b.has_compute_time && b.compute_time == 0.0625);
  ASSERT_EQ(0, msg_progress_encode(&a, buf, 10)); /* too small */
  /* absent scalars stay absent; NaN loss is a value */
  msg_progress_init(&a);
  a.step = 1;
  a.loss = NAN, a.has_loss = 1;
  n = msg_progress_encode(&a, buf, sizeof(buf));
  ASSERT_EQ(0, msg_progress_decode(buf, n, &b, err, sizeof(err)));
  ASSERT(b.has_loss && isnan(b.loss) && !b.has_lr && !b.has_tokens);
  /* the tag travels in the map too, and only when set */
  snprintf(a.tag, sizeof(a.tag), "%s", "0123456789abcdef");
  n = msg_progress_encode(&a, buf, sizeof(buf));
  ASSERT_EQ(0, msg_progress_decode(buf, n, &b, err, sizeof(err)));
  ASSERT_STR_EQ("0123456789abcdef", b.tag);
  a.tag[0] = '\0';
  n = msg_progress_encode(&a, buf, sizeof(buf));
  ASSERT(memmem(buf, n, "tag", 3) == NULL);
  /* the bare step of older writers */
  ASSERT_EQ(0, msg_progress_decode("17 1700000000000", 16, &b, err,
                                   sizeof(err)));
  ASSERT(b.step == 17 && b.time_ms == 1700000000000 && !b.has_loss);
  ASSERT_EQ(RDZV_EPROTO, msg_progress_decode("17", 2, &b, err, sizeof(err)));
  ASSERT_CONTAINS(err, "is not '<step> <unix ms> [<tag>]'");
  /* the worker's tag after the time (LAUNCH_PROGRESS_TAG, issue #24) */
  ASSERT_EQ(0, msg_progress_decode("17 5 x", 6, &b, err, sizeof(err)));
  ASSERT(b.step == 17 && b.time_ms == 5 && strcmp(b.tag, "x") == 0);
  ASSERT_EQ(RDZV_EPROTO, msg_progress_decode("17 5 x y", 8, &b, err,
                                             sizeof(err)));
  ASSERT_EQ(RDZV_EPROTO, msg_progress_decode("17 5 ", 5, &b, err,
                                             sizeof(err)));
  ASSERT_EQ(RDZV_EPROTO, msg_progress_decode("step", 4, &b, err, sizeof(err)));
  ASSERT_EQ(RDZV_EPROTO, msg_progress_decode("", 0, &b, err, sizeof(err)));
  /* trailing bytes after the map are refused */
  n = msg_progress_encode(&a, buf, sizeof(buf));
  buf[n] = 0;
  ASSERT_EQ(RDZV_EPROTO, msg_progress_decode(buf, n + 1, &b, err, sizeof(err)));
  /* encode_progress(7, 1700000000000, loss=2.5, lr=0.001, tokens=4096) of
   * examples/torch_progress.py */
  np = unhex("85a473746570d30000000000000007a774696d655f6d73d30000018bcfe56800"
             "a46c6f7373cb4004000000000000a26c72cb3f50624dd2f1a9fca6746f6b656e"
             "73d30000000000001000", py);
  ASSERT_EQ(0, msg_progress_decode(py, (size_t)np, &b, err, sizeof(err)));
  ASSERT(b.step == 7 && b.time_ms == 1700000000000 && b.loss == 2.5 &&
         b.lr == 0.001 && b.tokens == 4096 && !b.has_grad_norm);
}

int main(void) {
  test_join();
  test_round_and_restart();
  test_report_and_shutdown();
  test_status();
  test_strict_and_lenient();
  test_progress();
  printf("test_msg: ok\n");
  return 0;
}
