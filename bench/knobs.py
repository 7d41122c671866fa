"""`KVQ_KNOBS="NAME=VALUE ..."`: the knobs of `attention_kernels`, `attention`, `packing` or `calibrated` a bench run sets before it
starts (e.g. `KVQ_KNOBS="FOLD=0"`, `KVQ_KNOBS="INCLUDE=True"`), or a cache class's attribute (`CodecKVCache.stage=64`), shared by the GPU benches in this folder (`ncu_decode.py` passes its own NAME=VALUE arguments)."""
import os


def apply_knobs(pairs=None):
    """Set each NAME=VALUE of `pairs` (default: $KVQ_KNOBS split on spaces) on the first of attention_kernels, attention,
    packing, calibrated that has NAME; the pairs set"""
    from mlx_kvq import attention_kernels as AK, attention as A, packing as P, qcache as Q, calibrated as Cal
    done = []
    for kv in os.environ.get("KVQ_KNOBS", "").split() if pairs is None else pairs:
        k, v = kv.split("=", 1)
        if '.' in k:   # CLASS.attr of mlx_kvq.qcache (e.g. CodecKVCache.stage=64)
            cls, attr = k.split('.', 1)
            if not hasattr(getattr(Q, cls, None), attr): raise SystemExit(f"knob {k!r}: no such class attribute in mlx_kvq.qcache")
            setattr(getattr(Q, cls), attr, eval(v)); done.append(kv); continue
        m = next((m for m in (AK, A, P, Cal) if hasattr(m, k)), None)
        if m is None: raise SystemExit(f"knob {k!r}: no such name in attention_kernels, attention, packing or calibrated")
        setattr(m, k, eval(v)); done.append(kv)
    return done
