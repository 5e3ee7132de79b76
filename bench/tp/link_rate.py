"""The raw rate of the link between GPUs 0 and 1, to read NCCL's all-reduce figures against:
copy-engine peer copies (torch's device-to-device copy_, cudaMemcpyPeerAsync underneath),
one way and both ways at once, after a warm-up, timed on the host over many copies.
Usage: python3 bench/tp/link_rate.py [BYTES ...]   (default 4 MiB and 256 MiB)"""
import sys, time
import torch


def timed(fn, reps):
    fn()
    torch.cuda.synchronize(0); torch.cuda.synchronize(1)
    t = time.perf_counter()  # host clock: the both-ways copy runs on two devices' streams
    for _ in range(reps):
        fn()
    torch.cuda.synchronize(0); torch.cuda.synchronize(1)
    return (time.perf_counter() - t) * 1e6 / reps  # us


def main():
    if torch.cuda.device_count() < 2:
        sys.exit("link_rate: %d GPU(s) visible, 2 needed" % torch.cuda.device_count())
    print("peer access 0->1: %s, 1->0: %s" % (torch.cuda.can_device_access_peer(0, 1),
                                              torch.cuda.can_device_access_peer(1, 0)), flush=True)
    for n in [int(a) for a in sys.argv[1:]] or [4 << 20, 256 << 20]:
        x0 = torch.ones(n, dtype=torch.uint8, device="cuda:0")
        y1 = torch.empty(n, dtype=torch.uint8, device="cuda:1")
        x1 = torch.ones(n, dtype=torch.uint8, device="cuda:1")
        y0 = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        s1 = torch.cuda.Stream(device=1)
        reps = 50 if n <= (16 << 20) else 10

        def one():
            y1.copy_(x0, non_blocking=True)

        def both():
            y1.copy_(x0, non_blocking=True)
            with torch.cuda.stream(s1):
                y0.copy_(x1, non_blocking=True)
        torch.cuda.set_device(0)
        us1 = timed(one, reps)
        us2 = timed(both, reps)
        print("peer copy %10d bytes: one way %8.2f us (%6.1f GB/s); both ways %8.2f us (%6.1f GB/s each way)"
              % (n, us1, n / us1 / 1e3, us2, n / us2 / 1e3), flush=True)


if __name__ == "__main__":
    main()
