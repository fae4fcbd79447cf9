/* fuzz_ckpt_pickle.c - libFuzzer target for the pickle walker
 * (checkpoint/pickle.c: pk_walk, pk_find_ints, pk_dcp_storage). The
 * pickles come from other trainers' checkpoints (DCP's .metadata,
 * DeepSpeed's and Megatron's torch.save files): any bytes give a clean
 * error or a walk that consumed at most the input, with every string it
 * reports inside the input; nothing is ever executed or built.
 * Seeds: fuzz/corpus/ckpt_pickle/. */
#include "ck_int.h"
#include "fuzz.h"

typedef struct {
  const uint8_t *base;
  size_t len;
} span_t;

static int cb(void *ud, const pk_atom_t *a) {
  span_t *s = ud;
  if (a->kind == PK_STR)
    FUZZ_CHECK(fuzz_within(a->s, a->len, s->base, s->len));
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *buf = fuzz_dup(data, size);
  span_t s = {buf, size};
  size_t used = 0, n;
  pk_storage_t *recs;
  pk_keyint_t keys[3] = {{"dp_world_size", 0, 0},
                         {"tensor_model_parallel_size", 0, 0},
                         {"offset", 0, 0}};
  int rc = pk_walk(buf, size, &used, cb, &s);
  FUZZ_CHECK(rc == 0 || rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
  FUZZ_CHECK(used <= size);
  rc = pk_find_ints(buf, size, keys, 3);
  FUZZ_CHECK(rc == 0 || rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
  rc = pk_dcp_storage(buf, size, &recs, &n);
  if (rc == 0) {
    for (size_t i = 0; i < n; i++)
      FUZZ_CHECK(fuzz_within(recs[i].path, recs[i].plen, buf, size));
    free(recs);
  } else {
    FUZZ_CHECK(rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
  }
  free(buf);
  return 0;
}
