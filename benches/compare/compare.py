"""Compare sysprof with perf over what benches/compare/run.sh wrote: the
program's top-10 leaf symbols and whole stacks (same execution), and its
off-CPU time by reason (same execution, perf sched's switch records)."""
import collections, gzip, json, os, re

OUT = os.environ.get('OUT', '/tmp/sysprof-compare')
ENTRY = ('_start', '__libc_start_call_main')


def sysprof_thread(path):
    p = json.load(gzip.open(path))
    return next(t for t in p['threads'] if t['processName'] == 'python3')


def sysprof_stacks(t):
    """(leaf symbol, names root-most last, weight) per sample; the leaf's
    symbol is the function its inlined calls were inlined into, as perf
    reports it."""
    sa, st, ft, fu, s = t['samples'], t['stackTable'], t['frameTable'], t['funcTable'], t['stringArray']
    depth = ft.get('inlineDepth') or [0] * ft['length']
    w = sa.get('weight') or [1] * sa['length']
    for i, x in enumerate(sa['stack']):
        names, depths = [], []
        while x is not None:
            f = st['frame'][x]
            names.append(s[fu['name'][ft['func'][f]]])
            depths.append(depth[f] or 0)
            x = st['prefix'][x]
        k = 0
        while depths[k] > 0 and k + 1 < len(names):
            k += 1
        yield names[k], names, w[i]


# CPU: one execution seen by both.
t = sysprof_thread(OUT + '/sysprof-cpu.json.gz')
tid = str(t['tid'])
sp_leaf, sp_n, sp_whole = collections.Counter(), 0, 0
for leaf, names, _ in sysprof_stacks(t):
    if names[0].startswith('[off-CPU'):
        continue
    sp_n += 1
    sp_whole += any(n in ENTRY for n in names)
    sp_leaf[leaf] += 1
perf_leaf, perf_n, perf_whole, cur, cur_tid = collections.Counter(), 0, 0, [], None


def flush():
    global perf_n, perf_whole
    if cur_tid == tid and cur:
        perf_n += 1
        syms = [l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else '[unknown]' for l in cur]
        perf_whole += any(s in ENTRY for s in syms)
        perf_leaf[next((s for s in syms if not s.endswith('(inlined)')), syms[0])] += 1


for line in open(OUT + '/perf.stacks'):
    if not line.strip():
        flush()
        cur, cur_tid = [], None
    elif line.startswith('\t'):
        cur.append(line.strip())
    else:
        flush()
        cur, cur_tid = [], line.split()[0]
flush()
print(f'CPU samples of the program (tid {tid}): perf {perf_n}, sysprof {sp_n}\n')
print('| leaf symbol | perf self % | sysprof self % | difference |\n|---|---:|---:|---:|')
for name, c in perf_leaf.most_common(10):
    a, b = 100 * c / perf_n, 100 * sp_leaf.get(name, 0) / max(sp_n, 1)
    print(f'| {name} | {a:.2f} | {b:.2f} | {b - a:+.2f} |')
print(f'\nstacks reaching the entry ({" or ".join(ENTRY)}): perf {100 * perf_whole / max(perf_n, 1):.1f}%, sysprof {100 * sp_whole / max(sp_n, 1):.1f}%')

# Off-CPU: the second execution, sysprof's weighted samples vs perf sched's
# switch-out (by prev_state) to switch-in intervals of the same thread.
t = sysprof_thread(OUT + '/sysprof-offcpu.json.gz')
tid = str(t['tid'])
sp_off = collections.Counter()
for _, names, w in sysprof_stacks(t):
    if names[0].startswith('[off-CPU'):
        sp_off[names[0].split(': ')[1].split(',')[0].rstrip(']')] += w
state = {'R': 'preempted', 'R+': 'preempted', 'S': 'sleeping', 'D': 'blocked'}
out, perf_off = {}, collections.Counter()
for line in open(OUT + '/sched.txt'):
    m = re.match(r'\s*([\d.]+):\s+prev_comm=\S+ prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=\S+ next_pid=(\d+)', line)
    if not m:
        continue
    ts, prev, st, nxt = float(m[1]), m[2], m[3], m[4]
    if prev == tid:
        out[prev] = (ts, st)
    if nxt == tid and nxt in out:
        t0, s0 = out.pop(nxt)
        perf_off[state.get(s0, s0)] += (ts - t0) * 1e3
print(f'\noff-CPU ms of tid {tid} by reason:\n\n| reason | perf sched | sysprof |\n|---|---:|---:|')
for r in sorted(set(perf_off) | set(sp_off)):
    print(f'| {r} | {perf_off.get(r, 0):.1f} | {sp_off.get(r, 0):.1f} |')
