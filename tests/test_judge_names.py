"""A standard module the tests read without importing it is the judge's own, never the program's; and the program may
import it even when it is on the block list. MBPP task 596 reads `sys` in its asserts (`sys.getsizeof`): a program
that defines its own `sys` gains nothing, the honest `import sys` scores full marks. Over every shipped MBPP and
HumanEval task, the tests' namespace is the same whether or not the program defines the standard modules the tests
read unbound (the judge's namespace logic called directly; the sandbox runs only for a few cases)."""
import functools, sys
import pytest
from mapg.data import load_data
from mapg.rewards import code_reward, code_tests, unsafe_names, UNSAFE_MODULES
from mapg.sandbox import SandboxCfg
from mapg.sandbox.judge import names_in_tests, _jdg_namespace

CFG = SandboxCfg(timeout=20)
# some shipped tests hold string escapes Python warns about when it parses them
pytestmark = pytest.mark.filterwarnings('ignore:invalid escape sequence:DeprecationWarning')

def fence(code): return f"```python\n{code}\n```"

@functools.cache
def tasks()->tuple:
    "Every shipped MBPP task (all four splits) and every HumanEval task"
    mbpp = (r for s in ('test', 'prompt', 'validation', 'train') for r in load_data('mbpp', s))
    return (*mbpp, *load_data('humaneval'))

def cases(r)->list: return code_tests(r['tests'], r['entry_point'])

def std_read_free(r)->set:
    "The standard modules a task's tests read and that neither they nor its import lines bind (the entry point aside)"
    loaded, bound, _ = names_in_tests(cases(r) + list(r['test_imports']))
    return (loaded - bound - {r['entry_point']}) & set(sys.stdlib_module_names)

def task(i): return next(r for r in tasks() if r['id'] == i)

# ---------------------------------------------------------------- the judge's namespace, directly
class Handle:
    "What the judge makes of an object the sandbox announced (`Remote` in a run)"
    def __init__(self, ref): self.ref = ref

def namespace(r, fakes, monkeypatch)->tuple:
    "`(namespace, solution.__all__)` the judge builds for `r`'s tests; the program defines the entry point and `fakes`"
    monkeypatch.delitem(sys.modules, 'solution', raising=False)
    job = dict(entry_point=r['entry_point'], imports=list(r['test_imports']), helpers=r.get('helpers'),
               names=names_in_tests(cases(r)))
    objs = {n: i for i, n in enumerate([r['entry_point'], *sorted(fakes)], 1)}
    return _jdg_namespace(job, {}, objs, Handle), sys.modules['solution'].__all__

def gains_nothing(r, fakes, monkeypatch):
    "The program's own `fakes` reach the tests nowhere: the namespace holds the entry point as its only program object"
    clean, clean_all = namespace(r, (), monkeypatch)
    base, sol_all = namespace(r, fakes, monkeypatch)
    assert set(base) == set(clean) and sol_all == clean_all == [r['entry_point']]
    assert [n for n, v in base.items() if type(v) is Handle] == [r['entry_point']]
    for n in fakes: assert n not in base or base[n] is sys.modules[n]

def test_no_shipped_task_takes_a_standard_module_from_the_program(monkeypatch):
    "Every task: a program defining each standard module its tests read unbound changes nothing the tests see"
    found = {r['id']: m for r in tasks() if (m := std_read_free(r))}
    # the scan sees every task: of 591, MBPP 596 alone reads a standard module (`sys`) it does not import
    assert len(tasks()) == 427 + 164 and found == {596: {'sys'}}
    for r in tasks(): gains_nothing(r, std_read_free(r), monkeypatch)

def test_a_module_the_judge_cannot_import_is_still_not_the_programs(monkeypatch):
    "`winreg` is standard but absent on Linux: the tests' `winreg` stays unbound, not the program's"
    r = dict(id='winreg', tests=["assert f() == winreg.HKEY_CURRENT_USER"], test_imports=[], entry_point='f')
    gains_nothing(r, {'winreg'}, monkeypatch)
    assert 'winreg' not in namespace(r, {'winreg'}, monkeypatch)[0]

def test_code_reward_reads_the_same_names():
    "`unbound_modules` (what `code_reward` unblocks) is the scan's set on every shipped task"
    from mapg.sandbox.judge import unbound_modules
    for r in tasks():
        assert unbound_modules(cases(r), r['test_imports'], r['entry_point']) == std_read_free(r), r['id']

# ---------------------------------------------------------------- scored in the sandbox
FAKE_SYS = "class sys:\n    @staticmethod\n    def getsizeof(x): return 0\n"

def test_mbpp_596_pays_the_honest_solution_not_the_fake():
    r = task(596)
    def execution(code, **kw):
        return code_reward(fence(code), r['tests'], entry_point=r['entry_point'], test_imports=r['test_imports'],
                           cfg=CFG, **kw)['execution']
    honest = "import sys\ndef tuple_size(t): return sys.getsizeof(t)"
    assert unsafe_names(honest) == ['sys']
    assert execution(honest) == 1.0                                   # `sys` is on the default block list
    assert execution(FAKE_SYS + "def tuple_size(t): return 0") == 0.0
    assert execution(FAKE_SYS + "def tuple_size(t): return 0", blocked=()) == 0.0
    # only what the tests read is unblocked: `os` still scores 0
    assert execution("import os, sys\ndef tuple_size(t): return sys.getsizeof(t)") == 0.0

def test_a_humaneval_check_reading_standard_modules_free():
    "HumanEval's shape: `check` reads `sys` (blocked) and `base64` (not) unbound; the fake of either gains nothing"
    test = ("def check(candidate):\n    assert candidate((1, 2)) == sys.getsizeof((1, 2))\n"
            "    assert candidate(b'hi') == len(base64.b64encode(b'hi'))\n")
    def execution(code, **kw): return code_reward(fence(code), test, entry_point='size', cfg=CFG, **kw)['execution']
    assert execution("import sys, base64\ndef size(x):\n    return sys.getsizeof(x) if type(x) is tuple else "
                     "len(base64.b64encode(x))") == 1.0
    fake_b64 = "class base64:\n    @staticmethod\n    def b64encode(b): return b''\n"
    assert execution(FAKE_SYS + fake_b64 + "def size(x): return 0") == 0.0
    assert execution("import sys\n" + fake_b64 + "def size(x): return sys.getsizeof(x) if type(x) is tuple else 0",
                     blocked=()) == 0.0
    # a task whose tests do not read `sys`: importing it stays blocked
    assert code_reward(fence("import sys\ndef size(x): return 1"), "def check(c):\n    assert c(1) == 1\n",
                       entry_point='size')['execution'] == 0.0
