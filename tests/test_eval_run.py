"""The path after a toy's command: a Sudoku toy run is trained, then evaluated with `scripts/eval.py`, which reads the run's
config.json and reproduces the figures the trainer printed, before RL (the shipped pretrained toy) and after RL (the
run), to the last bit; the CPU accelerate configs launch without accelerate's "values were not passed" warning."""
import json, os, sys
from pathlib import Path
import pytest, torch
from mapg.eval_args import EvalArgs, resolve, trainer_config
from mapg.evaluate import evaluate, eval_cli
from mapg.faults import cli_main
from mapg.toy import toy_sudoku
from conftest import run_child

ROOT = Path(__file__).resolve().parents[1]
PRETRAINED = ROOT/'data'/'toy'/'toy_sudoku_pretrained'
N = 64      # held-out puzzles: one of greedy_eval's batches

def _env(): return dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))

def _run(*args):
    p = run_child([sys.executable, *map(str, args)], env=_env(), cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "A Sudoku toy run as its command writes it (configs/toy_sudoku.yaml), cut to 2 steps, a checkpoint each, N held-out puzzles"
    out = tmp_path_factory.mktemp('run')/'toy_sudoku'
    _run(ROOT/'scripts'/'train.py', '--config', ROOT/'configs'/'toy_sudoku.yaml', '--max_steps', 2, '--save_steps', 1, '--eval_size', N,
         '--output_dir', out, '--report', 'false', '--progress', 'false')
    return out, json.loads((out/'summary.json').read_text())

def _figures(out:Path)->tuple:
    "(results.json, the trainer's figures of its last row: the checkpoint, or the model)"
    res = json.loads((out/'results.json').read_text())
    return res, res['rows'][-1]['cells']['sudoku_L16_b16']['trainer']

def test_run_dir_gives_the_after_rl_figures(run, tmp_path):
    out, summary = run
    p = _run(ROOT/'scripts'/'eval.py', '--model', out, '--output_dir', tmp_path, '--no_plot')
    res, got = _figures(tmp_path)
    assert got == summary['after']                                             # every bit
    assert res['base'] == 'toy_sudoku/checkpoint-2' and [r['label'] for r in res['rows']] == ['base', 'checkpoint-2']
    assert res['protocol'] == 'trainer' and res['model_kind'] == 'toy'
    assert 'LLaDA' not in (tmp_path/'run.json').read_text() and 'LLaDA' not in res['base']
    assert "checkpoint-2: " + ', '.join(f"{k} {v:.3f}" for k, v in summary['after'].items()) in p.stdout   # as the trainer prints it

def test_run_dir_has_the_base_models_row(run, tmp_path):
    "The run's start (the shipped pretrained toy) is the first row, with the run's before-RL figures, in the tables and the chart"
    out, summary = run
    p = _run(ROOT/'scripts'/'eval.py', '--model', out, '--output_dir', tmp_path)
    res = json.loads((tmp_path/'results.json').read_text())
    base = res['rows'][0]
    assert (base['label'], base['kind'], base['model'], base['step']) == ('base', 'base', 'toy_sudoku_pretrained', None)
    assert base['cells']['sudoku_L16_b16']['trainer'] == summary['before']                  # every bit
    assert res['rows'][1]['cells']['sudoku_L16_b16']['trainer'] == summary['after']
    md = (tmp_path/'results.md').read_text()
    row = next(l for l in md.splitlines() if l.startswith('| mapg, trainer protocol: base (toy_sudoku_pretrained) |'))
    assert row.split('|')[2].strip() == f"{base['cells']['sudoku_L16_b16']['accuracy']:.1f}"
    assert "base: " + ', '.join(f"{k} {v:.3f}" for k, v in summary['before'].items()) in p.stdout
    html = (tmp_path/'results.html').read_text()
    assert 'mapg, trainer protocol: base (toy_sudoku_pretrained)' in html and 'mapg, trainer protocol: checkpoint-2' in html
    from mapg.eval_results import results_figure
    fig = results_figure(res)
    assert [d.name for d in fig.data] == ['mapg, trainer protocol: base (toy_sudoku_pretrained)', 'mapg, trainer protocol: checkpoint-2']
    from mapg.report import DECODERS
    c = base['cells']['sudoku_L16_b16']
    for n, *_ in DECODERS: assert c[n] == summary[f'{n}_before']                          # every bit, each decoder
    assert list(fig.data[0].y) == [c['accuracy']] + [100 * c[n][k] for n, *_ in DECODERS for k in ('accuracy', 'solved')]

def test_no_base_row(run, tmp_path):
    out, _ = run
    _run(ROOT/'scripts'/'eval.py', '--model', out, '--output_dir', tmp_path, '--no_plot', '--no_base_row')
    assert [r['label'] for r in json.loads((tmp_path/'results.json').read_text())['rows']] == ['checkpoint-2']

def test_pretrained_toy_gives_the_before_rl_figures(run, tmp_path):
    out, summary = run
    assert json.loads((out/'eval_before.json').read_text()) == summary['before']
    _run(ROOT/'scripts'/'eval.py', '--model', PRETRAINED, '--limit', N, '--output_dir', tmp_path, '--no_plot')
    res, got = _figures(tmp_path)
    assert got == summary['before']
    assert res['base'] == 'toy_sudoku_pretrained'

def test_limit_is_the_first_held_out_puzzles():
    "`--limit N` on the pretrained toy is the run's `eval_size N`: the held-out puzzles are drawn one after another"
    assert [r['puzzle'] for r in toy_sudoku(N, 'eval', seed=0)] == [r['puzzle'] for r in toy_sudoku(256, 'eval', seed=0)][:N]

def test_checkpoint_of_a_run_and_every_checkpoint(run, tmp_path):
    out, summary = run
    torch.set_num_threads(1)
    one = resolve(EvalArgs(model=str(out/'checkpoint-1')))
    assert (one.checkpoint, one.protocol, one.kind, one.limit) == (str(out/'checkpoint-1'), 'trainer', 'toy', N)
    assert Path(one.output_dir) == Path('eval_results')/'toy_sudoku'/'checkpoint-1'
    res = evaluate(EvalArgs(checkpoint=str(out), output_dir=str(tmp_path), progress=False, plot=False))   # every checkpoint
    assert [r['label'] for r in res['rows']] == ['base', 'step-1', 'step-2', 'final (step-2)', 'best (chosen on the test set, per cell)']
    assert res['rows'][0]['cells']['sudoku_L16_b16']['trainer'] == summary['before']       # the run's start, first
    assert res['rows'][3]['cells']['sudoku_L16_b16']['trainer'] == summary['after']
    assert res['rows'][4]['cells']['sudoku_L16_b16']['step'] in (1, 2)                     # best: a checkpoint, never the base
    assert res['base'] == 'toy_sudoku'

REFUSALS = [
    (['--model', '/no/such/run'], "error: model: no folder '/no/such/run' here"),
    (['--model', 'RUN', '--checkpoint', 'RUN'], "error: checkpoint: --model"),
    (['--model', 'RUN', '--tasks', 'gsm8k'], "error: tasks: the 'trainer' protocol evaluates the run's own task, sudoku"),
    (['--model', 'RUN', '--lengths', '128'], "error: lengths: sudoku_L128_b16: L=128 leaves no position for a prompt in the model's 128; choose lengths below 128"),
]

@pytest.mark.parametrize('args,msg', REFUSALS)
def test_refusals_are_one_line(run, tmp_path, capsys, args, msg):
    "One line naming the field, exit 2: the first as a shell sees it (scripts/eval.py in a child process), the others from its entry point in this process"
    out, _ = run
    shell = (args, msg) == REFUSALS[0]
    args = [str(out) if a == 'RUN' else a for a in args]
    lines = refusal(args + ['--output_dir', str(tmp_path/'ev'), '--no_plot', '--no_progress'], capsys, shell=shell)
    assert len(lines) == 1 and lines[0].startswith(msg), lines

def refusal(args:list, capsys, shell:bool=False)->list:
    "The lines `scripts/eval.py ARGS` writes to stderr, having exited 2 (DeepSpeed's import notice left out)"
    if shell:
        p = run_child([sys.executable, str(ROOT/'scripts'/'eval.py'), *args], env=_env(), cwd=ROOT)
        code, err = p.returncode, p.stderr
    else:
        capsys.readouterr()
        with pytest.raises(SystemExit) as e: cli_main(eval_cli, args)
        code, err = e.value.code, capsys.readouterr().err
    assert code == 2, err[-2000:]
    return [l for l in err.splitlines() if l.strip() and 'real_accelerator' not in l]

def test_trainer_config_is_not_a_model_config(run):
    out, _ = run
    assert trainer_config(out)['dataset'] == 'toy_sudoku' and trainer_config(out/'checkpoint-2')['dataset'] == 'toy_sudoku'
    assert trainer_config(out/'checkpoint-2'/'model') is None and trainer_config(PRETRAINED) is None

@pytest.mark.parametrize('cfg', ['cpu.yaml', 'cpu_zero2.yaml'])
def test_cpu_launch_configs_are_quiet(cfg, tmp_path):
    "The CPU accelerate configs set every value `accelerate launch` otherwise fills in with a warning"
    script = tmp_path/'hello.py'
    script.write_text("print('hello')\n")
    p = run_child([sys.executable, '-m', 'accelerate.commands.launch', '--config_file', str(ROOT/'configs'/'accelerate'/cfg), str(script)], env=_env(), cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count('hello') == 2
    assert 'were not passed' not in p.stdout + p.stderr, p.stderr

def test_lora_toy_run_goes_on_the_pretrained_toy(tmp_path):
    "A toy run with LoRA: its adapter is evaluated on the pretrained toy it was trained from (the shipped one at the default's sizes)"
    from mapg.config import parse_cfg, resolved_config
    cfg = resolved_config(*parse_cfg(['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), '--lora_r', '4']))
    ck = tmp_path/'run'/'checkpoint-3'
    (ck/'adapter').mkdir(parents=True)
    (ck/'adapter'/'adapter_config.json').write_text('{}')
    for d in (tmp_path/'run', ck): (d/'config.json').write_text(json.dumps(cfg))
    (ck/'trainer_state.json').write_text('{}')
    a = resolve(EvalArgs(model=str(ck)))
    assert (Path(a.model), a.kind, a.checkpoint, a.protocol, a.limit) == (PRETRAINED, 'toy', str(ck), 'trainer', 256)
