/* client_int.h - librdzv internals shared between its files. */
#ifndef CLIENT_INT_H
#define CLIENT_INT_H

#include "lu.h"
#include "rdzv.h"

/* Set the message rdzv_last_error() returns. */
void rdzv__set_error(rdzv_client_t *c, const char *fmt, ...) LU_PRINTF(2, 3);

#endif
