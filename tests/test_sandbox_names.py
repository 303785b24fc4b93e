"""The judge's name analysis knows every binding form. For each form, a test module binds a name in that form and a
wrong program supplies its own object under the same name: the wrong program scores 0, the same program computing
the answer scores 1. Star imports of the standard library and of test libraries (`math`, `pytest`, `numpy.testing`)
followed by `from solution import *` are the reward hack of issue 24; the other forms close the same hole."""
import pytest
from mapg.sandbox import SandboxCfg, judge_program
from mapg.sandbox.judge import names_in_tests
from mapg.rewards import code_reward

CFG = SandboxCfg(timeout=10)
WRONG = "def f(x): return 0.0\n"

def fence(code): return f"```python\n{code}\n```"

def execution(code, tests, **kw):
    "The execution part of the code reward of `code` (nothing blocked: the judge alone has to hold)"
    return code_reward(fence(code), tests, cfg=CFG, blocked=(), **kw)['execution']

FORMS = {   # form: (a wrong program that binds the tests' name, the test)
    'star-math': (WRONG + "def isclose(*a, **k): return True",
                  "from math import *\nfrom solution import *\nassert isclose(f(2), 4.0)"),
    'star-math-module-attr': (WRONG + "import math\ndef sqrt(x): return 2.0",
                              "from math import *\nfrom solution import *\nassert f(sqrt(4.0)) == 4.0 and sqrt(16.0) == 4.0"),
    'star-pytest': (WRONG + "def approx(x, **k): return 0.0",
                    "from pytest import *\nfrom solution import *\nassert f(2) == approx(4.0)"),
    'star-pytest-raises': ("def f(x): return 0.0 if x < 0 else 4.0\nimport contextlib\n"
                           "def raises(*a, **k): return contextlib.nullcontext()",
                           "from pytest import *\nfrom solution import *\nwith raises(ValueError): f(-1)\nassert f(2) == 4.0",
                           "def f(x):\n    if x < 0: raise ValueError(x)\n    return 4.0\nimport contextlib\n"
                           "def raises(*a, **k): return contextlib.nullcontext()"),
    'star-numpy-testing': (WRONG + "def assert_allclose(*a, **k): return None",
                           "from numpy.testing import *\nfrom solution import *\nassert_allclose(f(2), 4.0)"),
    'star-program-all': (WRONG + "def isclose(*a, **k): return True\n__all__ = ['isclose', 'f']",
                         "from math import *\nfrom solution import *\nassert isclose(f(2), 4.0)"),
    'match-as': (WRONG + "r = 4.0", "match f(2):\n    case 4.0 as r: pass\n    case _: pass\nassert r == 4.0"),
    'match-capture': (WRONG + "r = 4.0", "match [f(2)]:\n    case [float(r)] if r == 4.0: pass\n    case _: pass\nassert r == 4.0"),
    'match-star': (WRONG + "rest = [4.0]", "match [1, f(2)]:\n    case [1, *rest] if rest == [4.0]: pass\n    case _: pass\nassert rest == [4.0]"),
    'match-mapping': (WRONG + "rest = {'b': 4.0}",
                      "match {'a': 1, 'b': f(2)}:\n    case {'a': 1, **rest} if rest == {'b': 4.0}: pass\n    case _: pass\n"
                      "assert rest == {'b': 4.0}"),
    'walrus': (WRONG + "ok = 'yes'", "if f(2) == 4.0 and (ok := 'yes'): pass\nassert ok == 'yes'"),
    'comprehension': (WRONG + "r = 4.0", "hits = [r for r in [f(2)] if r == 4.0]\nassert hits == [4.0] or r == 4.0"),
    'global': (WRONG + "r = 4.0", "def g():\n    global r\n    if f(2) == 4.0: r = 4.0\ng()\nassert r == 4.0"),
    'nonlocal': (WRONG + "r = 4.0",
                 "def outer():\n    r = None\n    def inner():\n        nonlocal r\n        if f(2) == 4.0: r = 4.0\n    inner()\n"
                 "    return r\nassert outer() == 4.0"),
    'del': (WRONG + "r = 4.0", "r = f(2)\nif r != 4.0: del r\nassert r == 4.0"),
    'except-as': (WRONG + "e = 4.0", "try: 1 / (f(2) == 4.0)\nexcept ZeroDivisionError as e: pass\nelse: e = 4.0\nassert e == 4.0"),
    'with-as': (WRONG + "r = 4.0", "import contextlib\nwith contextlib.nullcontext(f(2)) as r: pass\nassert r == 4.0"),
}

@pytest.mark.parametrize('form', list(FORMS))
def test_a_name_the_tests_bind_is_never_the_programs(form):
    code, test, *right = FORMS[form]
    assert execution(code, [test]) == 0.
    right = right[0] if right else code.replace("return 0.0", "return 4.0")   # the program computing the answer: full credit
    assert execution(right, [test]) == 1.

def test_star_import_of_a_missing_module_gives_only_the_entry_point():
    "A star import the judge cannot resolve: no name but the entry point comes from the program"
    code = "def f(x): return 4.0\nHELPER = 4.0"
    test = "try:\n    from no_such_module_here import *\nexcept ImportError: pass\nassert f(2) == HELPER"
    assert execution(code, [test]) == 0.
    assert judge_program(code, [test], entry_point='f', cfg=CFG).passed == [False]
    assert execution(code, ["try:\n    from no_such_module_here import *\nexcept ImportError: pass\nassert f(2) == 4.0"],
                     entry_point='f') == 1.

def test_star_import_still_leaves_the_programs_own_names():
    "`from math import *` binds math's names only: the program's other functions still reach the tests"
    code = "import math\ndef area(r): return math.pi * r * r\ndef perimeter(r): return 2 * math.pi * r"
    assert execution(code, ["from math import *\nfrom solution import *\nassert isclose(area(1), pi) and isclose(perimeter(1), tau)"]) == 1.

def test_entry_point_wins_over_a_star_import():
    "HumanEval-style: the function under test may share a name with one that a star import brings (here `gcd`)"
    code = "def gcd(a, b):\n    while b: a, b = b, a % b\n    return a"
    test = "from math import *\ndef check(candidate):\n    assert candidate(12, 18) == 6\n"
    assert execution(code, test, entry_point='gcd') == 1.
    test = "from math import *\nfrom solution import *\ndef check(candidate):\n    assert candidate(12, 18) == 6\n"
    assert execution("def gcd(a, b): return 1", test, entry_point='gcd') == 0.   # the entry point is in `solution`'s `__all__`

def test_names_table():
    loaded, bound, stars = names_in_tests(["from math import *\nfrom pytest import approx\nmatch x:\n    case [a, *b]: pass\n"
                                       "from solution import *"])
    assert {'a', 'b', 'approx'} <= bound and stars == {'math'} and 'x' in loaded
