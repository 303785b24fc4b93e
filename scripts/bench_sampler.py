"""Time `mapg.sampler.generate` against the same number of bare forward passes of the same model, in one run.

    python scripts/bench_sampler.py                                  # toy model, batch 1 8 32, paper setting
    python scripts/bench_sampler.py --model llada8b --batch 6        # GPU: random weights with LLaDA-8B's shapes
"""
import argparse, torch
from mapg.models import load_model, llada_shaped
from mapg.sampler import bench_generate

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='toy', help="'toy', 'llada8b' (random LLaDA-8B shapes), or a checkpoint for load_model")
    p.add_argument('--kind', default='auto', help='model kind for a checkpoint (see mapg.models.FAMILIES)')
    p.add_argument('--batch', type=int, nargs='+', default=[1, 8, 32])
    p.add_argument('--prompt-len', type=int, default=16)
    p.add_argument('--gen-length', type=int, default=256)
    p.add_argument('--block-length', type=int, default=32)
    p.add_argument('--steps', type=int, default=128)
    p.add_argument('--remasking', default='plackett_luce')
    p.add_argument('--score', default='max_logit')
    p.add_argument('--repeats', type=int, default=3, help='interleaved timing rounds; the fastest of each is kept')
    p.add_argument('--threads', type=int, default=1, help='CPU threads for torch (0: leave the default)')
    p.add_argument('--device', default=None)
    p.add_argument('--clock', default=None, choices=['wall', 'cpu'], help='default: cpu time on a CPU, wall time on CUDA')
    a = p.parse_args()
    if a.threads: torch.set_num_threads(a.threads)
    if a.model == 'toy': m = load_model(kind='toy', device=a.device or 'cpu')
    elif a.model == 'llada8b': m = llada_shaped(device=a.device)
    else: m = load_model(a.model, kind=a.kind, device=a.device)
    print(f"model={a.model} device={m.device} threads={torch.get_num_threads()} L={a.gen_length} block={a.block_length} "
          f"T={a.steps} prompt={a.prompt_len} remasking={a.remasking} score={a.score} repeats={a.repeats} clock={a.clock or 'default'}")
    print(f"{'batch':>5} {'generate s':>11} {'forwards s':>11} {'ratio':>7} {'outside':>8} {'tokens/s':>10} {'peak GiB':>9}")
    for b in a.batch:
        r = bench_generate(m, batch=b, prompt_len=a.prompt_len, repeats=a.repeats, gen_length=a.gen_length,
                           block_length=a.block_length, steps=a.steps, remasking=a.remasking, score=a.score, clock=a.clock)
        mem = f"{r['peak_mem_gib']:.1f}" if r['peak_mem_gib'] is not None else '-'
        print(f"{b:>5} {r['gen_s']:>11.3f} {r['fwd_s']:>11.3f} {r['ratio']:>7.3f} {100*r['outside_share']:>7.1f}% "
              f"{r['tokens_per_s']:>10.1f} {mem:>9}", flush=True)

if __name__ == '__main__': main()
