"""What one layer of a staged `turbo:4` decode step costs the GPU machine's host, piece by piece, beside fp16's
(Llama-3.2-1B's attention shape: 32 query / 8 KV heads, d64, float16, 4096 tokens):

    python3 bench/host_staged_cuda.py [--calls 64]

Rows (us per call; build = the Python call, submit = `mx.async_eval` of many independent calls, wait = the rest):
fp16 `KVCache.update_and_fetch` and `mx.fast.scaled_dot_product_attention`; the staged cache's `update_and_fetch`
(a stage's steps after its first: `CodecKVCache._stage_next`) and its `attend` over staged tokens (the memoized
launcher); then the decode kernel's own `mx.fast.cuda_kernel` call alone, replayed with the arguments that `attend`
gave it (every custom-kernel call of the process is recorded by a wrapper made before mlx_kvq builds its kernels), and
the same call with its constant inputs left out (a kernel of fewer inputs, not launched: build only)."""
import argparse, platform, statistics as st, sys, time
from pathlib import Path
import mlx.core as mx

LAST = {}
_real = mx.fast.cuda_kernel
def _recording(name, input_names, output_names, source, **kw):
    k = _real(name=name, input_names=input_names, output_names=output_names, source=source, **kw)
    def call(**a):
        LAST[name] = (k, a, input_names)
        if name.startswith('mlx_kvq_decode_') and 'combine' not in name: LAST['decode'] = LAST[name]   # the last decode kernel called
        return k(**a)
    return call
mx.fast.cuda_kernel = _recording

sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_kvq.turboquant import TurboQuantKVCache
from mlx_lm.models.cache import KVCache
from host_calls_cuda import split, per_call


def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--calls', type=int, default=64); a = ap.parse_args()
    print(f"# host_staged_cuda {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; MLX {mx.__version__} {mx.default_device()}; {platform.node()}")
    B, Hq, Hkv, D, n, dt = 1, 32, 8, 64, 4096, mx.float16
    mx.random.seed(0)
    k, v = mx.random.normal((B, Hkv, n, D)).astype(dt), mx.random.normal((B, Hkv, n, D)).astype(dt)
    qs = [mx.random.normal((B, Hq, 1, D)).astype(dt) for _ in range(8)]
    toks = [(mx.random.normal((B, Hkv, 1, D)).astype(dt), mx.random.normal((B, Hkv, 1, D)).astype(dt)) for _ in range(40)]
    mx.eval(k, v, qs, toks)
    fp, tq = KVCache(), TurboQuantKVCache(4, 4)
    for c in (fp, tq): c.update_and_fetch(k, v)
    for i in range(40):   # decode steps: the kernels verified, the stage capacity recorded, staging under way
        for c in (fp, tq):
            ks, vs = c.update_and_fetch(*toks[i]); out = c.attend(qs[0], ks, vs, scale=D ** -0.5) if c is tq else \
                mx.fast.scaled_dot_product_attention(qs[0], ks, vs, scale=D ** -0.5)
            mx.eval(out, c.state)
    print(f"# staged now: {tq._n_tail()}, stage buffer {None if tq._stage is None else tq._stage.shape}")
    print("\n| what | build us/call | submit us/call | wait us/call |\n| --- | ---: | ---: | ---: |")
    row = lambda nm, b, s, w: print(f"| {nm} | {b:.1f} | {s:.1f} | {w:.1f} |", flush=True)
    def updates(c, steps=24, reps=9):
        "build us per update over `steps` decode steps (a stage's first step included), best of reps; trimmed back after"
        best = 1e9
        for _ in range(reps):
            t = time.perf_counter()
            for i in range(steps): c.update_and_fetch(*toks[i])
            best = min(best, (time.perf_counter() - t) / steps * 1e6)
            mx.eval(c.state); c.trim(steps); mx.eval(c.state)
        return best
    for r in range(2):
        tq.trim(tq._n_tail()); mx.eval(tq.state)
        print(f"| fp16 KVCache.update_and_fetch, 24 steps (build only) | {updates(fp):.1f} | - | - |")
        print(f"| turbo:4 update_and_fetch, 24 steps from an empty stage (build only) | {updates(tq):.1f} | - | - |")
        ks, vs = fp.update_and_fetch(*toks[0]); mx.eval(fp.state)
        row("fp16 SDPA", *split(lambda i: mx.fast.scaled_dot_product_attention(qs[i % 8], ks, vs, scale=D ** -0.5), a.calls))
        tq.trim(tq._n_tail())
        for i in range(5): sk, sv = tq.update_and_fetch(*toks[i])
        mx.eval(tq.state)
        row(f"turbo:4 attend, {tq._n_tail()} staged tokens (memoized launcher)", *split(lambda i: tq.attend(qs[i % 8], sk, sv, scale=D ** -0.5), a.calls))
        kern, args, names = LAST['decode']   # the staged kernel `attend` just launched (the logs of 2026-11-29 replayed the first decode kernel made instead: the folded one without staged tokens, 14 inputs)
        row(f"its decode kernel call alone ({len(args['inputs'])} inputs, {len(args['output_shapes'])} outputs)", *split(lambda i: kern(**args)[2], a.calls))
        print(f"| the same call, build only | {per_call(lambda: kern(**args)[2], 400):.1f} | - | - |")


if __name__ == '__main__': main()
