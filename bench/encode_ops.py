"""How many MLX operations a calibrated codec's traced encode (`CalibratedTurboCodec._encode`, what one side of an update
cost on CUDA before the pair kernel took it) builds for one decode token: the nodes of its parts' graph, as
`mx.export_to_dot` writes them (rectangles are operations).

    python3 bench/encode_ops.py
"""
import sys, tempfile
from pathlib import Path
import numpy as np
import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mlx_kvq.calibrated import CalibratedTurboCodec

for D, outliers in ((64, 0), (128, 16), (256, 32)):
    r = np.random.default_rng(0)
    c = CalibratedTurboCodec(4, seed=0, mean=(r.normal(size=D) * 0.1).tolist(), scale=r.uniform(0.5, 2.0, D).tolist(),
                             outliers=sorted(r.choice(D, outliers, replace=False).tolist()) if outliers else None,
                             outlier_bits=5 if outliers else None, dim=D)
    parts = c._encode(mx.random.normal((1, 8, 1, D)).astype(mx.float16))
    with tempfile.NamedTemporaryFile(suffix='.dot') as f:
        mx.export_to_dot(f.name, *parts)
        ops = sum('shape=rectangle' in line for line in open(f.name))
    print(f"d{D}, 4-bit centred and scaled, {'an outlier band of ' + str(outliers) + ' channels' if outliers else 'one band'}: {ops} operations")
