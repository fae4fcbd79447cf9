/* test_sha256.c - util/sha256.c, which hashes the fingerprint's files and
 * makes the HELLO proofs and job keys: the FIPS 180-4 and RFC 4231
 * vectors, and OpenSSL's answer for every length from 0 to 300 bytes fed
 * in uneven pieces, and for keys up to 200 bytes. */
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "lu.h"
#include "test.h"

static void hex_of(const uint8_t *d, char out[65]) { lu_hex(d, LU_SHA256_LEN, out); }

static void digest_is(const void *p, size_t n, const char *want) {
  lu_sha256_t s;
  uint8_t d[LU_SHA256_LEN];
  char h[65];
  lu_sha256_init(&s);
  lu_sha256_update(&s, p, n);
  lu_sha256_final(&s, d);
  hex_of(d, h);
  ASSERT_STR_EQ(want, h);
}

int main(void) {
  uint8_t data[300], key[200], a[LU_SHA256_LEN], b[EVP_MAX_MD_SIZE];
  unsigned blen = 0;
  char h[65];
  lu_sha256_t s;
  digest_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  digest_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  digest_is("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  lu_sha256_init(&s);
  memset(data, 'a', 100);
  for (int i = 0; i < 10000; i++)
    lu_sha256_update(&s, data, 100);
  lu_sha256_final(&s, a);
  hex_of(a, h);
  ASSERT_STR_EQ("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", h);
  /* RFC 4231 cases 2 and 6 (a key longer than a block is hashed first) */
  lu_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, a);
  hex_of(a, h);
  ASSERT_STR_EQ("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", h);
  memset(key, 0xaa, 131);
  lu_hmac_sha256(key, 131, "Test Using Larger Than Block-Size Key - Hash Key First",
                 54, a);
  hex_of(a, h);
  ASSERT_STR_EQ("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", h);
  for (size_t i = 0; i < sizeof(data); i++)
    data[i] = (uint8_t)(i * 131 + 7);
  for (size_t i = 0; i < sizeof(key); i++)
    key[i] = (uint8_t)(i * 17 + 3);
  for (size_t n = 0; n <= sizeof(data); n++) {
    size_t off = 0, step = 1 + n % 70;
    lu_sha256_init(&s);
    while (off < n) {
      size_t k = LU_MIN(step, n - off);
      lu_sha256_update(&s, data + off, k);
      off += k;
      step = step * 3 % 97 + 1;
    }
    lu_sha256_final(&s, a);
    ASSERT_EQ(1, EVP_Digest(data, n, b, &blen, EVP_sha256(), NULL));
    if (memcmp(a, b, LU_SHA256_LEN) != 0)
      TEST_FAIL("SHA-256 of %zu bytes differs from OpenSSL's", n);
    lu_hmac_sha256(key, n % sizeof(key), data, n, a);
    ASSERT(HMAC(EVP_sha256(), key, (int)(n % sizeof(key)), data, n, b, &blen));
    if (memcmp(a, b, LU_SHA256_LEN) != 0)
      TEST_FAIL("HMAC-SHA256 of %zu bytes, key of %zu, differs from OpenSSL's", n,
                n % sizeof(key));
  }
  printf("test_sha256: ok\n");
  return 0;
}
