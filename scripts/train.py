"""Mask-aware policy-gradient training of a masked diffusion LM.

    accelerate launch scripts/train.py                                  # the toy default: CPU, minutes
    accelerate launch --config_file configs/accelerate/8gpu_zero2.yaml scripts/train.py --config configs/llada_gsm8k.yaml
    python scripts/train.py --help                                      # every field

Fields come from --config (YAML), then from the command line (`--field value`). Without --config the toy default
(configs/toy_sudoku.yaml) is used, and its printout ends with both arms of the saved experiment (mask-aware and
token-only RL over six seeds, `scripts/experiment.py`). A bad field or file prints `error: FIELD: reason` and exits 2
(`--debug`: the traceback); SIGTERM or Ctrl-C saves a checkpoint at the end of the current step and prints the command
that resumes the run."""
import json, sys
from pathlib import Path
from mapg.faults import cli_main
from mapg.train import parse_cfg, train

ROOT = Path(__file__).resolve().parent.parent
ARMS = (('mask_aware_1', 'mask-aware (pos_weight 1)'), ('token_only', 'token-only (pos_weight 0)'))

def both_arms(path:Path=ROOT/'nbs'/'explanations'/'results'/'summary.json')->str:
    "Both arms of the saved toy experiment (suite 'sudoku', the default's settings): greedy figures after RL, mean ± std over seeds"
    if not path.exists(): return ''
    s = json.loads(path.read_text()).get('sudoku', {})
    b, arms = s.get('greedy_before', {}), s.get('arms', {})
    lines = [f"saved experiment, {path.relative_to(ROOT)} (greedy, held-out; before RL: accuracy {b.get('accuracy', float('nan')):.3f}, "
             f"solved {b.get('solved', float('nan')):.3f}):"]
    for k, name in ARMS:
        a = arms.get(k, {})
        if not a: continue
        acc, sol = a['greedy_after.accuracy'], a['greedy_after.solved']
        lines.append(f"  {name:27s} accuracy {acc['mean']:.3f} ± {acc['std']:.3f}, solved {sol['mean']:.3f} ± {sol['std']:.3f}"
                     f" (seeds {', '.join(map(str, acc['seeds']))})")
    return '\n'.join(lines) if len(lines) > 1 else ''

def main(args:list):
    default = not any(a.split('=')[0] == '--config' for a in args) and not {'-h', '--help'} & set(args)
    if default: args = ['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), *args]
    s = train(*parse_cfg(args))
    if default and s.get('after') and (txt := both_arms()): print(txt)

if __name__ == '__main__': cli_main(main)
