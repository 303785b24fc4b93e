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
    if request.config.getvalue('loadgroup'):                      # a pytest-xdist worker under --dist loadgroup
        assert request.node.nodeid.endswith('@test_suite'), request.node.nodeid
