"""The paper's recipe per GPU on random weights with LLaDA-8B's shapes: seconds and peak memory of the rollout and
update phases, then `scripts/bench.py`'s figures on the same model. Needs a GPU; `--small` checks on a CPU that the
script runs (hidden 64, 2 blocks, L 32 in blocks of 8, T 8, N 4, K 2, a 16-token prompt; in the bench figures
2 prompts of 8 tokens per sampler call).

    python scripts/gpu_phases.py --out results/      # writes phases.json and figures.json

The model is bf16 with a LoRA adapter (r 128, alpha 64) on every projection and checkpointed blocks; one GPU holds what
ZeRO-2 would shard over eight. Settings are those of `configs/llada_gsm8k.yaml`: 3 sequences per rollout batch, a
200-token prompt, L 256 in blocks of 32, T 128, N 32 StepMerge segments, K 12 scored per update.
"""
import argparse, json, statistics
from pathlib import Path
import torch
from mapg.standins import llada_shaped
from mapg.models import add_lora
from mapg.core import make_gen
from mapg.bench import BenchArgs, run_benchmarks, interleaved, update_backward, _rollout
from mapg.likelihood import sample_segments

def main(out:Path, small:bool=False, repeats:int=2):
    cuda = torch.cuda.is_available()
    dev = torch.device('cuda' if cuda else 'cpu')
    gib = lambda b: b / 2**30
    peak = lambda: gib(torch.cuda.max_memory_allocated()) if cuda else float('nan')
    reset = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
    med = lambda ts: statistics.median(ts)
    g = dict(gen_length=32, block_length=8, steps=8) if small else dict(gen_length=256, block_length=32, steps=128)
    B, P, N, K = 3, (16 if small else 200), (4 if small else 32), (2 if small else 12)
    res = dict(device=torch.cuda.get_device_name() if cuda else 'cpu', torch=torch.__version__, B=B, prompt=P, N=N, K=K, **g)
    m = llada_shaped(device=dev, **(dict(hidden=64, layers=2, heads=4, intermediate=128) if small else {}))
    res.update(attn=m.model.config._attn_implementation, weights_gib=gib(torch.cuda.memory_allocated()) if cuda else float('nan'))
    m = add_lora(m, r=128, lora_alpha=64, lora_dropout=0.).set_grad_ckpt(True)
    res['lora_params'] = sum(p.numel() for p in m.model.parameters() if p.requires_grad)
    m.model.eval(); reset()
    out_r = {}
    ts = interleaved({'rollout': lambda: out_r.update(r=_rollout(m, B, P, N, **g))}, repeats, dev, clock='wall')
    res['rollout_s'], res['rollout_peak_gib'], r = med(ts['rollout']), peak(), out_r['r']
    opt = torch.optim.AdamW([p for p in m.model.parameters() if p.requires_grad], lr=1e-6)
    seg, adv = sample_segments(r, N, K, make_gen(2, r.ids.device)), torch.randn(B, generator=make_gen(3)).to(r.ids.device)
    def step(pw):
        update_backward(m, r, N, seg, adv, pw)
        opt.step(); opt.zero_grad(set_to_none=True)
    reset()
    ts = interleaved({'update': lambda: step(1.), 'update_token_only': lambda: step(0.)}, repeats, dev, clock='wall')
    res.update(update_s=med(ts['update']), update_token_only_s=med(ts['update_token_only']), update_peak_gib=peak())
    print(json.dumps(res, indent=1), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out/'phases.json').write_text(json.dumps(res, indent=1))
    a = BenchArgs(model='llada8b', repeats=repeats, only=['passes', 'position', 'batching', 'sampler', 'sampler_stepmerge'],
                  gen_length=g['gen_length'], block_length=g['block_length'], steps=g['steps'], segments=N, k=K,
                  **(dict(batch=2, prompt_len=8) if small else {}))
    figs = run_benchmarks(a, model=m)
    (out/'figures.json').write_text(json.dumps([vars(f) for f in figs], indent=1))
    return res, figs

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', type=Path, default=Path('.'), help='folder for phases.json and figures.json')
    p.add_argument('--small', action='store_true', help='a tiny model with a short prompt and canvas (a CPU check of the script)')
    p.add_argument('--repeats', type=int, default=2, help='timed calls per measurement, after a warm-up call')
    a = p.parse_args()
    main(a.out, a.small, a.repeats)
