"""With `pytest -n N --dist loadgroup` (the README's test command), the tests of a file that share a module-scoped fixture
(a recorded run, trained engines) stay on one worker, which builds it once; every other test, each notebook included, goes
to whichever worker is free, the longest first. Child processes that hang fail with their output (`run_child`)."""
import os
import pytest

# torch's CPU allocations of 2 MiB and more on transparent huge pages: the real vocabularies' logits (tens of MB a forward)
# are otherwise mapped and faulted in 4 KiB at a time, which cost the tiny real-code runs a third of their time in the
# kernel; read by torch at its first allocation, so set before it is imported (child processes inherit it)
os.environ.setdefault('THP_MEM_ALLOC_ENABLE', '1')

if os.environ.get('PYTEST_XDIST_WORKER'):       # two workers on two cores: one thread each, subprocesses included
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    # remote code is copied into a modules cache under the checkpoint folder's name: a cache per worker keeps two workers'
    # tiny checkpoints with the same folder name (and different code) apart (read when transformers is first imported)
    import tempfile
    os.environ['HF_MODULES_CACHE'] = tempfile.mkdtemp(prefix=f"hf-modules-{os.environ['PYTEST_XDIST_WORKER']}-")
    import torch
    torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))

SANDBOX = {'test_sandbox', 'test_sandbox_attacks', 'test_sandbox_judge', 'test_rewards_data', 'test_rewards_robust',
           'test_sandbox_inflight', 'test_judge_names'}
# the long poles (a minute or more each on one core), started first so that the two workers finish together
FIRST = ('test_distributed.py::', 'test_multinode.py::', 'test_recipes.py::test_recipe_trained', 'test_pages.py::test_eight_gpus',
         'add_task.ipynb')

def _shares_a_fixture(item)->bool:
    "Whether the test uses a fixture built once for its file (module scope or wider, pytest's own left aside)"
    return any(defs[-1].scope in ('module', 'package', 'session') and defs[-1].baseid != ''
               for defs in item._fixtureinfo.name2fixturedefs.values())

@pytest.hookimpl(tryfirst=True)        # before pytest-xdist reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.module.__name__
        # hostile programs (fork bombs, memory hogs) never beside the gold checks
        if name in SANDBOX: item.add_marker(pytest.mark.xdist_group('sandbox'))
        # a file's tests that share a fixture stay on one worker, which builds it once; the others go where a worker is free
        elif _shares_a_fixture(item): item.add_marker(pytest.mark.xdist_group(name))
    items.sort(key=lambda item: not any(f in item.nodeid for f in FIRST))      # stable: the long poles first, else as collected

def free_port()->int:
    "A TCP port free on this machine now, for a distributed launch's rendezvous (fixed ports collide between workers)"
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]

HANG = 1800     # seconds: a child process still running then has hung (none needs a tenth of it, even on a busy machine)

def run_child(cmd:list, *, timeout:float=HANG, **kwargs):
    "`subprocess.run(cmd, capture_output=True, text=True, **kwargs)`; a child still running after `timeout` (a hang) fails the test with its output so far"
    import subprocess
    try: return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as e:
        out, err = ((x.decode(errors='replace') if isinstance(x, bytes) else x or '') for x in (e.stdout, e.stderr))
        pytest.fail(f"hung: `{' '.join(map(str, cmd))[:400]}` still ran after {timeout:.0f} s\n"
                    f"its stdout, last lines:\n{out[-3000:]}\nits stderr, last lines:\n{err[-5000:]}", pytrace=False)
