"""What one q/k/v GEMM would save a prefill, measured through PyTorch's cuBLAS: the three
products of one x as three GEMMs against one GEMM over the weights side by side, bf16, each
form captured 16 times in a CUDA graph (16 different weight sets, so L2 does not keep them)
and replayed; also q alone, and q with k and v as one batched GEMM. Shapes: rows x K x (q, k, v)
of the LLaMA widths rlx-bench runs (8B on one GPU and on a rank of two, 1B, 188m). The
yardstick for the GPU backend's FUSE_QKV_GEMM (docs/perf-notes.md, CUDA Change 44).
Usage: python3 bench/gpu-gemm/qkv_peer.py [ROWS]"""
import sys
import torch

SHAPES = [("8b", 4096, 4096, 1024), ("8b-rank", 4096, 2048, 512), ("1b", 2048, 2048, 512), ("188m", 1024, 1024, 256)]
SETS = 16


def timed(fn, reps=5):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / reps / SETS  # us a layer


def main():
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    torch.manual_seed(0)
    print("%s, rows %d" % (torch.cuda.get_device_name(), m), flush=True)
    for name, k, nq, nkv in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(nq + 2 * nkv, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(SETS)]
        parts = [(w[:nq], w[nq:nq + nkv], w[nq + nkv:]) for w in ws]
        sep = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for n in (nq, nkv, nkv)]
        cat = torch.empty(m, nq + 2 * nkv, device="cuda", dtype=torch.bfloat16)

        def three():
            for p in parts:
                for w, y in zip(p, sep):
                    torch.matmul(x, w.t(), out=y)

        def one():
            for w in ws:
                torch.matmul(x, w.t(), out=cat)

        wkv = [w[nq:].view(2, nkv, k) for w in ws]
        kv = torch.empty(2, m, nkv, device="cuda", dtype=torch.bfloat16)
        xb = x.unsqueeze(0).expand(2, m, k)

        def q_kv_batched():
            for p, w2 in zip(parts, wkv):
                torch.matmul(x, p[0].t(), out=sep[0])
                torch.matmul(xb, w2.transpose(1, 2), out=kv)

        def q_only():
            for p in parts:
                torch.matmul(x, p[0].t(), out=sep[0])

        t3, t1, tq, tb = timed(three), timed(one), timed(q_only), timed(q_kv_batched)
        fl = 2.0 * m * k * (nq + 2 * nkv)
        print("%-8s K %5d q %5d k,v %5d: three GEMMs %7.1f us (%4.0f TFLOP/s), one %7.1f us (%4.0f), q alone %6.1f us,"
              " q + k/v batched %7.1f us; one saves %5.1f us a layer" % (name, k, nq, nkv, t3, fl / t3 / 1e6, t1, fl / t1 / 1e6,
                                                                      tq, tb, t3 - t1), flush=True)


if __name__ == "__main__":
    main()
