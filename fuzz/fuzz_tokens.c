/* fuzz_tokens.c - libFuzzer target for train_gpt's data files
 * (gpt_data_parse, model/gpt_data.h): an llm.c token file's header and
 * size, or text. Invariants: a file that parses as tokens holds exactly
 * its header's count of ids after the 1024-byte header; text is one token
 * per byte; a refusal always says why; an empty file is refused. */
#include "fuzz.h"
#include "gpt_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gpt_data_info_t info;
  char err[512];
  /* an exact-size copy (as fuzz_dup), zeroed so that no compiler takes
   * the one byte behind an empty input for uninitialised */
  uint8_t *copy = calloc(size ? size : 1, 1);
  int rc;
  if (copy == NULL)
    return 0;
  if (size)
    memcpy(copy, data, size);
  err[0] = '\0';
  rc = gpt_data_parse(copy, size, &info, err, sizeof(err));
  if (rc == 0) {
    FUZZ_CHECK(size > 0);
    if (info.kind == GPT_DATA_TOKENS) {
      FUZZ_CHECK(info.width == 2 || info.width == 4);
      FUZZ_CHECK(info.count > 0);
      FUZZ_CHECK(info.offset == 1024);
      FUZZ_CHECK(info.offset + info.count * (size_t)info.width == size);
    } else {
      FUZZ_CHECK(info.kind == GPT_DATA_TEXT && info.width == 1);
      FUZZ_CHECK(info.offset == 0 && info.count == size);
    }
  } else {
    FUZZ_CHECK(err[0] != '\0');
  }
  free(copy);
  return 0;
}
