"""The child's program ships by module: the jailed interpreter imports the caller's own `mapg/sandbox` files as a bare
package (never `mapg/__init__.py`, so never torch), and every name its code reads resolves in the child (that no module
imports another's private name is `tests/test_house.py`'s check)."""
import json, os, sys, tempfile
from pathlib import Path
from mapg.sandbox import child
from mapg.sandbox.host import spawn_child

PKG = Path(child.__file__).resolve().parent
PARTS = {'mapg.sandbox', 'mapg.sandbox.protocol', 'mapg.sandbox.filter', 'mapg.sandbox.jail', 'mapg.sandbox.judge',
         'mapg.sandbox.child'}

# run in the child's interpreter (and here, on namespaces with a name taken out): the globals code reads and lacks
UNRESOLVED = '''
import builtins, dis
def unresolved(code, ns):
    "Names the functions and class bodies of `code` (a module's) read as globals and neither `ns` nor builtins has"
    out, todo = set(), [c for c in code.co_consts if hasattr(c, 'co_code')]
    while todo:
        c = todo.pop()
        todo += [k for k in c.co_consts if hasattr(k, 'co_code')]
        ins = list(dis.get_instructions(c))
        # a function reads globals with LOAD_GLOBAL; a class body reads what it did not bind itself with LOAD_NAME
        mine = {i.argval for i in ins if i.opname == 'STORE_NAME'}
        reads = {i.argval for i in ins if i.opname == 'LOAD_GLOBAL' or i.opname == 'LOAD_NAME' and i.argval not in mine}
        out |= {n for n in reads if n not in ns and not hasattr(builtins, n)}
    return out
'''

CHECK = '''
import sys
before = sorted(sys.modules)
''' + UNRESOLVED + '''
import json
mods = {k: m for k, m in sys.modules.items() if k.startswith('mapg')}
print(json.dumps(dict(modules=before, files={k: getattr(m, '__file__', None) for k, m in mods.items()},
                      init_ran=hasattr(mods['mapg.sandbox'], 'run_program'),
                      missing={k: sorted(unresolved(m.__spec__.loader.get_code(k), vars(m)))
                               for k, m in mods.items() if k != 'mapg.sandbox'})))
'''

def _unresolved(): ns = {}; exec(UNRESOLVED, ns); return ns['unresolved']

def run_in_child()->dict:
    "The child's program spawned as the caller spawns it, its call of `child_main` swapped for `CHECK`"
    src = child.child_program()
    assert src.endswith('\nchild_main()\n')
    work = tempfile.mkdtemp()
    with tempfile.TemporaryFile() as out:
        p = spawn_child(src[:-len('child_main()\n')] + CHECK, dict(work=work), sys.executable, out.fileno(), (), work)
        assert p.wait(timeout=60) == 0, os.pread(out.fileno(), 1 << 16, 0).decode()
        text = os.pread(out.fileno(), 1 << 20, 0).decode()
    os.rmdir(work)
    return json.loads(text)

def test_the_child_imports_the_callers_sandbox_alone():
    "The same files as the caller's, the package's front (and `mapg/__init__.py`) never run, no module beyond the stdlib"
    r = run_in_child()
    mods = set(r['modules'])
    assert {m for m in mods if m.startswith('mapg')} == PARTS
    assert not r['init_ran'] and 'torch' not in mods and 'mapg' not in mods
    assert {Path(f).resolve() for k, f in r['files'].items() if k != 'mapg.sandbox'} == \
           {PKG/f'{k.rpartition(".")[2]}.py' for k in PARTS - {'mapg.sandbox'}}
    assert {m.split('.')[0] for m in mods if not m.startswith('mapg')} - set(sys.stdlib_module_names) <= {'__main__'}

def test_every_name_the_child_reads_resolves():
    "In the child, every global its functions read is defined; the check finds a name that is taken away"
    assert run_in_child()['missing'] == {k: [] for k in PARTS - {'mapg.sandbox'}}
    unresolved, code = _unresolved(), compile(Path(child.__file__).read_text(), child.__file__, 'exec')
    assert unresolved(code, vars(child)) == set()
    assert unresolved(code, {k: v for k, v in vars(child).items() if k != 'confine'}) == {'confine'}
    assert unresolved(compile("def f():\n    class A:\n        x = nowhere\n    return A, gone", 'm', 'exec'), {}) == \
           {'nowhere', 'gone'}
