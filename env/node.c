/* node.c - what the lint checks names against: this node's network
 * interfaces and RDMA devices, from the facts affinity/ read (aff_facts_t). */
#include <stdlib.h>
#include <string.h>

#include "aff.h"
#include "env.h"

void env_node_from_facts(env_node_t *n, const aff_facts_t *f) {
  memset(n, 0, sizeof(*n));
  n->has_nvlink = -1;
  n->probed = f->probed;
  for (int i = 0; i < f->nnetdevs && n->nnetdevs < ENV_NODE_NETDEVS; i++)
    lu_strlcpy(n->netdevs[n->nnetdevs++], f->netdevs[i], sizeof(n->netdevs[0]));
  n->netdevs_incomplete = f->netdevs_cut > 0 || n->nnetdevs < f->nnetdevs;
  n->hcas_incomplete = f->hcas_cut > 0 || f->nhcas > ENV_NODE_HCAS;
  for (int i = 0; i < f->nhcas && n->nhcas < ENV_NODE_HCAS; i++) {
    const aff_facts_hca_t *fh = &f->hcas[i];
    env_hca_t *h = &n->hcas[n->nhcas++];
    lu_strlcpy(h->name, fh->name, sizeof(h->name));
    /* the ports up to the first without a state, as the lint counts them */
    for (int p = 0; p < fh->nports && fh->ports[p].state >= 0; p++) {
      h->nports = p + 1;
      h->state[p] = fh->ports[p].state;
      lu_strlcpy(h->link_layer[p], fh->ports[p].link_layer,
                 sizeof(h->link_layer[0]));
    }
  }
}

int env_node_probe(env_node_t *n, const char *root) {
  aff_facts_t *f = malloc(sizeof(*f));
  if (f == NULL) {
    memset(n, 0, sizeof(*n));
    n->has_nvlink = -1;
    return RDZV_ENOMEM;
  }
  aff_facts_probe(f, root);
  env_node_from_facts(n, f);
  free(f);
  return 0;
}
