"""Mask-aware policy-gradient training of a masked diffusion LM.

    accelerate launch scripts/train.py                                  # the toy default: CPU, minutes
    accelerate launch --config_file configs/accelerate/8gpu_zero2.yaml scripts/train.py --config configs/llada_gsm8k.yaml
    python scripts/train.py --help                                      # every field

Fields come from --config (YAML), then from the command line (`--field value`). Without --config the toy default
(configs/toy_sudoku.yaml) is used. A bad field or file prints `error: FIELD: reason` and exits 2 (`--debug`: the traceback);
SIGTERM or Ctrl-C saves a checkpoint at the end of the current step and prints the command that resumes the run."""
import sys
from pathlib import Path
from mapg.faults import cli_main
from mapg.train import parse_cfg, train

def main(args:list):
    if not any(a.split('=')[0] == '--config' for a in args) and not {'-h', '--help'} & set(args):
        args = ['--config', str(Path(__file__).resolve().parent.parent/'configs'/'toy_sudoku.yaml'), *args]
    train(*parse_cfg(args))

if __name__ == '__main__': cli_main(main)
