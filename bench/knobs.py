"""`KVQ_KNOBS="NAME=VALUE ..."`: the knobs of `attention_kernels`, `attention` or `packing` a bench run sets before it
starts (e.g. `KVQ_KNOBS="FOLD=0"`, `KVQ_KNOBS="INCLUDE=True"`), shared by the GPU benches in this folder."""
import os


def apply_knobs(env="KVQ_KNOBS"):
    "Set each NAME=VALUE of $KVQ_KNOBS on the first of attention_kernels, attention, packing that has NAME; the pairs set"
    from mlx_kvq import attention_kernels as AK, attention as A, packing as P
    done = []
    for kv in os.environ.get(env, "").split():
        k, v = kv.split("=", 1)
        m = next((m for m in (AK, A, P) if hasattr(m, k)), None)
        if m is None: raise SystemExit(f"{env}: {k} is no knob of attention_kernels, attention or packing")
        setattr(m, k, eval(v)); done.append(kv)
    return done
