"""Evaluate a masked diffusion LM, one checkpoint, or every checkpoint of a training run (`mapg.evaluate`); `--help`
lists every option. A run the trainer wrote is read by its config.json: model, family, task, generation settings and
the protocol that fits the task (a toy's held-out prompts as the trainer scores them: greedily, sampled with the rollout
settings and by the low-temperature decoder, the order task with the good-order share; the paper's protocol for the paper's tasks: d1's evaluation
prompts and answer reading, with documented corrections). With checkpoints, the model they were trained from is
evaluated first, as the row `base` of the tables and the chart (`--no_base_row` leaves it out).

    python scripts/eval.py --model runs/toy_order                           # the toy default's run: after RL (its final checkpoint) and before
    python scripts/eval.py --model data/toy/toy_order_pretrained           # where the toy default starts: its before-RL figures
    python scripts/eval.py --model runs/toy_sudoku                          # the Sudoku toy's run (configs/toy_sudoku.yaml)
    python scripts/eval.py --model data/toy/toy_sudoku_pretrained          # where the Sudoku toy starts
    python scripts/eval.py --model GSAI-ML/LLaDA-8B-Instruct               # all tasks, L = 128 256 512, block 32, T = L/2
    accelerate launch scripts/eval.py --checkpoint runs/gsm8k --tasks gsm8k  # every checkpoint of a run, sharded over GPUs
    python scripts/eval.py --config configs/eval/block_ablation.yaml       # the block-size ablation
    python scripts/eval.py --protocol mapg --checkpoint runs/gsm8k         # the training prompts and reward instead

A bad field prints `error: FIELD: reason` (one line) and exits 2; `--debug` shows the traceback.
"""
from mapg.faults import cli_main
from mapg.evaluate import eval_cli

if __name__ == '__main__': cli_main(eval_cli)
