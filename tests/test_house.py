"""The house's proportions: modules under 600 lines, functions under 60, lines under 120 characters (nbdev's generated
`__all__` aside), comments on their own line (docments aside), exported notebook cells under 40 lines with a median
of at most 8, every top-level name defined in one module only, on the module pages no prose cell of 250 words or more
and a shown example of every public name. `python tests/test_house.py` prints the figures and every offender."""
import ast, io, json, re, statistics, tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG, NBS = ROOT/'mapg', ROOT/'nbs'
MAX_MODULE, MAX_FUNCTION, MAX_LINE, MAX_CELL, MEDIAN_CELL, MAX_PROSE = 600, 60, 120, 40, 8, 250
# exported cells allowed over MAX_CELL, by the name they define, and why
LONG_CELLS_KNOWN = {
    'RunCfg': 'a config record: one field per option, each with its help text',
    'EvalArgs': 'a config record: one field per option, each with its help text'}
MODULES = sorted(p for p in PKG.rglob('*.py') if p.name != '_modidx.py')

def _rel(p:Path)->str: return str(p.relative_to(ROOT))

def _functions(tree)->list:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

def docments_lines(src:str)->set:
    "Lines whose trailing comment documents a parameter: a def's signature, a class body's annotated field"
    tree, out = ast.parse(src), set()
    for f in _functions(tree): out |= set(range(f.lineno, f.body[0].lineno))
    for c in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for b in c.body:
            if isinstance(b, ast.AnnAssign): out |= set(range(b.lineno, b.end_lineno + 1))
    return out

def trailing_comments(src:str)->list:
    "Line numbers of comments that follow code on their line, docments aside"
    ok, toks = docments_lines(src), tokenize.generate_tokens(io.StringIO(src).readline)
    return [t.start[0] for t in toks if t.type == tokenize.COMMENT and t.line[:t.start[1]].strip() and t.start[0] not in ok]

def _index_lines(tree)->set:
    "The lines of the `__all__` nbdev writes (generated, like `_modidx.py`)"
    return {i for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, 'id', '') == '__all__' for t in n.targets)
            for i in range(n.lineno, n.end_lineno + 1)}

def module_offenders()->dict:
    "For each rule, the places that break it"
    out = defaultdict(list)
    for p in MODULES:
        src = p.read_text()
        lines, tree = src.splitlines(), ast.parse(src)
        if len(lines) >= MAX_MODULE: out['module lines'].append(f"{_rel(p)}: {len(lines)}")
        for f in _functions(tree):
            if (n := f.end_lineno - f.lineno + 1) >= MAX_FUNCTION: out['function lines'].append(f"{_rel(p)}:{f.lineno} {f.name}: {n}")
        out['long lines'] += [f"{_rel(p)}:{i}: {len(l)}" for i, l in enumerate(lines, 1) if len(l) >= MAX_LINE and i not in _index_lines(tree)]
        out['trailing comments'] += [f"{_rel(p)}:{i}" for i in trailing_comments(src)]
    return out

def _defines(src:str)->str|None:
    "The first name a cell defines"
    return next(iter(re.findall(r'^(?:def|class) (\w+)', src, re.M)), None)

def exported_cells()->list:
    "(lines, notebook, the name it defines) of every exported code cell"
    out = []
    for nb in sorted(NBS.glob('*.ipynb')):
        for c in json.loads(nb.read_text())['cells']:
            src = ''.join(c['source'])
            if c['cell_type'] == 'code' and re.search(r'^#\|\s*export', src, re.M):
                out.append((len(src.splitlines()), nb.name, _defines(src)))
    return out

def module_pages()->list: return sorted(NBS.glob('[0-9]*.ipynb'))

def long_prose()->list:
    "(notebook, cell index, words) of the module pages' markdown cells of MAX_PROSE words or more"
    return [(nb.name, i, n) for nb in module_pages() for i, c in enumerate(json.loads(nb.read_text())['cells'])
            if c['cell_type'] == 'markdown' and (n := len(''.join(c['source']).split())) >= MAX_PROSE]

def public_names(src:str)->list:
    "The public functions and classes a cell defines, with the public methods of its classes"
    out = []
    for n in ast.parse(src).body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith('_'):
            out.append(n.name)
            if isinstance(n, ast.ClassDef):
                out += [m.name for m in n.body if isinstance(m, ast.FunctionDef) and not m.name.startswith('_')]
    return out

def _shown(src:str)->bool: return not re.search(r'^#\|\s*(export|hide)', src, re.M)

def unshown_names()->list:
    "(notebook, name) of each public name that no later shown code cell of its page uses"
    out = []
    for nb in module_pages():
        cells = [(c['cell_type'], ''.join(c['source'])) for c in json.loads(nb.read_text())['cells']]
        for i, (kind, src) in enumerate(cells):
            if kind != 'code' or not re.search(r'^#\|\s*export', src, re.M): continue
            later = [s for k, s in cells[i + 1:] if k == 'code' and _shown(s)]
            out += [(nb.name, n) for n in public_names(src) if not any(re.search(rf'\b{n}\b', s) for s in later)]
    return out

def _is_patch(d)->bool:
    "A fastcore `@patch` (or `@patch(...)`): the function is a method of the class its first parameter names"
    if isinstance(d, ast.Call): d = d.func
    return (d.id if isinstance(d, ast.Name) else getattr(d, 'attr', None)) == 'patch'

def shared_names()->dict:
    "Top-level names defined in more than one module (a subpackage counts as one)"
    where = defaultdict(set)
    for p in MODULES:
        room = p.relative_to(PKG).parts[0]
        for n in ast.parse(p.read_text()).body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_is_patch(d) for d in n.decorator_list): names = []
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): names = [n.name]
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                names = [t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
            else: names = []
            for x in names:
                if not x.startswith('__'): where[x].add(room)
    return {k: sorted(v) for k, v in where.items() if len(v) > 1}

def test_modules_are_short(): assert not module_offenders()['module lines']
def test_functions_are_short(): assert not module_offenders()['function lines']
def test_lines_are_short(): assert not module_offenders()['long lines']
def test_comments_sit_on_their_own_line(): assert not module_offenders()['trailing comments']
def test_each_name_lives_in_one_module(): assert not shared_names()

def test_exported_cells_are_short():
    cells = exported_cells()
    assert len(cells) > 100
    long = {name: (n, nb) for n, nb, name in cells if n >= MAX_CELL}
    assert not {k: v for k, v in long.items() if k not in LONG_CELLS_KNOWN}
    assert not set(LONG_CELLS_KNOWN) - set(long), 'no longer long: remove from LONG_CELLS_KNOWN'
    assert statistics.median(n for n, *_ in cells) <= MEDIAN_CELL

def test_module_pages_have_no_long_prose(): assert not long_prose()
def test_public_names_have_a_shown_example(): assert not unshown_names()

def test_the_rules_see_what_they_check():
    "The checks find what they look for: a trailing comment, a docments comment left alone"
    src = "def f(a:int, # a docment\n      b=1):\n    x = a  # a trailing comment\n    # its own line\n    return x\n"
    assert trailing_comments(src) == [3]
    assert docments_lines(src) == {1, 2}
    assert public_names("class A:\n    def f(self): pass\n    def _g(self): pass\ndef h(): pass\n_i = 1") == ['A', 'f', 'h']
    assert _shown('x = 1') and not _shown('#| hide\nx = 1') and not _shown('#| export\ndef f(): pass')

if __name__ == '__main__':
    for rule, found in module_offenders().items(): print(f"{rule}: {len(found)}", *found[:40], sep='\n  ')
    cells = exported_cells()
    print(f"exported cells: {len(cells)}, median {statistics.median(n for n, *_ in cells)}, "
          f"{sum(n >= MAX_CELL for n, *_ in cells)} of {MAX_CELL}+ lines",
          *[f"{nb}: {name}: {n}" for n, nb, name in cells if n >= MAX_CELL], sep='\n  ')
    print('names in several modules:', shared_names())
    print(f'prose cells of {MAX_PROSE}+ words on module pages:', long_prose())
    print('public names without a shown example:', unshown_names())
