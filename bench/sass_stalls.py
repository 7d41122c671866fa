"""Where a kernel's warps wait, from Nsight Compute's per-instruction stall samples (`ncu -i REP --page source --csv
--print-source sass`, as `bash bench/gpu_round.sh sass131` writes them): samples summed over the kernel's loops
(backward branches: each loop the address range from its target to the branch) and the code between them, each
region's top stall reasons and opcodes.

    python3 bench/sass_stalls.py bench/h200_20261128e/sass_turbo4.csv.gz [--top 8] [--insts 12]   # .csv or .csv.gz"""
import argparse, collections, csv, gzip, re

def load(path):
    rows = list(csv.reader(gzip.open(path, 'rt') if path.endswith('.gz') else open(path)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == 'Address')
    cols = rows[head]
    out = []
    for r in rows[head + 1:]:
        if len(r) != len(cols): continue
        d = dict(zip(cols, r))
        d['addr'] = int(d['Address'], 16)
        out.append(d)
    return cols, out

def num(x):
    try: return float(x.replace(',', ''))
    except ValueError: return 0.0

def main():
    ap = argparse.ArgumentParser(); ap.add_argument('csv'); ap.add_argument('--top', type=int, default=8)
    ap.add_argument('--insts', type=int, default=12, help='the instructions with the most stall samples, with their top reasons')
    a = ap.parse_args()
    cols, ins = load(a.csv)
    stalls = [c for c in cols if c.startswith('stall_') and '(Not Issued)' not in c]
    base = ins[0]['addr']
    loops = []
    for d in ins:   # a backward branch: BRA to a lower address
        tgt = re.search(r'0x([0-9a-f]+)', d['Source'])
        if 'BRA' in d['Source'].split() and tgt:
            t = int(tgt.group(1), 16)
            t = t if t > base else base + t
            if t < d['addr']: loops.append((t, d['addr']))
    loops = sorted(set(loops))
    big = [(s, e) for s, e in loops if (e - s) // 16 >= 100]   # the token loops (hundreds of instructions)
    def region(addr):   # the innermost (shortest) such loop holding the instruction
        inside = [(e - s, s, e) for s, e in big if s <= addr <= e]
        if not inside: return "outside the loops"
        _, s, e = min(inside)
        return f"loop [{s - base:#x}-{e - base:#x}]"
    tot = collections.Counter(); by = collections.defaultdict(collections.Counter); ops = collections.defaultdict(collections.Counter)
    execd = collections.Counter()
    for d in ins:
        rg = region(d['addr']); n = num(d['Warp Stall Sampling (All Samples)'])
        tot[rg] += n; execd[rg] += num(d['Instructions Executed'])
        for c in stalls: by[rg][c[6:]] += num(d[c])
        op = d['Source'].split()
        op = [x for x in op if not x.startswith('@')]
        ops[rg][op[0].split('.')[0] if op else '?'] += n
    allv = sum(tot.values())
    wf, ex = sum(num(d.get('L1 Wavefronts Shared', '0')) for d in ins), sum(num(d.get('L1 Wavefronts Shared Excessive', '0')) for d in ins)
    print(f"{a.csv}: {len(ins)} instructions, {allv:.0f} stall samples; loops of 100+ instructions: {[(hex(s - base), hex(e - base)) for s, e in big]}")
    for rg in sorted((r for r in tot if tot[r]), key=lambda r: -tot[r]):
        print(f"\n{rg}: {tot[rg]:.0f} samples ({100 * tot[rg] / allv:.1f}%), {execd[rg]:.0f} warp instructions executed")
        print("  reasons: " + ', '.join(f"{k} {100 * v / tot[rg]:.0f}%" for k, v in by[rg].most_common(a.top) if v))
        print("  opcodes: " + ', '.join(f"{k} {100 * v / tot[rg]:.0f}%" for k, v in ops[rg].most_common(a.top) if v))
    print(f"\nshared-memory wavefronts {wf:.0f}, of them excessive (bank conflicts) {ex:.0f} ({100 * ex / max(wf, 1):.0f}%)")
    print(f"\nthe {a.insts} instructions with the most samples (address from the kernel's start, samples, top reasons):")
    for d in sorted(ins, key=lambda d: -num(d['Warp Stall Sampling (All Samples)']))[:a.insts]:
        st = collections.Counter({c[6:]: num(d[c]) for c in stalls})
        print(f"  {d['addr'] - base:#07x} {num(d['Warp Stall Sampling (All Samples)']):6.0f}  {d['Source'].strip()[:56]:56s} " + ', '.join(f"{k} {v:.0f}" for k, v in st.most_common(2)))

if __name__ == '__main__': main()
