/* fuzz_ckpt_manifest.c - libFuzzer target for the manifest reader
 * (checkpoint/record.c, ck_manifest_decode). A manifest is read back from
 * disk after crashes and by other nodes: any bytes give a manifest whose
 * every shard has a rank in range, a plain file name and a 64-hex SHA-256,
 * or a clean error with a reason; an accepted manifest encodes and decodes
 * back to the same fields. Seeds: fuzz/corpus/ckpt_manifest/. */
#include "ck_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = (char *)fuzz_dup(data, size), why[256] = "", *text;
  ck_manifest_t m, back;
  size_t len;
  int rc = ck_manifest_decode(buf, size, &m, why, sizeof(why));
  if (rc != 0) {
    FUZZ_CHECK(rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
    FUZZ_CHECK(rc == RDZV_ENOMEM || why[0] != '\0');
    FUZZ_CHECK(m.shards == NULL);
    free(buf);
    return 0;
  }
  FUZZ_CHECK(m.world_size >= 1 && m.world_size <= CK_MAX_WORLD);
  FUZZ_CHECK(m.step >= 0 && m.shards != NULL);
  for (int r = 0; r < m.world_size; r++) {
    FUZZ_CHECK(m.shards[r].rank == r);
    FUZZ_CHECK(ck_name_ok(m.shards[r].file));
    FUZZ_CHECK(strlen(m.shards[r].sha) == 64);
  }
  FUZZ_CHECK(ck_manifest_encode(&m, &text, &len) == 0);
  FUZZ_CHECK(ck_manifest_decode(text, len, &back, why, sizeof(why)) == 0);
  FUZZ_CHECK(back.step == m.step && back.world_size == m.world_size);
  FUZZ_CHECK(back.replicated == m.replicated && strcmp(back.job, m.job) == 0);
  for (int r = 0; r < m.world_size; r++) {
    FUZZ_CHECK(back.shards[r].size == m.shards[r].size);
    FUZZ_CHECK(strcmp(back.shards[r].file, m.shards[r].file) == 0);
    FUZZ_CHECK(strcmp(back.shards[r].sha, m.shards[r].sha) == 0);
  }
  ck_manifest_free(&back);
  ck_manifest_free(&m);
  free(text);
  free(buf);
  return 0;
}
