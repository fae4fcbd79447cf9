/* netaddr.c - which addresses are this node's; name resolution. */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
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


/* The inode of the socket listening on TCP port (any address) in one of
 * /proc/net/tcp, tcp6; 0 when none is listed. */
static unsigned long listen_inode(int port) {
  static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
    FILE *f = fopen(tables[t], "r");
    unsigned long inode;
    if (f == NULL)
      continue;
    inode = launch__listen_inode_in(f, port);
    fclose(f);
    if (inode)
      return inode;
  }
  return 0;
}

unsigned long launch__listen_inode_in(FILE *f, int port) {
  char line[512];
  {
    while (fgets(line, sizeof(line), f)) {
      char local[64], remote[64], st[8];
      unsigned long inode;
      const char *colon;
      /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
      if (sscanf(line, " %*[0-9]: %63s %63s %7s %*s %*s %*s %*s %*s %lu",
                 local, remote, st, &inode) != 4 ||
          strcmp(st, "0A") != 0 || (colon = strrchr(local, ':')) == NULL ||
          strtol(colon + 1, NULL, 16) != port)
        continue;
      return inode;
    }
  }
  return 0;
}

int launch_port_holder(int port, char *out, size_t cap) {
  unsigned long inode = listen_inode(port);
  char want[64], path[600], link[64];
  DIR *proc, *fds;
  struct dirent *p, *fd;
  int pid = 0;
  out[0] = '\0';
  if (inode == 0 || (proc = opendir("/proc")) == NULL)
    return 0;
  snprintf(want, sizeof(want), "socket:[%lu]", inode);
  while (pid == 0 && (p = readdir(proc)) != NULL) {
    if (!isdigit((unsigned char)p->d_name[0]))
      continue;
    snprintf(path, sizeof(path), "/proc/%s/fd", p->d_name);
    if ((fds = opendir(path)) == NULL)
      continue; /* another user's: not knowable */
    while ((fd = readdir(fds)) != NULL) {
      ssize_t n;
      snprintf(path, sizeof(path), "/proc/%s/fd/%s", p->d_name, fd->d_name);
      n = readlink(path, link, sizeof(link) - 1);
      if (n <= 0)
        continue;
      link[n] = '\0';
      if (strcmp(link, want) == 0) {
        pid = atoi(p->d_name);
        break;
      }
    }
    closedir(fds);
  }
  closedir(proc);
  if (pid > 0) {
    char comm[64] = "?";
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/comm", pid);
    if ((f = fopen(path, "r")) != NULL) {
      if (fgets(comm, sizeof(comm), f))
        comm[strcspn(comm, "\n")] = '\0';
      fclose(f);
    }
    snprintf(out, cap, "%s (pid %d)", comm, pid);
  }
  return pid;
}
