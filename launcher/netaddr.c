/* netaddr.c - which addresses are this node's; name resolution. */
#include <arpa/inet.h>
#include <ctype.h>
#include <strings.h>
#include <unistd.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>

#include "launch.h"

/* Is `ip` one of this node's addresses? */
int launch_ip_is_local(const char *ip) {
  struct ifaddrs *ifa, *it;
  char buf[INET6_ADDRSTRLEN];
  int found = 0;
  if (getifaddrs(&ifa) != 0)
    return 0;
  for (it = ifa; it && !found; it = it->ifa_next) {
    if (it->ifa_addr == NULL)
      continue;
    if (it->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)it->ifa_addr)->sin_addr, buf,
                sizeof(buf));
    else if (it->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)it->ifa_addr)->sin6_addr,
                buf, sizeof(buf));
    else
      continue;
    if (strcmp(buf, ip) == 0)
      found = 1;
  }
  freeifaddrs(ifa);
  /* The whole 127/8 is this host's, though only 127.0.0.1 is listed. */
  if (!found && strncmp(ip, "127.", 4) == 0)
    found = 1;
  return found;
}

/* Is name one of this node's host names: host (LAUNCH_HOSTNAME or
 * gethostname()), the kernel's name, its short form or its canonical
 * (fully qualified) name? Names compare without case. */
int launch_is_my_name(const char *name, const char *host) {
  char me[256], *dot;
  struct addrinfo hints, *res = NULL;
  int yes = 0;
  if (name[0] == '\0' || !strcasecmp(name, "localhost"))
    return 0;
  if (!strcasecmp(name, host))
    return 1;
  if (gethostname(me, sizeof(me)) != 0)
    return 0;
  me[sizeof(me) - 1] = '\0';
  if (!strcasecmp(name, me))
    return 1;
  if ((dot = strchr(me, '.')) != NULL) {
    *dot = '\0';
    if (!strcasecmp(name, me))
      return 1;
    *dot = '.';
  }
  /* the canonical name: only when name looks like one (has a dot) */
  if (strchr(name, '.') == NULL || isdigit((unsigned char)name[0]))
    return 0;
  memset(&hints, 0, sizeof(hints));
  hints.ai_flags = AI_CANONNAME;
  if (getaddrinfo(me, NULL, &hints, &res) == 0 && res && res->ai_canonname)
    yes = !strcasecmp(name, res->ai_canonname);
  if (res)
    freeaddrinfo(res);
  return yes;
}

/* Resolve host to its first address as text. RET 0 or RDZV_ERESOLVE. */
int launch_resolve_ip(const char *host, char *ip, size_t cap) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
    return RDZV_ERESOLVE;
  if (res->ai_family == AF_INET)
    inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip,
              (socklen_t)cap);
  else
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, ip,
              (socklen_t)cap);
  freeaddrinfo(res);
  return 0;
}

