/* fuzz_sampler.c - libFuzzer target for the GPU sampler's replies as the
 * agent decodes them (launcher/sampler.h): the input is a byte stream of
 * replies, read in pieces of the sizes its first byte picks, as recv()
 * would hand them over. A reply is taken only whole, its text within the
 * bytes read and GS_TEXT_MAX; a bad header ends the stream. Requests: the
 * first 8 bytes as one. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv.h"
#include "sampler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t step, have = 0, used = 0;
  uint32_t seq;
  if (size < 1)
    return 0;
  step = (size_t)data[0] % 64 + 1;
  data++, size--;
  if (gs_parse_request(data, size, &seq) == 0 &&
      (size < GS_REQ_LEN || gs_get_u32(data) != GS_REQ_MAGIC))
    abort();
  while (used < size) {
    const uint8_t *text;
    uint32_t len;
    long r;
    have = have + step > size ? size : have + step;
    while ((r = gs_parse_reply(data + used, have - used, &seq, &text,
                               &len)) > 0) {
      if ((size_t)r != GS_HDR_LEN + (size_t)len || len > GS_TEXT_MAX ||
          text != data + used + GS_HDR_LEN || used + (size_t)r > have)
        abort();
      used += (size_t)r;
    }
    if (r < 0) {
      if (r != RDZV_EPROTO)
        abort();
      return 0;
    }
    if (have == size)
      break;
  }
  return 0;
}
