/* fuzz_ckpt_pointers.c - libFuzzer target for the small files that say
 * where a checkpoint is and what it holds: launch's `latest`, Megatron's
 * latest_checkpointed_iteration.txt and metadata.json, DeepSpeed's
 * `latest`, the Hugging Face Trainer's trainer_state.json and
 * *.index.json, and DCP's __R.metadata file names (checkpoint/record.c,
 * checkpoint/layout_peers.c). Each input goes
 * through every reader: any bytes give a clean error or a value that is
 * safe to use (a non-negative step, a tag or shard name that stays inside
 * the checkpoint directory). Seeds: fuzz/corpus/ckpt_pointers/. */
#include "ck_int.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = (char *)fuzz_dup(data, size), name[CKPT_NAME_MAX], why[256];
  int64_t step;
  int release;
  char **names;
  size_t n;
  if (ck_latest_decode(buf, size, &step) == 0)
    FUZZ_CHECK(step >= 0);
  if (ck_megatron_tracker(buf, size, &step, &release) == 0)
    FUZZ_CHECK(step >= 0 && (release == 0 || step == 0));
  if (ck_deepspeed_latest(buf, size, name, sizeof(name)) == 0)
    FUZZ_CHECK(ck_name_ok(name));
  if (ck_hf_trainer_state(buf, size, &step, why, sizeof(why)) == 0)
    FUZZ_CHECK(step >= 0);
  if (ck_hf_index(buf, size, &names, &n, why, sizeof(why)) == 0) {
    for (size_t i = 0; i < n; i++) {
      FUZZ_CHECK(ck_name_ok(names[i]));
      FUZZ_CHECK(i == 0 || strcmp(names[i - 1], names[i]) < 0);
    }
    ck_free_names(names, n);
  }
  if (ck_megatron_metadata(buf, size, name, sizeof(name)) == 0)
    FUZZ_CHECK(strlen(name) < sizeof(name));
  /* DCP's file names: a directory entry, NUL-terminated. */
  {
    char *z = malloc(size + 1);
    FUZZ_CHECK(z != NULL);
    memcpy(z, data, size);
    z[size] = '\0';
    if (ck_dcp_rank_meta(z, &step) == 0)
      FUZZ_CHECK(step >= 0 && ck_dcp_name(z));
    free(z);
  }
  free(buf);
  return 0;
}
