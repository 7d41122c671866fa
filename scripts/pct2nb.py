"""Write a notebook from a percent-format script (a drafting aid for contributors).

Usage: python scripts/pct2nb.py draft.py nbs/03_turboquant.ipynb

Cells start with `# %%` (code) or `# %% [markdown]` (markdown; each line's leading `# ` is removed).
The notebook is the source of truth afterwards: edit it, not the draft.
"""
import json, sys, re
from pathlib import Path

def parse(text):
    cells, kind, buf = [], None, []
    def flush():
        if kind is None: return
        lines = list(buf)
        while lines and not lines[-1].strip(): lines.pop()
        while lines and not lines[0].strip(): lines.pop(0)
        if kind == 'markdown': lines = [re.sub(r'^# ?', '', l) for l in lines]
        src = '\n'.join(lines)
        cell = dict(cell_type=kind, metadata={}, source=src)
        if kind == 'code': cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    for line in text.splitlines():
        m = re.match(r'^# %%( \[markdown\])?\s*$', line)
        if m:
            flush(); kind = 'markdown' if m.group(1) else 'code'; buf = []
        else: buf.append(line)
    flush()
    return cells

def main(src, dst):
    nb = dict(cells=parse(Path(src).read_text()), nbformat=4, nbformat_minor=5,
              metadata=dict(kernelspec=dict(display_name="python3", language="python", name="python3")))
    Path(dst).write_text(json.dumps(nb, indent=1) + '\n')

if __name__ == '__main__': main(*sys.argv[1:3])
