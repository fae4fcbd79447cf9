/* test_aff_libs.c - the GPU stack's versions for the node fingerprint read
 * from files, no library loaded (aff_sysinfo_files): on fake trees laid
 * out as a CUDA toolkit, the NCCL packages, PyTorch's wheels and glibc's
 * ld.so.cache lay them out: the driver and the CUDA version of its branch,
 * libcudart by its real name or by its header, libnccl by its real name or
 * by the version string in its .rodata, found through the loader's cache
 * (an entry of another architecture skipped), the GPUs and the first
 * model; and each parser's refusals. test_aff_gpu_probe (label gpu) checks
 * the same against the loaded libraries on a GPU machine. */
#include <elf.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aff.h"
#include "aff_int.h"
#include "lu.h"
#include "test.h"


/* Write n bytes to root/rel, making its directories. */
static void put_bytes(const char *root, const char *rel, const void *data,
                      size_t n) {
  char p[1024], dir[1024];
  FILE *f;
  snprintf(p, sizeof(p), "%s%s", root, rel);
  lu_strlcpy(dir, p, sizeof(dir));
  *strrchr(dir, '/') = '\0';
  test_mkdirs(dir);
  if ((f = fopen(p, "wb")) == NULL || fwrite(data, 1, n, f) != n)
    TEST_FAIL("cannot write %s", p);
  fclose(f);
}

static void put(const char *root, const char *rel, const char *text) {
  put_bytes(root, rel, text, strlen(text));
}

static void link_to(const char *root, const char *rel, const char *target) {
  char p[1024];
  snprintf(p, sizeof(p), "%s%s", root, rel);
  ASSERT_EQ(0, symlink(target, p));
}

/* A minimal ELF64 shared object: .rodata holding text, .shstrtab. */
static size_t make_elf(unsigned char *out, size_t cap, const char *text,
                       size_t tl) {
  static const char shstr[] = "\0.rodata\0.shstrtab";
  Elf64_Ehdr eh;
  Elf64_Shdr sh[3];
  size_t off_ro = sizeof(eh), off_str = off_ro + tl,
         off_sh = (off_str + sizeof(shstr) + 7) & ~(size_t)7;
  ASSERT(off_sh + sizeof(sh) <= cap);
  memset(out, 0, off_sh + sizeof(sh));
  memset(&eh, 0, sizeof(eh));
  memset(sh, 0, sizeof(sh));
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof(eh);
  eh.e_shoff = off_sh;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 3;
  eh.e_shstrndx = 2;
  sh[1].sh_name = 1;
  sh[1].sh_type = SHT_PROGBITS;
  sh[1].sh_offset = off_ro;
  sh[1].sh_size = tl;
  sh[2].sh_name = 9;
  sh[2].sh_type = SHT_STRTAB;
  sh[2].sh_offset = off_str;
  sh[2].sh_size = sizeof(shstr);
  memcpy(out, &eh, sizeof(eh));
  memcpy(out + off_ro, text, tl);
  memcpy(out + off_str, shstr, sizeof(shstr));
  memcpy(out + off_sh, sh, sizeof(sh));
  return off_sh + sizeof(sh);
}

/* glibc's new-format ld.so.cache: each entry soname -> path with flags. */
typedef struct {
  int32_t flags;
  const char *key, *value;
} ldc_entry_t;

static size_t make_ldcache(unsigned char *out, size_t cap, const ldc_entry_t *e,
                           int n) {
  size_t strings = 48 + (size_t)n * 24, at = strings;
  uint32_t v;
  ASSERT(strings < cap);
  memset(out, 0, strings);
  memcpy(out, "glibc-ld.so.cache1.1", 20);
  v = (uint32_t)n;
  memcpy(out + 20, &v, 4);
  for (int i = 0; i < n; i++) {
    unsigned char *ent = out + 48 + (size_t)i * 24;
    size_t kl = strlen(e[i].key) + 1, vl = strlen(e[i].value) + 1;
    ASSERT(at + kl + vl <= cap);
    memcpy(ent, &e[i].flags, 4);
    v = (uint32_t)at;
    memcpy(ent + 4, &v, 4);
    memcpy(out + at, e[i].key, kl);
    at += kl;
    v = (uint32_t)at;
    memcpy(ent + 8, &v, 4);
    memcpy(out + at, e[i].value, vl);
    at += vl;
  }
  v = (uint32_t)(at - strings);
  memcpy(out + 24, &v, 4);
  return at;
}

#if defined(__aarch64__)
#define ARCH 0x0a03
#define OTHER 0x0303
#else
#define ARCH 0x0303
#define OTHER 0x0a03
#endif

static void driver_tree(const char *root) {
  put(root, "/proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
      "22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n");
  put(root, "/proc/driver/nvidia/gpus/0000:0f:00.0/information",
      "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\n");
  put(root, "/proc/driver/nvidia/gpus/0000:07:00.0/information",
      "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\nBus Location: \t 0000:07:00.0\n");
}

/* A CUDA toolkit in /usr/local/cuda-12.4 (libcudart.so.12 ->
 * libcudart.so.12.4.127) and NCCL from NVIDIA's packages in the multiarch
 * directory, found through the cache (whose first libnccl entry is for
 * another architecture). */
static void toolkit_tree(void) {
  const char *root = test_tmpdir();
  char r[512];
  unsigned char cache[4096];
  ldc_entry_t e[] = {
      {OTHER, "libnccl.so.2", "/usr/lib/other-arch/libnccl.so.2"},
      {ARCH, "libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"},
      {ARCH, "libcudart.so.12",
       "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12"},
  };
  aff_sysinfo_t si;
  snprintf(r, sizeof(r), "%s/toolkit", root);
  driver_tree(r);
  put(r, "/usr/lib/other-arch/libnccl.so.2.30.1", "not this one");
  link_to(r, "/usr/lib/other-arch/libnccl.so.2", "libnccl.so.2.30.1");
  put(r, "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", "no version inside");
  link_to(r, "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "libnccl.so.2.21.5");
  put(r, "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12.4.127",
      "x");
  link_to(r, "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12",
          "libcudart.so.12.4.127");
  put_bytes(r, "/etc/ld.so.cache", cache, make_ldcache(cache, sizeof(cache), e, 3));
  aff_sysinfo_files(&si, r);
  ASSERT_STR_EQ("550.54.15", si.driver);
  ASSERT_EQ(12040, si.cuda_driver);
  ASSERT_EQ(12040, si.cuda_runtime);
  ASSERT_EQ(22105, si.nccl);
  ASSERT_CONTAINS(si.nccl_path, "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5");
  ASSERT_EQ(2, si.ngpus);
  /* NVML's GPU 0: the lowest bus id. */
  ASSERT_STR_EQ("NVIDIA H200", si.gpu_model);
  ASSERT_EQ(0, si.nvml);
}

/* PyTorch's wheels: nvidia/cuda_runtime/lib/libcudart.so.12 (version only
 * in ../include/cuda_runtime_api.h), nvidia/nccl/lib/libnccl.so.2 (version
 * only inside the file), found through $CUDA_HOME/lib64 here. */
static void wheel_tree(void) {
  const char *root = test_tmpdir();
  char r[512];
  unsigned char elf[1024];
  aff_sysinfo_t si;
  snprintf(r, sizeof(r), "%s/wheel", root);
  driver_tree(r);
  put(r, "/proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.10  "
      "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Jan 16 2025\n");
  put(r, "/venv/nvidia/cuda_runtime/lib/libcudart.so.12", "x");
  put(r, "/venv/nvidia/cuda_runtime/include/cuda_runtime_api.h",
      "/* CUDART_VERSION is used below */\n#define CUDART_VERSIONX 1\n"
      "#define CUDART_VERSION  12080\n");
  {
    static const char ro[] = "NCCL version %s\0NCCL version 2.26.2+cuda12.8";
    put_bytes(r, "/venv/nvidia/nccl/lib/libnccl.so.2", elf,
              make_elf(elf, sizeof(elf), ro, sizeof(ro)));
  }
  /* both libraries through $CUDA_HOME/lib64 */
  {
    char p[1024];
    snprintf(p, sizeof(p), "%s/venv/nvidia/lib64", r);
    test_mkdirs(p);
    snprintf(p, sizeof(p), "%s/venv/nvidia/lib64/libcudart.so.12", r);
    ASSERT_EQ(0, symlink("../cuda_runtime/lib/libcudart.so.12", p));
    snprintf(p, sizeof(p), "%s/venv/nvidia/lib64/libnccl.so.2", r);
    ASSERT_EQ(0, symlink("../nccl/lib/libnccl.so.2", p));
  }
  setenv("CUDA_HOME", "/venv/nvidia", 1);
  aff_sysinfo_files(&si, r);
  unsetenv("CUDA_HOME");
  ASSERT_STR_EQ("570.86.10", si.driver);
  ASSERT_EQ(12080, si.cuda_driver);
  ASSERT_EQ(12080, si.cuda_runtime);
  ASSERT_EQ(22602, si.nccl);
}

/* No driver, no library: nothing invented. */
static void empty_tree(void) {
  char r[512];
  aff_sysinfo_t si;
  snprintf(r, sizeof(r), "%s/empty", test_tmpdir());
  test_mkdirs(r);
  aff_sysinfo_files(&si, r);
  ASSERT_STR_EQ("", si.driver);
  ASSERT_EQ(0, si.cuda_driver);
  ASSERT_EQ(0, si.cuda_runtime);
  ASSERT_EQ(0, si.nccl);
  ASSERT_EQ(-1, si.ngpus);
}

static void parsers(void) {
  int v[3];
  unsigned char buf[256];
  char out[64];
  ASSERT_EQ(3, aff__libver_name("libnccl.so.2.21.5", "libnccl.so.", v));
  ASSERT(v[0] == 2 && v[1] == 21 && v[2] == 5);
  ASSERT_EQ(1, aff__libver_name("libcudart.so.12", "libcudart.so.", v));
  ASSERT_EQ(0, aff__libver_name("libcudart.so.12.x", "libcudart.so.", v));
  ASSERT_EQ(0, aff__libver_name("libnccl.so", "libnccl.so.", v));
  /* NCCL's two encodings */
  ASSERT_EQ(2804, aff__nccl_code(2, 8, 4));
  ASSERT_EQ(21903, aff__nccl_code(2, 19, 3));
  ASSERT_EQ(0, aff__nccl_code(2, 100, 0));
  ASSERT_EQ(0, aff__nccl_verstr("NCCL version 2.x", 16));
  ASSERT_EQ(21805, aff__nccl_verstr("xxNCCL version 2.18NCCL version 2.18.5", 38));
  ASSERT_EQ(0, aff__cudart_header("#define CUDART_VERSION", 22));
  ASSERT_EQ(11080, aff__cudart_header("#define CUDART_VERSION 11080", 28));
  ASSERT_EQ(12090, aff__cuda_of_driver("575.51.03"));
  ASSERT_EQ(0, aff__cuda_of_driver("999.1"));
  ASSERT_EQ(0, aff__cuda_of_driver(""));
  /* caches glibc did not write */
  memset(buf, 0, sizeof(buf));
  ASSERT_EQ(-1, aff__ldcache_find(buf, sizeof(buf), "libnccl.so.2", out, sizeof(out)));
  memcpy(buf, "glibc-ld.so.cache1.1", 20);
  buf[20] = 200; /* more entries than bytes */
  ASSERT_EQ(-1, aff__ldcache_find(buf, sizeof(buf), "libnccl.so.2", out, sizeof(out)));
}

int main(void) {
  unsetenv("CUDA_HOME");
  parsers();
  toolkit_tree();
  wheel_tree();
  empty_tree();
  test_cleanup();
  printf("test_aff_libs: ok\n");
  return 0;
}
