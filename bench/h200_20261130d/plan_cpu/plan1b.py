import json, time, mlx.core as mx
from mlx_kvq.bench import shape_model, bench_caches, bench_calibration, _bench_scheme
t=time.time()
m = shape_model('llama-3.2-1b', mx.float32)
kw, note = bench_calibration(m, ['auto:5'], None, 0)
cs = bench_caches(m, _bench_scheme('auto:5'), **kw)
print(time.time()-t, 's')
for c in cs:
    plan, layer = getattr(c,'plan',None), getattr(c,'layer',None)
    p = json.loads(plan) if isinstance(plan,str) else plan
    print(type(c).__name__, layer, (p or {}).get('layers',{}).get(str(layer)) if p else None)
p = json.loads(cs[0].plan)
for l, v in sorted(p['layers'].items(), key=lambda kv: int(kv[0])): print(l, v['labels'], v['predicted_kl'])
print(p.get('bits_per_value'), p.get('sink'), p.get('window'))
