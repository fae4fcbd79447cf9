/* err.c - the error table of include/rdzv.h: strerror and names. */
#include <errno.h>
#include <string.h>

#include "rdzv.h"

const char *rdzv_strerror(int err) {
  switch (err) {
#define XX(name, val, msg)                                                     \
  case val:                                                                    \
    return msg;
    RDZV_ERRNO_MAP(XX)
#undef XX
  case 0:
    return "success";
  default:
    break;
  }
  if (err < 0 && err > -1000) {
    /* strerror() may use a static buffer for unknown codes; every code we
     * produce is a known errno, whose string is static in glibc. */
    return strerror(-err);
  }
  return "unknown error";
}

const char *rdzv_err_name(int err) {
  switch (err) {
#define XX(name, val, msg)                                                     \
  case val:                                                                    \
    return "RDZV_" #name;
    RDZV_ERRNO_MAP(XX)
#undef XX
  case 0:
    return "OK";
  case -ETIMEDOUT:
    return "ETIMEDOUT";
  case -ECONNREFUSED:
    return "ECONNREFUSED";
  case -ECONNRESET:
    return "ECONNRESET";
  case -EPIPE:
    return "EPIPE";
  case -ENOENT:
    return "ENOENT";
  case -EACCES:
    return "EACCES";
  case -EADDRINUSE:
    return "EADDRINUSE";
  case -EHOSTUNREACH:
    return "EHOSTUNREACH";
  case -ENETUNREACH:
    return "ENETUNREACH";
  case -EINVAL:
    return "EINVAL";
  case -ENOMEM:
    return "ENOMEM";
  default:
    return "E?";
  }
}
