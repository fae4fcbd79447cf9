/* node.c - what the lint checks names against: this node's network
 * interfaces and RDMA devices, read from sysfs under a root prefix. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

static int cmp_name(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

int env_node_probe(env_node_t *n, const char *root) {
  char dir[256];
  DIR *d;
  struct dirent *e;
  memset(n, 0, sizeof(*n));
  n->has_nvlink = -1;
  if (root == NULL || strcmp(root, "/") == 0)
    root = "";
  snprintf(dir, sizeof(dir), "%s/sys/class/net", root);
  if ((d = opendir(dir)) != NULL) {
    n->probed = 1;
    while ((e = readdir(d)) != NULL && n->nnetdevs < ENV_NODE_MAX)
      if (e->d_name[0] != '.')
        lu_strlcpy(n->netdevs[n->nnetdevs++], e->d_name, sizeof(n->netdevs[0]));
    closedir(d);
    qsort(n->netdevs, (size_t)n->nnetdevs, sizeof(n->netdevs[0]), cmp_name);
  }
  snprintf(dir, sizeof(dir), "%s/sys/class/infiniband", root);
  if ((d = opendir(dir)) != NULL) {
    while ((e = readdir(d)) != NULL && n->nhcas < ENV_NODE_MAX) {
      env_hca_t *h;
      if (e->d_name[0] == '.')
        continue;
      h = &n->hcas[n->nhcas++];
      memset(h, 0, sizeof(*h));
      lu_strlcpy(h->name, e->d_name, sizeof(h->name));
      for (int p = 1; p <= 8; p++) {
        char path[1024], buf[64];
        snprintf(path, sizeof(path), "%s/%s/ports/%d/state", dir, e->d_name, p);
        if (lu_read_line(NULL, path, buf, sizeof(buf)) < 0)
          break;
        h->nports = p;
        h->state[p - 1] = atoi(buf);
        snprintf(path, sizeof(path), "%s/%s/ports/%d/link_layer", dir, e->d_name,
                 p);
        if (lu_read_line(NULL, path, buf, sizeof(buf)) > 0)
          lu_strlcpy(h->link_layer[p - 1], buf, sizeof(h->link_layer[0]));
      }
    }
    closedir(d);
    qsort(n->hcas, (size_t)n->nhcas, sizeof(n->hcas[0]), cmp_name);
  }
  return 0;
}
