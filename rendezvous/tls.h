/* tls.h - TLS (OpenSSL) over memory BIOs. The caller moves ciphertext
 * between its socket and the session (tls_feed in, tls_take out), so one
 * implementation serves the server's libuv connections, the agent's libuv
 * client and librdzv's blocking socket. A failed handshake is explained in
 * one line (tls_error): an expired certificate, one not signed by the CA
 * given, one for another host, a client certificate missing, a peer that
 * does not speak TLS. docs/protocol.md#tls. Not thread-safe per session;
 * a context may be shared by sessions of one thread. */
#ifndef TLS_H
#define TLS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct tls_ctx_s tls_ctx_t;
typedef struct tls_s tls_t;

typedef struct tls_files_s {
  const char *cert; /* PEM certificate (chain) of this end, or NULL */
  const char *key;  /* its private key; NULL: cert holds it */
  const char *ca;   /* PEM CA certificates to verify the peer with */
} tls_files_t;

/* A server needs cert; with ca it also requires every client to present a
 * certificate signed by it (mutual TLS). A client verifies the server with
 * ca (NULL: the system's CAs) and presents cert when given.
 * OUT *out. RET 0, or RDZV_EINVAL with a one-line message in err. */
int tls_ctx_new(int server, const tls_files_t *f, tls_ctx_t **out, char *err,
                size_t errcap);
/* NULL is a no-op. */
void tls_ctx_free(tls_ctx_t *c);

/* A session. IN host: for a client, the name or address it dialled, which
 * the server's certificate must name; NULL for a server.
 * OUT *out. RET 0 or RDZV_ENOMEM. */
int tls_new(tls_ctx_t *ctx, const char *host, tls_t **out);
void tls_free(tls_t *t);

/* Hand over ciphertext received from the peer. RET 0 or RDZV_ENOMEM. */
int tls_feed(tls_t *t, const void *p, size_t n);
/* Run the handshake as far as the input allows, then decrypt into buf.
 * RET bytes (> 0); 0 when more ciphertext is needed (send tls_take's
 * bytes first); RDZV_ECLOSED when the peer closed the session;
 * RDZV_EAUTH for a certificate refused (either side), RDZV_EPROTO for
 * anything else; tls_error() explains. */
ssize_t tls_read(tls_t *t, void *buf, size_t cap);
/* Encrypt n bytes (after the handshake). RET 0 or a negative code. */
int tls_write(tls_t *t, const void *p, size_t n);
/* The ciphertext to send. OUT *buf (malloc'd, caller frees; NULL when
 * *n is 0). RET 0 or RDZV_ENOMEM. */
int tls_take(tls_t *t, char **buf, size_t *n);
/* tls_take, *buf from alloc (freed with release on failure). */
int tls_take_alloc(tls_t *t, char **buf, size_t *n, void *(*alloc)(size_t),
                   void (*release)(void *));
size_t tls_out_pending(const tls_t *t);
/* Ciphertext fed and not yet decrypted. */
size_t tls_in_pending(const tls_t *t);
int tls_established(const tls_t *t);
/* Why the session failed, in one line ("" when it did not). */
const char *tls_error(const tls_t *t);

#endif /* TLS_H */
