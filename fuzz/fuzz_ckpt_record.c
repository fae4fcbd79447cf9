/* fuzz_ckpt_record.c - libFuzzer target for the completion-file and store
 * record reader (checkpoint/record.c, ck_record_decode). A completion file
 * is written by a trainer in any language: any bytes give a record whose
 * rank is the file's, whose file name stays inside the step directory and
 * whose SHA-256 is empty or 64 hex digits, or a clean error with a reason;
 * an accepted record encodes and decodes back to itself.
 * Seeds: fuzz/corpus/ckpt_record/. */
#include "ck_int.h"
#include "fuzz.h"

static void one(const char *buf, size_t size, int hint) {
  ck_record_t r, back;
  char why[256] = "", *text;
  size_t len;
  int rc = ck_record_decode(buf, size, hint, &r, why, sizeof(why));
  if (rc != 0) {
    FUZZ_CHECK(rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
    FUZZ_CHECK(rc == RDZV_ENOMEM || why[0] != '\0');
    return;
  }
  FUZZ_CHECK(hint < 0 || r.rank == hint);
  FUZZ_CHECK(r.rank >= 0 && r.rank < CK_MAX_WORLD);
  FUZZ_CHECK(ck_name_ok(r.file));
  FUZZ_CHECK(r.sha[0] == '\0' || strlen(r.sha) == 64);
  FUZZ_CHECK(r.world_size >= 0 && r.world_size <= CK_MAX_WORLD);
  FUZZ_CHECK(ck_record_encode(&r, &text, &len) == 0);
  FUZZ_CHECK(ck_record_decode(text, len, -1, &back, why, sizeof(why)) == 0);
  FUZZ_CHECK(back.rank == r.rank && back.size == r.size);
  FUZZ_CHECK(strcmp(back.file, r.file) == 0 && strcmp(back.sha, r.sha) == 0);
  FUZZ_CHECK(back.replicated == r.replicated);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = (char *)fuzz_dup(data, size);
  one(buf, size, -1);
  one(buf, size, 3);
  free(buf);
  return 0;
}
