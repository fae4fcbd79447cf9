/* fuzz_tls.c - the TLS layer's handling of a peer's certificate
 * (rendezvous/tls.c): tls_ctx_new loading it, tls_new with the name or
 * address dialled (IP names vs DNS names, SNI), the handshake over memory
 * BIOs, and explain(): expired (the notAfter printed), not yet valid,
 * wrong CA, name mismatch, and the rest.
 * Input: a flags byte, then lines: the host dialled, CN, SAN entries
 * ("DNS:x,IP:1.2.3.4", X509V3 config syntax), notBefore, notAfter (raw
 * ASN.1 time text: 13 characters are a UTCTime, others a GeneralizedTime,
 * unchecked); with flag 4 the rest after the sixth line is a DER
 * certificate used instead (its names, times and extensions kept, its key
 * replaced and re-signed). The certificate is the server's (flag 1: the
 * client's, with a server that requires one); flag 2 signs it with
 * itself instead of the CA both ends trust.
 * Invariants checked:
 * - the handshake ends (established or failed) within 32 rounds;
 * - a failed end has a one-line error that names the docs;
 * - an established pair carries bytes both ways unchanged. */
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include "fuzz.h"
#include "rdzv.h"
#include "tls.h"

static char dir[256], ca_path[300], cert_path[300];
static EVP_PKEY *ca_key, *key;
static X509 *ca;

static EVP_PKEY *new_key(void) {
  EVP_PKEY *k = EVP_EC_gen("P-256");
  FUZZ_CHECK(k != NULL);
  return k;
}

static void write_pem(const char *path, X509 *c, EVP_PKEY *k) {
  FILE *f = fopen(path, "w");
  FUZZ_CHECK(f != NULL);
  FUZZ_CHECK(PEM_write_X509(f, c) == 1);
  if (k)
    FUZZ_CHECK(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) == 1);
  fclose(f);
}

static void cleanup(void) {
  unlink(ca_path);
  unlink(cert_path);
  rmdir(dir);
  X509_free(ca);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(key);
}

static void setup(void) {
  const char *tmp = getenv("TMPDIR");
  X509_NAME *n;
  snprintf(dir, sizeof(dir), "%s/fuzz-tls.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  FUZZ_CHECK(mkdtemp(dir) != NULL);
  snprintf(ca_path, sizeof(ca_path), "%s/ca.pem", dir);
  snprintf(cert_path, sizeof(cert_path), "%s/cert.pem", dir);
  ca_key = new_key();
  key = new_key();
  ca = X509_new();
  X509_set_version(ca, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(ca), 1);
  X509_gmtime_adj(X509_getm_notBefore(ca), -3600);
  X509_gmtime_adj(X509_getm_notAfter(ca), 86400L * 3650);
  n = X509_get_subject_name(ca);
  X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                             (const unsigned char *)"fuzz CA", -1, -1, 0);
  X509_set_issuer_name(ca, n);
  X509_set_pubkey(ca, ca_key);
  {
    X509V3_CTX v;
    X509_EXTENSION *e;
    X509V3_set_ctx(&v, ca, ca, NULL, NULL, 0);
    e = X509V3_EXT_conf_nid(NULL, &v, NID_basic_constraints, "critical,CA:TRUE");
    X509_add_ext(ca, e, -1);
    X509_EXTENSION_free(e);
  }
  FUZZ_CHECK(X509_sign(ca, ca_key, EVP_sha256()) > 0);
  write_pem(ca_path, ca, NULL);
  atexit(cleanup);
}

/* Next line of [*p, end) as a NUL-terminated copy (caller frees). */
static char *line(const uint8_t **p, const uint8_t *end) {
  const uint8_t *q = *p;
  char *s;
  while (q < end && *q != '\n')
    q++;
  s = malloc((size_t)(q - *p) + 1);
  FUZZ_CHECK(s != NULL);
  memcpy(s, *p, (size_t)(q - *p));
  s[q - *p] = '\0';
  *p = q < end ? q + 1 : q;
  return s;
}

/* text as the certificate's time (13 characters: a UTCTime, else a
 * GeneralizedTime), decoded from DER so that OpenSSL's own checks of the
 * text are those of a certificate received. "" keeps the default. */
static void set_time(X509 *c, int after, const char *text) {
  size_t n = strlen(text);
  unsigned char der[130];
  const unsigned char *d = der;
  ASN1_TIME *t;
  if (n == 0 || n > 127)
    return;
  der[0] = n == 13 ? V_ASN1_UTCTIME : V_ASN1_GENERALIZEDTIME;
  der[1] = (unsigned char)n;
  memcpy(der + 2, text, n);
  if ((t = d2i_ASN1_TIME(NULL, &d, (long)n + 2)) == NULL)
    return;
  if (after)
    X509_set1_notAfter(c, t);
  else
    X509_set1_notBefore(c, t);
  ASN1_TIME_free(t);
}

static X509 *make_cert(const char *cn, const char *san, const char *nb,
                       const char *na, const uint8_t *der, size_t der_len,
                       int use_der, int self) {
  X509 *c;
  if (use_der) {
    const unsigned char *d = der;
    if ((c = d2i_X509(NULL, &d, (long)der_len)) == NULL)
      return NULL;
  } else {
    X509_NAME *n;
    c = X509_new();
    X509_set_version(c, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c), 2);
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), 86400L * 365);
    set_time(c, 0, nb);
    set_time(c, 1, na);
    n = X509_get_subject_name(c);
    if (cn[0])
      X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8,
                                 (const unsigned char *)cn, -1, -1, 0);
    if (san[0]) {
      X509V3_CTX v;
      X509_EXTENSION *e;
      X509V3_set_ctx(&v, ca, c, NULL, NULL, 0);
      e = X509V3_EXT_conf_nid(NULL, &v, NID_subject_alt_name, san);
      if (e) {
        X509_add_ext(c, e, -1);
        X509_EXTENSION_free(e);
      }
    }
  }
  X509_set_pubkey(c, key);
  X509_set_issuer_name(c, self ? X509_get_subject_name(c)
                               : X509_get_subject_name(ca));
  if (X509_sign(c, self ? key : ca_key, EVP_sha256()) <= 0) {
    X509_free(c);
    return NULL;
  }
  ERR_clear_error();
  return c;
}

static void check_error(tls_t *t) {
  const char *e = tls_error(t);
  FUZZ_CHECK(e[0] != '\0');
  FUZZ_CHECK(strchr(e, '\n') == NULL);
  FUZZ_CHECK(strstr(e, "docs/protocol.md#tls") != NULL);
}

/* Move what from has to send into to. RET 0 or -1. */
static int pump(tls_t *from, tls_t *to) {
  char *b;
  size_t n;
  FUZZ_CHECK(tls_take(from, &b, &n) == 0);
  if (n && tls_feed(to, b, n) != 0) {
    free(b);
    return -1;
  }
  free(b);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *p = data + (size ? 1 : 0), *end = data + size;
  int flags = size ? data[0] : 0, client_cert = flags & 1;
  char *host, *cn, *san, *nb, *na, buf[64];
  tls_ctx_t *cctx = NULL, *sctx = NULL;
  tls_t *c = NULL, *s = NULL;
  ssize_t rc = 0, rs = 0;
  char err[512];
  X509 *cert;
  if (ca == NULL)
    setup();
  host = line(&p, end);
  cn = line(&p, end);
  san = line(&p, end);
  nb = line(&p, end);
  na = line(&p, end);
  cert = make_cert(cn, san, nb, na, p, (size_t)(end - p), flags & 4, flags & 2);
  if (cert == NULL)
    goto out;
  write_pem(cert_path, cert, key);
  X509_free(cert);
  {
    tls_files_t sf = {client_cert ? NULL : cert_path, NULL, NULL};
    tls_files_t cf = {client_cert ? cert_path : NULL, NULL, ca_path};
    tls_files_t sfca = {NULL, NULL, ca_path};
    if (client_cert) {
      /* the server's own certificate: a good one, the same key */
      X509 *good = make_cert("", "IP:127.0.0.1", "", "", NULL, 0, 0, 0);
      char spath[320];
      FUZZ_CHECK(good != NULL);
      snprintf(spath, sizeof(spath), "%s/server.pem", dir);
      write_pem(spath, good, key);
      X509_free(good);
      sfca.cert = spath;
      rc = tls_ctx_new(1, &sfca, &sctx, err, sizeof(err));
      unlink(spath);
      FUZZ_CHECK(rc == 0);
      free(host);
      host = strdup("127.0.0.1");
    } else {
      sf.cert = cert_path;
      if (tls_ctx_new(1, &sf, &sctx, err, sizeof(err)) != 0) {
        FUZZ_CHECK(err[0] != '\0');
        goto out;
      }
    }
    if (tls_ctx_new(0, &cf, &cctx, err, sizeof(err)) != 0) {
      FUZZ_CHECK(err[0] != '\0');
      goto out;
    }
  }
  FUZZ_CHECK(tls_new(cctx, host, &c) == 0);
  FUZZ_CHECK(tls_new(sctx, NULL, &s) == 0);
  for (int i = 0; i < 32; i++) {
    rc = tls_read(c, buf, sizeof(buf));
    if (pump(c, s) != 0)
      break;
    rs = tls_read(s, buf, sizeof(buf));
    if (pump(s, c) != 0)
      break;
    if (rc < 0 || rs < 0 || (tls_established(c) && tls_established(s) &&
                             tls_out_pending(c) == 0 &&
                             tls_out_pending(s) == 0))
      break;
  }
  if (rc < 0)
    check_error(c);
  if (rs < 0)
    check_error(s);
  FUZZ_CHECK(rc < 0 || rs < 0 || (tls_established(c) && tls_established(s)));
  if (rc >= 0 && rs >= 0) {
    /* both ends established: bytes go through unchanged */
    ssize_t r = 0;
    FUZZ_CHECK(tls_write(c, "ping", 4) == 0);
    FUZZ_CHECK(pump(c, s) == 0);
    for (int i = 0; i < 4 && r == 0; i++) {
      r = tls_read(s, buf, sizeof(buf));
      pump(s, c);
    }
    FUZZ_CHECK(r == 4 && memcmp(buf, "ping", 4) == 0);
  }
out:
  tls_free(c);
  tls_free(s);
  tls_ctx_free(cctx);
  tls_ctx_free(sctx);
  unlink(cert_path);
  free(host);
  free(cn);
  free(san);
  free(nb);
  free(na);
  ERR_clear_error();
  return 0;
}
