"""kernel_trace.so's CSV (plain or .xz), read by layer_table.py and step_table.py."""
import collections, lzma


def rows(path):
    """(start_ns, end_ns, graph_id, name, device, grid) of each row; grid is a copy's bytes"""
    op = lzma.open if path.endswith('.xz') else open
    with op(path, 'rt') as f:
        for ln in f:
            p = ln.rstrip('\n').split(',')
            if len(p) < 9 or not p[0].isdigit():
                continue
            yield int(p[0]), int(p[1]), p[2], ','.join(p[7:-1]), p[-1], int(p[4])


def replays(ev):
    """a graph's kernels (sorted) split into replays at each k_embedding (a step's first
    kernel), the replays of the most common length kept; and that length"""
    out, cur = [], []
    for r in ev:
        if 'k_embedding' in r[3] and cur:
            out.append(cur)
            cur = []
        cur.append(r)
    out.append(cur)
    n = collections.Counter(len(x) for x in out).most_common(1)[0][0]
    return [x for x in out if len(x) == n], n
