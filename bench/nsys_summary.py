"""Sum an Nsight Systems decode run's GPU kernels between its two window markers (`nsys_decode.py`): per step, the
GPU's busy time (the union of kernel intervals), the idle time between kernels, and the kernels by name (time per
step, launches per step). A step bound by the GPU shows busy close to the step's wall time; one bound by the host
shows idle gaps.

    python3 bench/nsys_summary.py TRACE.csv WINDOW.json   (TRACE: nsys stats -r cuda_gpu_trace -f csv)
"""
import csv, json, sys
from collections import defaultdict


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    w = json.loads(open(sys.argv[2]).read())
    steps = w["steps"]
    marks = sorted(int(r["Start (ns)"]) for r in rows if "nsys_window_marker" in r.get("Name", ""))
    if len(marks) != 2: sys.exit(f"expected the two window markers, found {len(marks)}")
    t0, t1 = marks
    ks = []
    for r in rows:
        name = r.get("Name", "")
        if not r.get("Start (ns)") or "[CUDA mem" in name or "nsys_window_marker" in name: continue
        s, d = int(r["Start (ns)"]), int(r["Duration (ns)"])
        if t0 < s < t1: ks.append((s, d, name))
    ks.sort()
    busy, end = 0, t0
    for s, d, _ in ks:
        if s + d > end:
            busy += s + d - max(s, end); end = s + d
    by = defaultdict(lambda: [0, 0])
    for s, d, n in ks:
        short = n.split("(")[0].split("<")[0][:60]
        by[short][0] += d; by[short][1] += 1
    wall = (t1 - t0) / steps / 1e3
    print(json.dumps(dict(scheme=w["scheme"], context=w["context"], tps=w["tps"], wall_us_per_step=round(wall, 1),
                          gpu_busy_us_per_step=round(busy / steps / 1e3, 1), busy_fraction=round(busy / (t1 - t0), 3),
                          kernels_per_step=round(len(ks) / steps, 1))))
    for n, (d, c) in sorted(by.items(), key=lambda x: -x[1][0])[:14]:
        print(f"  {d / steps / 1e3:8.1f} us/step  {c / steps:6.1f} launches/step  {n}")


if __name__ == "__main__": main()
