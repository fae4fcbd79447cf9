/* fuzz_msg.c - libFuzzer target for the rendezvous messages (rendezvous/
 * msg.c), which decode what agents send the server and what the server
 * sends agents and `launch status`, and the checkpoint agreement's VIEW
 * and VERDICT maps that agents leave in the store (first bytes 10 and
 * 11). The first byte picks the message, the rest is one msgpack
 * object. Invariants: unpack never reads outside the
 * object; what unpacks packs again, and that unpacks and packs to the same
 * bytes (a round trip loses nothing and invents nothing); free releases
 * everything (LeakSanitizer). A first byte 0xff feeds the rest to
 * msg_progress_decode as a progress key's value. */
#include "fuzz.h"
#include "msg.h"
#include "proto.h"

#define ROUND_TRIP(name, type)                                                 \
  static void rt_##name(const msgpack_object *o) {                             \
    type a, b;                                                                 \
    msgpack_sbuffer s1, s2;                                                    \
    msgpack_packer p1, p2;                                                     \
    msgpack_unpacked u;                                                        \
    char err[256];                                                             \
    if (msg_##name##_unpack(o, &a, err, sizeof(err)) != 0) {                   \
      FUZZ_CHECK(err[0] != '\0');                                              \
      return;                                                                  \
    }                                                                          \
    msgpack_sbuffer_init(&s1);                                                 \
    msgpack_packer_init(&p1, &s1, msgpack_sbuffer_write);                      \
    msg_##name##_pack(&p1, &a);                                                \
    msgpack_unpacked_init(&u);                                                 \
    FUZZ_CHECK(msgpack_unpack_next(&u, s1.data, s1.size, NULL) ==              \
               MSGPACK_UNPACK_SUCCESS);                                        \
    FUZZ_CHECK(msg_##name##_unpack(&u.data, &b, err, sizeof(err)) == 0);       \
    msgpack_sbuffer_init(&s2);                                                 \
    msgpack_packer_init(&p2, &s2, msgpack_sbuffer_write);                      \
    msg_##name##_pack(&p2, &b);                                                \
    FUZZ_CHECK(s1.size == s2.size && memcmp(s1.data, s2.data, s1.size) == 0);  \
    msgpack_unpacked_destroy(&u);                                              \
    msgpack_sbuffer_destroy(&s1);                                              \
    msgpack_sbuffer_destroy(&s2);                                              \
    msg_##name##_free(&a);                                                     \
    msg_##name##_free(&b);                                                     \
  }

ROUND_TRIP(join, msg_join_t)
ROUND_TRIP(round, msg_round_t)
ROUND_TRIP(report, msg_report_t)
ROUND_TRIP(leave, msg_leave_t)
ROUND_TRIP(restart, msg_restart_t)
ROUND_TRIP(shutdown, msg_shutdown_t)
ROUND_TRIP(status, msg_status_t)
ROUND_TRIP(failure, msg_failure_t)
ROUND_TRIP(member, msg_member_t)
ROUND_TRIP(progress, msg_progress_t)
ROUND_TRIP(ckpt_view, msg_ckpt_view_t)
ROUND_TRIP(ckpt_verdict, msg_ckpt_verdict_t)

static void (*const targets[])(const msgpack_object *) = {
    rt_join, rt_round, rt_report, rt_leave, rt_restart,
    rt_shutdown, rt_status, rt_failure, rt_member, rt_progress,
    rt_ckpt_view, rt_ckpt_verdict};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  msgpack_unpacked u;
  uint8_t *body;
  if (size < 1)
    return 0;
  /* A progress key's raw bytes (text or map), as the agent reads them. */
  if (data[0] == 0xff) {
    msg_progress_t p;
    uint8_t out[MSG_PROGRESS_MAX];
    body = fuzz_dup(data + 1, size - 1);
    if (msg_progress_decode(body, size - 1, &p, NULL, 0) == 0)
      (void)msg_progress_encode(&p, out, sizeof(out));
    free(body);
    return 0;
  }
  /* The limits the server and the agent apply before decoding. */
  if (proto_scan(data + 1, size - 1, &lim) != 0)
    return 0;
  body = fuzz_dup(data + 1, size - 1);
  msgpack_unpacked_init(&u);
  if (msgpack_unpack_next(&u, (const char *)body, size - 1, NULL) ==
      MSGPACK_UNPACK_SUCCESS)
    targets[data[0] % (sizeof(targets) / sizeof(targets[0]))](&u.data);
  msgpack_unpacked_destroy(&u);
  free(body);
  return 0;
}
