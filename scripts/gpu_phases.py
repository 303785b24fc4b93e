"""The paper's recipe per GPU on random weights with LLaDA-8B's shapes: seconds and peak memory of the rollout and
update phases, then `scripts/bench.py`'s figures on the same model. Needs a GPU; `--small` runs a tiny model on the CPU.

    python scripts/gpu_phases.py --out results/      # writes phases.json and figures.json

The model is bf16 with a LoRA adapter (r 128, alpha 64) on every projection and checkpointed blocks; one GPU holds what
ZeRO-2 would shard over eight. Settings are those of `configs/llada_gsm8k.yaml`: 3 sequences per rollout batch, a
200-token prompt, L 256 in blocks of 32, T 128, N 32 StepMerge segments, K 12 scored per update.
"""
import argparse, json, statistics, time
from pathlib import Path
import torch
from mapg.models import llada_shaped, add_lora
from mapg.core import make_gen
from mapg.bench import BenchArgs, run_benchmarks, _rollout, _terms
from mapg.likelihood import stepmerge_log_probs, sample_segments
from mapg.objectives import gspo_loss

def main(out:Path, small:bool=False, repeats:int=2):
    cuda = torch.cuda.is_available()
    dev = 'cuda' if cuda else 'cpu'
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gib = lambda b: b / 2**30
    peak = lambda: gib(torch.cuda.max_memory_allocated()) if cuda else float('nan')
    reset = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
    g = dict(gen_length=32, block_length=8, steps=8) if small else dict(gen_length=256, block_length=32, steps=128)
    B, P, N, K = 3, 200, (4 if small else 32), (2 if small else 12)
    res = dict(device=torch.cuda.get_device_name() if cuda else 'cpu', torch=torch.__version__, B=B, prompt=P, N=N, K=K, **g)
    def timed(f):
        "Median seconds of `repeats` calls after a warm-up call, and the last result"
        ts = []
        for i in range(repeats + 1):
            sync(); t = time.perf_counter(); x = f(); sync()
            if i: ts.append(time.perf_counter() - t)
        return statistics.median(ts), x
    m = llada_shaped(device=dev, **(dict(hidden=64, layers=2, heads=4, intermediate=128) if small else {}))
    res.update(attn=m.model.config._attn_implementation, weights_gib=gib(torch.cuda.memory_allocated()) if cuda else float('nan'))
    m = add_lora(m, r=128, lora_alpha=64, lora_dropout=0.).set_grad_ckpt(True)
    res['lora_params'] = sum(p.numel() for p in m.model.parameters() if p.requires_grad)
    m.model.eval(); reset()
    res['rollout_s'], r = timed(lambda: _rollout(m, B, P, N, **g))
    res['rollout_peak_gib'] = peak()
    opt = torch.optim.AdamW([p for p in m.model.parameters() if p.requires_grad], lr=1e-6)
    seg, adv = sample_segments(r, N, K, make_gen(2, r.ids.device)), torch.randn(B, generator=make_gen(3)).to(r.ids.device)
    def step(pw):
        lt, lp, counted = _terms(stepmerge_log_probs(m, r, N, seg, positions=pw > 0))
        loss, _ = gspo_loss(lt, r.old_token, lp if pw else None, r.old_pos if pw else None, counted, adv, pos_weight=pw)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    for pw, name in ((1., 'update'), (0., 'update_token_only')):
        reset(); res[name + '_s'], _ = timed(lambda: step(pw)); res[name + '_peak_gib'] = peak()
    print(json.dumps(res, indent=1), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out/'phases.json').write_text(json.dumps(res, indent=1))
    a = BenchArgs(model='llada8b', repeats=repeats, only=['passes', 'position', 'batching', 'sampler', 'sampler_stepmerge'],
                  gen_length=g['gen_length'], block_length=g['block_length'], steps=g['steps'], segments=N, k=K)
    figs = run_benchmarks(a, model=m)
    (out/'figures.json').write_text(json.dumps([vars(f) for f in figs], indent=1))
    return res, figs

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', type=Path, default=Path('.'), help='folder for phases.json and figures.json')
    p.add_argument('--small', action='store_true', help='a tiny model with a short canvas (a CPU check of the script)')
    p.add_argument('--repeats', type=int, default=2, help='timed calls per measurement, after a warm-up call')
    a = p.parse_args()
    main(a.out, a.small, a.repeats)
