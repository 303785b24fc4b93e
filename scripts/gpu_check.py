"""The paper's recipe on one GPU from the real modelling code, in one command: build LLaDA-8B-Instruct's full-size model
(Dream-7B's with `--kind dream`) from its own remote code with random weights directly on the GPU, save it as a local
checkpoint that `--model` loads like a hub one, run `scripts/train.py` with the shipped recipe at its shapes in NF4 and
bf16, each with `--cache none` and `--cache prefix`, then evaluate the bf16 run with 2 items of every paper task.

    python scripts/gpu_check.py --out results/gpu                  # the whole check (the 8-GPU tutorial times its stages)
    python scripts/gpu_check.py --quick --out results/gpu          # bf16, --cache none: a first call of a few minutes
    python scripts/gpu_check.py --precisions nf4 --no_eval         # the NF4 runs alone (the checkpoint is kept and reused)
    python scripts/gpu_check.py --tiny --out /tmp/check            # the same end to end on a CPU at tiny shapes

Each run is the recipe (`configs/llada_gsm8k.yaml`) with `--per_device_batch 6 --grad_accum 1 --micro_batch 36
--max_steps 2`: one rollout batch of one group (the 6 sequences one GPU of the 8-GPU recipe samples per cycle, in 2
batches of 3) and two optimizer steps scoring 6 x K pairs each (one GPU's share of an 8-GPU step), the first of which
must have importance ratios of exactly 1. The seconds per optimizer step per GPU of the 8-GPU recipe are derived as the
8-GPU tutorial does: the cycle's rollouts shared by `inner_updates` steps, plus one update (the second step's; the first
warms up). It prints
one table and writes it as `gpu_check.json` in `--out`. On a GPU every stage runs in a child process under its own
timeout, so a stage that fails or hangs leaves a row saying so and the others still run.
The machine needs the wheels and remote code of `scripts/gpu_env.py` (its docstring has the line that installs them).
"""
import argparse, json, os, subprocess, sys, time
from pathlib import Path
import torch

ROOT = Path(__file__).resolve().parent.parent
RECIPES = dict(llada=ROOT/'configs'/'llada_gsm8k.yaml', dream=ROOT/'configs'/'dream_gsm8k.yaml')
UPSTREAM = Path(os.environ.get('MAPG_UPSTREAM') or ROOT.parent/'shared'/'upstream_models')
# one GPU doing one of the 8-GPU recipe's GPUs' work per cycle: a rollout batch of one group (6 = 2 batches x 3), each
# update scoring 6 x K pairs in passes of 3 x K, as the 8-GPU run's (the 8-GPU tutorial's one-GPU command, one batch a cycle)
ONE_GPU = ['--per_device_batch', '6', '--grad_accum', '1']
# pairs per forward pass of the update: the 8-GPU run's 3 x K uncached; with the prefix cache 36 ran out of memory on one
# H200 (139.7 GiB; the prefix passes keep their activations), 12 peaked at 69 GiB in NF4
MICRO_BATCH = dict(none=36, prefix=12)
TINY = dict(hidden=32, layers=2, heads=4)
# the recipe's shapes shrunk for --tiny (a CPU check of the script, not of speed)
TINY_ARGS = ['--gen_length', '16', '--block_length', '8', '--steps', '8', '--n_segments', '8', '--segments_per_update', '4',
             '--max_prompt_len', '48', '--lora_r', '4', '--lora_alpha', '8', '--dtype', 'float32', '--reward_workers', '1']

def build(kind:str, ckpt:Path, tiny:bool=False, upstream:Path=UPSTREAM)->dict:
    "The full-size model (tiny: `TINY`) from `kind`'s remote code with random weights, written to `ckpt`"
    from mapg.standins import remote_checkpoint
    ckpt, upstream = Path(ckpt), Path(upstream)
    cuda = torch.cuda.is_available() and not tiny
    t0 = time.perf_counter()
    remote_checkpoint(kind, upstream/kind, ckpt, sizes=TINY if tiny else None, dtype=torch.bfloat16 if cuda else torch.float32,
                      device='cuda' if cuda else 'cpu')
    files = list(ckpt.glob('*.safetensors'))
    gib = sum(f.stat().st_size for f in files) / 2**30
    return dict(stage='build', build_s=time.perf_counter() - t0, checkpoint=str(ckpt), checkpoint_gib=gib)

def train_args(kind:str, ckpt:Path, out:Path, precision:str, cache:str, steps:int, tiny:bool)->list:
    "scripts/train.py's command line for one run of the check"
    return ['--config', str(RECIPES[kind]), '--model', str(ckpt), '--model_kind', kind, '--output_dir', str(out),
            '--load_in_4bit', str(precision == 'nf4').lower(), '--cache', cache, *ONE_GPU, '--micro_batch', str(MICRO_BATCH[cache]), '--max_steps', str(steps),
            '--save_steps', '0', '--eval_size', '0', '--no_report', '--no_progress', *(TINY_ARGS if tiny else [])]

def train_run(kind:str, ckpt:Path, out:Path, precision:str, cache:str, steps:int=2, tiny:bool=False)->dict:
    "One run of the trainer (what `scripts/train.py` calls, in this process): timings, peak memory, first-update ratios"
    ckpt, out = Path(ckpt), Path(out)
    from mapg.config import parse_cfg
    from mapg.train import train
    t0 = time.perf_counter()
    s = train(*parse_cfg(train_args(kind, ckpt, out, precision, cache, steps, tiny)))
    wall = time.perf_counter() - t0
    rows = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines()]
    cfg = recipe(kind)
    r, u = rows[0], rows[-1]
    rollout = r['rollout_s'] + r.get('scoring_s', 0.)
    # the 8-GPU recipe per GPU and optimizer step: its cycle's rollouts (this batch) shared by inner_updates steps, one update
    per_step = rollout / cfg['inner_updates'] + u['update_s']
    return dict(stage='train', run=f"{precision} cache {cache}", precision=precision, cache=cache, wall_s=wall,
                setup_s=s['setup_s'], rollout_s=rollout, update_s=u['update_s'], step_s_per_gpu=per_step,
                peak_gib=max(x.get('peak_gib', float('nan')) for x in rows), steps=len(rows),
                first_ratios=[r.get('ratio_token', float('nan')), r.get('ratio_pos', 1.)], loss=[x['loss'] for x in rows],
                reward=r['reward'], output_dir=str(out))

def recipe(kind:str)->dict:
    "The fields of `kind`'s shipped recipe"
    import yaml
    return yaml.safe_load(RECIPES[kind].read_text())

PAPER_TASKS = ['gsm8k', 'math', 'countdown', 'sudoku', 'humaneval', 'mbpp']   # the paper tables' order

def evaluate(run_dir:Path, out:Path, items:int=2, tiny:bool=False)->dict:
    "The paper's evaluation of the run's final checkpoint: `items` items of every paper task at L 256 (tiny: 16)"
    from mapg.evaluate import eval_cli
    run_dir, out = Path(run_dir), Path(out)
    L = '16' if tiny else '256'
    t0 = time.perf_counter()
    res = eval_cli(['--checkpoint', str(run_dir), '--no_base_row', '--tasks', *PAPER_TASKS, '--limit', str(items), '--lengths', L, '--batch_size', str(items),
                    '--output_dir', str(out), '--no_plot', '--no_progress', '--reward_workers', '2',
                    *(['--dtype', 'float32', '--max_prompt_len', '48', '--steps', '8'] if tiny else [])])
    cells = {n: dict(accuracy=c.get('accuracy'), n=c.get('n')) for row in res['rows'] for n, c in row['cells'].items()}
    return dict(stage='eval', eval_s=time.perf_counter() - t0, cells=cells)

def device_name()->str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'

def child(stage:str, kw:dict, timeout:float)->dict:
    "Run `stage(**kw)` in a child process under `timeout`: its row, or a row saying how it failed"
    cmd = [sys.executable, __file__, '--_stage', json.dumps(dict(stage=stage, kw=kw))]
    t0 = time.perf_counter()
    try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors='replace') if isinstance(e.stdout, bytes) else (e.stdout or '')
        return dict(stage=stage, error=f"timed out after {timeout:.0f} s", tail=out[-2000:])
    sys.stderr.write(p.stderr[-4000:])
    last = [l for l in p.stdout.splitlines() if l.startswith('GPU_CHECK_ROW ')]
    if p.returncode or not last:
        return dict(stage=stage, error=f"exit {p.returncode} after {time.perf_counter() - t0:.0f} s", tail=(p.stdout + p.stderr)[-2000:])
    return json.loads(last[-1][len('GPU_CHECK_ROW '):])

STAGES = dict(build=build, train=train_run, eval=evaluate)

def ratios(rs:list)->str:
    "The first update's ratios: 'exactly 1', or each and how far from 1 (the rollout and the update computed differently)"
    if all(x == 1. for x in rs): return 'exactly 1'
    return ', '.join(f"{x:.6f}" for x in rs) + f" (NOT 1: off by up to {max(abs(x - 1) for x in rs):.1e})"

def table(res:dict)->str:
    "The check's table (markdown)"
    lines = [f"GPU check, {res['date']}, {res['device']}, torch {res['torch']}, {res['kind']} ({res['model']})", '',
             f"build and save: {res.get('build', {}).get('build_s', float('nan')):.0f} s, "
             f"{res.get('build', {}).get('checkpoint_gib', float('nan')):.1f} GiB", '',
             '| run | load s | rollout s (one group of 6) | update s (6 × K pairs) | s per optimizer step per GPU (8-GPU recipe) | peak GiB | first ratios (token, position) |',
             '|---|---|---|---|---|---|---|']
    for r in res['runs']:
        if 'error' in r: lines.append(f"| {r['run']} | {r['error']} | | | | | |"); continue
        setup = '—' if r.get('setup_s') is None else f"{r['setup_s']:.1f}"
        lines.append(f"| {r['run']} | {setup} | {r['rollout_s']:.1f} | {r['update_s']:.2f} | {r['step_s_per_gpu']:.2f} | "
                     f"{r['peak_gib']:.1f} | {ratios(r['first_ratios'])} |")
    ev = res.get('eval')
    if ev and 'error' in ev: lines += ['', f"evaluation: {ev['error']}"]
    elif ev:
        lines += ['', f"evaluation of the bf16 run ({ev['eval_s']:.0f} s): " +
                  ', '.join(f"{n} {c['accuracy']:.2f} (n {c['n']})" for n, c in ev['cells'].items())]
    return '\n'.join(lines)

def check(out:Path, kind:str='llada', precisions=('nf4', 'bf16'), caches=('none', 'prefix'), steps:int=2, eval_items:int=2,
          tiny:bool=False, ckpt:Path|None=None, isolate:bool|None=None, timeout:float=240.)->dict:
    "Build (or reuse) the checkpoint, run the recipe per precision and cache setting, evaluate; the results, also in `out`"
    import datetime
    out = Path(out); out.mkdir(parents=True, exist_ok=True)
    isolate = torch.cuda.is_available() if isolate is None else isolate
    ckpt = Path(ckpt or Path(os.environ.get('TMPDIR', '/tmp'))/'mapg-gpu-check'/f"{kind}{'-tiny' if tiny else ''}")
    res = dict(date=datetime.date.today().isoformat(), device=device_name(), torch=torch.__version__, kind=kind, tiny=tiny,
               model=f"{'tiny ' if tiny else ''}{kind} from its remote code, random weights", recipe=str(RECIPES[kind].relative_to(ROOT)),
               runs=[])
    def stage(name, timeout, **kw):
        kw = {k: str(v) if isinstance(v, Path) else v for k, v in kw.items()}
        if isolate: row = child(name, kw, timeout)
        else: row = STAGES[name](**kw)
        print(json.dumps(row), flush=True)
        return row
    def save(): (out/'gpu_check.json').write_text(json.dumps(res, indent=1))
    if not (ckpt/'config.json').exists() or not list(ckpt.glob('*.safetensors')):
        res['build'] = stage('build', 2 * timeout, kind=kind, ckpt=ckpt, tiny=tiny, upstream=UPSTREAM)
        if 'error' in res['build']: save(); print(table(res)); return res
    else: res['build'] = dict(stage='build', build_s=0., checkpoint=str(ckpt), reused=True,
                              checkpoint_gib=sum(f.stat().st_size for f in ckpt.glob('*.safetensors')) / 2**30)
    save()
    for p in precisions:
        for c in caches:
            row = stage('train', timeout, kind=kind, ckpt=ckpt, out=out/'runs'/f"{p}_{c}", precision=p, cache=c, steps=steps, tiny=tiny)
            res['runs'].append(dict(row, run=f"{p} cache {c}")); save()
    done = [r for r in res['runs'] if 'error' not in r]
    if eval_items and done:
        res['eval'] = stage('eval', timeout, run_dir=done[-1]['output_dir'], out=out/'eval', items=eval_items, tiny=tiny)
        save()
    print(table(res), flush=True)
    (out/'gpu_check.md').write_text(table(res) + '\n')
    return res

def main(argv:list|None=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', type=Path, default=Path('gpu_check'), help='folder for gpu_check.json, gpu_check.md and the runs')
    p.add_argument('--kind', default='llada', choices=sorted(RECIPES), help='the model family (its GSM8K recipe)')
    p.add_argument('--precisions', nargs='+', default=['nf4', 'bf16'], choices=['nf4', 'bf16'], help='base weights of the runs')
    p.add_argument('--caches', nargs='+', default=['none', 'prefix'], choices=['none', 'prefix'], help='--cache of the runs')
    p.add_argument('--quick', action='store_true', help='bf16 with --cache none only (a first call of a few minutes)')
    p.add_argument('--steps', type=int, default=2, help='optimizer steps per run (one rollout batch each)')
    p.add_argument('--eval_items', type=int, default=2, help='items per paper task in the evaluation (0: none)')
    p.add_argument('--no_eval', action='store_true', help='no evaluation')
    p.add_argument('--tiny', action='store_true', help='tiny shapes on the CPU: that the script runs, not its speed')
    p.add_argument('--checkpoint', type=Path, default=None, help='where the built model goes and is reused from '
                   '(default: $TMPDIR/mapg-gpu-check/KIND)')
    p.add_argument('--timeout', type=float, default=240., help='seconds per stage (the build gets twice as long)')
    p.add_argument('--_stage', help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._stage:                                       # one stage, in a child process of the check
        s = json.loads(a._stage)
        print('GPU_CHECK_ROW ' + json.dumps(STAGES[s['stage']](**s['kw'])), flush=True)
        return
    return check(a.out, a.kind, ['bf16'] if a.quick else a.precisions, ['none'] if a.quick else a.caches, a.steps,
                 0 if a.no_eval else a.eval_items, a.tiny, a.checkpoint, timeout=a.timeout)

if __name__ == '__main__': main()
