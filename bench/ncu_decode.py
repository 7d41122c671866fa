"""One layer's decode attention at N tokens, run a few times, for Nsight Compute to profile one launch of the fused decode
kernel (or of fp16 SDPA) on the GPU machine (`ncu` is at /usr/local/cuda/bin/ncu there):

    ncu --kernel-name regex:mlx_kvq_decode_[0-9a-f] --launch-skip 4 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis --section InstructionStats python3 bench/ncu_decode.py turbo:4 131072
    ncu --kernel-name regex:sdpa ... python3 bench/ncu_decode.py fp16 131072

32 query / 8 KV heads, head dim 128, float16 (the issue's one-layer shape; `--gemma`: 4 query / 1 KV head, head dim 256, the
embedded Gemma's; `--llama`: 32 / 8 heads at head dim 64, a layer of Llama-3.2-1B's shape, the whole-model bench's). Schemes: fp16, turbo:K[,V], affine:K[,V], `auto:B` (planned as `mlx-kvq bench` plans it for this shape,
printed: near-tied plans of a random-weight layer can differ between runs on a GPU: on the issue's shape on 2026-11-30
this script planned keys tq3cs / values tq6cso where the bench's run planned tq4cso / tq5cs, `bench/h200_20261130c/`), and `cal:K,V`: calibrated codecs of the kinds `auto:B` plans
(per-channel mean and scale, an outlier band of dim / 8 channels at one bit more); `cal1:K,V`: the same with one band a side
(what `auto:B` labels tqBcs; V `a8`: 8-bit affine values, as `auto:5` pairs some calibrated keys); `calf:` / `cal1f:` the same
with float64 codebooks (`half_centroids=False`, a config saved before 2026-12-01: tables with low parts). Arguments after N set kernel knobs of
`attention_kernels` (e.g. `LEAN=False PCH=2`); `--say-error` prints the first-use check's error, passed or not; `--unchecked` lets a diagnostic variant (`_DIAG='nolds'`, wrong results
on purpose) past the first-use check so that its duration can be measured.
"""
import sys
from pathlib import Path
import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parents[1]))
from mlx_kvq.codecs import AffineCodec
from mlx_kvq.qcache import CodecKVCache
from mlx_kvq.turboquant import TurboQuantKVCache

argv = [a for a in sys.argv[1:] if a not in ('--unchecked', '--gemma', '--llama', '--say-error')]
scheme, n = argv[0], int(argv[1])
from knobs import apply_knobs; apply_knobs(argv[2:])   # knobs of attention_kernels, attention or packing, e.g. LEAN=False PCH=2 DEVICE_CONSTANTS=False
if '--unchecked' in sys.argv:   # diagnostics only (`_DIAG`): the first-use check accepts a kernel whatever it returns, so a wrong-on-purpose variant runs
    from mlx_kvq import attention as A
    A._agree_final = lambda *a: None
if '--say-error' in sys.argv:   # print the first-use check's error of every fused configuration, passed or not
    from mlx_kvq import attention as A
    _agree = A._agree_final
    def _say(out, ref, *a):
        err = mx.abs(out.astype(mx.float32) - ref.astype(mx.float32)).max().item(); top = mx.abs(ref.astype(mx.float32)).max().item()
        print(f"first-use check: max error {err:.3g}, scale {top:.3g}, relative {err / top:.3g}", flush=True)
        return _agree(out, ref, *a)
    A._agree_final = _say
B, Hkv, G, D = (1, 1, 4, 256) if '--gemma' in sys.argv else (1, 8, 4, 64) if '--llama' in sys.argv else (1, 8, 4, 128)
dt = mx.float16
q = mx.random.normal((B, Hkv * G, 1, D)).astype(dt)
if scheme == "fp16":
    k, v = mx.random.normal((B, Hkv, n, D)).astype(dt), mx.random.normal((B, Hkv, n, D)).astype(dt)
    for _ in range(6): mx.eval(mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5))
else:
    if scheme.startswith("auto:"):   # the codecs `mlx-kvq bench` plans for this shape on this device (seeded), as its rows measure them
        from mlx_kvq.bench import bench_caches, _bench_scheme, layer_model, bench_calibration, planned_labels
        subject = layer_model(Hkv * G, Hkv, D)
        c = [x for x in bench_caches(subject, _bench_scheme(scheme), **bench_calibration(subject, [scheme], None, 0)[0]) if x is not None][0]
        print("planned:", planned_labels([c]), flush=True)
    elif scheme.startswith("cal"):   # cal:K,V; cal1: one band a side (tqBcs), values `a8`: 8-bit affine; calf / cal1f: float64 codebooks (configs saved before 2026-12-01)
        kind, kv = scheme.split(":"); kb, vb = kv.split(",")
        from calcodecs import calibrated, calibrated_pair
        half, one = not kind.endswith("f"), kind.startswith("cal1")
        if one: c = CodecKVCache(calibrated(int(kb), 0, D, outliers=False, half=half), AffineCodec(8) if vb == "a8" else calibrated(int(vb), 1, D, outliers=False, half=half))
        else: c = CodecKVCache(*calibrated_pair(int(kb), int(vb), D, half=half))
    else:
        bits = [int(b) for b in scheme.split(":")[1].split(",")]
        kb, vb = bits[0], bits[-1]
        c = TurboQuantKVCache(kb, vb) if scheme.startswith("turbo") else CodecKVCache(AffineCodec(kb), AffineCodec(vb))
    for s in range(0, n - 1, 8192):
        m = min(8192, n - 1 - s)
        c.update_and_fetch(mx.random.normal((B, Hkv, m, D)).astype(dt), mx.random.normal((B, Hkv, m, D)).astype(dt))
        mx.eval(c.keys, c.values)
    ks, vs = c.update_and_fetch(mx.random.normal((B, Hkv, 1, D)).astype(dt), mx.random.normal((B, Hkv, 1, D)).astype(dt))
    for _ in range(8): mx.eval(c.attend(q, ks, vs, scale=D ** -0.5))
print("done", scheme, n)
