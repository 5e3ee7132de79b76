#!/usr/bin/env python3
"""What happens between two replays of a decode graph, from a kernel_trace.so CSV taken with
RLX_KTRACE_API=1 (plain or .xz): for each graph replayed at least --min times, the copies,
host CUDA calls and kernels outside the graph that fall between a replay's last kernel end
and the next replay's first kernel start, each as its median start and end in µs from that
last end (negative: it began while the graph still ran), over the last --last gaps that
have the most common sequence of events.
  step_table.py kt-api.csv.xz [--last 20] [--min 16]"""
import bisect, collections, statistics, sys
from ktrace_csv import replays, rows


def label(r):
    if r[3].startswith('memcpy:'):
        return f'{r[3]} {r[5]} B'
    return r[3][:60]


def main():
    a = sys.argv[1:]
    last = int(a[a.index('--last') + 1]) if '--last' in a else 20
    mn = int(a[a.index('--min') + 1]) if '--min' in a else 16
    allr = sorted(rows(a[0]))
    graphs = collections.defaultdict(list)
    for r in allr:
        if r[2] not in ('0', '') and not r[3].startswith('memcpy:'):
            graphs[r[2]].append(r)
    others = [r for r in allr if r[2] in ('0', '') or r[3].startswith('memcpy:')]
    starts = [r[0] for r in others]  # sorted: each gap looks only at events starting in it
    if not any(r[3].startswith('api:') for r in others):
        print('no host calls in the trace: take it with RLX_KTRACE_API=1')
    for g, ev in sorted(graphs.items(), key=lambda kv: -len(kv[1])):
        reps, n = replays(ev)
        reps = [(x[0][0], max(k[1] for k in x)) for x in reps]
        if len(reps) < mn:
            continue
        gaps = []
        for (s0, e0), (s1, e1) in zip(reps, reps[1:]):
            if s1 - e0 > 5e6:  # another phase ran between them (a rep's prefill)
                continue
            lo, hi = bisect.bisect_right(starts, e0 - 3e6), bisect.bisect_left(starts, s1)
            inside = [r for r in others[lo:hi] if r[1] > e0]
            gaps.append((e0, s1, e1 - s1, inside))
        if not gaps:
            continue
        seq = collections.Counter(tuple(label(r) for r in x[3]) for x in gaps).most_common(1)[0][0]
        gaps = [x for x in gaps if tuple(label(r) for r in x[3]) == seq][-last:]
        med = lambda v: statistics.median(v) / 1e3
        print(f'graph {g}: {n} kernels a replay, {len(gaps)} gaps; replay {med([x[2] for x in gaps]):.1f} µs, '
              f'gap {med([x[1] - x[0] for x in gaps]):.1f} µs (last kernel end to the next first kernel start)')
        print(f'  {"event":<62} {"start":>8} {"end":>8} {"dur":>7}')
        for i, name in enumerate(seq):
            st = [x[3][i][0] - x[0] for x in gaps]
            en = [x[3][i][1] - x[0] for x in gaps]
            du = [x[3][i][1] - x[3][i][0] for x in gaps]
            print(f'  {name:<62} {med(st):8.1f} {med(en):8.1f} {med(du):7.1f}')
        print(f'  {"next replay: first kernel start":<62} {med([x[1] - x[0] for x in gaps]):8.1f}')


if __name__ == '__main__':
    main()
