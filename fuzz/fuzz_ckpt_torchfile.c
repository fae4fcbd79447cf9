/* fuzz_ckpt_torchfile.c - libFuzzer target for the torch.save archive and
 * safetensors readers (checkpoint/torchfile.c: ck_torch_check,
 * ck_safetensors_check) on a file held in memory. The files are other
 * trainers' shards, possibly cut short by a crash: any bytes give 0, a
 * clean "incomplete" or "format" verdict with a reason, never a read
 * outside the file; a main pickle handed back is no longer than the file.
 * Seeds: fuzz/corpus/ckpt_torchfile/. */
#include "ck_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *buf = fuzz_dup(data, size), *pkl = NULL;
  ck_src_t src;
  ck_mem_t mem;
  char why[256] = "";
  size_t plen = 0;
  int rc;
  ck_src_mem(&src, &mem, buf, size);
  rc = ck_torch_check(&src, &pkl, &plen, why, sizeof(why));
  FUZZ_CHECK(rc == 0 || rc == CKPT_EINCOMPLETE || rc == CKPT_EFORMAT ||
             rc == RDZV_ENOMEM);
  FUZZ_CHECK(rc == 0 || rc == RDZV_ENOMEM || why[0] != '\0');
  if (pkl) {
    pk_keyint_t k = {"dp_world_size", 0, 0};
    FUZZ_CHECK(rc == 0 && plen <= size);
    fuzz_touch(pkl, plen);
    (void)pk_find_ints(pkl, plen, &k, 1);
    free(pkl);
  }
  why[0] = '\0';
  rc = ck_safetensors_check(&src, why, sizeof(why));
  FUZZ_CHECK(rc == 0 || rc == CKPT_EINCOMPLETE || rc == CKPT_EFORMAT ||
             rc == RDZV_ENOMEM);
  FUZZ_CHECK(rc == 0 || rc == RDZV_ENOMEM || why[0] != '\0');
  free(buf);
  return 0;
}
