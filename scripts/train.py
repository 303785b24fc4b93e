"""Mask-aware policy-gradient training of a masked diffusion LM.

    accelerate launch scripts/train.py                                  # the toy default: CPU, minutes
    accelerate launch --config_file configs/accelerate/8gpu_zero2.yaml scripts/train.py --config configs/llada_gsm8k.yaml
    python scripts/train.py --help                                      # every field

Fields come from --config (YAML), then from the command line (`--field value`). Without --config the toy default is
used: the order task (configs/toy_order.yaml), where the decoding order provably matters. A toy run (the default, or
--config configs/toy_sudoku.yaml) is scored before and after RL greedily (the paper's protocol), by sampling with the
rollout settings (the policy RL trains) and by the low-temperature decoder (argmax tokens, Plackett-Luce positions),
the order task with the share of completions decoded in the good order; its printout ends with both arms of its saved
experiment (mask-aware and token-only RL over several seeds, `scripts/experiment.py`). A bad field or file prints
`error: FIELD: reason` and exits 2 (`--debug`: the traceback); SIGTERM or Ctrl-C saves a checkpoint at the end of the
current step and prints the command that resumes the run."""
import json, os, sys
from pathlib import Path
from mapg.faults import cli_main
from mapg.config import parse_cfg
from mapg.train import train
from mapg.report import DECODERS

ROOT = Path(__file__).resolve().parent.parent
ARMS = (('mask_aware_1', 'mask-aware (pos_weight 1)'), ('token_only', 'token-only (pos_weight 0)'))
SUMMARY = ROOT/'nbs'/'explanations'/'results'/'summary.json'

def both_arms(path:Path=SUMMARY, suite:str='sudoku', how:str='greedy', keys:tuple=('accuracy', 'solved'))->str:
    "Both arms of a suite of the saved toy experiment (the config's settings): `how` ('greedy' or 'sampled') figures after RL, mean ± std over seeds"
    if not path.exists(): return ''
    s = json.loads(path.read_text()).get(suite, {})
    b, arms = s.get(f'{how}_before') or {}, s.get('arms', {})
    lines = [f"saved experiment, {path.relative_to(ROOT)} ({how}, held-out; before RL: "
             + ', '.join(f"{k} {b.get(k, float('nan')):.3f}" for k in keys) + "):"]
    for k, name in ARMS:
        a = arms.get(k, {})
        if not a: continue
        ms = [a[f'{how}_after.{m}'] for m in keys]
        lines.append(f"  {name:27s} " + ', '.join(f"{m} {v['mean']:.3f} ± {v['std']:.3f}" for m, v in zip(keys, ms))
                     + f" (seeds {', '.join(map(str, ms[0]['seeds']))})")
    return '\n'.join(lines) if len(lines) > 1 else ''

ORDER_KEYS = ('accuracy', 'solved', 'good_order')
# each toy's saved experiment suite (the config's settings) and the figures its printout ends with
SAVED = dict(toy_order=('default', (('greedy', ('accuracy', 'solved')), ('sampled', ORDER_KEYS))),
             toy_sudoku=('sudoku', (('greedy', ('accuracy', 'solved')),)))

def print_decoded(f:dict, n:int, keys:tuple=ORDER_KEYS):
    "A toy's figures under each decoder of `DECODERS` that `train` scored, before and after RL"
    for name, _, what in DECODERS:
        if not f.get(f'{name}_after'): continue
        print(f"{what}, {n} held-out prompts:")
        for when, pad in (('before', ''), ('after', ' ')):
            got = f[f'{name}_{when}']
            print(f"  {when} RL:{pad} " + ', '.join(f"{m.replace('_', ' ')} {got[m]:.3f}" for m in keys))

def end_process_group():
    "Tear down this process's process group, if a launcher started one: left to the interpreter's exit, gloo's threads can abort it"
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized(): dist.destroy_process_group()

def main(args:list):
    default = not any(a.split('=')[0] == '--config' for a in args) and not {'-h', '--help'} & set(args)
    if default: args = ['--config', str(ROOT/'configs'/'toy_order.yaml'), *args]
    run, roll, upd = parse_cfg(args)
    try: s = train(run, roll, upd)
    finally: end_process_group()
    main_process = os.environ.get('RANK', '0') == '0'
    if s.get('sampled_after') and main_process:      # a toy: train() scored the sampled policy and the decoder too
        print_decoded(s, run.eval_size, ORDER_KEYS if run.task == 'order' else ('accuracy', 'solved'))
    if s.get('after') and main_process and run.dataset in SAVED:
        suite, figures = SAVED[run.dataset]
        for how, keys in figures:
            if txt := both_arms(suite=suite, how=how, keys=keys): print(txt)

if __name__ == '__main__': cli_main(main)
