"Render nbs/index.ipynb to README.md without quarto (`python .ci/readme.py`; `--check` fails if README.md is stale)."
import json, re, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
DIRECTIVE = re.compile(r'^#\|.*$\n?', re.M)

def render(nb_path=root/'nbs/index.ipynb'):
    out = []
    for c in json.loads(nb_path.read_text())['cells']:
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown': out.append(src); continue
        if re.search(r'^#\|\s*hide', src, re.M): continue
        out.append('```python\n' + DIRECTIVE.sub('', src).strip() + '\n```')
        for o in c.get('outputs', []):
            text = ''.join(o.get('text', '')) or ''.join(o.get('data', {}).get('text/plain', ''))
            if text: out.append('```\n' + text.rstrip() + '\n```')
    return '\n\n'.join(out).strip() + '\n'

if __name__ == '__main__':
    readme, new = root/'README.md', render()
    if '--check' in sys.argv:
        if readme.read_text() != new: sys.exit("README.md is not in sync with nbs/index.ipynb: run `python .ci/readme.py`")
        print("README.md is in sync with nbs/index.ipynb")
    else: readme.write_text(new)
