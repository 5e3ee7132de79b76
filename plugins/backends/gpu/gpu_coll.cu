/* The GPU backend's side of a program's collectives (gpu_tp.cu runs them through NCCL /
 * RCCL): their symmetric window, and the checks and waits the ranks share around each execute. */
#include "gpu_exe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the program's first connected collective: its link names the rank and group (gpu_tp.cu) */
const gpu_tp_link *coll_link(const gpu_exe *x)
{
    for (uint32_t i = 0; i < x->n_steps; i++)
        if (x->steps[i].tp.comm)
            return &x->steps[i].tp;
    return NULL;
}

/* Gives each collective's input and output (the temporaries among them, with their
 * aliases) its own bytes of the window, for the whole program, up to RLX_TP_WINDOW_MB
 * (default 64: a decode program of LLaMA-3-8B widths takes 1.1 MB, its 512-row prefill
 * 516 MiB; over it the collectives stay on the arena). A peer enters a collective,
 * and may write this rank's buffers of it, as soon as this rank has entered the collective
 * before; buffers placed by lifetime (reused once a value is dead on this rank) lost parity
 * under both eager and graph runs, so no byte holds two buffers. Each rank compiles the
 * same program, so each places them alike. */
int coll_window_plan(gpu_exe *x, const rlx_program *prog)
{
    int nr = 0, rc = 0, *rs = (int *)calloc(2 * x->n_steps + 1, sizeof(int));
    if (!rs)
        return -1;
    for (uint32_t i = 0; !rc && i < x->n_steps; i++) {
        const gpu_step *st = &x->steps[i];
        if (st->tp.ranks < 2)
            continue;
        int cand[2] = {x->root[st->in[0]], x->root[st->out[0]]};
        for (int c = 0; c < 2 && !rc; c++) {
            int dup = 0;
            for (int k = 0; k < nr; k++)
                dup |= rs[k] == cand[c];
            if (dup || !movable(x, prog, cand[c]))
                continue;
            rs[nr++] = cand[c];
            rc = move_root(x, prog, cand[c], x->win_bytes, &x->win_v, &x->win_off, &x->n_win);
            x->win_bytes += align256(x->vbytes[cand[c]]);
        }
    }
    /* own bytes per buffer grow with the rows: a long prefill would take gigabytes */
    const char *cap_s = getenv("RLX_TP_WINDOW_MB");
    const double mb = cap_s && *cap_s ? atof(cap_s) : 64.0;
    const size_t cap = mb > 0 ? (size_t)(mb * 1048576.0) : 0;
    if (!rc && x->win_bytes > cap) {
        if (getenv("RLX_TP_PROFILE"))
            fprintf(stderr, "%s: %s program: collectives stay on the arena (a window would take %zu bytes, over "
                    "RLX_TP_WINDOW_MB=%g)\n", RLX_GPU_VENDOR, x->decode ? "decode" : "prefill", x->win_bytes, mb);
        x->n_win = 0;
        x->win_bytes = 0;
    }
    if (!rc && x->n_win && !(x->vpw = (void **)calloc(prog->n_values + 1, sizeof(void *))))
        rc = -1;
    free(rs);
    return rc;
}

/* gpu_tp.cu: the ranks launch a step's graph together or not at all */
int coll_launch(const gpu_exe *x, int rc, rlx_diag *d)
{
    const gpu_tp_link *l = coll_link(x);
    char m[384] = "";
    if (l && gpu_tp_launch_barrier(l, rc == 0, m, sizeof m) && !rc) {
        set_diag(d, RLX_ERR_DEVICE, "%s", m);
        rc = RLX_ERR_DEVICE;
    }
    return rc;
}

/* gpu_tp.cu: a program's first execute compares its collectives with the other ranks' */
int coll_check(const gpu_exe *x, rlx_diag *d)
{
    int64_t n = 0, vals = 0;
    uint64_t sig = 1469598103934665603ull; /* FNV-1a over each collective's op and size */
    const gpu_tp_link *l = coll_link(x);
    for (uint32_t i = 0; l && i < x->n_steps; i++) {
        const gpu_step *st = &x->steps[i];
        if (!st->tp.ranks)
            continue;
        int64_t v[4] = {st->op, st->rows, st->n, st->dto[0]};
        for (int k = 0; k < 4; k++)
            sig = (sig ^ (uint64_t)v[k]) * 1099511628211ull;
        n++;
        vals += st->rows * st->n;
    }
    char m[384];
    if (l && gpu_tp_check_program(l, n, vals, sig, m, sizeof m)) {
        set_diag(d, RLX_ERR_DEVICE, "%s", m);
        return RLX_ERR_DEVICE;
    }
    return 0;
}

/* gpu_tp.cu: the collectives' window, at the first execute on every rank (RLX_TP_SYMMETRIC=0:
 * none, to compare); without one they run on the arena's buffers */
void coll_window_open(gpu_be *be, gpu_exe *x)
{
    const gpu_tp_link *l = coll_link(x);
    const char *e = getenv("RLX_TP_SYMMETRIC");
    char m[384] = "off (RLX_TP_SYMMETRIC=0)";
    x->win_state = -1;
    if (l && !(e && !strcmp(e, "0")) && gpu_tp_window_open(l, x->win_bytes, &x->win, &x->win_h, m, sizeof m) == 0)
        x->win_state = 1;
    const int say = be->prof || getenv("RLX_TP_PROFILE");
    if (say)
        fprintf(stderr, "%s rank %d: %s program: %s\n", RLX_GPU_VENDOR, l ? l->rank : -1, x->decode ? "decode" : "prefill",
                x->win_state > 0 ? "collectives in a symmetric window" : m);
    if (say && x->win_state > 0)
        fprintf(stderr, "%s rank %d: window of %zu bytes, %d values\n", RLX_GPU_VENDOR, l->rank, x->win_bytes, x->n_win);
    (void)gpuSetDevice(be->device);
}

/* gpu_tp.cu: a step with collectives ends when its stream drains, or fails in bounded time */
int coll_end(gpu_be *be, const gpu_exe *x, int rc, rlx_diag *d)
{
    const gpu_tp_link *l = coll_link(x);
    char m[384];
    if (l && rc)
        gpu_tp_fail(l, d && d->msg[0] ? d->msg : "a step failed");
    else if (l && gpu_tp_wait(be->stream, l, m, sizeof m)) {
        set_diag(d, RLX_ERR_DEVICE, "%s", m);
        return RLX_ERR_DEVICE;
    }
    return rc;
}
