/* fuzz_resume_view.c - libFuzzer target for a node's checkpoint view and
 * verdict as the agent reads them from the store at a restart
 * (launcher/resume.c, resume_view_parse; checkpoint/agree.c,
 * ck_view_unpack and ck_verdict_unpack: VIEW and VERDICT maps of the
 * message codec). Another node wrote them: any bytes give a host name,
 * non-negative ranks and steps whose bitmaps fit their world size, or a
 * clean error; a view that decodes packs again to a view that decodes the
 * same. Seeds: fuzz/corpus/resume_view/. */
#include "../launcher/resume.h"
#include "ck_store.h"
#include "fuzz.h"

static void verdict(const uint8_t *data, size_t size) {
  char problem[256];
  int ok;
  if (ck_verdict_unpack(data, size, &ok, problem, sizeof(problem)) == 0)
    FUZZ_CHECK(ok == 0 || ok == 1);
  FUZZ_CHECK(memchr(problem, '\0', sizeof(problem)) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = (char *)fuzz_dup(data, size), err[300] = "";
  resume_view_t v;
  int rc = resume_view_parse(buf, size, &v, err, sizeof(err));
  free(buf);
  verdict(data, size);
  if (rc != 0) {
    FUZZ_CHECK(rc == CKPT_EFORMAT || rc == RDZV_ENOMEM);
    FUZZ_CHECK(v.nsteps == 0);
    FUZZ_CHECK(rc == RDZV_ENOMEM || err[0] != '\0');
  } else {
    FUZZ_CHECK(v.first >= 0 && v.nranks >= 0);
    FUZZ_CHECK(v.host[0] != '\0');
    for (size_t i = 0; i < v.nsteps; i++) {
      FUZZ_CHECK(v.steps[i].step >= 0);
      FUZZ_CHECK(v.steps[i].world_size > 0 || v.steps[i].ranks == NULL);
      if (v.steps[i].ranks)
        fuzz_touch(v.steps[i].ranks, ((size_t)v.steps[i].world_size + 7) / 8);
    }
  }
  resume_view_free(&v);
  return 0;
}
