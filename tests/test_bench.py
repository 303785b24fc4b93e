"`scripts/bench.py` and `mapg.bench`: the suite runs end to end, one line per figure, counts exact."
import json, os, re, sys
from pathlib import Path
import pytest, torch
from mapg.bench import Figure, BenchArgs, run_benchmarks, passes_per_cycle, PassCounter, FIGURES
from mapg.models import load_model
from conftest import run_child

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r'^(?P<name>.+?)\s+(?P<ratio>\d+\.\d{3})\s+target (?P<op><=|>=) (?P<target>[\d.]+)\s+(?P<verdict>pass|MISS)\s')
SMALL = ['--repeats', '1', '--batch', '2', '--gen_length', '32', '--steps', '16', '--segments', '4', '--k', '2', '--mu', '3', '--code_n', '4']

def _run(args):
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    return run_child([sys.executable, str(ROOT/'scripts'/'bench.py'), *args], env=env)

def test_suite_one_line_per_figure():
    p = _run(SMALL)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [LINE.match(l) for l in p.stdout.splitlines()]
    figs = [m for m in lines if m]
    assert len(figs) == len(FIGURES) + 2, p.stdout                      # cache_tokens gives three figures
    names = [m['name'].strip() for m in figs]
    assert names == ['sampler overhead', 'sampler overhead + StepMerge old log-probs', 'one generation per cycle (rollout time)',
                     'position-term overhead (update step)',
                     'StepMerge batched forwards (speed-up)', 'StepMerge micro-batching (exact gradient)',
                     'forward passes per training cycle', 'toy training cycle: scoring share', 'code-reward pool speed-up',
                     'prefix cache: tokens per rollout', 'prefix cache: tokens per exact update',
                     'prefix cache: tokens per StepMerge update', 'prefix cache: rollout time']
    for m in figs:
        ok = float(m['ratio']) <= float(m['target']) if m['op'] == '<=' else float(m['ratio']) >= float(m['target'])
        assert (m['verdict'] == 'pass') == ok, m.group(0)
    assert ' ms' not in p.stdout.split('code-reward')[0]                # absolute model times only on a GPU
    assert re.search(r'recipe T\+N\+muK = 16\+4\+3x2 = 26', p.stdout) and '= 22;' in p.stdout
    assert re.search(r'\d+/13 figures meet their targets', p.stdout)

def test_passes_per_cycle_paper_setting():
    "At the paper's setting a cycle is T + mu K = 272 sequence-forwards against the recipe's T + N + mu K = 304"
    torch.set_num_threads(1)
    m = load_model(kind='toy', device='cpu')
    f = passes_per_cycle(m)
    assert f.passed and abs(f.ratio - 272 / 304) < 1e-12 and '= 272' in f.detail and '= 304' in f.detail
    assert 'forward' not in vars(m)                                     # the counter put the method back

def test_counter_and_figure():
    m = load_model(kind='toy', device='cpu')
    with PassCounter(m) as c: m.logits(torch.zeros(3, 5, dtype=torch.long))
    assert (c.calls, c.rows) == (1, 3)
    assert Figure('a', 1.2, 1.1).passed is False and Figure('a', 2., 1.5, '>=').passed is True
    with pytest.raises(ValueError, match='unknown figure'): run_benchmarks(BenchArgs(only=['nope']), m, show=False)

def test_help_documents_every_option():
    "`scripts/bench.py --help` is this parser's help: every field, with its inline comment"
    from dataclasses import fields
    from mapg.config import docments_parser
    text = ' '.join(docments_parser(BenchArgs, config=False).format_help().split())
    for f in fields(BenchArgs): assert f"--{f.name}" in text, f.name
    assert "K: segments per inner update" in text and text.count('(default:') >= len(fields(BenchArgs))

def test_gpu_phases_script_small(tmp_path):
    "`scripts/gpu_phases.py --small` runs on the CPU and writes both files with every phase and figure"
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    p = run_child([sys.executable, str(ROOT/'scripts'/'gpu_phases.py'), '--small', '--repeats', '1', '--out', str(tmp_path)], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    ph = json.loads((tmp_path/'phases.json').read_text())
    assert all(ph[k] > 0 for k in ('rollout_s', 'update_s', 'update_token_only_s'))
    assert (ph['prompt'], ph['gen_length'], ph['steps']) == (16, 32, 8)                   # a short canvas: a check that it runs, sized to stay quick
    assert ph['lora_params'] == 2 * 128 * (4 * 2 * 64 + 3 * (64 + 128))     # r (in + out) over the 7 projections of 2 blocks
    figs = json.loads((tmp_path/'figures.json').read_text())
    assert [f['name'] for f in figs][0] == 'forward passes per training cycle' and len(figs) == 5
    assert figs[0]['ratio'] == pytest.approx((8 + 12 * 2) / (8 + 4 + 12 * 2))
