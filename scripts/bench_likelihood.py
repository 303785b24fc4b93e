"""Benchmarks of the mask-aware loss, measured in one run (ratios, not absolute times):

1. the cost of the position term: StepMerge forward + GSPO loss + backward with the position term (pos_weight=1)
   divided by the token-only baseline (pos_weight=0, position arithmetic skipped), same batch;
2. forward passes per training cycle at the paper's settings (L=256, block 32, T=128, N=32, K=12, mu=12), counted;
3. batched StepMerge (all (segment, sequence) pairs in one forward) against one pair per forward.

`python scripts/bench_likelihood.py [--repeats 7]`"""
import argparse, statistics, time
import torch
from mapg.core import Tok, toy_model, make_gen
from mapg.models import MDLM
from mapg.sampler import generate
from mapg.likelihood import stepmerge_log_probs, sample_segments
from mapg.objectives import gspo_loss

def model(hidden, layers):
    return MDLM(toy_model(0, hidden=hidden, layers=layers, heads=4), Tok(mask_id=1, eos_ids=(3,), pad_id=0), 'toy')

def timed(f, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return ts

def position_overhead(m, repeats, B=8, L=64, T=32, N=8, K=4):
    prompt = torch.randint(5, 100, (B, 16), generator=make_gen(0))
    r = generate(m, prompt, gen_length=L, block_length=32, steps=T, generator=make_gen(1), stepmerge_segments=N)
    seg, adv = sample_segments(r, N, K, make_gen(2)), torch.randn(B, generator=make_gen(3))
    def step(pw):
        m.model.zero_grad()
        lt, lp, counted = stepmerge_log_probs(m, r, N, seg, positions=pw > 0)
        loss, _ = gspo_loss(lt, r.old_token, lp if pw else None, r.old_pos if pw else None, counted, adv, pos_weight=pw)
        loss.backward()
    step(1.); step(0.)                                              # warm-up
    with_pos, without = [], []
    for _ in range(repeats):                                        # interleaved, so drifts of the machine hit both
        with_pos += timed(lambda: step(1.), 1); without += timed(lambda: step(0.), 1)
    return statistics.median(with_pos), statistics.median(without)

class Counter:
    "Counts forward passes and the sequences they carry"
    def __init__(self, m): self.m, self.calls, self.rows, self.f = m, 0, 0, m.forward
    def __enter__(self):
        def fwd(ids, **kw): self.calls += 1; self.rows += ids.shape[0]; return self.f(ids, **kw)
        self.m.forward = fwd; return self
    def __exit__(self, *a): self.m.forward = self.f

def cycle_passes(m, B=2, L=256, bl=32, T=128, N=32, K=12, mu=12):
    prompt = torch.randint(5, 100, (B, 16), generator=make_gen(0))
    with Counter(m) as c_roll: r = generate(m, prompt, gen_length=L, block_length=bl, steps=T, generator=make_gen(1), stepmerge_segments=N)
    with Counter(m) as c_upd:
        for i in range(mu):
            lt, lp, counted = stepmerge_log_probs(m, r, N, sample_segments(r, N, K, make_gen(10 + i)), micro_batch=B * K)
    return c_roll.rows / B, c_upd.rows / B, c_upd.calls

def micro_batch_speedup(m, repeats, B=8, L=64, T=32, N=8, K=4):
    prompt = torch.randint(5, 100, (B, 16), generator=make_gen(0))
    r = generate(m, prompt, gen_length=L, block_length=32, steps=T, generator=make_gen(1))
    seg = sample_segments(r, N, K, make_gen(2))
    with torch.no_grad():
        batched = statistics.median(timed(lambda: stepmerge_log_probs(m, r, N, seg), repeats))
        single = statistics.median(timed(lambda: stepmerge_log_probs(m, r, N, seg, micro_batch=1), repeats))
    return single, batched

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--repeats', type=int, default=7)
    args = ap.parse_args()
    torch.manual_seed(0)
    print("1. position term: StepMerge forward + GSPO loss + backward, pos_weight=1 / pos_weight=0 (median of interleaved runs)")
    for name, (h, l) in {'toy (hidden 64, 2 layers)': (64, 2), 'wider toy (hidden 256, 4 layers)': (256, 4)}.items():
        w, wo = position_overhead(model(h, l), args.repeats)
        print(f"   {name:34s} {w * 1e3:8.1f} ms / {wo * 1e3:8.1f} ms = {w / wo:.3f}   (target <= 1.05)")
    roll, upd, calls = cycle_passes(model(64, 2))
    print(f"2. forward passes per sequence and training cycle (L=256, block 32, T=128, N=32, K=12, mu=12):")
    print(f"   rollout {roll:.0f} (old log-probs included, 0 extra) + inner updates {upd:.0f} = {roll + upd:.0f}"
          f"   [T + mu*K = {128 + 12 * 12}; recomputing old log-probs would add N = 32: {128 + 32 + 12 * 12}]"
          f"; the {int(upd)} update passes per sequence ran as {calls} batched forward calls")
    single, batched = micro_batch_speedup(model(64, 2), args.repeats)
    print(f"3. StepMerge over 8 sequences x 4 segments: one pair per forward {single * 1e3:.1f} ms, all pairs batched "
          f"{batched * 1e3:.1f} ms: speed-up {single / batched:.1f}x")
