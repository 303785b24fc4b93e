"""Render nbs/index.ipynb to README.md without quarto (`python .ci/readme.py`; `--check` fails if README.md is stale).

The index's links are written for the site, which is built from nbs/: a link to a notebook is relative to nbs/
(`01_mdp.ipynb`), and a link to another file of the repository is its absolute URL on the repository's host. In
README.md, which GitHub shows from the repository's root, the first become `nbs/01_mdp.ipynb` and the second relative
paths, so the same links work in both places."""
import json, re, sys
from configparser import ConfigParser
from pathlib import Path

root = Path(__file__).resolve().parent.parent
DIRECTIVE = re.compile(r'^#\|.*$\n?', re.M)
_cfg = ConfigParser(delimiters=['=']); _cfg.read(root/'settings.ini', encoding='utf-8')
BLOB = f"{_cfg['DEFAULT']['git_url'].rstrip('/')}/blob/{_cfg['DEFAULT']['branch']}/"

def repo_links(md):
    "Links written for the site (relative to nbs/) as links from the repository's root"
    md = re.sub(r'\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+?\.ipynb(?:#[^)\s]*)?)\)', r'](nbs/\1)', md)
    return md.replace('](' + BLOB, '](')

def render(nb_path=root/'nbs/index.ipynb'):
    out = []
    for c in json.loads(nb_path.read_text())['cells']:
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown': out.append(repo_links(src)); continue
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
