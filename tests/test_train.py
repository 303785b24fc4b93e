"""The trainer end to end on a tiny toy: metrics and checkpoints, exact resume, every loss and advantage, bad configurations
failing before any forward pass, the token-only switch, and two processes against one."""
import json, math, os, sys
from pathlib import Path
import pytest, torch
from mapg.models import MDLM
from mapg.config import parse_cfg
from mapg.train import train
from conftest import free_port, run_child

ROOT = Path(__file__).resolve().parent.parent
TINY = ['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), '--toy_hidden', '32', '--toy_layers', '1', '--toy_heads', '2',
        '--toy_pretrain_steps', '5', '--per_device_batch', '8', '--group_size', '4', '--eval_size', '0', '--no_report',
        '--inner_updates', '2', '--segments_per_update', '3', '--n_segments', '4']

@pytest.fixture(scope='module')
def cache(tmp_path_factory): return str(tmp_path_factory.mktemp('toy_cache'))

def cfg(out, cache, *extra): return parse_cfg([*TINY, '--output_dir', str(out), '--toy_cache', cache, *extra])

def params(s): return {n: p.detach().cpu() for n, p in s['model'].model.named_parameters() if p.requires_grad}

def rows(out): return [json.loads(l) for l in (Path(out)/'metrics.jsonl').read_text().splitlines()]

KEYS = {'step', 'reward', 'reward_cells', 'reward_solved', 'accuracy', 'solved', 'completion_len', 'pos_entropy', 'tok_entropy',
        'reward_std', 'loss', 'loss_token', 'loss_pos', 'ratio_token', 'ratio_pos', 'clip_frac_token', 'clip_frac_pos',
        'grad_norm', 'lr', 'fwd_per_seq', 'rollout_s', 'scoring_s', 'update_s', 'skipped', 'skipped_total', 'optimizer_steps',
        'reward_nonfinite'}

def test_steps_metrics_checkpoints(tmp_path, cache):
    s = train(*cfg(tmp_path/'run', cache, '--max_steps', '3', '--save_steps', '2'))
    rs = rows(tmp_path/'run')
    assert [r['step'] for r in rs] == [1, 2, 3]
    assert KEYS <= set(rs[0]), KEYS - set(rs[0])
    assert all(math.isfinite(v) for r in rs for v in r.values())
    assert rs[0]['fwd_per_seq'] == 8 + 3 and rs[1]['fwd_per_seq'] == 3      # T for the rollout (old log-probs free) + K
    ck = sorted(p.name for p in (tmp_path/'run').glob('checkpoint-*'))
    assert ck == ['checkpoint-2', 'checkpoint-3']
    assert [r['optimizer_steps'] for r in rs] == [1, 2, 3]                   # the optimizer's own count: one step per trainer step
    for f in ('COMPLETE', 'pytorch_model.bin', 'optimizer.bin', 'rank0.pt', 'trainer_state.json', 'config.json', 'model/config.json'):
        assert (tmp_path/'run'/'checkpoint-3'/f).exists(), f
    assert json.loads((tmp_path/'run'/'config.json').read_text())['versions']['torch'] == torch.__version__

def test_resume_is_exact(tmp_path, cache):
    "Interrupted after 3 steps (inside a cycle: the rollout buffer is restored) and resumed = uninterrupted, bitwise on CPU"
    full = train(*cfg(tmp_path/'a', cache, '--max_steps', '5', '--save_steps', '1'))
    train(*cfg(tmp_path/'b', cache, '--max_steps', '3', '--save_steps', '1'))
    assert json.loads((tmp_path/'b'/'checkpoint-3'/'trainer_state.json').read_text())['inner'] == 1
    with open(tmp_path/'b'/'metrics.jsonl', 'a') as f: f.write(json.dumps(dict(step=4, reward=0.)) + '\n')   # logged, then lost
    resumed = train(*cfg(tmp_path/'b', cache, '--max_steps', '5', '--save_steps', '1', '--resume_from_checkpoint', 'latest'))
    a, b = params(full), params(resumed)
    for n, p in a.items(): assert torch.equal(p, b[n]), n
    ra, rb = rows(tmp_path/'a'), rows(tmp_path/'b')
    strip = lambda r: {k: v for k, v in r.items() if not k.endswith('_s')}          # everything but the timings
    assert [strip(r) for r in ra] == [strip(r) for r in rb]

@pytest.mark.parametrize('loss,adv', [('gspo', 'std'), ('grpo', 'mean'), ('rloo', 'rloo')])
def test_every_loss_and_advantage(tmp_path, cache, loss, adv):
    train(*cfg(tmp_path/'run', cache, '--max_steps', '2', '--save_steps', '0', '--loss', loss, '--advantage', adv))
    rs = rows(tmp_path/'run')
    assert len(rs) == 2 and all(math.isfinite(r['loss']) for r in rs)

def test_token_only_switch(tmp_path, cache):
    train(*cfg(tmp_path/'run', cache, '--max_steps', '1', '--save_steps', '0', '--pos_weight', '0'))
    r = rows(tmp_path/'run')[0]
    assert 'ratio_pos' not in r and 'loss_pos' not in r and math.isfinite(r['loss'])

@pytest.mark.parametrize('extra,msg', [
    (['--gen_length', '12'], 'gen_length=12 must be a multiple of block_length=16'),
    (['--segments_per_update', '9'], 'segments_per_update: K=9 must be between 1 and n_segments=4'),
    (['--group_size', '3'], 'per_device_batch: per_device_batch=8 x 1 process(es) must be a multiple of group_size=3'),
    (['--loss', 'ppo'], "loss: unknown loss 'ppo'"),
    (['--advantage', 'z'], "advantage: unknown advantage 'z'"),
    (['--model_kind', 'gpt'], "model_kind: unknown kind 'gpt'"),
    (['--task', 'chess'], "task: unknown task 'chess'"),
    (['--dataset', 'gsm8k', '--task', 'gsm8k', '--data_source', 'nowhere/train.jsonl'], "data_source: no such file 'nowhere/train.jsonl'"),
])
def test_bad_config_fails_before_any_forward(tmp_path, cache, monkeypatch, extra, msg):
    monkeypatch.setattr(MDLM, 'forward', lambda *a, **k: pytest.fail("a forward pass ran"))
    with pytest.raises(ValueError, match=msg.replace('(', r'\(').replace(')', r'\)')): train(*cfg(tmp_path/'run', cache, *extra))
    assert not (tmp_path/'run'/'metrics.jsonl').exists()

def test_output_dir_of_another_run_is_refused(tmp_path, cache):
    train(*cfg(tmp_path/'run', cache, '--max_steps', '1', '--save_steps', '0'))
    with pytest.raises(ValueError, match="holds a different run"): train(*cfg(tmp_path/'run', cache, '--max_steps', '1', '--learning_rate', '1e-3'))
    with pytest.raises(ValueError, match="already holds checkpoints"): train(*cfg(tmp_path/'run', cache, '--max_steps', '1'))

def test_unknown_yaml_field(tmp_path):
    p = tmp_path/'c.yaml'; p.write_text('task: sudoku\nlearning_rte: 1.0\n')
    with pytest.raises(ValueError, match=r"learning_rte: unknown field \(did you mean learning_rate\?\)"): parse_cfg(['--config', str(p)])

def test_script_help_documents_every_field():
    out = run_child([sys.executable, str(ROOT/'scripts'/'train.py'), '--help'])
    assert out.returncode == 0, out.stderr
    for f in ('--inner_updates', 'mu: optimizer steps per rollout batch', '--pos_weight', '--resume_from_checkpoint', '--config',
              'set report to false', '--max_prompt_len', '--save_total_limit', '--max_skipped_steps'):
        assert f in out.stdout, f

def test_two_processes_equal_one(tmp_path, cache):
    "Two gloo processes: a group split across them gets the advantages of the whole group; parameters equal a one-process run over the same rollouts; ranks identical"
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MAPG_TEST_OUT': str(tmp_path), 'MAPG_TEST_CACHE': cache}
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_port', str(free_port()), str(ROOT/'tests'/'dist_train.py')]
    out = run_child(cmd, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    two = [torch.load(tmp_path/f'params_rank{r}.pt') for r in (0, 1)]
    for n in two[0]: assert torch.equal(two[0][n], two[1][n]), f"ranks differ at {n}"
    adv = [torch.load(tmp_path/f'adv_rank{r}.pt') for r in (0, 1)]
    # per_device_batch 6, G 4: the second group spans both processes; its advantages come from its 4 rewards
    from mapg.objectives import group_advantages
    rew = torch.cat([torch.load(tmp_path/f'rew_rank{r}.pt') for r in (0, 1)])
    assert torch.equal(torch.cat(adv), group_advantages(rew, 4, 'std'))
    one = train(*cfg(tmp_path/'one', cache, '--max_steps', '2', '--save_steps', '0', '--per_device_batch', '12',
                     '--replay_rollouts', str(tmp_path/'two'/'rollouts')))
    for n, p in params(one).items():
        # attention key biases shift every score of a query equally: their gradient is zero up to rounding, which Adam scales to +-lr
        if n.endswith('attention.self.key.bias'): continue
        torch.testing.assert_close(p, two[0][n], rtol=1e-5, atol=1e-6)
    ra, rb = rows(tmp_path/'two'), rows(tmp_path/'one')
    for a, b in zip(ra, rb):
        for k in ('reward', 'loss', 'ratio_token', 'ratio_pos', 'grad_norm'): assert abs(a[k] - b[k]) < 1e-4, (k, a[k], b[k])

def test_missing_model_is_refused_before_anything_is_written(tmp_path):
    "A model path that is neither a folder here nor a hub id is refused naming `model`; no output_dir, no lock is left"
    out = tmp_path/'run'
    p = run_child([sys.executable, str(ROOT/'scripts'/'train.py'), '--model', '/no/such/dir', '--output_dir', str(out)], env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert p.returncode == 2 and "model: no folder '/no/such/dir' here, and it is not a hub id" in p.stderr, p.stderr[-2000:]
    assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()

def test_loss_metrics_are_averaged_over_processes_in_one_collective():
    "Two processes' metrics: one `reduce` of all of them, each the mean of the two, in the metrics' own order"
    from types import SimpleNamespace
    from mapg.train import TrainingRun
    other, calls = torch.tensor([3., -1., 0.25]), []
    def reduce(t, how):
        calls.append((t.clone(), how)); return (t + other) / 2
    run = SimpleNamespace(world=2, acc=SimpleNamespace(reduce=reduce), m=SimpleNamespace(device=torch.device('cpu')))
    got = TrainingRun._process_mean(run, {'loss': 1., 'ratio_token': 0.5, 'kl': 0.75})
    assert len(calls) == 1 and calls[0][1] == 'mean' and calls[0][0].tolist() == [1., .5, .75]
    assert got == {'loss': 2., 'ratio_token': -0.25, 'kl': 0.5} and list(got) == ['loss', 'ratio_token', 'kl']
    assert TrainingRun._process_mean(SimpleNamespace(world=1), {'loss': 1.}) == {'loss': 1.}

def test_fit_adds_no_attribute(tmp_path, cache):
    "Every attribute a run has is declared by `TrainingRun.__init__`: `fit` (fresh, and resumed) adds none"
    from mapg.engine import make_accelerator
    from mapg.config import resolved_config
    from mapg.faults import Preemption
    from mapg.train import TrainingRun
    for steps, ckpt in (('2', None), ('3', tmp_path/'run'/'checkpoint-2')):
        run, roll, upd = cfg(tmp_path/'run', cache, '--max_steps', steps, '--save_steps', '1', '--eval_size', '4',
                             '--report', 'true', '--no_progress')
        tr = TrainingRun(run, roll, upd, make_accelerator(run, roll, upd), resolved_config(run, roll, upd),
                         Path(run.output_dir), ckpt, Preemption())
        declared = set(vars(tr))
        s = tr.fit()
        assert set(vars(tr)) == declared, set(vars(tr)) ^ declared
        assert tr.state['step'] == int(steps) and tr.first is not None and 'report' in s
