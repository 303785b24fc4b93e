"""The prefix cache's price on the two toy tasks: sampled accuracy (the rollout settings, the policy RL trains)
against forward tokens and CPU seconds, uncached and with `--cache prefix` refreshed every r steps of a block (r = 0:
once a block), at two block lengths. Before RL: the pretrained toys of `configs/toy_order.yaml` and
`configs/toy_sudoku.yaml` on their held-out prompts, 3 sampling seeds. After RL (`--after`): each setting trained
with the toy's config from that pretrained start with RL seeds 0, 1 and 2, then sampled on the same prompts.

    python scripts/cache_refresh.py                # before RL: prints the table, writes nbs/explanations/results/cache_refresh.json
    python scripts/cache_refresh.py --after --jobs 2   # and after RL (48 RL runs, one CPU thread each; resumable)
"""
import argparse, json, os, shutil, statistics, time
from pathlib import Path
import torch
from mapg.config import parse_cfg
from mapg.checkpoints import load_policy
from mapg.scoring import eval_records, sampled_eval

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT/'nbs'/'explanations'/'results'/'cache_refresh.json'
TASKS = dict(order=('toy_order.yaml', (8, 4)), sudoku=('toy_sudoku.yaml', (16, 8)))
SEEDS = (10_007, 10_008, 10_009)
RL_SEEDS = (0, 1, 2)
# RL runs at 64 completions per step (the experiment's sudoku and order suites; the order default takes 256)
RL_ARGS = dict(sudoku=['--per_device_batch', '64'], order=['--per_device_batch', '64'])
SETTINGS = (('none', 0), ('prefix', 0), ('prefix', 4), ('prefix', 2), ('prefix', 1))
RUNS = ROOT/'nbs'/'explanations'/'results'/'cache_refresh_rl'

class Count:
    "Tokens through the model's forward passes (rows x positions of every call of its `forward`)"
    def __init__(self, m): self.m, self.n, self.f = m, 0, m.model.forward
    def __enter__(self):
        def fwd(*a, **k):
            x = k.get('input_ids', a[0] if a else None)
            self.n += x.numel(); return self.f(*a, **k)
        self.m.model.forward = fwd; return self
    def __exit__(self, *e): del self.m.model.forward

def cell(task:str, block:int, cache:str, refresh:int)->dict:
    "Accuracy (mean and per seed), forward tokens per completion and CPU seconds of one setting"
    cfg, _ = TASKS[task]
    run, roll, _ = parse_cfg(['--config', str(ROOT/'configs'/cfg), '--block_length', str(block), '--cache', cache,
                              '--cache_refresh', str(refresh)])
    m = load_policy(run, roll, 'cpu')
    recs = eval_records(run, m.tokenizer)
    acc, solved, toks, cpu = [], [], 0, 0.
    for s in SEEDS:
        t0 = time.process_time()
        with Count(m) as c: f = sampled_eval(m, recs, run.task, roll, seed=s)
        cpu += time.process_time() - t0; toks += c.n
        acc.append(f['accuracy']); solved.append(f['solved'])
    n = len(recs) * len(SEEDS)
    return dict(task=task, block=block, cache=cache, refresh=refresh, accuracy=statistics.mean(acc), per_seed=acc,
                solved=statistics.mean(solved),
                tokens_per_completion=toks / n, cpu_ms_per_completion=1000 * cpu / n)

def _args(task:str, block:int, cache:str, refresh:int)->list:
    return ['--config', str(ROOT/'configs'/TASKS[task][0]), '--block_length', str(block), '--cache', cache,
            '--cache_refresh', str(refresh)]

def after_rl(job:tuple)->dict:
    "One RL run of a setting (`job` = task, block, cache, refresh, RL seed), then sampled on the held-out prompts"
    from mapg.train import train
    task, block, cache, refresh, seed = job
    path = RUNS/f"{task}_b{block}_{cache}_r{refresh}_s{seed}.json"
    if path.exists(): return json.loads(path.read_text())
    torch.set_num_threads(1)
    work = ROOT/'runs'/'cache_refresh'/path.stem
    shutil.rmtree(work, ignore_errors=True)
    run, roll, upd = parse_cfg(_args(task, block, cache, refresh) + RL_ARGS[task] + [
        '--seed', str(seed), '--output_dir', str(work), '--eval_size', '0', '--save_steps', '0', '--report', 'false',
        '--progress', 'false'])
    t0 = time.process_time()
    m = train(run, roll, upd)['model']
    cpu = time.process_time() - t0
    held = eval_records(parse_cfg(_args(task, block, cache, refresh))[0], m.tokenizer)
    f = sampled_eval(m, held, run.task, roll, seed=SEEDS[0])
    res = dict(task=task, block=block, cache=cache, refresh=refresh, seed=seed, accuracy=f['accuracy'],
               solved=f['solved'], train_cpu_s=cpu)
    path.parent.mkdir(parents=True, exist_ok=True); path.write_text(json.dumps(res))
    return res

def add_after(rows:list, jobs:int=1):
    "Each row of `rows` with its mean sampled accuracy and solved share after RL over `RL_SEEDS` (and per seed)"
    def same(r):
        "The row's setting, a refresh at or past the block's last step being the block's one recording"
        per_block = parse_cfg(_args(r['task'], r['block'], r['cache'], r['refresh']))[1].settings().steps_per_block
        return r['task'], r['block'], r['cache'], 0 if r['refresh'] >= per_block else r['refresh']
    todo = sorted({(*same(r), s) for r in rows for s in RL_SEEDS})
    if jobs > 1:
        import multiprocessing as mp
        with mp.get_context('spawn').Pool(jobs, maxtasksperchild=1) as pool: got = pool.map(after_rl, todo)
    else: got = [after_rl(j) for j in todo]
    for r in rows:
        mine = [g for g in got if (g['task'], g['block'], g['cache'], g['refresh']) == same(r)]
        r.update(accuracy_after=statistics.mean(g['accuracy'] for g in mine), per_seed_after=[g['accuracy'] for g in mine],
                 solved_after=statistics.mean(g['solved'] for g in mine),
                 train_cpu_s=statistics.mean(g['train_cpu_s'] for g in mine))
        print(f"{r['task']:6s} block {r['block']:2d} {r['cache']:6s} r {r['refresh']}: after RL accuracy "
              f"{r['accuracy_after']:.3f}, solved {r['solved_after']:.3f} "
              f"({', '.join(f'{a:.3f}' for a in r['per_seed_after'])}), {r['train_cpu_s']:.0f} s CPU to train", flush=True)

def main(out:Path=OUT, after:bool=False, jobs:int=1):
    torch.set_num_threads(1)
    rows = []
    for task, (_, blocks) in TASKS.items():
        for block in blocks:
            for cache, refresh in SETTINGS:
                r = cell(task, block, cache, refresh)
                rows.append(r)
                print(f"{task:6s} block {block:2d} {cache:6s} r {refresh}: accuracy {r['accuracy']:.3f}, solved {r['solved']:.3f} "
                      f"({', '.join(f'{a:.3f}' for a in r['per_seed'])}), {r['tokens_per_completion']:.0f} tokens, "
                      f"{r['cpu_ms_per_completion']:.2f} ms CPU per completion", flush=True)
    if after: add_after(rows, jobs)
    out.write_text(json.dumps(rows, indent=1))
    return rows

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', type=Path, default=OUT, help='where the JSON goes')
    p.add_argument('--after', action='store_true', help='also train each setting (RL seeds 0-2) and sample it after RL')
    p.add_argument('--jobs', type=int, default=1, help='RL runs at once, one CPU thread each')
    a = p.parse_args()
    main(a.out, a.after, a.jobs)
