"""The pages' stored figures are what their commands print: the train-the-toy tutorial's saved run (`toy_run/`) is the
shipped default command's, its tables and printed lines are that run's, and the figures of the order task in the
README and index are the saved experiment's, whose runs are the shipped `configs/toy_order.yaml` command. The 8-GPU
tutorial's CPU rehearsal is copied from the page and run as written, and every page that states the position term's
cost states the one figure measured on one H200 (`gpu_h200/figures.json`). The slow case (`MAPG_TEST_FLAGS=slow`) runs
the default command again and compares every figure."""
import json, os, re, shlex, sys
from pathlib import Path
import pytest
from mapg.config import parse_cfg, resolved_config
from mapg.checkpoints import load_policy
from mapg.scoring import eval_records, greedy_eval
from conftest import run_child

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT/'nbs'/'tutorials'/'toy_run'
PAGE = ROOT/'nbs'/'tutorials'/'train_toy.ipynb'
RES = ROOT/'nbs'/'explanations'/'results'
EIGHT = ROOT/'nbs'/'tutorials'/'eight_gpus.ipynb'

def _markdown(nb): return '\n'.join(''.join(c['source']) for c in json.loads(Path(nb).read_text())['cells'] if c['cell_type'] == 'markdown')

def _sh_block(nb, heading:str)->str:
    "The first `sh` block under `heading` in a page's markdown, joined into one line as a shell reads it"
    text = _markdown(nb).split(heading, 1)[1]
    return ' '.join(text.split('```sh\n', 1)[1].split('```', 1)[0].replace('\\\n', ' ').split())

def _fmt(d): return ', '.join(f"{k} {v:.3f}" for k, v in d.items())
def _cells(nb): return {c['id']: c for c in json.loads(Path(nb).read_text())['cells']}
def _outputs(c): return ''.join(''.join(o.get('text', [])) + ''.join(o.get('data', {}).get('text/markdown', '')) for o in c.get('outputs', []))

def test_toy_run_is_the_shipped_command():
    cfg = json.loads((RUN/'config.json').read_text())
    want = resolved_config(*parse_cfg(['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), '--output_dir', '/tmp/site_run']))
    drop = lambda d: {k: v for k, v in d.items() if k != 'versions'}
    assert drop(cfg) == drop(want)                                   # a changed default makes the saved run stale
    rows = [json.loads(l) for l in (RUN/'metrics.jsonl').read_text().splitlines() if l.strip()]
    assert len(rows) == cfg['max_steps']
    o = json.loads((RUN/'orders.json').read_text())
    assert len(o['before']) == len(o['after']) == len(o['puzzles']) == cfg['per_device_batch'] and o['T'] == cfg['steps']

def test_toy_run_before_figures_are_the_shipped_toys():
    summary = json.loads((RUN/'summary.json').read_text())
    run, roll, upd = parse_cfg(['--config', str(ROOT/'configs'/'toy_sudoku.yaml')])
    m = load_policy(run, roll, 'cpu')
    assert greedy_eval(m, eval_records(run, m.tokenizer), run.task, roll) == summary['before']

def test_page_shows_the_runs_figures():
    s, cells = json.loads((RUN/'summary.json').read_text()), _cells(PAGE)
    b, a = s['before'], s['after']
    text = ''.join(''.join(c['source']) for c in cells.values())
    assert f"before RL: {_fmt(b)}\nafter RL:  {_fmt(a)}" in text            # the printed lines the page quotes
    table = _outputs(cells['d66b8034'])
    for k in ('accuracy', 'solved'): assert f"| {k} | {b[k]:.1%} | {a[k]:.1%} | {100 * (a[k] - b[k]):+.1f} points |" in table
    readme = (ROOT/'README.md').read_text()
    assert f"`after RL:  accuracy {a['accuracy']:.3f}, ..., solved {a['solved']:.3f}`" in readme
    assert f"`before RL: accuracy {b['accuracy']:.3f}, ..., solved {b['solved']:.3f}`" in readme

def test_order_figures_in_readme_are_the_experiments():
    readme = ' '.join((ROOT/'README.md').read_text().split())
    S = json.loads((RES/'summary.json').read_text())['order']
    sb = S['sampled_before']
    assert f"before RL `accuracy {sb['accuracy']:.3f}, solved {sb['solved']:.3f}, good order {sb['good_order']:.3f}`" in readme
    for arm, name in (('mask_aware_1', 'mask-aware'), ('token_only', 'token-only')):
        r = json.loads((RES/'order'/f'{arm}_s0.json').read_text())['sampled_after']
        assert f"`accuracy {r['accuracy']:.3f}, solved {r['solved']:.3f}, good order {r['good_order']:.3f}` {name}" in readme
    a, t = S['arms']['mask_aware_1'], S['arms']['token_only']
    pct = lambda m: f"{100 * m['mean']:.1f} ± {100 * m['std']:.1f}%"
    assert f"solves {pct(a['sampled_after.solved'])[:-1]}" in readme and f"{pct(a['sampled_after.good_order'])} of its samples" in readme
    assert f"token-only RL {pct(t['sampled_after.solved'])} and {pct(t['sampled_after.good_order'])}" in readme
    for k in ('sampled_after.solved', 'sampled_after.good_order'):
        assert a[k]['vs_token_only']['positive'] == a[k]['n'] == 6                 # "higher on every seed"

@pytest.mark.skipif('slow' not in os.environ.get('MAPG_TEST_FLAGS', '').split(), reason="the full default run: MAPG_TEST_FLAGS=slow")
def test_the_default_command_prints_the_pages_figures(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    p = run_child([sys.executable, ROOT/'scripts'/'train.py', '--output_dir', tmp_path/'site_run', '--progress', 'false'], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads((RUN/'summary.json').read_text())
    assert f"before RL: {_fmt(s['before'])}\nafter RL:  {_fmt(s['after'])}" in p.stdout

def test_eight_gpus_cpu_rehearsal_runs_as_written(tmp_path):
    "The 8-GPU tutorial's CPU rehearsal, copied from the page and run as written (one process, the shipped toy); it prints and writes what the page says"
    cmd = _sh_block(EIGHT, '## Rehearse on a CPU')
    words = shlex.split(cmd)
    assert words[:4] == ['accelerate', 'launch', '--config_file', 'configs/accelerate/1gpu.yaml'] and '--model' in words, cmd
    text = ' '.join(_markdown(EIGHT).split())
    for name in ('configs', 'scripts'): (tmp_path/name).symlink_to(ROOT/name)     # a reader's checkout; the run writes under tmp_path
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'CUDA_VISIBLE_DEVICES': ''}
    p = run_child([sys.executable, '-m', 'accelerate.commands.launch', *words[2:]], env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    out = tmp_path/words[words.index('--output_dir') + 1]
    said = f"`report: {out.relative_to(tmp_path)}/report.html`"
    assert said in text and said.strip('`') in p.stdout
    assert 'were not passed' not in p.stderr                                        # 1gpu.yaml sets what accelerate asks for
    rs = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines()]
    assert [r['optimizer_steps'] for r in rs] == [1, 2] and not any(r['skipped'] for r in rs)
    assert rs[0]['fwd_per_seq'] == 16 + 12 and '`fwd_per_seq` 28 on the first' in text
    assert all((out/n).exists() for n in ('checkpoint-1', 'checkpoint-2', 'report.html'))
    saved = json.loads((out/'config.json').read_text())
    assert (saved['per_device_batch'], saved['grad_accum'], saved['micro_batch'], saved['group_size']) == (6, 8, 36, 6)
    assert saved['per_device_batch'] * saved['grad_accum'] == 48 and 'two optimizer steps of 48 completions each' in text

def test_one_position_term_cost_across_pages():
    "Every page that states the position term's cost states the one measured figure: scripts/gpu_phases.py's on one H200"
    fig = next(f for f in json.loads((ROOT/'nbs'/'tutorials'/'gpu_h200'/'figures.json').read_text()) if f['name'].startswith('position-term'))
    said = f"{100 * (fig['ratio'] - 1):.1f} % of an update step"
    assert 'B=2 N=32 K=12 L=256 T=128' in fig['detail']
    pages = {'README.md': (ROOT/'README.md').read_text(), 'index': _markdown(ROOT/'nbs'/'index.ipynb'), 'eight_gpus': _markdown(EIGHT),
             '14_bench': _markdown(ROOT/'nbs'/'14_bench.ipynb')}
    for name, t in pages.items():
        t = ' '.join(t.split())
        assert said in t, name
        for stale in ('added 0.1 % to the update', 'adds under 1 % to an update'): assert stale not in t, (name, stale)
