"""The prefix cache's price on the two toy tasks before RL: sampled accuracy (the rollout settings, the policy RL
trains) against forward tokens and CPU seconds, uncached and with `--cache prefix` refreshed every r steps of a block
(r = 0: once a block), at two block lengths. The pretrained toys of `configs/toy_order.yaml` and
`configs/toy_sudoku.yaml`, their held-out prompts, 3 sampling seeds.

    python scripts/cache_refresh.py                      # prints the table, writes nbs/explanations/results/cache_refresh.json
"""
import argparse, json, statistics, time
from pathlib import Path
import torch
from mapg.config import parse_cfg
from mapg.checkpoints import load_policy
from mapg.scoring import eval_records, sampled_eval

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT/'nbs'/'explanations'/'results'/'cache_refresh.json'
TASKS = dict(order=('toy_order.yaml', (8, 4)), sudoku=('toy_sudoku.yaml', (16, 8)))
SEEDS = (10_007, 10_008, 10_009)

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

def main(out:Path=OUT):
    torch.set_num_threads(1)
    rows = []
    for task, (_, blocks) in TASKS.items():
        for block in blocks:
            for cache, refresh in (('none', 0), ('prefix', 0), ('prefix', 4), ('prefix', 2), ('prefix', 1)):
                r = cell(task, block, cache, refresh)
                rows.append(r)
                print(f"{task:6s} block {block:2d} {cache:6s} r {refresh}: accuracy {r['accuracy']:.3f}, solved {r['solved']:.3f} "
                      f"({', '.join(f'{a:.3f}' for a in r['per_seed'])}), {r['tokens_per_completion']:.0f} tokens, "
                      f"{r['cpu_ms_per_completion']:.2f} ms CPU per completion", flush=True)
    out.write_text(json.dumps(rows, indent=1))
    return rows

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', type=Path, default=OUT, help='where the JSON goes')
    main(p.parse_args().out)
