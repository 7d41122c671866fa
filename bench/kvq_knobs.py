"""`KVQ_KNOBS="VTLO=True" python3 bench/kvq_knobs.py bench --kv ...`: the `mlx-kvq` command with the knobs of $KVQ_KNOBS set
first (bench/knobs.py), so a knob's effect on `mlx-kvq bench` is measured by the command users run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from knobs import apply_knobs

print("knobs:", " ".join(apply_knobs()) or "(none)", flush=True)
from mlx_kvq.cli import main

sys.exit(main(sys.argv[1:]))
