/* fuzz_ckpt_view.c - libFuzzer target for the text form of a node's
 * checkpoint view (checkpoint/agree.c, ckpt_view_decode) and for the
 * agreement run over what it decodes (ckpt_agree). Views come from other
 * nodes: any bytes give steps whose rank bitmaps fit their world size, or
 * a clean error; the agreement on them returns a step one of them holds
 * (or -1) and never reads outside a bitmap. Seeds: fuzz/corpus/ckpt_view/. */
#include "ck_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = (char *)fuzz_dup(data, size);
  ckpt_have_t *h;
  size_t n;
  int rc = ckpt_view_decode(buf, size, &h, &n);
  free(buf);
  if (rc != 0) {
    FUZZ_CHECK(rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    FUZZ_CHECK(h[i].step >= 0);
    FUZZ_CHECK(h[i].world_size >= 0 && h[i].world_size <= CK_MAX_WORLD);
    FUZZ_CHECK(h[i].world_size > 0 || h[i].ranks == NULL);
    if (h[i].ranks)
      fuzz_touch(h[i].ranks, ((size_t)h[i].world_size + 7) / 8);
  }
  if (n > 0) {
    /* The view as two nodes of a job as large as its first step. */
    int world = h[0].world_size > 0 ? h[0].world_size : 1;
    ckpt_node_view_t nodes[2] = {{"a", h, n, 0, world / 2},
                                 {"b", h, n, world / 2, world - world / 2}};
    ckpt_agreement_t a;
    rc = ckpt_agree(nodes, 2, world, &a);
    FUZZ_CHECK(rc == 0 || rc == CKPT_EWORLD || rc == RDZV_ENOMEM);
    if (a.step >= 0) {
      int found = 0;
      for (size_t i = 0; i < n; i++)
        found |= h[i].step == a.step;
      FUZZ_CHECK(found);
    }
  }
  ckpt_view_free(h, n);
  return 0;
}
