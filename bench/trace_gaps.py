"""Kernels and idle gaps in Nsight Systems' `cuda_gpu_trace` CSV reports (`nsys stats --report cuda_gpu_trace --format csv`),
one report per profiled region of `bench/call_timeline.py`: per region the span from the first kernel's start to the last's
end, the sum of kernel durations, the idle time between them, and the kernels by name (count, total us)."""
import csv, sys
from collections import defaultdict

for path in sys.argv[1:]:
    rows = []
    with open(path) as f:
        lines = [l for l in f if l.strip()]
    head = next((i for i, l in enumerate(lines) if l.startswith('"Start') or l.startswith('Start')), None)
    if head is None: print(path, ": no trace rows"); continue
    for r in csv.DictReader(lines[head:]):
        try: rows.append((int(float(r['Start (ns)'])), int(float(r['Duration (ns)'])), r.get('Name', '?')))
        except (KeyError, ValueError): pass
    rows.sort()
    if not rows: print(path, ": no kernels"); continue
    span = rows[-1][0] + rows[-1][1] - rows[0][0]
    busy = sum(d for _, d, _ in rows)
    idle, end = 0, rows[0][0]
    for s, d, _ in rows:
        idle += max(0, s - end); end = max(end, s + d)
    by = defaultdict(lambda: [0, 0])
    for _, d, n in rows: by[n[:60]][0] += 1; by[n[:60]][1] += d
    print(f"{path}: {len(rows)} GPU operations, span {span / 1e3:.1f} us, busy {busy / 1e3:.1f} us, idle between {idle / 1e3:.1f} us")
    for n, (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1]): print(f"   {c:4d} x {n}: {d / 1e3:.1f} us")
    print("   first 24 in order (start us, duration us, gap us, name):")
    prev = rows[0][0]
    for s, d, n in rows[:24]:
        print(f"     {(s - rows[0][0]) / 1e3:8.1f} {d / 1e3:7.1f} {(s - prev) / 1e3:6.1f} {n[:50]}"); prev = s + d
