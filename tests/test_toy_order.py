"""The order task, first-class: its reward on completions written by hand, its records and shipped toy, the config's
2-step run through the shipped script (greedy and sampled figures, the good-order share), and the experiment's order
runs being exactly that config."""
import hashlib, json, os, sys
from dataclasses import asdict, replace
from pathlib import Path
import pytest
from mapg.faults import ConfigError
from mapg.rewards import order_reward, order_solution, score_batch, task_metrics
from mapg.config import parse_cfg, validate
from mapg.toy import pretrained_toy, toy_order
from mapg.scoring import train_records, eval_records
from conftest import run_child

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT/'configs'/'toy_order.yaml'

@pytest.mark.parametrize('completion,cells,solved', [
    ('47230427', 1., 1.),          # h = 2: p3..p7 = 1 8 2 0 5, each plus 2 (mod 10)
    ('47341538', 1., 1.),          # h = 3
    ('47018205', 1., 1.),          # h = 0: p3..p7 copied
    ('57230427', .875, 0.),        # a copy wrong
    ('47230428', .875, 0.),        # the last cell wrong
    ('47130427', .375, 0.),        # h = 1: its l's are 2 9 3 1 6, none matches
    ('47930427', 0., 0.),          # h must be 0-3
    ('4723042', 0., 0.),           # too short
    ('', 0., 0.),
    ('47230427<|eot|>junk', 1., 1.)])
def test_reward_on_hand_made_completions(completion, cells, solved):
    assert order_reward(completion, '4718205') == dict(total=cells, cells=cells, solved=solved)
    assert task_metrics('order', order_reward(completion, '4718205')) == dict(accuracy=cells, solved=solved)

def test_reward_refuses_bad_digits_and_scores_batches():
    with pytest.raises(ValueError, match='7 digits'): order_reward('47230427', '47182')
    assert order_solution('4718205', 2) == '47230427'
    s = score_batch('order', ['47230427', [dict(role='assistant', content='47018205')], 'x'], digits=['4718205'] * 3)
    assert [r['total'] for r in s] == [1., 1., 0.]

def test_records_and_the_shipped_toy():
    run, roll, upd = parse_cfg(['--config', str(CONFIG)])
    validate(run, roll, upd)
    tr, ev = train_records(run, None), eval_records(run, None)
    assert len(ev) == run.eval_size == 256 and len(tr) == 4096 and {r['task'] for r in tr + ev} == {'order'}
    assert ev == toy_order(256, 'eval')                                            # one held-out set for every seed
    assert train_records(replace(run, seed=1), None) != tr                         # training prompts follow the seed
    d = pretrained_toy(run, roll)
    assert d == ROOT/'data'/'toy'/'toy_order_pretrained'
    sha = hashlib.sha256((d/'model.safetensors').read_bytes()).hexdigest()
    assert sha in (ROOT/'data'/'toy'/'README.md').read_text()
    with pytest.raises(ConfigError, match="needs task 'order'"): validate(*parse_cfg(['--config', str(CONFIG), '--task', 'sudoku']))
    with pytest.raises(ConfigError, match='toy_order'): validate(*parse_cfg(['--config', str(CONFIG), '--dataset', 'toy_ordr']))

def test_the_config_runs_two_steps(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    out = tmp_path/'toy_order'
    p = run_child([sys.executable, ROOT/'scripts'/'train.py', '--config', CONFIG, '--max_steps', '2', '--save_steps', '0',
                        '--eval_size', '16', '--output_dir', out, '--progress', 'false'], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    s = json.loads((out/'summary.json').read_text())
    assert set(s['sampled_before']) == set(s['sampled_after']) >= {'accuracy', 'solved', 'good_order', 'reward'}
    assert 'before RL: accuracy' in p.stdout and 'sampled with the rollout settings' in p.stdout
    assert f"after RL:  accuracy {s['sampled_after']['accuracy']:.3f}, solved {s['sampled_after']['solved']:.3f}, good order {s['sampled_after']['good_order']:.3f}" in p.stdout
    assert len((out/'metrics.jsonl').read_text().splitlines()) == 2
    html = (out/'report.html').read_text()                                          # the report shows the sampled figures too
    b, a = s['sampled_before'], s['sampled_after']
    assert 'Sampled with the rollout settings' in html
    assert f"<th>good_order</th><td>{b['good_order']:.3f}</td><td>{a['good_order']:.3f}</td>" in html

def test_the_experiments_order_runs_are_the_config():
    sys.path.insert(0, str(ROOT/'scripts'))
    import experiment as E
    a = E.argparse.Namespace(work='/tmp/x', max_steps=None, eval_size=256)
    # the `default` suite is the config as shipped; the `order` suite the same at 64 completions per step
    runs = [(suite, size, arm, w) for suite, size in (('default', []), ('order', ['--per_device_batch', '64']))
            for arm, w in (('mask_aware_1', 1.), ('token_only', 0.))]
    for suite, size, arm, w in runs:
        exp = parse_cfg(E.run_args(suite, arm, 3, a))
        cmd = parse_cfg(['--config', str(CONFIG), '--seed', '3', '--pos_weight', str(w), *size])
        assert asdict(exp[1]) == asdict(cmd[1]) and asdict(exp[2]) == asdict(cmd[2])      # rollout and update: the same
        diff = {k for k, v in asdict(exp[0]).items() if asdict(cmd[0])[k] != v}
        assert diff <= {'model', 'model_kind', 'output_dir', 'save_steps', 'eval_size', 'report', 'progress'}, diff
        assert pretrained_toy(cmd[0], cmd[1]) == Path(asdict(exp[0])['model'])
