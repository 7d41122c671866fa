"""Write README.md from nbs/index.ipynb (what `nbdev-readme` does, without Quarto).

Markdown cells are copied; code cells become ```python blocks followed by their text output;
cells marked `#| hide` and nbdev directives are left out. `--check` exits 1 if README.md differs.
"""
import json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "<!-- WARNING: generated from nbs/index.ipynb by scripts/sync_readme.py; edit the notebook -->\n\n"


def _src(cell): return ''.join(cell['source']) if isinstance(cell['source'], list) else cell['source']


def _outputs(cell):
    out = []
    for o in cell.get('outputs', []):
        if o.get('output_type') == 'stream': out.append(''.join(o['text']))
        elif 'data' in o:
            d = o['data']
            if 'text/markdown' in d: out.append('\x00md' + ''.join(d['text/markdown']))
            elif 'text/plain' in d: out.append(''.join(d['text/plain']))
    return out


def render(nb):
    parts = []
    for cell in nb['cells']:
        src = _src(cell)
        lines = src.splitlines()
        directives = [l for l in lines if l.startswith('#|')]
        if any(d.replace(' ', '') in ('#|hide', '#|eval:false') for d in directives) and cell['cell_type'] == 'code' \
                and any(d.replace(' ', '') == '#|hide' for d in directives):
            continue
        body = '\n'.join(l for l in lines if not l.startswith('#|')).strip('\n')
        if cell['cell_type'] == 'markdown':
            parts.append(body)
        elif cell['cell_type'] == 'code':
            echo = not any(d.replace(' ', '') == '#|echo:false' for d in directives)
            if body and echo: parts.append(f"```python\n{body}\n```")
            for o in _outputs(cell):
                if o.startswith('\x00md'): parts.append(o[3:].strip('\n'))
                else: parts.append(f"```\n{o.rstrip()}\n```")
    return HEADER + '\n\n'.join(p for p in parts if p.strip()) + '\n'


def main():
    nb = json.loads((ROOT / 'nbs' / 'index.ipynb').read_text())
    text, readme = render(nb), ROOT / 'README.md'
    if '--check' in sys.argv:
        if not readme.exists() or readme.read_text() != text:
            sys.exit('README.md is out of date: run `python scripts/sync_readme.py`')
        return
    if not readme.exists() or readme.read_text() != text: readme.write_text(text)


if __name__ == '__main__': main()
