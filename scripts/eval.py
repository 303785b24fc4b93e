"""Evaluate a masked diffusion LM, one checkpoint, or every checkpoint of a training run with the paper's protocol
(`mapg.evaluate`: d1's evaluation prompts and answer reading, with documented corrections); `--help` lists every option.

    python scripts/eval.py --model GSAI-ML/LLaDA-8B-Instruct               # all tasks, L = 128 256 512, block 32, T = L/2
    accelerate launch scripts/eval.py --checkpoint runs/gsm8k --tasks gsm8k  # every checkpoint of a run, sharded over GPUs
    python scripts/eval.py --config configs/eval/block_ablation.yaml       # the block-size ablation
    python scripts/eval.py --protocol mapg --checkpoint runs/gsm8k         # the training prompts and reward instead
    python scripts/eval.py --model toy --tasks sudoku --lengths 32 --limit 4 --max_prompt_len 480   # toy, CPU
"""
from mapg.evaluate import eval_cli

if __name__ == '__main__': eval_cli()
