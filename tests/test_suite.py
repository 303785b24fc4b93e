"""The suite's own machinery: under the README's test command (`pytest -n 2 --dist loadgroup`) the tests of a file that
share a fixture run on one worker, which builds the fixture once (`conftest.py` marks them; pytest-xdist reads the mark
into the test's id, which pytest 9.2 stopped honouring: hence `pytest<9.2` in the dev extra)."""
import os, pytest

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

def test_constraints_pin_every_requirement_within_its_range():
    "The README's set-up installs with constraints.txt, which pins each declared requirement (dev extra included) to a version its range admits"
    import configparser, importlib.util, re, shlex
    from pathlib import Path
    from packaging.requirements import Requirement
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location('constraints', root/'.ci'/'constraints.py')
    c = importlib.util.module_from_spec(spec); spec.loader.exec_module(c)
    pins = c.read(root/'constraints.txt')
    norm = lambda n: re.sub(r'[-_.]+', '-', n).lower()
    assert c.read(root/'constraints.txt') == {norm(k): v for k, v in pins.items()} and c.render(pins).endswith(''.join(f'{n}=={v}\n' for n, v in pins.items()))
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(root/'settings.ini', encoding='utf-8')
    reqs = [Requirement(r) for k in ('requirements', 'dev_requirements') for r in shlex.split(cfg['DEFAULT'][k])]
    for r in reqs:
        assert norm(r.name) in pins, f"{r.name} is not pinned in constraints.txt: run python .ci/constraints.py"
        assert r.specifier.contains(pins[norm(r.name)], prereleases=True), f"constraints.txt pins {r.name}=={pins[norm(r.name)]}, outside {r}"
    readme = (root/'README.md').read_text()
    setup = readme.split('<!-- setup -->')[1].split('```sh\n')[1].split('\n```')[0]
    assert 'pip install -e ".[dev]" -c constraints.txt' in setup, setup
    assert c.moved({'a': '1', 'b': '2'}, {'a': '1', 'b': '3', 'c': '4'}) == ['b: 2 -> 3', 'c: added 4']
