"""The GPU check (`scripts/gpu_check.py`) end to end on the CPU at tiny shapes under the device guard: the model built from
LLaDA's real remote code, the shipped recipe through `scripts/train.py` with the prefix cache off and on, the evaluation of
every paper task, the table and its JSON; and its environment (`scripts/gpu_env.py`): what the GPU machine is sent,
pinned by the constraints the set-up uses."""
import json, sys
from pathlib import Path
import pytest
from mapg.device import device_guard
from upstream import has_upstream, UPSTREAM

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'scripts'))
import gpu_check, gpu_env

def test_the_check_runs_under_the_device_guard(tmp_path, monkeypatch):
    if not has_upstream('llada'): pytest.skip(f"the real llada remote code is not at {UPSTREAM/'llada'}")
    monkeypatch.setattr(gpu_check, 'UPSTREAM', UPSTREAM)
    with device_guard():
        res = gpu_check.check(tmp_path/'out', precisions=['bf16'], caches=['none', 'prefix'], eval_items=1, tiny=True,
                              ckpt=tmp_path/'ckpt', isolate=False)
    assert 'error' not in res['build'] and (tmp_path/'ckpt'/'modeling_llada.py').exists()
    assert [r['run'] for r in res['runs']] == ['bf16 cache none', 'bf16 cache prefix']
    for r in res['runs']:
        assert 'error' not in r, r
        assert r['steps'] == 2 and r['first_ratios'] == [1., 1.]          # the first update computes what the rollout did
        assert r['setup_s'] > 0 and r['rollout_s'] > 0 and r['update_s'] > 0
        # 8-GPU recipe per GPU: one cycle's rollouts over mu = 12 inner updates, plus one update
        assert r['step_s_per_gpu'] == pytest.approx(r['rollout_s'] / 12 + r['update_s'])
    assert set(res['eval']['cells']) == {f"{t}_L16_b16" for t in gpu_check.PAPER_TASKS}
    assert all(c['n'] == 1 for c in res['eval']['cells'].values())
    assert json.loads((tmp_path/'out'/'gpu_check.json').read_text()) == json.loads(json.dumps(res))
    md = (tmp_path/'out'/'gpu_check.md').read_text()
    assert '| bf16 cache prefix |' in md and 'exactly 1' in md and 'humaneval_L16_b16' in md

def test_a_failed_stage_leaves_its_row(tmp_path):
    "A stage that fails in its child process is a row naming the failure, and the check goes on to the next"
    row = gpu_check.child('train', dict(kind='llada', ckpt=str(tmp_path/'none'), out=str(tmp_path/'o'), precision='bf16',
                                        cache='none', tiny=True), timeout=120)
    assert row['error'].startswith('exit 2') or row['error'].startswith('exit 1'), row
    assert 'model' in row['tail']
    assert 'bf16 cache none | exit' in gpu_check.table(dict(date='d', device='cpu', torch='t', kind='llada', model='m',
                                                            runs=[dict(row, run='bf16 cache none')]))

def test_the_first_ratios_are_flagged():
    assert gpu_check.ratios([1., 1.]) == 'exactly 1'
    assert 'NOT 1: off by up to 1.8e-03' in gpu_check.ratios([1.0005823572476702, 0.9981671969095866])

def test_the_environment_is_pinned_and_split():
    "Every package sent is mapg's runtime need, pinned by constraints.txt; bitsandbytes travels alone; the image's torch stays"
    folders = gpu_env.plan()
    pins = gpu_env.pins()
    sent = {**folders['wheels'], **folders['wheels_nf4']}
    assert all(pins[n] == v for n, v in sent.items())
    assert set(folders['wheels_nf4']) == {'bitsandbytes'}
    assert {'transformers', 'tokenizers', 'huggingface-hub', 'peft', 'fastcore', 'math-verify', 'datasets'} <= set(folders['wheels'])
    assert not {'torch', 'accelerate', 'pyarrow', 'pandas', 'numpy'} & set(sent)
    assert set(sent) <= gpu_env.closure(gpu_env.requirements())

def test_the_readme_states_the_stored_check():
    "The README's GPU table is the stored check's (nbs/tutorials/gpu_h200/gpu_check.json), dated, naming the card"
    gc = json.loads((ROOT/'nbs'/'tutorials'/'gpu_h200'/'gpu_check.json').read_text())
    readme = (ROOT/'README.md').read_text()
    assert f"On one H200 on {gc['date']} (torch {gc['torch']})" in readme and gc['device'] == 'NVIDIA H200'
    for r in gc['runs']:
        if 'error' in r: assert 'out of memory' in r['error'] and 'out of memory in the update (139.7 GiB)' in readme; continue
        ratios = 'exactly 1' if r['first_ratios'] == [1., 1.] else ', '.join(f"{x:.5f}" for x in r['first_ratios'])
        assert (f"| {r['step_s_per_gpu']:.1f} s | {r['rollout_s']:.1f} s | {r['update_s']:.1f} s | {r['peak_gib']:.1f} GiB | "
                f"{ratios} |") in readme, r['run']
