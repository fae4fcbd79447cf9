/* tls.c - TLS sessions over memory BIOs, with certificate errors
 * translated into one line that says what to do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lu.h"
#include "rdzv.h"
#include "tls.h"

struct tls_ctx_s {
  SSL_CTX *ctx;
  int server;
};

struct tls_s {
  SSL *ssl;
  BIO *rbio, *wbio; /* owned by ssl */
  int server;
  int failed;
  char host[256];
  char err[512];
};

/* OpenSSL's reason for the last error, or "unknown error". */
static const char *last_reason(void) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  return r ? r : "unknown error";
}

int tls_ctx_new(int server, const tls_files_t *f, tls_ctx_t **out, char *err,
                size_t errcap) {
  tls_ctx_t *c;
  SSL_CTX *ctx;
  const char *key = f->key ? f->key : f->cert;
  ERR_clear_error();
  if (server && f->cert == NULL) {
    lu_errf(err, errcap, "a TLS server needs --tls-cert (and --tls-key)");
    return RDZV_EINVAL;
  }
  if ((f->cert == NULL) != (f->key == NULL) && f->key != NULL) {
    lu_errf(err, errcap, "--tls-key needs --tls-cert");
    return RDZV_EINVAL;
  }
  ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == NULL) {
    lu_errf(err, errcap, "cannot create a TLS context: %s", last_reason());
    return RDZV_ENOMEM;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (f->cert) {
    if (SSL_CTX_use_certificate_chain_file(ctx, f->cert) != 1) {
      lu_errf(err, errcap, "--tls-cert %s: cannot load a PEM certificate: %s",
             f->cert, last_reason());
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
      lu_errf(err, errcap, "--tls-key %s: cannot load a PEM private key: %s",
             key, last_reason());
      goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      lu_errf(err, errcap, "--tls-key %s is not the key of --tls-cert %s",
             key, f->cert);
      goto fail;
    }
  }
  if (f->ca) {
    if (SSL_CTX_load_verify_locations(ctx, f->ca, NULL) != 1) {
      lu_errf(err, errcap, "--tls-ca %s: cannot load PEM CA certificates: %s",
             f->ca, last_reason());
      goto fail;
    }
    if (server) {
      STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(f->ca);
      if (names)
        SSL_CTX_set_client_CA_list(ctx, names);
    }
  } else if (!server) {
    SSL_CTX_set_default_verify_paths(ctx);
  }
  if (!server)
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  else if (f->ca)
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       NULL);
  if ((c = calloc(1, sizeof(*c))) == NULL)
    goto fail;
  c->ctx = ctx;
  c->server = server;
  *out = c;
  return 0;
fail:
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return RDZV_EINVAL;
}

void tls_ctx_free(tls_ctx_t *c) {
  if (c == NULL)
    return;
  SSL_CTX_free(c->ctx);
  free(c);
}

int tls_new(tls_ctx_t *ctx, const char *host, tls_t **out) {
  tls_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return RDZV_ENOMEM;
  t->server = ctx->server;
  t->ssl = SSL_new(ctx->ctx);
  t->rbio = BIO_new(BIO_s_mem());
  t->wbio = BIO_new(BIO_s_mem());
  if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
    BIO_free(t->rbio);
    BIO_free(t->wbio);
    SSL_free(t->ssl);
    free(t);
    return RDZV_ENOMEM;
  }
  /* An empty input BIO means "more to come", not end of stream. */
  BIO_set_mem_eof_return(t->rbio, -1);
  BIO_set_mem_eof_return(t->wbio, -1);
  SSL_set_bio(t->ssl, t->rbio, t->wbio);
  if (t->server) {
    SSL_set_accept_state(t->ssl);
  } else {
    SSL_set_connect_state(t->ssl);
    if (host && *host) {
      X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
      lu_strlcpy(t->host, host, sizeof(t->host));
      /* An address is checked against the certificate's IP names, a host
       * name against its DNS names. */
      if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1) {
        SSL_set_tlsext_host_name(t->ssl, host);
        SSL_set1_host(t->ssl, host);
      }
    }
  }
  *out = t;
  return 0;
}

void tls_free(tls_t *t) {
  if (t == NULL)
    return;
  SSL_free(t->ssl);
  free(t);
}

int tls_feed(tls_t *t, const void *p, size_t n) {
  if (n == 0)
    return 0;
  return BIO_write(t->rbio, p, (int)n) == (int)n ? 0 : RDZV_ENOMEM;
}

/* notAfter of the peer's certificate as text ("" when none). */
static void peer_not_after(tls_t *t, char *out, size_t cap) {
  X509 *pc = SSL_get_peer_certificate(t->ssl);
  BIO *b;
  out[0] = '\0';
  if (pc == NULL)
    return;
  if ((b = BIO_new(BIO_s_mem())) != NULL) {
    if (ASN1_TIME_print(b, X509_get0_notAfter(pc)) == 1) {
      int n = BIO_read(b, out, (int)cap - 1);
      out[n > 0 ? n : 0] = '\0';
    }
    BIO_free(b);
  }
  X509_free(pc);
}

/* Fill t->err with what went wrong, in one line. RET RDZV_EAUTH for a
 * certificate problem, RDZV_EPROTO otherwise. */
static int explain(tls_t *t) {
  const char *peer = t->server ? "client" : "server";
  long vr = SSL_get_verify_result(t->ssl);
  unsigned long e = ERR_peek_last_error();
  int reason = e ? ERR_GET_REASON(e) : 0;
  int rc = RDZV_EAUTH;
  char when[64];
  t->failed = 1;
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && vr != X509_V_OK) {
    switch (vr) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
      peer_not_after(t, when, sizeof(when));
      lu_errf(t->err, sizeof(t->err), "TLS: the %s's certificate expired%s%s: "
             "renew it (docs/protocol.md#tls)", peer, when[0] ? " on " : "",
             when);
      break;
    case X509_V_ERR_CERT_NOT_YET_VALID:
      lu_errf(t->err, sizeof(t->err), "TLS: the %s's certificate is not valid "
             "yet: check the clocks of both hosts (docs/protocol.md#tls)",
             peer);
      break;
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      lu_errf(t->err, sizeof(t->err), "TLS: the %s's certificate is not signed "
             "by a CA of --tls-ca: give both ends certificates of the same CA "
             "(docs/protocol.md#tls)", peer);
      break;
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      lu_errf(t->err, sizeof(t->err), "TLS: the server's certificate does not "
             "name %s, the address dialled: connect by a name or address the "
             "certificate lists (docs/protocol.md#tls)", t->host);
      break;
    default:
      lu_errf(t->err, sizeof(t->err), "TLS: the %s's certificate was refused: "
             "%s (docs/protocol.md#tls)", peer,
             X509_verify_cert_error_string(vr));
    }
  } else if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    lu_errf(t->err, sizeof(t->err), "TLS: the client sent no certificate and "
           "this server requires one (--tls-ca is set): give the client "
           "--tls-cert and --tls-key (docs/protocol.md#tls)");
  } else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) {
    lu_errf(t->err, sizeof(t->err), "TLS: the server requires a client "
           "certificate: give --tls-cert and --tls-key "
           "(docs/protocol.md#tls)");
  } else if (reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
             reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
             reason == SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED ||
             reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
             reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR) {
    lu_errf(t->err, sizeof(t->err), "TLS: the %s refused this end's "
           "certificate (%s): it must be valid and signed by the CA the %s "
           "trusts (docs/protocol.md#tls)", peer, last_reason(), peer);
  } else if (reason == SSL_R_WRONG_VERSION_NUMBER ||
             reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
             reason == SSL_R_HTTP_REQUEST || reason == SSL_R_UNKNOWN_PROTOCOL ||
             reason == SSL_R_BAD_RECORD_TYPE) {
    lu_errf(t->err, sizeof(t->err), "TLS: the %s does not speak TLS: give "
           "both ends the --tls-* options, or neither (docs/protocol.md#tls)",
           peer);
    rc = RDZV_EPROTO;
  } else {
    lu_errf(t->err, sizeof(t->err), "TLS handshake with the %s failed: %s "
           "(docs/protocol.md#tls)", peer, last_reason());
    rc = RDZV_EPROTO;
  }
  ERR_clear_error();
  return rc;
}

ssize_t tls_read(tls_t *t, void *buf, size_t cap) {
  int r, e;
  if (t->failed)
    return RDZV_EPROTO;
  ERR_clear_error();
  if (!SSL_is_init_finished(t->ssl)) {
    r = SSL_do_handshake(t->ssl);
    if (r != 1) {
      e = SSL_get_error(t->ssl, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
      return explain(t);
    }
  }
  if (cap == 0)
    return 0;
  r = SSL_read(t->ssl, buf, (int)LU_MIN(cap, (size_t)1 << 30));
  if (r > 0)
    return r;
  e = SSL_get_error(t->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    return 0;
  if (e == SSL_ERROR_ZERO_RETURN)
    return RDZV_ECLOSED;
  return explain(t);
}

int tls_write(tls_t *t, const void *p, size_t n) {
  const char *c = p;
  ERR_clear_error();
  while (n > 0) {
    int chunk = (int)LU_MIN(n, (size_t)1 << 30);
    int r = SSL_write(t->ssl, c, chunk);
    if (r <= 0)
      return explain(t);
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

int tls_take(tls_t *t, char **buf, size_t *n) {
  return tls_take_alloc(t, buf, n, malloc, free);
}

int tls_take_alloc(tls_t *t, char **buf, size_t *n, void *(*alloc)(size_t),
                   void (*release)(void *)) {
  size_t len = BIO_ctrl_pending(t->wbio);
  *buf = NULL;
  *n = 0;
  if (len == 0)
    return 0;
  if ((*buf = alloc(len)) == NULL)
    return RDZV_ENOMEM;
  if (BIO_read(t->wbio, *buf, (int)len) != (int)len) {
    release(*buf);
    *buf = NULL;
    return RDZV_ENOMEM;
  }
  *n = len;
  return 0;
}

size_t tls_out_pending(const tls_t *t) { return BIO_ctrl_pending(t->wbio); }
size_t tls_in_pending(const tls_t *t) { return BIO_ctrl_pending(t->rbio); }
int tls_established(const tls_t *t) { return SSL_is_init_finished(t->ssl); }
const char *tls_error(const tls_t *t) { return t->err; }
