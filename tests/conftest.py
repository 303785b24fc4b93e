"""With `pytest -n N --dist loadgroup` (the README's test command), each test file stays on one worker, so its module-scoped
fixtures (tiny checkpoints, recorded rollouts) are built once; the notebooks, one test each, are spread, and the recipes run in two halves (LLaDA, Dream)."""
import os
import pytest

if os.environ.get('PYTEST_XDIST_WORKER'):       # two workers on two cores: one thread each, subprocesses included
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    # remote code is copied into a modules cache under the checkpoint folder's name: a cache per worker keeps two workers'
    # tiny checkpoints with the same folder name (and different code) apart (read when transformers is first imported)
    import tempfile
    os.environ['HF_MODULES_CACHE'] = tempfile.mkdtemp(prefix=f"hf-modules-{os.environ['PYTEST_XDIST_WORKER']}-")
    import torch
    torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))

SANDBOX = {'test_sandbox', 'test_sandbox_attacks', 'test_sandbox_judge', 'test_rewards_data', 'test_rewards_robust'}

def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.module.__name__
        if name == 'test_notebooks': continue
        if name == 'test_recipes': name += '-dream' if 'dream' in item.name else '-llada'   # the longest file, in two halves
        if name in SANDBOX: name = 'sandbox'      # hostile programs (fork bombs, memory hogs) never beside the gold checks
        item.add_marker(pytest.mark.xdist_group(name))

def free_port()->int:
    "A TCP port free on this machine now, for a distributed launch's rendezvous (fixed ports collide between workers)"
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]
