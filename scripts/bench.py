"""mapg's speed against its targets, in one run: one line per figure (name, measured ratio, target, pass/miss).
Ratios are measured interleaved, with repeats; absolute times are printed only on a GPU. `--help` lists every option.

    python scripts/bench.py                           # toy model, CPU
    python scripts/bench.py --model llada8b           # random weights with LLaDA-8B's shapes, on a GPU
    python scripts/bench.py --only sampler position   # some figures
    python scripts/bench.py --only cache_tokens cache_speed   # the prefix cache (cache='prefix') against the full canvas

The prefix cache is an exact but different policy, and its speed has a price in accuracy: at toy scale, recorded
once a block, 2.8 points of sampled cell accuracy and 12.5 of solved prompts after RL on the order task (one block
of 8), 1.5 points of cells on Sudoku (one block of 16); `--cache_refresh r` buys part of it back for tokens
(nbs/04a_cache.ipynb, "The price, and a refresh"; scripts/cache_refresh.py).
"""
from mapg.bench import bench_cli

if __name__ == '__main__': bench_cli()
