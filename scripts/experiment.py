"""Does learning the order help? The toy-scale experiment behind nbs/explanations/order_experiment.ipynb.

    python scripts/experiment.py --jobs 2            # every suite, arm and seed; skips finished runs
    python scripts/experiment.py --suites sudoku --seeds 0 1 --jobs 2
    python scripts/experiment.py --list              # the runs and whether their results exist
    python scripts/experiment.py --summarise         # only rebuild the tables (summary.json) from the saved runs

Every run is `mapg.train.train` on a toy config with a few fields overridden, paired by RL seed across arms: the
`default` suite is the toy default, the order task (configs/toy_order.yaml as it is, from data/toy/toy_order_pretrained):
a `default` run is exactly `accelerate launch scripts/train.py --seed S` (--pos_weight 0 for token-only), whose
printout ends with this suite's figures. The `order` suites are the same task at 64 completions per step, the `sudoku`
suites the Sudoku toy (configs/toy_sudoku.yaml, from data/toy/toy_sudoku_pretrained). After RL the runner scores the
policy on the held-out prompts greedily (`mapg.scoring.greedy_eval`, the paper's protocol), by sampling with the
rollout settings (`mapg.scoring.sampled_eval`: the policy RL optimises) and by the low-temperature decoder at each
tau_pos of `PL_TAUS` (`mapg.scoring.pl_decoder`); order runs also keep the first step's position scores. Each run's
figures, training curves and settings go to RESULTS/<suite>/<arm>_s<seed>.json; a run whose file exists is skipped, so
the command resumes where it stopped. Every run is one CPU thread (runs/experiment/ keeps the run directories).
"""
import argparse, json, math, os, shutil, sys, time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = dict(sudoku=ROOT/'configs'/'toy_sudoku.yaml', order=ROOT/'configs'/'toy_order.yaml')
PRETRAINED = dict(sudoku=ROOT/'data'/'toy'/'toy_sudoku_pretrained', order=ROOT/'data'/'toy'/'toy_order_pretrained')
RESULTS = ROOT/'nbs'/'explanations'/'results'

NOCLIP = '1e9'                                        # max_grad_norm that never clips
SUITES = {
    # the toy default: the order task (configs/toy_order.yaml as it is), 20 steps of 256 completions
    'default': dict(task='order', base=[], arms={
        'token_only':   ['--pos_weight', '0'],
        'mask_aware_1': ['--pos_weight', '1'],
    }),
    # the Sudoku toy (configs/toy_sudoku.yaml as it is), T=8 steps for 16 cells (two cells per step)
    'sudoku': dict(task='sudoku', base=[], arms={
        'token_only':          ['--pos_weight', '0'],
        'mask_aware_1':        ['--pos_weight', '1'],
        'mask_aware_1_noclip': ['--pos_weight', '1', '--max_grad_norm', NOCLIP],
        'token_only_lr2e-5':   ['--pos_weight', '0', '--learning_rate', '2e-5'],     # the token step mask_aware_1 leaves
        'mask_aware_0.3':      ['--pos_weight', '0.3'],
        'token_only_noclip':   ['--pos_weight', '0', '--max_grad_norm', NOCLIP],
    }),
    # four cells per step: where the paper says the order should matter more
    'sudoku_4cells': dict(task='sudoku', base=['--steps', '4', '--n_segments', '4', '--segments_per_update', '2'], arms={
        'token_only':   ['--pos_weight', '0'],
        'mask_aware_1': ['--pos_weight', '1'],
    }),
    # the synthetic task where one order is provably better, at 64 completions per step (the toy default's size
    # until 2026-11-28)
    'order': dict(task='order', base=['--per_device_batch', '64'], arms={
        'token_only':   ['--pos_weight', '0'],
        'mask_aware_1': ['--pos_weight', '1'],
    }),
}
# the toy default with three times the RL steps
SUITES['sudoku_long'] = dict(task='sudoku', base=['--max_steps', '60'], arms={k: SUITES['sudoku']['arms'][k] for k in ('token_only', 'mask_aware_1')})
# the order task with three times the RL steps: does token-only catch up?
SUITES['order_long'] = dict(task='order', base=SUITES['order']['base'] + ['--max_steps', '60'], arms=dict(SUITES['order']['arms']))
CURVE_KEYS = ('reward', 'accuracy', 'solved', 'pos_entropy', 'tok_entropy', 'ratio_token', 'ratio_pos', 'clip_frac_token',
              'clip_frac_pos', 'loss_token', 'loss_pos', 'grad_norm')

# ---------------------------------------------------------------------------------------------------------------
def run_args(suite:str, arm:str, seed:int, a)->list:
    s = SUITES[suite]
    task = SUITES[suite]['task']
    return ['--config', str(CONFIG[task]), '--model', str(PRETRAINED[task]), '--model_kind', 'toy', '--seed', str(seed),
            '--output_dir', str(Path(a.work)/suite/f"{arm}_s{seed}"), '--report', 'false', '--progress', 'false',
            '--save_steps', '0', '--eval_size', '0', *(['--max_steps', str(a.max_steps)] if a.max_steps else []),
            *s['base'], *s['arms'][arm]]

def one_run(suite:str, arm:str, seed:int, a)->dict:
    import torch
    torch.set_num_threads(1)
    import mapg
    from mapg.config import parse_cfg
    from mapg.train import train
    from mapg.scoring import eval_records, greedy_eval
    out = Path(a.work)/suite/f"{arm}_s{seed}"
    shutil.rmtree(out, ignore_errors=True)                      # an unfinished run starts again
    args = run_args(suite, arm, seed, a)
    run, roll, upd = parse_cfg(args)
    t0 = time.time()
    s = train(run, roll, upd)
    wall = time.time() - t0
    m = s.pop('model')
    held = eval_records(replace(run, eval_size=a.eval_size), m.tokenizer)   # the held-out set, scored here once after RL
    greedy = greedy_eval(m, held, run.task, roll)
    after_s = sample_metrics(m, held, roll, suite)
    after_pl = decoder_metrics(m, held, roll, suite)
    scores = first_step_scores(m, held, roll) if SUITES[suite]['task'] == 'order' else None
    rows = [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines() if l.strip()]
    curves = {k: [round(r_[k], 5) for r_ in rows] for k in CURVE_KEYS if k in rows[0]}
    res = dict(suite=suite, arm=arm, seed=seed, args=args[args.index('--seed'):], wall_s=round(wall, 1),
               eval_size=len(held), greedy_after=greedy, sampled_after=after_s, pl_after=after_pl, first_step=scores, curves=curves,
               mapg=str(Path(mapg.__file__).parent))
    return res

def sample_metrics(m, held, roll, suite:str)->dict:
    "Sampled held-out metrics (`mapg.scoring.sampled_eval`); for the order task also the share decoded in the good order"
    from mapg.scoring import sampled_eval
    return {k: round(v, 5) for k, v in sampled_eval(m, held, SUITES[suite]['task'], roll).items()}

# the low-temperature decoder's sweep
PL_TAUS = (0.03, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5)

def decoder_metrics(m, held, roll, suite:str)->dict:
    "{tau_pos: held-out metrics of the low-temperature decoder (`mapg.scoring.pl_decoder`)} for each of `PL_TAUS`"
    from mapg.scoring import sampled_eval, pl_decoder
    task = SUITES[suite]['task']
    return {str(t): {k: round(v, 5) for k, v in sampled_eval(m, held, task, roll, settings=pl_decoder(roll, t)).items()}
            for t in PL_TAUS}

def first_step_scores(m, held, roll)->dict:
    """The order task's first step on the blank canvas (the run's score, `mapg.policy.unmask_scores`): mean over the
    prompts of the two copies' scores (the higher and the lower) and of the best free cell's, and the share of prompts
    whose best free cell outscores the lower copy (where greedy would keep a free cell first)"""
    import torch
    from mapg.scoring import prompt_batch
    from mapg.policy import unmask_scores
    ids, attn = prompt_batch(held, m.tokenizer, max_len=roll.max_prompt_len)
    L, B = roll.gen_length, len(held)
    canvas = torch.cat([ids, torch.full((B, L), m.tok.mask_id, dtype=ids.dtype)], 1)
    with torch.no_grad():
        v = unmask_scores(m.logits(canvas, torch.cat([attn, attn.new_ones(B, L)], 1))[:, -L:], roll.score)
    copies = v[:, :2].sort(1, descending=True).values
    free = v[:, 2:].amax(1)
    return dict(copy_high=copies[:, 0].mean().item(), copy_low=copies[:, 1].mean().item(), best_free=free.mean().item(),
                free_above_copy=(free > copies[:, 1]).float().mean().item())

def before_metrics(suite:str, a)->dict:
    "Sampled held-out metrics of the pretrained start (the same for every arm and seed of a suite)"
    import torch
    torch.set_num_threads(1)
    from mapg.config import parse_cfg
    from mapg.checkpoints import load_policy
    from mapg.scoring import eval_records, greedy_eval
    run, roll, upd = parse_cfg(run_args(suite, next(iter(SUITES[suite]['arms'])), 0, a))
    m = load_policy(run, roll, 'cpu')
    held = eval_records(replace(run, eval_size=a.eval_size), m.tokenizer)
    return dict(suite=suite, eval_size=len(held), greedy_before=greedy_eval(m, held, run.task, roll),
                sampled_before=sample_metrics(m, held, roll, suite), pl_before=decoder_metrics(m, held, roll, suite),
                first_step=first_step_scores(m, held, roll) if SUITES[suite]['task'] == 'order' else None)

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
    for sd in sorted(p for p in results.iterdir() if p.is_dir() and p.name in SUITES):
        runs = [json.loads(p.read_text()) for p in sorted(sd.glob('*_s*.json'))]
        if not runs: continue
        before = json.loads((sd/'before.json').read_text()) if (sd/'before.json').exists() else {}
        arms = {}
        for r in runs:
            for where in ('greedy_after', 'sampled_after'):
                for k, v in (r.get(where) or {}).items():
                    arms.setdefault(r['arm'], {}).setdefault(f"{where}.{k}", {})[r['seed']] = v
            for tau, mets in (r.get('pl_after') or {}).items():
                for k, v in mets.items(): arms.setdefault(r['arm'], {}).setdefault(f"pl_after@{tau}.{k}", {})[r['seed']] = v
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
        out[sd.name] = dict(greedy_before=before.get('greedy_before'), sampled_before=before.get('sampled_before'),
                            pl_before=before.get('pl_before'), arms=table)
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
    p.add_argument('--work', default=str(ROOT/'runs'/'experiment'), help="run directories")
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
