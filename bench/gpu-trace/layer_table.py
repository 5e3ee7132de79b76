#!/usr/bin/env python3
"""A decode graph's kernels on the GPU's clock, from kernel_trace.so's CSV (plain or .xz):
replays of the graph with the most kernels, split at each k_embedding launch; for each
position in a replay the median duration and the median 'end minus the previous kernel's
end' (what the kernel adds to the token), over the last --last replays.
  layer_table.py kt-188m.csv.xz [--last 20] [--layer]   (--layer: one layer's rows, averaged)"""
import collections, statistics, sys
from ktrace_csv import replays, rows


def main():
    a = sys.argv[1:]
    last = int(a[a.index('--last') + 1]) if '--last' in a else 20
    ks = [r for r in rows(a[0]) if r[2] not in ('0', '')]  # graph nodes only
    by = collections.defaultdict(list)
    for r in ks:
        by[(r[4], r[2])].append(r)
    key = max(by, key=lambda k: len(by[k]))
    reps, n = replays(sorted(by[key]))
    reps = reps[-last:]
    print(f'graph {key[1]} on device {key[0]}: {len(reps)} replays of {n} kernels')
    tok = statistics.median(x[-1][1] - x[0][0] for x in reps) / 1e3
    table = []
    for i in range(n):
        dur = statistics.median((x[i][1] - x[i][0]) / 1e3 for x in reps)
        inc = statistics.median((x[i][1] - (x[i - 1][1] if i else x[i][0])) / 1e3 for x in reps)
        table.append((reps[0][i][3][:60], dur, inc))
    if '--layer' in a:  # the repeating block: from the first kernel that recurs to its next launch
        names = [t[0] for t in table]
        first = next(i for i, t in enumerate(names) if names.count(t) > 1 and i > 0)
        period = next(i for i in range(first + 1, n) if names[i] == names[first]) - first
        layers = (n - first) // period
        layer = 0.0
        for k in range(period):
            sel = [table[first + L * period + k] for L in range(layers)]
            dur, inc = statistics.mean(s[1] for s in sel), statistics.mean(s[2] for s in sel)
            layer += inc
            print(f'{sel[0][0]:60s} {dur:7.2f} {inc:7.2f}')
        print(f'a layer: {layer:.1f} us of increments, {layers} layers')
    else:
        for t in table:
            print(f'{t[0]:60s} {t[1]:7.2f} {t[2]:7.2f}')
    print(f'first start to last end: {tok:.1f} us')


main()
