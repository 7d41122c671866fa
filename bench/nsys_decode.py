"""Whole-model decode under Nsight Systems: where a decode step's time goes on the GPU. Run by bench/nsys_decode.sh:

    nsys profile --cuda-graph-trace=node -t cuda python3 bench/nsys_decode.py SCHEME CONTEXT STEPS

fills a Llama-3.2-1B-shaped model's caches (random weights, float16) with CONTEXT tokens of SCHEME (fp16, turbo:4,
affine:4, ...), decodes 16 warm-up steps, then STEPS pipelined steps (mlx-lm's generate_step) and prints the tokens/s
with a one-thread marker kernel (`nsys_window_marker`) launched before and after the timed steps, so that
`nsys_summary.py` sums the GPU's kernel time between the two only.
"""
import json, sys
from pathlib import Path

import mlx.core as mx

sys.path.append(str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))
from decode_step_profile import filled, pipelined
from mlx_kvq.bench import shape_model
from mlx_kvq.integrate import probe_kv_shapes


def main():
    scheme, context, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    model = shape_model("llama-3.2-1b", mx.float16); shapes = probe_kv_shapes(model)
    caches = filled(model, scheme, context, mx.float16, shapes)[0]
    marker = mx.fast.cuda_kernel(name="nsys_window_marker", input_names=["x"], output_names=["y"], source="y[0] = x[0];")
    mark = lambda: mx.eval(marker(inputs=[mx.ones((1,))], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32])[0])
    pipelined(model, caches, 16)
    mark()
    tps = pipelined(model, caches, steps, warmup=0)
    mark()
    print("WINDOW " + json.dumps(dict(scheme=scheme, context=context, steps=steps, tps=round(tps, 1))), flush=True)


if __name__ == "__main__": main()
