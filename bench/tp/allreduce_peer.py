"""The link between two GPUs, measured through PyTorch's NCCL: all-reduce time a size (bf16),
one process a GPU, 50 calls captured in a CUDA graph (no host time between them) and the
graph replayed 5 times after a warm-up. The same-run yardstick for rlx.all_reduce
(rlx-bench --devices 0,1 with RLX_GPU_PROFILE=1). NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
Usage: python3 bench/tp/allreduce_peer.py [ELEMENTS ...]   (default 4096 .. 2097152 bf16)"""
import os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def rank_main(r, n, init, sizes):
    torch.cuda.set_device(r)
    dist.init_process_group("nccl", init_method=init, rank=r, world_size=n)
    for e in sizes:
        x = torch.zeros(e, dtype=torch.bfloat16, device="cuda")
        for _ in range(10):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
            for _ in range(50):
                dist.all_reduce(x)
        g.replay()
        torch.cuda.synchronize()
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(5):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        us = a.elapsed_time(b) * 1e3 / 250
        if r == 0:
            print("all_reduce %9d bf16 (%8.1f KiB): %8.2f us, algbw %7.1f GB/s" % (e, e * 2 / 1024, us, e * 2 / us / 1e3),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    n = torch.cuda.device_count()
    if n < 2:
        sys.exit("allreduce_peer: %d GPU(s) visible, 2 needed" % n)
    print("GPUs %d, peer access 0->1: %s" % (n, torch.cuda.can_device_access_peer(0, 1)), flush=True)
    sizes = [int(a) for a in sys.argv[1:]] or [4096, 65536, 524288, 2097152]
    init = "file://" + tempfile.mktemp(prefix="ar-")
    mp.spawn(rank_main, args=(2, init, sizes), nprocs=2)
