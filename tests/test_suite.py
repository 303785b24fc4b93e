"""The suite's own machinery: under the README's test command (`pytest -n 2 --dist loadgroup`) the tests of a file that
share a fixture run on one worker, which builds the fixture once (`conftest.py` marks them; pytest-xdist reads the mark
into the test's id, which pytest 9.2 stopped honouring: hence `pytest<9.2` in the dev extra)."""
import importlib.util, os
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent

def ci_script(name:str):
    "A script of `.ci/` as a module (its command-line part does not run)"
    spec = importlib.util.spec_from_file_location(name, ROOT/'.ci'/f'{name}.py')
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m

BUILT = []

@pytest.fixture(scope='module')
def shared():
    BUILT.append(os.getpid())
    return len(BUILT)

@pytest.mark.parametrize('i', range(4))
def test_a_shared_fixture_is_built_once(request, shared, i):
    assert shared == 1 and BUILT == [os.getpid()], BUILT
    if getattr(request.config.option, 'loadgroup', False):                    # a pytest-xdist worker under --dist loadgroup
        assert request.node.nodeid.endswith('@test_suite'), request.node.nodeid

def test_constraints_pin_every_requirement_within_its_range(tmp_path):
    "The README's set-up installs with constraints.txt, which pins each declared requirement (dev extra included) to a version its range admits"
    import configparser, shlex
    from packaging.requirements import Requirement
    c, readme_cmd = ci_script('constraints'), ci_script('readme_cmd')
    pins = c.read(ROOT/'constraints.txt')
    (tmp_path/'c.txt').write_text(c.render(pins))
    assert c.read(tmp_path/'c.txt') == pins and len(pins) > 100                  # what the script writes, it reads back
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT/'settings.ini', encoding='utf-8')
    reqs = [Requirement(r) for k in ('requirements', 'dev_requirements') for r in shlex.split(cfg['DEFAULT'][k])]
    for r in reqs:
        assert c.norm(r.name) in pins, f"{r.name} is not pinned in constraints.txt: run python .ci/constraints.py"
        assert r.specifier.contains(pins[c.norm(r.name)], prereleases=True), f"constraints.txt pins {r.name}=={pins[c.norm(r.name)]}, outside {r}"
    setup = readme_cmd.command('setup')
    assert 'pip install -e ".[dev]" -c constraints.txt' in setup, setup
    assert c.moved({'a': '1', 'b': '2'}, {'a': '1', 'b': '3', 'c': '4'}) == ['b: 2 -> 3', 'c: added 4']
