/* The persistent cuBLASLt tuning cache's file (model/tune_cache.h): where
 * it lives (GPT_CUDA_TUNE_CACHE, XDG_CACHE_HOME, HOME), that a choice
 * written by one start is found by the next, that starts merge, that a
 * corrupt or foreign file is ignored and rewritten, and that the file and
 * its directory are private to the user. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"
#include "tune_cache.h"

static tc_entry_t entry(const char *dev, int64_t m, uint64_t algo0) {
  tc_entry_t e;
  memset(&e, 0, sizeof(e));
  snprintf(e.dev, sizeof(e.dev), "%s", dev);
  e.ltver = 130000;
  for (int k = 0; k < TC_KEY_N; k++)
    e.key[k] = k + 1;
  e.key[0] = m;
  for (int k = 0; k < TC_ALGO_N; k++)
    e.algo[k] = algo0 + (uint64_t)k;
  return e;
}

static void test_path(void) {
  char p[512];
  unsetenv("GPT_CUDA_TUNE_CACHE");
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  setenv("HOME", "/home/u", 1);
  ASSERT_EQ(1, tc_path(p, sizeof(p)));
  ASSERT_STR_EQ("/x/cache/launch/cublaslt-tune.txt", p);
  setenv("XDG_CACHE_HOME", "relative", 1); /* not absolute: not used */
  ASSERT_EQ(1, tc_path(p, sizeof(p)));
  ASSERT_STR_EQ("/home/u/.cache/launch/cublaslt-tune.txt", p);
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  ASSERT_EQ(0, tc_path(p, sizeof(p))); /* nowhere to keep it: no cache */
  setenv("GPT_CUDA_TUNE_CACHE", "/elsewhere/t.txt", 1);
  ASSERT_EQ(1, tc_path(p, sizeof(p)));
  ASSERT_STR_EQ("/elsewhere/t.txt", p);
  ASSERT_EQ(-ENAMETOOLONG, tc_path(p, 8));
  setenv("GPT_CUDA_TUNE_CACHE", "0", 1);
  ASSERT_EQ(0, tc_path(p, sizeof(p)));
  ASSERT_EQ(0, tc_device_key(p, sizeof(p), "NVIDIA H200 (x)", 90, 132));
  ASSERT_STR_EQ("NVIDIA_H200__x_:cc90:sm132", p);
  ASSERT_EQ(-EINVAL, tc_device_key(p, sizeof(p), "", 90, 132));
  printf("  the file: GPT_CUDA_TUNE_CACHE, else XDG_CACHE_HOME, else HOME\n");
}

static void test_round_trip(void) {
  char path[600], dir[560];
  tc_table_t t = {NULL, 0, 0};
  tc_entry_t a = entry("NVIDIA_H200:cc90:sm132", 768, 0x100),
             b = entry("NVIDIA_H200:cc90:sm132", 2304, 0x200),
             a2 = entry("NVIDIA_H200:cc90:sm132", 768, 0x300),
             other = entry("NVIDIA_A100:cc80:sm108", 768, 0x400);
  struct stat st;
  snprintf(dir, sizeof(dir), "%s/cache/launch", test_tmpdir());
  snprintf(path, sizeof(path), "%s/cublaslt-tune.txt", dir);
  ASSERT_EQ(0, tc_load(path, &t)); /* none yet: empty */
  ASSERT_EQ(0, t.n);
  ASSERT_EQ(0, tc_update(path, &a, 1));
  ASSERT_EQ(0, stat(path, &st));
  ASSERT_EQ(0600, st.st_mode & 0777);
  ASSERT_EQ(0, stat(dir, &st));
  ASSERT_EQ(0700, st.st_mode & 0777);
  /* another start adds its own; a third re-times a and replaces it */
  ASSERT_EQ(0, tc_update(path, &b, 1));
  ASSERT_EQ(0, tc_update(path, &other, 1));
  ASSERT_EQ(0, tc_update(path, &a2, 1));
  ASSERT_EQ(0, tc_load(path, &t));
  ASSERT_EQ(3, t.n);
  ASSERT(tc_find(&t, a.dev, a.ltver, a.key) != NULL);
  ASSERT_EQ(0x300, tc_find(&t, a.dev, a.ltver, a.key)->algo[0]);
  ASSERT_EQ(0x207, tc_find(&t, b.dev, b.ltver, b.key)->algo[7]);
  ASSERT_EQ(0x400, tc_find(&t, other.dev, other.ltver, other.key)->algo[0]);
  /* another cuBLASLt version is another entry */
  a.ltver++;
  ASSERT(tc_find(&t, a.dev, a.ltver, a.key) == NULL);
  tc_free(&t);
  printf("  a choice written by one start is found by the next; starts merge\n");
}

static void test_corrupt(void) {
  char path[600], *text;
  tc_table_t t = {NULL, 0, 0};
  tc_entry_t a = entry("G:cc90:sm1", 64, 0x500), bad = a;
  FILE *f;
  snprintf(path, sizeof(path), "%s/corrupt.txt", test_tmpdir());
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs("launch-cublaslt-tune 1\nG:cc90:sm1 1 2 3\n", f); /* cut short */
  fclose(f);
  ASSERT_EQ(1, tc_load(path, &t));
  ASSERT_EQ(0, t.n);
  ASSERT_EQ(0, tc_update(path, &a, 1)); /* rewritten with the new entry */
  ASSERT_EQ(0, tc_load(path, &t));
  ASSERT_EQ(1, t.n);
  text = test_read_file(path);
  ASSERT(text && strstr(text, "launch-cublaslt-tune 1\n") != NULL);
  free(text);
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs("{\"some\": \"json\"}\n", f); /* someone else's file */
  fclose(f);
  ASSERT_EQ(1, tc_load(path, &t));
  ASSERT_EQ(0, t.n);
  /* what would not parse back is refused, not written */
  bad.key[3] = -1;
  ASSERT_EQ(-EINVAL, tc_put(&t, &bad));
  snprintf(bad.dev, sizeof(bad.dev), "has space");
  bad.key[3] = 1;
  ASSERT_EQ(-EINVAL, tc_put(&t, &bad));
  tc_free(&t);
  printf("  a corrupt or foreign file is ignored and rewritten\n");
}

int main(void) {
  test_path();
  test_round_trip();
  test_corrupt();
  printf("test_tune_cache: ok\n");
  return 0;
}
