"""Does learning the order help? The toy-scale experiment behind nbs/explanations/order_experiment.ipynb.

    python scripts/experiment.py --jobs 2            # every suite, arm and seed (84 runs); skips finished runs
    python scripts/experiment.py --suites sudoku --seeds 0 1 --jobs 2
    python scripts/experiment.py --list              # the runs and whether their results exist
    python scripts/experiment.py --summarise         # only rebuild the tables (summary.json) from the saved runs

Every run is `mapg.train.train` on the toy default (configs/toy_sudoku.yaml) with a few fields overridden, from the
shipped pretrained toy (data/toy/toy_sudoku_pretrained), paired by RL seed across arms. After RL the runner scores
the policy on the held-out puzzles twice: greedily (`mapg.train.greedy_eval`, the figures the trainer prints: the paper's protocol) and by
sampling with the rollout settings (the policy RL optimises). Each run's figures, training curves and settings go to
RESULTS/<suite>/<arm>_s<seed>.json; a run whose file exists is skipped, so the command resumes where it stopped.
The `order` suites are a synthetic task on which the decoding order provably matters (see `order_records`).
Every run is one CPU thread; the 84 runs took about 80 minutes with two at a time on a 2-core CPU shared with
other jobs (runs/experiment/ keeps the run directories).
"""
import argparse, json, math, os, shutil, sys, time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT/'configs'/'toy_sudoku.yaml'
PRETRAINED = ROOT/'data'/'toy'/'toy_sudoku_pretrained'
RESULTS = ROOT/'nbs'/'explanations'/'results'

NOCLIP = '1e9'                                        # max_grad_norm that never clips
SUITES = {
    # the toy default: T=8 steps for 16 cells (two cells per step)
    'sudoku': dict(base=[], arms={
        'token_only':          ['--pos_weight', '0'],
        'mask_aware_1':        ['--pos_weight', '1'],
        'mask_aware_1_noclip': ['--pos_weight', '1', '--max_grad_norm', NOCLIP],
        'token_only_lr2e-5':   ['--pos_weight', '0', '--learning_rate', '2e-5'],     # the token step mask_aware_1 leaves
        'mask_aware_0.3':      ['--pos_weight', '0.3'],
        'token_only_noclip':   ['--pos_weight', '0', '--max_grad_norm', NOCLIP],
    }),
    # four cells per step: where the paper says the order should matter more
    'sudoku_4cells': dict(base=['--steps', '4', '--n_segments', '4', '--segments_per_update', '2'], arms={
        'token_only':   ['--pos_weight', '0'],
        'mask_aware_1': ['--pos_weight', '1'],
    }),
    # the synthetic task where one order is provably better (order_records)
    'order': dict(base=['--gen_length', '8', '--block_length', '8', '--steps', '4', '--n_segments', '4',
                        '--segments_per_update', '2', '--score', 'max_logprob', '--pos_temperature', '0.25'], arms={
        'token_only':   ['--pos_weight', '0'],
        'mask_aware_1': ['--pos_weight', '1'],
    }),
}
# the toy default with three times the RL steps
SUITES['sudoku_long'] = dict(base=['--max_steps', '60'], arms={k: SUITES['sudoku']['arms'][k] for k in ('token_only', 'mask_aware_1')})
# the order task with three times the RL steps: does token-only catch up?
SUITES['order_long'] = dict(base=SUITES['order']['base'] + ['--max_steps', '60'], arms=dict(SUITES['order']['arms']))
CURVE_KEYS = ('reward', 'accuracy', 'solved', 'pos_entropy', 'tok_entropy', 'ratio_token', 'ratio_pos', 'clip_frac_token',
              'clip_frac_pos', 'loss_token', 'loss_pos', 'grad_norm')

# ---------------------------------------------------------------------------------------------------------------
# The order task. The prompt is 7 random digits p1..p7. The completion is 8 characters:
#     a1 a2 h l1 l2 l3 l4 l5     with  a_i = p_i (copies),  h in 0..3,  l_i = (p_{i+2} + h) mod 10.
# Given the prompt, a1 and a2 are determined; h is free (4 values) and every l_i is determined once h, or any other
# l_j, is known. With two cells per step, a model that knows the data distribution exactly fills everything
# consistently if and only if the first free cell (h or an l) is decoded in a step of its own among the free cells,
# i.e. together with a copy: decode two free cells in the same step and they are independent draws that agree with
# probability 1/4. Confidence-first decoding keeps the two copies first (step 1) and then decodes two free cells
# together (step 2): it is the bad order. The good order (a copy with a free cell in step 1) is reachable by moving
# position scores alone; token-only RL can reach reward 1 only by collapsing h to one value per prompt.
# ---------------------------------------------------------------------------------------------------------------
ORDER_L, ORDER_H = 8, 4

def order_records(n:int, seed:int, tok, split:str='train')->list:
    "Records of the order task: `text` (chat prompt), `digits` (p1..p7)"
    import torch
    from mapg.data import chat_prompt
    g = torch.Generator().manual_seed(seed + (0 if split == 'train' else 10**6))
    ps = torch.randint(10, (n, 7), generator=g).tolist()
    return [dict(id=f"order/{split}/{i}", text=chat_prompt([dict(role='user', content=''.join(map(str, p)))], tok),
                 digits=''.join(map(str, p)), prefill='', task='order') for i, p in enumerate(ps)]

def order_solution(digits:str, h:int)->str:
    p = [int(c) for c in digits]
    return f"{p[0]}{p[1]}{h}" + ''.join(str((p[i + 2] + h) % 10) for i in range(5))

def order_score(text:str, digits:str)->dict:
    "cells: share of the 8 cells consistent with the completion's own h (copies exact); solved: all 8"
    c = text[:ORDER_L]
    if len(c) < ORDER_L or c[2] not in '0123': return dict(cells=0., solved=0.)
    want = order_solution(digits, int(c[2]))
    ok = sum(a == b for a, b in zip(c, want))
    return dict(cells=ok / ORDER_L, solved=float(ok == ORDER_L))

def order_score_completions(task, texts, records, workers=1):
    "The trainer's `score_completions` for the order task: (rewards, parts, metrics)"
    import torch
    s = [order_score(t, r['digits']) for t, r in zip(texts, records)]
    cells = torch.tensor([x['cells'] for x in s], dtype=torch.float32)
    solved = torch.tensor([x['solved'] for x in s], dtype=torch.float32)
    return cells, dict(total=cells), dict(accuracy=cells, solved=solved)

def order_pretrained(work:Path, steps:int=800, progress:bool=False)->Path:
    "The toy model pretrained (masked diffusion) on the order task's data, built once under `work`"
    import torch
    from mapg.core import toy_model, toy_tokenizer, save_toy
    from mapg.train import pretrain_mdlm
    d = work/f'order_pretrained_{steps}'
    if (d/'config.json').exists(): return d
    tok = toy_tokenizer()
    g = torch.Generator().manual_seed(7)
    recs = order_records(8192, 12345, tok)
    hs = torch.randint(ORDER_H, (len(recs),), generator=g).tolist()
    seqs = [(tok(r['text'], add_special_tokens=False)['input_ids'], tok(order_solution(r['digits'], h), add_special_tokens=False)['input_ids'])
            for r, h in zip(recs, hs)]
    model = toy_model(0, hidden=128, layers=3, heads=4, max_len=128)
    pretrain_mdlm(model, seqs, tok.mask_token_id, steps, 1e-3, 64, seed=0, pad_id=tok.pad_token_id, progress=progress)
    tmp = d.with_name(d.name + '.tmp'); shutil.rmtree(tmp, ignore_errors=True)
    save_toy(tmp, model=model, tok=tok); tmp.rename(d)
    return d

def patch_order_task():
    "Point the trainer's data and scoring at the order task (the trainer looks these names up when it runs)"
    import mapg.train as T
    T.train_records = lambda run, tok: order_records(4096, run.seed, tok, 'train')
    T.eval_records = lambda run, tok: order_records(run.eval_size, 0, tok, 'eval') if run.eval_size else []
    T.score_completions = order_score_completions

# ---------------------------------------------------------------------------------------------------------------
def run_args(suite:str, arm:str, seed:int, a)->list:
    s = SUITES[suite]
    model = str(order_pretrained(Path(a.work))) if suite.startswith('order') else str(PRETRAINED)
    return ['--config', str(CONFIG), '--model', model, '--model_kind', 'toy', '--seed', str(seed),
            '--output_dir', str(Path(a.work)/suite/f"{arm}_s{seed}"), '--report', 'false', '--progress', 'false',
            '--save_steps', '0', '--eval_size', '0', *(['--max_steps', str(a.max_steps)] if a.max_steps else []),
            *s['base'], *s['arms'][arm]]

def one_run(suite:str, arm:str, seed:int, a)->dict:
    import torch
    torch.set_num_threads(1)
    import mapg, mapg.train as T
    if suite.startswith('order'): patch_order_task()
    out = Path(a.work)/suite/f"{arm}_s{seed}"
    shutil.rmtree(out, ignore_errors=True)                      # an unfinished run starts again
    args = run_args(suite, arm, seed, a)
    run, roll, upd = T.parse_cfg(args)
    t0 = time.time()
    s = T.train(run, roll, upd)
    wall = time.time() - t0
    m = s.pop('model')
    held = T.eval_records(replace(run, eval_size=a.eval_size), m.tokenizer)   # the held-out set, scored here once after RL
    greedy = T.greedy_eval(m, held, run.task, roll)
    after_s = sample_metrics(m, held, roll, suite)
    rows = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines() if l.strip()]
    curves = {k: [round(r_[k], 5) for r_ in rows] for k in CURVE_KEYS if k in rows[0]}
    res = dict(suite=suite, arm=arm, seed=seed, args=args[args.index('--seed'):], wall_s=round(wall, 1),
               eval_size=len(held), greedy_after=greedy, sampled_after=after_s, curves=curves,
               mapg=str(Path(mapg.__file__).parent))
    return res

def sample_metrics(m, held, roll, suite:str)->dict:
    "Sampled held-out metrics; for the order task also how often step 1 keeps a free cell, and the two free cells' agreement"
    import torch
    from mapg.core import make_gen
    from mapg.sampler import generate
    from mapg.likelihood import counted_mask
    import mapg.train as T
    g, sums, n = make_gen(10_007, m.device), {}, 0
    for a in range(0, len(held), 64):
        recs = held[a:a + 64]
        ids, attn = T.prompt_batch(recs, m.tokenizer)
        r = generate(m, ids.to(m.device), attn.to(m.device), generator=g, **asdict(roll.settings()))
        rew, _, mets = T.score_completions('sudoku', T.completions_text(m, r)[0], recs, 1)
        c = counted_mask(r).float()
        vals = {'reward': rew, **mets, 'pos_entropy': -(r.logp_pos * c).sum(1) / c.sum(1).clamp(min=1),
                'tok_entropy': -(r.logp_token * c).sum(1) / c.sum(1).clamp(min=1)}
        if suite.startswith('order'):                          # step 1 keeps exactly one of the two copies: a free cell with it
            copies_first = (r.unmask_step[:, :2] == 1).sum(1)
            vals['good_order'] = (copies_first == 1).float()
        for k, v in vals.items(): sums[k] = sums.get(k, 0.) + float(v.float().sum())
        n += len(recs)
    return {k: round(v / n, 5) for k, v in sums.items()}

def before_metrics(suite:str, a)->dict:
    "Sampled held-out metrics of the pretrained start (the same for every arm and seed of a suite)"
    import torch
    torch.set_num_threads(1)
    import mapg.train as T
    if suite.startswith('order'): patch_order_task()
    run, roll, upd = T.parse_cfg(run_args(suite, next(iter(SUITES[suite]['arms'])), 0, a))
    m = T.load_policy(run, roll, 'cpu')
    held = T.eval_records(replace(run, eval_size=a.eval_size), m.tokenizer)
    return dict(suite=suite, eval_size=len(held), greedy_before=T.greedy_eval(m, held, run.task, roll),
                sampled_before=sample_metrics(m, held, roll, suite))

def _write(path:Path, obj, indent=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp'); tmp.write_text(json.dumps(obj, indent=indent)); tmp.replace(path)

def _job(job):
    kind, suite, arm, seed, a = job
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    path = Path(a.results)/suite/(f"{arm}_s{seed}.json" if kind == 'run' else 'before.json')
    t = time.time()
    res = one_run(suite, arm, seed, a) if kind == 'run' else before_metrics(suite, a)
    _write(path, res)
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({time.time() - t:.0f} s)"

# ---------------------------------------------------------------------------------------------------------------
def paired(xs:dict, ys:dict)->dict:
    "Paired difference y - x over the seeds both have: mean, std, n, t, 95% interval and whether it excludes 0"
    from scipy import stats
    seeds = sorted(set(xs) & set(ys))
    d = [ys[s] - xs[s] for s in seeds]
    n = len(d)
    if n < 2: return dict(n=n, mean=d[0] if d else None)
    mu = sum(d) / n; sd = math.sqrt(sum((x - mu) ** 2 for x in d) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return dict(n=n, mean=mu, std=sd, lo=mu - half, hi=mu + half, positive=sum(x > 0 for x in d),
                exceeds_noise=bool(mu - half > 0 or mu + half < 0))

def summarise(results:Path, write:bool=True)->dict:
    "Per suite and arm, mean and std over seeds of every final metric, and paired differences with token_only (written to summary.json)"
    out = {}
    for sd in sorted(p for p in results.iterdir() if p.is_dir()):
        runs = [json.loads(p.read_text()) for p in sorted(sd.glob('*_s*.json'))]
        if not runs: continue
        before = json.loads((sd/'before.json').read_text()) if (sd/'before.json').exists() else {}
        arms = {}
        for r in runs:
            for where in ('greedy_after', 'sampled_after'):
                for k, v in (r.get(where) or {}).items():
                    arms.setdefault(r['arm'], {}).setdefault(f"{where}.{k}", {})[r['seed']] = v
            gn = r['curves'].get('grad_norm', [])
            if gn: arms.setdefault(r['arm'], {}).setdefault('grad_norm_mean', {})[r['seed']] = sum(gn) / len(gn)
            arms.setdefault(r['arm'], {}).setdefault('wall_s', {})[r['seed']] = r['wall_s']
        table = {}
        for arm, mets in arms.items():
            row = {}
            for k, by_seed in mets.items():
                v = list(by_seed.values()); mu = sum(v) / len(v)
                row[k] = dict(mean=mu, std=math.sqrt(sum((x - mu) ** 2 for x in v) / max(1, len(v) - 1)), n=len(v),
                              seeds=sorted(by_seed))
                if arm != 'token_only' and 'token_only' in arms and k in arms['token_only']:
                    row[k]['vs_token_only'] = paired(arms['token_only'][k], by_seed)
            table[arm] = row
        out[sd.name] = dict(greedy_before=before.get('greedy_before'), sampled_before=before.get('sampled_before'), arms=table)
    if write: _write(results/'summary.json', out, indent=1)
    return out

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--suites', nargs='+', default=list(SUITES), choices=list(SUITES), help="suites to run (default: all)")
    p.add_argument('--arms', nargs='+', default=None, help="only these arms (default: every arm of each suite)")
    p.add_argument('--seeds', nargs='+', type=int, default=list(range(6)), help="RL seeds, paired across arms (default: 0-5)")
    p.add_argument('--max_steps', type=int, default=None, help="RL optimizer steps per run (default: the toy default's)")
    p.add_argument('--eval_size', type=int, default=256, help="held-out puzzles scored greedily and by sampling (default: 256)")
    p.add_argument('--jobs', type=int, default=1, help="runs at once, one CPU thread each (default: 1)")
    p.add_argument('--results', default=str(RESULTS), help="where each run's JSON goes (default: %(default)s)")
    p.add_argument('--work', default=str(ROOT/'runs'/'experiment'), help="run directories and the order task's model")
    p.add_argument('--list', action='store_true', help="list the runs and whether their results exist, then stop")
    p.add_argument('--summarise', action='store_true', help="only rebuild summary.json from the saved runs")
    a = p.parse_args(argv)
    res = Path(a.results)
    if a.summarise: summarise(res); print(f"wrote {res/'summary.json'}"); return
    jobs = []
    for suite in a.suites:
        if not (res/suite/'before.json').exists(): jobs.append(('before', suite, None, 0, a))
        for seed in a.seeds:                                   # seed-major: a partial sweep is still paired
            for arm in SUITES[suite]['arms']:
                if a.arms and arm not in a.arms: continue
                done = (res/suite/f"{arm}_s{seed}.json").exists()
                if a.list: print(f"{suite:14s} {arm:22s} seed {seed}: {'done' if done else 'to run'}")
                elif not done: jobs.append(('run', suite, arm, seed, a))
    if a.list: return
    if any(x.startswith('order') for x in a.suites): order_pretrained(Path(a.work))
    print(f"{len(jobs)} job(s) to run")
    if a.jobs > 1:
        import multiprocessing as mp
        with mp.get_context('spawn').Pool(a.jobs, maxtasksperchild=1) as pool:
            for msg in pool.imap_unordered(_job, jobs): print('done', msg, flush=True)
    else:
        for j in jobs: print('done', _job(j), flush=True)
    summarise(res)
    print(f"wrote {res/'summary.json'}")

if __name__ == '__main__': main()
