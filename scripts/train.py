"""Mask-aware policy-gradient training of a masked diffusion LM.

    accelerate launch scripts/train.py                                  # the toy default: CPU, minutes
    accelerate launch --config_file configs/accelerate/8gpu_zero2.yaml scripts/train.py --config configs/llada_gsm8k.yaml
    python scripts/train.py --help                                      # every field

Fields come from --config (YAML), then from the command line (`--field value`). Without --config the toy default
(configs/toy_sudoku.yaml) is used."""
import sys
from pathlib import Path
from mapg.train import parse_cfg, train

if __name__ == '__main__':
    args = sys.argv[1:]
    if not any(a.split('=')[0] == '--config' for a in args) and not {'-h', '--help'} & set(args):
        args = ['--config', str(Path(__file__).resolve().parent.parent/'configs'/'toy_sudoku.yaml'), *args]
    train(*parse_cfg(args))
