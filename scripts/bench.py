"""mapg's speed against its targets, in one run: one line per figure (name, measured ratio, target, pass/miss).
Ratios are measured interleaved, with repeats; absolute times are printed only on a GPU. `--help` lists every option.

    python scripts/bench.py                           # toy model, CPU
    python scripts/bench.py --model llada8b           # random weights with LLaDA-8B's shapes, on a GPU
    python scripts/bench.py --only sampler position   # some figures
    python scripts/bench.py --only cache_tokens cache_speed   # the prefix cache (cache='prefix') against the full canvas
"""
from mapg.bench import bench_cli

if __name__ == '__main__': bench_cli()
