/* fuzz_resume_view.c - libFuzzer target for a node's checkpoint view as the
 * agent reads it from the store at a restart (launcher/resume.c,
 * resume_view_parse): "FIRST NRANKS HOST\n" and the lines of
 * ckpt_view_decode. Another node wrote it: any bytes give a host name
 * without spaces, non-negative ranks and steps whose bitmaps fit their
 * world size, or a clean error. Seeds: fuzz/corpus/resume_view/. */
#include "../launcher/resume.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = (char *)fuzz_dup(data, size);
  resume_view_t v;
  int rc = resume_view_parse(buf, size, &v);
  free(buf);
  if (rc != 0) {
    FUZZ_CHECK(rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
    FUZZ_CHECK(v.nsteps == 0);
  } else {
    FUZZ_CHECK(v.first >= 0 && v.nranks >= 0);
    FUZZ_CHECK(v.host[0] != '\0' && strchr(v.host, ' ') == NULL);
    for (size_t i = 0; i < v.nsteps; i++) {
      FUZZ_CHECK(v.steps[i].step >= 0);
      if (v.steps[i].ranks)
        fuzz_touch(v.steps[i].ranks, ((size_t)v.steps[i].world_size + 7) / 8);
    }
  }
  resume_view_free(&v);
  return 0;
}
