/* replay_main.c - runs a fuzz target without libFuzzer: every file named on
 * the command line, and every file in every directory named (sorted, one
 * level, skipping README* and dot files), goes once through
 * LLVMFuzzerTestOneInput. ctest runs it over fuzz/corpus/<target>/ and
 * fuzz/crashers/<target>/ in every sanitizer build, so an input that once
 * crashed keeps being checked (SQLite's fuzzcheck).
 *
 * usage: replay_<target> PATH...   exit 0 when every input passed; a crash
 * aborts (the sanitizer report names the input printed just before). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  uint8_t *data = NULL;
  size_t len = 0, cap = 0;
  if (f == NULL) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  for (;;) {
    size_t r;
    if (cap - len < 4096) {
      uint8_t *nd = realloc(data, cap ? cap * 2 : 8192);
      if (nd == NULL) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        free(data);
        fclose(f);
        return -1;
      }
      data = nd;
      cap = cap ? cap * 2 : 8192;
    }
    r = fread(data + len, 1, cap - len, f);
    len += r;
    if (r == 0)
      break;
  }
  if (ferror(f)) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    free(data);
    fclose(f);
    return -1;
  }
  fclose(f);
  /* Say which input runs, so that a sanitizer report can be traced to it;
   * the target's own buffer of exactly len bytes catches over-reads. */
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
  {
    uint8_t *exact = fuzz_dup(data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
  }
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* RET inputs run, or -1 on an error. */
static int run_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char **names = NULL;
  size_t n = 0, cap = 0;
  int count = 0;
  if (d == NULL) {
    fprintf(stderr, "replay: cannot open directory %s: %s\n", dir,
            strerror(errno));
    return -1;
  }
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strncmp(e->d_name, "README", 6) == 0)
      continue;
    if (n == cap) {
      char **nn = realloc(names, (cap ? cap * 2 : 64) * sizeof(*nn));
      if (nn == NULL)
        break;
      names = nn;
      cap = cap ? cap * 2 : 64;
    }
    if ((names[n] = strdup(e->d_name)) == NULL)
      break;
    n++;
  }
  closedir(d);
  if (n > 0)
    qsort(names, n, sizeof(*names), by_name);
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      if (run_file(path) != 0)
        count = -1;
      else if (count >= 0)
        count++;
    }
    free(names[i]);
  }
  free(names);
  return count;
}

int main(int argc, char **argv) {
  int total = 0, failed = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    struct stat st;
    int r;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      failed = 1;
      continue;
    }
    r = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) == 0;
    if (r < 0)
      failed = 1;
    else
      total += r;
  }
  printf("replay: %d inputs passed%s\n", total,
         failed ? ", but some could not be read" : "");
  return failed ? 1 : 0;
}
