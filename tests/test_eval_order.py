"""The order task after its first command: a toy_order run is trained, then evaluated with `scripts/eval.py`, which reads
the run's config.json and gives the figures the trainer printed for it, before RL (the shipped pretrained toy, and the
base row of a run's results) and after RL (the run): greedy, sampled with the rollout settings and decoded by the
low-temperature decoder, with the share of samples decoded in the good order, to the last bit. Every refusal on these paths is one line naming the field."""
import json
from pathlib import Path
import pytest, torch
from mapg.eval_args import EvalArgs, resolve
from mapg.eval_results import results_figure, SAMPLED_KEYS
from mapg.report import DECODERS

ROOT = Path(__file__).resolve().parents[1]
PRETRAINED = ROOT/'data'/'toy'/'toy_order_pretrained'
CONFIG = ROOT/'configs'/'toy_order.yaml'
N = 64      # held-out prompts: one of greedy_eval's and sampled_eval's batches
CELL = 'order_L8_b8'

from test_eval_run import _run, refusal

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "An order run as its command writes it (configs/toy_order.yaml), cut to 2 steps, a checkpoint each, N held-out prompts"
    out = tmp_path_factory.mktemp('run')/'toy_order'
    p = _run(ROOT/'scripts'/'train.py', '--config', CONFIG, '--max_steps', 2, '--save_steps', 1, '--eval_size', N, '--output_dir', out,
             '--report', 'false', '--progress', 'false')
    return out, json.loads((out/'summary.json').read_text()), p.stdout

def _printed(f:dict)->str: return ', '.join(f"{k.replace('_', ' ')} {f[k]:.3f}" for k in SAMPLED_KEYS)

def test_run_dir_gives_the_trainers_figures(run, tmp_path):
    "`--model <run>`: the after-RL figures (greedy and sampled), and the base row with the before-RL ones, as the trainer printed them"
    out, summary, printed = run
    p = _run(ROOT/'scripts'/'eval.py', '--model', out, '--output_dir', tmp_path)
    res = json.loads((tmp_path/'results.json').read_text())
    base, ck = res['rows']
    assert (base['label'], base['kind'], base['model'], ck['label']) == ('base', 'base', 'toy_order_pretrained', 'checkpoint-2')
    for name in ('sampled', 'pl'):                                              # every bit, both decoders
        assert ck['cells'][CELL][name] == summary[f'{name}_after'] and base['cells'][CELL][name] == summary[f'{name}_before']
    assert ck['cells'][CELL]['trainer'] == summary['after'] and base['cells'][CELL]['trainer'] == summary['before']
    assert (res['protocol'], res['model_kind'], res['base'], res['settings']['tasks']) == ('trainer', 'toy', 'toy_order/checkpoint-2', ['order'])
    # the lines the trainer printed, the same figures in eval.py's printout
    assert f"  before RL: {_printed(summary['sampled_before'])}" in printed and f"  after RL:  {_printed(summary['sampled_after'])}" in printed
    assert f"  base: {_printed(summary['sampled_before'])}" in p.stdout and f"  checkpoint-2: {_printed(summary['sampled_after'])}" in p.stdout
    for name, _, what in DECODERS:                                              # the decoder's lines, printed by both
        assert f"{what}, {N} held-out prompts:\n  before RL: {_printed(summary[f'{name}_before'])}\n" in printed
        assert f"  checkpoint-2: {_printed(summary[f'{name}_after'])}" in p.stdout
    assert "checkpoint-2: " + ', '.join(f"{k} {v:.3f}" for k, v in summary['after'].items()) in p.stdout
    assert "base: " + ', '.join(f"{k} {v:.3f}" for k, v in summary['before'].items()) in p.stdout
    for f in ('run.json', 'results.md', 'results.html'):                      # results name the model evaluated
        t = (tmp_path/f).read_text()
        assert 'LLaDA' not in t and 'sudoku' not in t.lower(), f
    assert 'checkpoint-2' in (tmp_path/'results.html').read_text()
    md = (tmp_path/'results.md').read_text()
    assert '| mapg, trainer protocol: base (toy_order_pretrained) | ' + ' | '.join(f"{100 * summary['sampled_before'][k]:.1f}" for k in SAMPLED_KEYS) + ' |' in md
    fig = results_figure(res)                                                 # the chart: the base row beside the checkpoint's
    assert fig.layout.title.text.startswith('Accuracy (%) of toy_order/checkpoint-2 (trainer protocol)')
    assert [d.name for d in fig.data] == ['mapg, trainer protocol: base (toy_order_pretrained)', 'mapg, trainer protocol: checkpoint-2']
    assert list(fig.data[0].x)[1:] == [f"Order (toy) 8 b8, {label}: {k.replace('_', ' ')}" for _, label, _ in DECODERS for k in SAMPLED_KEYS]
    assert list(fig.data[0].y) == [base['cells'][CELL]['accuracy']] + [100 * summary[f'{n}_before'][k] for n, *_ in DECODERS for k in SAMPLED_KEYS]

def test_pretrained_toy_gives_the_before_rl_figures(run, tmp_path):
    "`--model data/toy/toy_order_pretrained` is read with configs/toy_order.yaml: the run's before-RL figures"
    out, summary, _ = run
    _run(ROOT/'scripts'/'eval.py', '--model', PRETRAINED, '--limit', N, '--output_dir', tmp_path, '--no_plot')
    res = json.loads((tmp_path/'results.json').read_text())
    [row] = res['rows']
    assert row['cells'][CELL]['trainer'] == summary['before'] and row['cells'][CELL]['sampled'] == summary['sampled_before']
    assert row['cells'][CELL]['pl'] == summary['pl_before']
    assert res['base'] == 'toy_order_pretrained' and Path(res['settings']['run_config']) == CONFIG

def test_resolve_a_checkpoint_and_its_weights(run):
    out, _, _ = run
    torch.set_num_threads(1)
    a = resolve(EvalArgs(model=str(out/'checkpoint-1')))
    assert (a.protocol, a.kind, a.tasks, a.lengths, a.block_lengths, a.steps, a.limit, a.checkpoint) == (
        'trainer', 'toy', ['order'], [8], [8], 4, N, str(out/'checkpoint-1'))
    w = resolve(EvalArgs(model=str(out/'checkpoint-1'/'model')))              # the checkpoint's weights folder: read with its run's config
    assert (w.protocol, w.tasks, Path(w.run_config), w.checkpoint) == ('trainer', ['order'], out/'checkpoint-1', None)

REFUSALS = [
    (['--model', 'RUN', '--tasks', 'sudoku'], "error: tasks: the 'trainer' protocol evaluates the run's own task, order; drop --tasks"),
    (['--model', 'RUN', '--protocol', 'mapg'], "error: protocol: RUN trained the toy order task, which only the 'trainer' protocol scores"),
    (['--model', 'RUN', '--lengths', '128'], "error: lengths: order_L128_b8: L=128 leaves no position for a prompt in the model's 128; choose lengths below 128"),
    (['--model', 'RUN', '--steps', '16'], "error: steps: order_L8_b8: steps=16 gives 16 steps per block"),
    (['--model', 'RUN', '--block_lengths', '3'], "error: lengths: order_L8_b3: gen_length=8 must be a multiple of block_length=3; choose lengths that are multiples of block_lengths"),
    (['--model', 'RUN', '--limit', '0'], "error: limit: must be a positive integer, got 0"),
    (['--model', 'PRE', '--tasks', 'gsm8k'], "error: tasks: the 'trainer' protocol evaluates the run's own task, order"),
    (['--model', 'PRE', '--run_config', '/no/such/run'], "error: run_config: /no/such/run holds no trainer config.json"),
    (['--model', 'toy', '--tasks', 'order'], "error: tasks: ['order'] is scored by the 'trainer' protocol only"),
]

@pytest.mark.parametrize('args,msg', REFUSALS)
def test_refusals_are_one_line(run, tmp_path, capsys, args, msg):
    "One line naming the field (and the fix), exit 2, and no output_dir left behind; the first as a shell sees it, the others in this process"
    out, _, _ = run
    shell, sub = (args, msg) == REFUSALS[0], {'RUN': str(out), 'PRE': str(PRETRAINED)}
    args, msg = [sub.get(a, a) for a in args], msg.replace('RUN', str(out))
    lines = refusal(args + ['--output_dir', str(tmp_path/'ev'), '--no_plot', '--no_progress'], capsys, shell=shell)
    assert len(lines) == 1 and lines[0].startswith(msg), lines
    assert not (tmp_path/'ev').exists()
