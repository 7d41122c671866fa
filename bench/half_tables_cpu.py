"""Where the calibrated codecs' decode kernel loses precision on long contexts, on the CPU (no GPU needed).

The CUDA decode kernels hold each band's codebook as half-precision tables (the tensor-core products read keys and
values as float16). This script runs the blockwise reference (`attention._quantized_partial_mlx`, float32) with the
decoded band values of one side rounded to float16 (`_decode_band`, inside `_band_scores` for keys, `_band_weighted`
for values) and compares it with `codec_attention` in float32 over the same stored codes: the error the kernels'
half tables alone would cause, apart from everything else the kernels do.

    python3 bench/half_tables_cpu.py [--seeds 3]

Configurations: `check_decode_steps.py`'s calibrated pair (4-bit codecs with a 5-bit outlier band of dim / 8
channels, centred and scaled) and `turbo:4`, at the GPU check's long shapes (2 KV heads d128 over 24,000 tokens,
1 KV head d256 over 20,000), 4 query heads per KV head, float16 keys, values and queries (standard normal: the check's
codec means, drawn at random, do not fit them; the rows "mean 0" give the codecs the data's own mean)."""
import argparse, platform, sys, time
from pathlib import Path
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq import attention as A
from mlx_kvq.codecs import CachedSide, codec_attention
from calcodecs import calibrated_pair as _pair   # bench/calcodecs.py
from mlx_kvq.turbo_codec import TurboCodec


def calibrated_pair(D, mean_sd=0.3):
    "The pair `bench/check_decode_steps.py` checks ('calibrated 4o5'): per-channel means drawn with sd `mean_sd` (0: the data's own mean, as calibration fits it)"
    return _pair(4, 4, D, mean_sd)


def _half(x): return x.astype(mx.float16).astype(mx.float32)


def error(kc, vc, Hkv, D, n, seed, round_keys, round_values, G=4):
    "Max error of the blockwise path (one side's decoded bands rounded to float16) relative to the float32 reference's max"
    decode, scores, weighted = A._decode_band, A._band_scores, A._band_weighted
    def rounded(f):
        def g(*a):
            A._decode_band = lambda b, parts, dt: _half(decode(b, parts, dt))
            try: return f(*a)
            finally: A._decode_band = decode
        return g
    A._band_scores = rounded(scores) if round_keys else scores
    A._band_weighted = rounded(weighted) if round_values else weighted
    try:
        mx.random.seed(seed)
        k = mx.random.normal((1, Hkv, n, D)).astype(mx.float16); v = mx.random.normal((1, Hkv, n, D)).astype(mx.float16)
        q = mx.random.normal((1, Hkv * G, 1, D)).astype(mx.float16)
        ks, vs = CachedSide(kc, None, kc.encode(k), None), CachedSide(vc, None, vc.encode(v), None)
        ref = codec_attention(q.astype(mx.float32), ks, vs, scale=D ** -0.5)
        qq = (q.astype(mx.float32) * D ** -0.5).reshape(1, Hkv, G, 1, D)
        m, l, o = A._quantized_partial_mlx(qq, A.side_plan(kc, D), A.side_plan(vc, D), ks.parts, vs.parts, None, n)
        return (mx.abs((o / l).reshape(ref.shape) - ref).max() / mx.abs(ref).max()).item()
    finally:
        A._band_scores, A._band_weighted = scores, weighted


def main():
    p = argparse.ArgumentParser(); p.add_argument('--seeds', type=int, default=3)
    a = p.parse_args()
    print(f"# half_tables_cpu: MLX {mx.__version__} (CPU stream), {platform.machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"max |error| / max |reference| over the outputs, seeds 0-{a.seeds - 1}")
    print("| codecs | KV heads | head dim | tokens | float32 throughout | keys' bands in float16 | values' bands in float16 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    with mx.stream(mx.cpu):
        for name, make in (('calibrated 4o5', calibrated_pair), ('calibrated 4o5, mean 0', lambda D: calibrated_pair(D, 0.0)),
                           ('turbo:4', lambda D: (TurboCodec(4), TurboCodec(4, seed=1)))):
            for Hkv, D, n in ((2, 128, 24000), (1, 256, 20000)):
                kc, vc = make(D)
                cols = []
                for rk, rv in ((False, False), (True, False), (False, True)):
                    es = [error(kc, vc, Hkv, D, n, s, rk, rv) for s in range(a.seeds)]
                    cols.append(f"{min(es):.2e}-{max(es):.2e}")
                print(f"| {name} | {Hkv} | {D} | {n:,} | " + " | ".join(cols) + " |", flush=True)


if __name__ == '__main__': main()
