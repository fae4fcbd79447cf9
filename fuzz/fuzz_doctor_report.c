/* fuzz_doctor_report.c - libFuzzer target for the compact doctor report,
 * which node 0 parses from every agent: parse, serialise, parse again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  doc_report_t *r = NULL, *again = NULL;
  char *text = NULL, *text2 = NULL, *json = NULL;
  size_t len = 0, len2 = 0;
  if (doc_from_compact((const char *)data, size, &r) != 0)
    return 0;
  if (doc_to_compact(r, &text, &len) != 0 || doc_to_json(r, &json) != 0)
    abort();
  if (doc_from_compact(text, len, &again) != 0 ||
      doc_to_compact(again, &text2, &len2) != 0 || len != len2 ||
      memcmp(text, text2, len) != 0)
    abort();
  free(json);
  free(text);
  free(text2);
  doc_free(r);
  doc_free(again);
  return 0;
}
