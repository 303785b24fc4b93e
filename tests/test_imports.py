"""The house: no module of `mapg` imports another that imports it back (lazy imports inside functions included), and the
notebook numbers follow the dependencies (a notebook's module imports only modules of lower-numbered notebooks)."""
import ast, json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG, NBS = ROOT/'mapg', ROOT/'nbs'

def _imports(path:Path, pkg:str|None=None)->set:
    "The `mapg` modules `path` imports, anywhere in the file (`pkg`: the subpackage `path` is in, which counts as one module)"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1: out.add(pkg or node.module or next(a.name for a in node.names))
            elif node.level == 2 and pkg: out.add(node.module or next(a.name for a in node.names))
            elif (node.module or '').startswith('mapg.'): out.add(node.module.split('.')[1])
            elif node.module == 'mapg': out |= {a.name for a in node.names if (PKG/f'{a.name}.py').exists()}
        elif isinstance(node, ast.Import):
            out |= {a.name.split('.')[1] for a in node.names if a.name.startswith('mapg.')}
    return {m.split('.')[0] for m in out} - {pkg or path.stem}

GRAPH = {p.stem: _imports(p) for p in PKG.glob('*.py') if not p.stem.startswith('_')}
# a subpackage (mapg/sandbox/) is one module of the house: what any of its files imports from the rest of mapg
GRAPH |= {d.name: set().union(*(_imports(p, d.name) for p in d.glob('*.py'))) for d in PKG.iterdir() if (d/'__init__.py').exists()}

def test_graph_is_read():
    assert {'core', 'policy', 'sampler', 'likelihood', 'train', 'sandbox'} <= set(GRAPH)
    assert 'sandbox' in GRAPH['rewards']
    assert 'policy' in GRAPH['sampler'] and 'policy' in GRAPH['likelihood'] and 'sampler' in GRAPH['likelihood']

def test_no_import_cycle():
    state = {}
    def visit(m, path):
        if state.get(m) == 'done': return
        assert state.get(m) != 'open', f"import cycle: {' -> '.join(path + [m])}"
        state[m] = 'open'
        for d in sorted(GRAPH.get(m, ())): visit(d, path + [m])
        state[m] = 'done'
    for m in sorted(GRAPH): visit(m, [])

def test_notebook_numbers_follow_dependencies():
    num = {}
    for nb in NBS.glob('[0-9][0-9]*.ipynb'):
        cells = json.loads(nb.read_text())['cells']
        if m := next((re.search(r'#\|\s*default_exp\s+(\S+)', ''.join(c['source'])) for c in cells
                      if c['cell_type'] == 'code' and 'default_exp' in ''.join(c['source'])), None):
            mod = m.group(1)
            # a room's pages sort by their number and letter (12 < 12a < 12b); a subpackage's pages share its number
            num.setdefault(mod.split('.')[0], nb.name[:2] if '.' in mod else re.match(r'\d+[a-z]?', nb.name).group())
    assert {'policy', 'sampler', 'likelihood', 'train'} <= set(num)
    for mod, deps in GRAPH.items():
        for d in deps:
            if mod in num and d in num: assert num[d] < num[mod], f"{num[mod]}_{mod} imports {d}, from the later notebook {num[d]}"
