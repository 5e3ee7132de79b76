/* Topological schedule (Kahn) with the emission position as priority, so fused and
 * decomposed nodes land where the nodes they replace were. */
#include "compile/plan.h"
#include <stdlib.h>
#include <string.h>

typedef struct heap {
    uint32_t *a;
    uint32_t n;
    const rg_node *nodes;
} heap;

static int before(const heap *h, uint32_t x, uint32_t y)
{
    const rg_node *a = &h->nodes[x], *b = &h->nodes[y];
    return a->pos != b->pos ? a->pos < b->pos : x < y;
}

static void push(heap *h, uint32_t v)
{
    uint32_t i = h->n++;
    h->a[i] = v;
    while (i && before(h, h->a[i], h->a[(i - 1) / 2])) {
        uint32_t p = (i - 1) / 2, t = h->a[p];
        h->a[p] = h->a[i];
        h->a[i] = t;
        i = p;
    }
}

static uint32_t pop(heap *h)
{
    uint32_t top = h->a[0], i = 0;
    h->a[0] = h->a[--h->n];
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && before(h, h->a[l], h->a[m])) m = l;
        if (r < h->n && before(h, h->a[r], h->a[m])) m = r;
        if (m == i) break;
        uint32_t t = h->a[m];
        h->a[m] = h->a[i];
        h->a[i] = t;
        i = m;
    }
    return top;
}

int rg_schedule(rg_graph *g, rlx_diag *d)
{
    rg_compact_nodes(g);
    uint32_t n = g->n_nodes, nv = g->n_values;
    uint32_t *indeg = calloc(n + 1, sizeof *indeg);
    uint32_t *cstart = calloc(nv + 1, sizeof *cstart); /* consumers of v: cons[cstart[v]..] */
    uint32_t *order = malloc((n + 1) * sizeof *order);
    uint32_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += g->nodes[i].n_in;
    uint32_t *cons = malloc((total + 1) * sizeof *cons), *fill = calloc(nv + 1, sizeof *fill);
    heap h = {malloc((n + 1) * sizeof(uint32_t)), 0, g->nodes};
    int rc = 0;
    if (!indeg || !cstart || !order || !cons || !fill || !h.a) {
        rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < g->nodes[i].n_in; j++) cstart[g->nodes[i].in[j] + 1]++;
    for (uint32_t v = 0; v < nv; v++) cstart[v + 1] += cstart[v];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < g->nodes[i].n_in; j++) {
            int32_t v = g->nodes[i].in[j];
            cons[cstart[v] + fill[v]++] = i;
            if (g->values[v].producer >= 0) indeg[i]++;
        }
    for (uint32_t i = 0; i < n; i++)
        if (!indeg[i]) push(&h, i);
    uint32_t done = 0;
    while (h.n) {
        uint32_t i = pop(&h);
        order[done++] = i;
        for (uint32_t k = 0; k < g->nodes[i].n_out; k++) {
            int32_t v = g->nodes[i].out[k];
            for (uint32_t c = cstart[v]; c < cstart[v + 1]; c++)
                if (--indeg[cons[c]] == 0) push(&h, cons[c]);
        }
    }
    if (done != n) {
        rc = rlx_diag_set(d, RLX_ERR_INTERNAL, "schedule: the graph has a cycle (%u of %u nodes ordered)", done, n);
        goto out;
    }
    rg_node *sorted = malloc((n + 1) * sizeof *sorted);
    if (!sorted) {
        rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < n; k++) sorted[k] = g->nodes[order[k]];
    memcpy(g->nodes, sorted, n * sizeof *sorted);
    free(sorted);
    for (uint32_t k = 0; k < n; k++) {
        g->nodes[k].pos = k;
        for (uint32_t j = 0; j < g->nodes[k].n_out; j++) g->values[g->nodes[k].out[j]].producer = (int32_t)k;
    }
out:
    free(indeg);
    free(cstart);
    free(order);
    free(cons);
    free(fill);
    free(h.a);
    return rc;
}
