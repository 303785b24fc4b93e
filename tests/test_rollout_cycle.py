"""Rollouts at the hardware's pace: a cycle's rollout batches sampled in one `generate` call give, bit for bit, the
trajectories, rewards and updates of one call per batch; and the denoising loop reads no tensor value on the host."""
import json
from pathlib import Path
import pytest, torch
import mapg.train as mt
from mapg.core import Tok, make_gen, sharp_toy
from mapg.models import MDLM
from mapg.policy import REMASKING, SCORES
from mapg.sampler import generate, _Sampler
from mapg.config import parse_cfg
from mapg.train import train
from mapg.stages import rollout_stage, cycle_gens
from test_train import TINY

@pytest.fixture(scope='module')
def cache(tmp_path_factory): return str(tmp_path_factory.mktemp('toy_cache'))

def per_batch(m, batches, roll, gen, rank=0, world=1):
    "Today's loop: one `generate` call per rollout batch (the sampling inside `rollout_stage`), each with its batch's generator"
    upd = parse_cfg(TINY)[2]
    rs = [rollout_stage(m, recs, roll, upd, 'sudoku', g, rank, world)[0].r for recs, g in zip(batches, cycle_gens(gen, len(batches)))]
    return rs, 1.

def run(out, cache, *extra):
    s = train(*parse_cfg([*TINY, '--output_dir', str(out), '--toy_cache', cache, '--no_progress', '--save_rollouts', 'true',
                          '--save_steps', '0', *extra]))
    rows = [{k: v for k, v in json.loads(l).items() if not k.endswith('_s')} for l in (Path(out)/'metrics.jsonl').read_text().splitlines()]
    rolls = {p.name: torch.load(p, weights_only=False) for p in sorted((Path(out)/'rollouts').glob('*.pt'))}
    return rows, {n: p.detach().clone() for n, p in s['model'].model.named_parameters()}, rolls

@pytest.mark.parametrize('accum', ['1', '2'])
def test_one_call_per_cycle_is_the_loop_over_batches(tmp_path, cache, monkeypatch, accum):
    "Metrics, saved rollouts (every field) and trained parameters of a run equal those of one `generate` call per batch"
    extra = ['--grad_accum', accum, '--max_steps', '2', '--per_device_batch', '4']
    new = run(tmp_path/'one_call', cache, *extra)
    monkeypatch.setattr(mt, 'cycle_rollouts', per_batch)
    old = run(tmp_path/'per_batch', cache, *extra)
    assert new[0] == old[0] and len(new[0]) == 2
    assert new[1].keys() == old[1].keys() and all(torch.equal(new[1][k], old[1][k]) for k in new[1])
    assert new[2].keys() == old[2].keys() and len(new[2]) == int(accum)
    for k in new[2]:
        a, b = new[2][k], old[2][k]
        for f in vars(a):
            x, y = getattr(a, f), getattr(b, f)
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, (k, f)

SYNCS = ('item', 'tolist', '__bool__', '__int__', '__float__', '__index__', 'nonzero', 'cpu', 'numpy')

def count_syncs(monkeypatch)->dict:
    "Patch every Tensor method that reads values on the host to count its calls made inside `_Sampler.step`"
    counts, inside = {}, [False]
    for name in SYNCS:
        orig = getattr(torch.Tensor, name)
        def wrap(self, *a, _o=orig, _n=name, **k):
            if inside[0]: counts[_n] = counts.get(_n, 0) + 1
            return _o(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, wrap)
    step = _Sampler.step
    def counted(self, *a, **k):
        inside[0] = True
        try: return step(self, *a, **k)
        finally: inside[0] = False
    monkeypatch.setattr(_Sampler, 'step', counted)
    return counts

@pytest.mark.parametrize('score', SCORES)
@pytest.mark.parametrize('remasking', REMASKING)
def test_the_denoising_loop_reads_no_value_on_the_host(monkeypatch, remasking, score):
    "No `.item()`, `.tolist()`, `bool(tensor)`, ... in any step of any mode, StepMerge old log-probs included"
    m = MDLM(sharp_toy(0, max_len=32), Tok(mask_id=1, eos_ids=(0,), pad_id=0), 'toy')
    counts = count_syncs(monkeypatch)
    kw = dict(gen_length=12, block_length=6, steps=8, remasking=remasking, score=score, stepmerge_segments=3)
    generate(m, torch.tensor([[2, 0]] * 4), generator=[make_gen(0), make_gen(1)], **kw)
    assert counts == {}, counts

def test_the_sync_counter_sees_a_sync(monkeypatch):
    "The counter catches a host read: the StepMerge scoring that reads its segment length from a tensor"
    m = MDLM(sharp_toy(0, max_len=32), Tok(mask_id=1, eos_ids=(0,), pad_id=0), 'toy')
    counts = count_syncs(monkeypatch)
    import mapg.sampler as ms
    seg = ms.segment_terms
    monkeypatch.setattr(ms, 'segment_terms', lambda *a, n_steps=None, **k: seg(*a, **k))   # drop the known length
    generate(m, torch.tensor([[2, 0]] * 2), gen_length=12, block_length=6, steps=8, stepmerge_segments=3, generator=make_gen(0))
    assert counts.get('__int__', 0) + counts.get('__index__', 0) + counts.get('item', 0) >= 3
