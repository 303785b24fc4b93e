"""`cache='prefix'` (`mapg.cache`): the cached logits against references built without the cache's wrappers, on the toy
and on tiny checkpoints of the real LLaDA and Dream code (skipped where that code is absent, as in `upstream.py`)."""
import math, sys
from pathlib import Path
import pytest, torch, torch.nn.functional as F
from mapg.core import Tok, toy_model
from mapg.models import MDLM, load_model, add_lora
from mapg.standins import tiny_llada
from mapg.cache import PrefixCache, cached_logits
sys.path.insert(0, str(Path(__file__).parent))
from test_sampler import chisquare_pooled
from upstream import tiny_checkpoint

torch.set_num_threads(1)
P, L, BL = 5, 12, 4                      # prompt, completion, block length: three blocks

def toy(dtype=torch.float32): return MDLM(toy_model(0).to(dtype), Tok(mask_id=1, eos_ids=(), pad_id=0), 'toy')

# the toy's logits reach about 30: float32 rounding alone moves them by a few 1e-6, so the toy is also checked in float64
TOL = {'toy': 5e-5, 'toy64': 1e-10, 'llada': 1e-5, 'dream': 1e-5}

def build(kind):
    if kind.startswith('toy'): return toy(torch.float64 if kind == 'toy64' else torch.float32)
    return load_model(tiny_checkpoint(kind, 'real'), dtype=torch.float32, device='cpu')

def canvases(m, seed=0):
    "z_b (prompt, first block done, the rest [MASK]), z^t (some of block 1 filled, later blocks filled too: never seen), attn (row 0 left-padded)"
    g = torch.Generator().manual_seed(seed)
    V = min(m.model.get_input_embeddings().num_embeddings, 200)
    zb = torch.randint(5, V, (2, P + L), generator=g)
    zb[:, P + BL:] = m.mask_id
    zt = zb.clone()
    zt[:, P + BL:] = torch.randint(5, V, (2, L - BL), generator=g)
    zt[:, P + BL + 1] = m.mask_id; zt[0, P + BL + 3] = m.mask_id
    attn = torch.ones_like(zb, dtype=torch.bool)
    attn[0, :2] = False
    zb[0, :2] = zt[0, :2] = 0
    return zb, zt, attn

def close(a, b, tol=1e-5):
    fa = a.isfinite()
    assert torch.equal(fa, b.isfinite())
    torch.testing.assert_close(a[fa], b[fa], atol=tol, rtol=tol)

@pytest.mark.parametrize('kind', ['toy', 'toy64', 'llada', 'dream'])
def test_last_block_equals_full_forward(kind):
    "z^t = z_b, window = the last block with nothing after it: the window forward sees what the full forward sees"
    m = build(kind)
    zb, _, attn = canvases(m)
    zb[:, P:P + L - BL] = zb[:, :1].clamp(min=5)                 # the earlier blocks finished
    start = P + L - BL
    with torch.no_grad():
        for a in (attn, torch.ones_like(attn)):
            close(cached_logits(m, zb, zb, a, start, BL), m.logits(zb, a)[:, start:], TOL[kind])
            close(cached_logits(m, zb, zb, a, P, L), m.logits(zb, a)[:, P:], TOL[kind])          # one window over the whole completion

def concat_reference(m, zb, zt, attn, start, W):
    "One plain forward over [z_b, window of z^t] with position ids and a mask: z_b's rows see z_b; the window's rows see the prefix and the window"
    shift = int(m.family.shift)
    n, S = start - shift, zb.shape[1]
    lo, hi = n, start + W
    w = hi - lo
    pos = (attn.long().cumsum(-1) - 1).clamp(min=0)
    ids = torch.cat([zb, zt[:, lo:hi]], 1)
    pids = torch.cat([pos, pos[:, lo:hi]], 1)
    keys = torch.zeros(zb.shape[0], S + w, S + w, dtype=torch.bool)
    keys[:, :S, :S] = attn[:, None, :]
    keys[:, S:, :n] = attn[:, None, :n]
    keys[:, S:, S:] = True
    mask = keys.long() if m.kind == 'toy' else keys[:, None]         # BERT takes a 3-D mask, Dream a 4-D one
    return banned(m, m.model(input_ids=ids, position_ids=pids, attention_mask=mask).logits[:, S:S + W])

def banned(m, lg):
    "Raw logits with [MASK] and the ids the adapter never proposes at -inf"
    ban = m.banned(lg.shape[-1])
    return lg.masked_fill(ban, -math.inf) if ban is not None else lg.index_fill(-1, torch.tensor([m.mask_id]), -math.inf)

@pytest.mark.parametrize('kind', ['toy', 'toy64', 'dream'])
@pytest.mark.parametrize('W', [BL, 2 * BL])
def test_cached_equals_concatenated_reference(kind, W):
    "z^t differs from z_b in the window and after it: cached logits = a plain forward over [z_b, window] with a block mask"
    m = build(kind)
    zb, zt, attn = canvases(m)
    with torch.no_grad(): close(cached_logits(m, zb, zt, attn, P + BL, W), concat_reference(m, zb, zt, attn, P + BL, W), TOL[kind])

def llada_loop(lm, ids, bias, pasts=None):
    "LLaDA's own forward, block by block through its native `layer_past`/`use_cache` arguments: (raw logits, each block's (k, v))"
    core, cfg = lm.model, lm.model.config
    tr = core.transformer
    x = tr.wte(ids)
    if cfg.input_emb_norm: x = x * cfg.d_model ** 0.5
    kvs = []
    for i, blk in enumerate(tr.blocks):
        x, kv = blk(x, attention_bias=bias, layer_past=None if pasts is None else pasts[i], use_cache=True)
        kvs.append(kv)
    x = tr.ln_f(x)
    lg = F.linear(x, tr.wte.weight) if cfg.weight_tying else tr.ff_out(x)
    return lg / math.sqrt(cfg.d_model) if cfg.scale_logits else lg, kvs

def llada_bias(keys):
    "[B, Q, K] bool -> LLaDA's additive float bias [B, 1, Q, K]"
    return torch.zeros(keys.shape).masked_fill_(~keys, torch.finfo(torch.float32).min)[:, None]

def test_llada_cached_equals_native_layer_past():
    "Real LLaDA code: cached logits = its blocks run by hand with their own layer_past; and at z^t = z_b, = its forward with an attention_bias"
    m = build('llada')
    lm = m.model
    zb, zt, attn = canvases(m)
    S, start = zb.shape[1], P + BL
    with torch.no_grad():
        full, kvs = llada_loop(lm, zb, llada_bias(attn[:, None, :].expand(-1, S, -1)))
        close(full, lm(input_ids=zb, attention_mask=attn.long()).logits)          # the hand-run loop is LLaDA's forward
        for W in (BL, 2 * BL):
            pasts = [(k[:, :, :start], v[:, :, :start]) for k, v in kvs]
            keys = torch.cat([attn[:, :start], torch.ones(2, W, dtype=torch.bool)], 1)
            ref, _ = llada_loop(lm, zt[:, start:start + W], llada_bias(keys[:, None, :].expand(-1, start + W, -1)), pasts)
            close(cached_logits(m, zb, zt, attn, start, W), banned(m, ref))
            # z^t = z_b: the full forward with a bias where the window's rows see only the prefix and the window
            keys = attn[:, None, :].expand(-1, S, -1).clone()
            keys[:, start:start + W, start + W:] = False
            ref = lm(input_ids=zb, attention_bias=keys[:, None]).logits
            close(cached_logits(m, zb, zb, attn, start, W), banned(m, ref[:, start:start + W]))

# ---------------------------------------------------------------- the cached policy end to end: sampler, replay, oracle, gradient
from collections import Counter
from mapg.core import make_gen, sharp_toy
from mapg.sampler import generate, enumerate_trajectories, rollout_keys
from mapg.likelihood import exact_log_probs, stepmerge_log_probs
from mapg.objectives import gspo_loss

GEN = dict(gen_length=8, block_length=4, steps=4, temperature=0.9, pos_temperature=0.5, cache='prefix')

def prompts(m):
    ids = torch.tensor([[0, 0, 7, 9, 11], [5, 6, 7, 8, 9], [0, 0, 0, 9, 12]])
    return ids, (ids != 0) | (torch.arange(5) >= 3)

@pytest.mark.parametrize('kind', ['toy', 'llada', 'dream'])
@pytest.mark.parametrize('score', ['max_logit', 'token_logprob'])
def test_replay_and_first_update_ratio(kind, score):
    "generate(cache='prefix') then the exact replay and StepMerge (a segment spans both blocks): the rollout's records, ratios exactly 1"
    m = build(kind)
    ids, attn = prompts(m)
    r = generate(m, ids, attn, generator=make_gen(0), score=score, stepmerge_segments=3, **GEN)
    assert r.settings.cache == 'prefix'
    e = exact_log_probs(m, r)                                        # with grad, as in an update
    assert e.token.requires_grad
    # the sampler's position terms come from its Plackett-Luce draw, the replay's from `segment_terms`: the same values by
    # another float32 formula (the uncached replay tests allow 2e-4); the StepMerge terms below are computed alike, to 1e-6
    torch.testing.assert_close(e.token.detach(), r.logp_token, atol=1e-5, rtol=0)
    torch.testing.assert_close(e.pos.detach(), r.logp_pos, atol=1e-5, rtol=0)
    if score == 'token_logprob': torch.testing.assert_close(e.prop.detach(), r.logp_prop, atol=1e-5, rtol=0)
    sm = stepmerge_log_probs(m, r, 3)                                # segments [0,1], [1,3] (both blocks), [3,4]
    torch.testing.assert_close(sm.token.detach(), r.old_token, atol=1e-6, rtol=0)
    torch.testing.assert_close(sm.pos.detach(), r.old_pos, atol=1e-6, rtol=0)
    # some segments, two pairs per forward (prefix passes shared by rows): other batch shapes, so float32 rounding apart
    sub = stepmerge_log_probs(m, r, 3, segments=torch.tensor([[0, 1], [1, 2], [0, 2]]), micro_batch=2)
    torch.testing.assert_close(sub.token.detach()[sub.counted], r.old_token[sub.counted], atol=1e-5, rtol=0)
    torch.testing.assert_close(sub.pos.detach()[sub.counted], r.old_pos[sub.counted], atol=1e-5, rtol=0)
    _, met = gspo_loss(sm.token, r.old_token, sm.pos, r.old_pos, sm.counted, torch.tensor([1., -1., 0.5]))
    assert abs(met['ratio_token'] - 1) < 1e-6 and abs(met['ratio_pos'] - 1) < 1e-6
    # the uncached replay of the same rollout scores another policy
    import dataclasses
    other = dataclasses.replace(r, settings=dataclasses.replace(r.settings, cache='none'))
    assert not torch.allclose(exact_log_probs(m, other).token.detach(), r.logp_token, atol=1e-4)

def test_cache_none_is_todays_sampler():
    "cache='none' (the default) draws the same rollout as before the option existed: bit for bit the same tensors"
    m = toy()
    ids, attn = prompts(m)
    kw = {k: v for k, v in GEN.items() if k != 'cache'}
    a = generate(m, ids, attn, generator=make_gen(0), stepmerge_segments=3, **kw)
    b = generate(m, ids, attn, generator=make_gen(0), stepmerge_segments=3, cache='none', **kw)
    for f in ('ids', 'unmask_step', 'unmask_rank', 'logp_token', 'logp_pos', 'old_token', 'old_pos'): assert torch.equal(getattr(a, f), getattr(b, f))
    c = generate(m, ids, attn, generator=make_gen(0), stepmerge_segments=3, **GEN)
    assert not torch.equal(a.logp_token, c.logp_token)


@pytest.mark.parametrize('canvas', [dict(gen_length=4, block_length=2, steps=2), dict(gen_length=4, block_length=2, steps=4),
                                    dict(gen_length=6, block_length=2, steps=3)], ids=['2x1', '2x2', '3x1'])
@pytest.mark.parametrize('score', ['max_logit', 'token_logprob'])
def test_oracle_matches_cached_sampler(canvas, score):
    "The enumeration oracle with cache='prefix' sums to 1, gives the sampler's recorded log-probs and its frequencies; the uncached oracle does not"
    m = MDLM(sharp_toy(0, 2.), Tok(mask_id=1, eos_ids=(0,), pad_id=0), 'toy')
    prompt, n = torch.tensor([2, 0]), 40_000
    kw = dict(temperature=0.9, pos_temperature=0.5, remasking='plackett_luce', score=score, **canvas)
    exact = enumerate_trajectories(m, prompt, cache='prefix', **kw)
    assert abs(sum(lp.exp().item() for lp in exact.values()) - 1) < 1e-9
    r = generate(m, prompt.expand(n, 2), generator=make_gen(11), cache='prefix', **kw)
    keys = rollout_keys(r)
    assert set(keys) <= set(exact)
    # float32 forwards over 40 000 rows against one row in the oracle: a few 1e-6 apart on log-probs of about -4
    torch.testing.assert_close(r.logp.double(), torch.stack([exact[k] for k in keys]), atol=3e-5, rtol=0)
    counts, ks = Counter(keys), list(exact)
    assert chisquare_pooled([counts[k] for k in ks], [exact[k].exp().item() for k in ks], n) > 1e-3 / 6   # 6 cases share 1e-3
    plain = enumerate_trajectories(m, prompt, **kw)
    assert max(abs(plain[k].exp().item() - exact[k].exp().item()) for k in ks) > 1e-3              # another policy

def test_gradient_flows_through_the_prefix_pass():
    "The gradient of a loss on cached logits equals the concatenated reference's, and reaches tokens seen only by the prefix pass"
    m = toy(torch.float64)
    zb, zt, attn = canvases(m)
    grads = []
    for f in (lambda: cached_logits(m, zb, zt, attn, P + BL, BL), lambda: concat_reference(m, zb, zt, attn, P + BL, BL)):
        m.model.zero_grad()
        lg = f()
        lg[lg.isfinite()].sin().sum().backward()
        grads.append({n: p.grad.clone() for n, p in m.model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for k in grads[0]: torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-9, rtol=1e-9)
    emb = grads[0]['bert.embeddings.word_embeddings.weight']
    only_prefix = sorted(set(zb[:, :P + BL].flatten().tolist()) - set(zt[:, P + BL:P + 2 * BL].flatten().tolist()))
    assert only_prefix and (emb[only_prefix].abs().sum(-1) > 0).all()

def test_other_models_are_refused():
    "mapg's own stand-ins and other kinds take no key/value cache: a ValueError that names `cache`"
    with pytest.raises(ValueError, match="cache='prefix'"):
        generate(tiny_llada(), torch.tensor([[5, 6]]), gen_length=4, block_length=2, steps=2, cache='prefix')

@pytest.mark.parametrize('kind', ['toy', 'llada', 'dream'])
def test_lora_wrapped(kind):
    "LoRA-wrapped models: the last block's cached logits equal the full forward's, and the replay matches the rollout"
    m = add_lora(build(kind), r=4, lora_dropout=0.)
    for n, p in m.model.named_parameters():
        if 'lora_B' in n: torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(1))
    zb, _, attn = canvases(m)
    zb[:, P:P + L - BL] = 7
    with torch.no_grad(): close(cached_logits(m, zb, zb, attn, P + L - BL, BL), m.logits(zb, attn)[:, P + L - BL:], TOL[kind])
    ids, pa = prompts(m)
    r = generate(m, ids, pa, generator=make_gen(0), **GEN)
    torch.testing.assert_close(exact_log_probs(m, r).token.detach(), r.logp_token, atol=1e-5, rtol=0)

def test_train_with_cache_prefix(tmp_path):
    "`--cache prefix` (with activation checkpointing, as the recipes run) reaches the rollouts and the update: the saved rollouts carry it, first ratios are 1"
    import json
    from mapg.config import parse_cfg
    from mapg.train import train
    from test_train import TINY
    out = tmp_path/'run'
    train(*parse_cfg([*TINY, '--output_dir', str(out), '--toy_cache', str(tmp_path/'toy'), '--no_progress', '--save_rollouts', 'true',
                      '--save_steps', '0', '--max_steps', '1', '--inner_updates', '1', '--block_length', '8', '--cache', 'prefix',
                      '--grad_ckpt', 'true']))
    row = json.loads((out/'metrics.jsonl').read_text().splitlines()[0])
    assert abs(row['ratio_token'] - 1) < 1e-6 and abs(row['ratio_pos'] - 1) < 1e-6
    r = torch.load(next((out/'rollouts').glob('*.pt')), weights_only=False)
    assert r.settings.cache == 'prefix' and r.settings.num_blocks == 2

@pytest.mark.parametrize('kind', ['toy', 'llada', 'dream'])
def test_activation_checkpointing(kind):
    "Under activation checkpointing the cached replay's gradient equals the one without, and checkpointing stays on"
    m = build(kind)
    ids, attn = prompts(m)
    r = generate(m, ids, attn, generator=make_gen(0), **GEN)
    out = []
    for ckpt in (True, False):
        m.set_grad_ckpt(ckpt); m.model.zero_grad()
        exact_log_probs(m, r).total().sum().backward()
        assert m.grad_ckpt == ckpt
        out.append({n: p.grad.clone() for n, p in m.model.named_parameters() if p.grad is not None})
    assert out[0].keys() == out[1].keys() and out[0]
    for k in out[0]: torch.testing.assert_close(out[0][k], out[1][k], atol=1e-6, rtol=1e-5)

@pytest.mark.parametrize('kind', ['toy', 'dream'])
def test_one_token_prompt(kind):
    "A one-token prompt: Dream's shifted window starts at position 0 with an empty recorded prefix; the replay still matches"
    m = build(kind)
    r = generate(m, torch.tensor([[7], [9]]), generator=make_gen(0), **GEN)
    torch.testing.assert_close(exact_log_probs(m, r).token.detach(), r.logp_token, atol=1e-5, rtol=0)
    zb = torch.cat([torch.tensor([[7], [9]]), torch.full((2, 8), m.mask_id)], 1)
    zb[:, 1:5] = 11
    with torch.no_grad(): close(cached_logits(m, zb, zb, torch.ones_like(zb, dtype=torch.bool), 5, 4), m.logits(zb)[:, 5:], TOL[kind])
    with torch.no_grad(): close(cached_logits(m, zb, zb, torch.ones_like(zb, dtype=torch.bool), 1, 8), m.logits(zb)[:, 1:], TOL[kind])

def test_token_counts_agree_with_the_schedule():
    "The benchmark's token counts at the network's input equal the schedule's (cache_tokens raises otherwise)"
    from mapg.bench import cache_tokens
    figs = cache_tokens(toy(), prompt_len=8, n_segments=3, k=2, gen_length=8, block_length=4, steps=4)
    assert [f.name for f in figs] == ['prefix cache: tokens per rollout', 'prefix cache: tokens per exact update', 'prefix cache: tokens per StepMerge update']
    assert figs[0].ratio == (2 * 16 + 4 * 4 + 8) / (4 * 16)      # n_b S + T block + the window of the segment spanning both blocks

# ---------------------------------------------------------------- the prefix recorded again within a block (cache_refresh)
REFRESH = dict(gen_length=8, block_length=4, steps=8, temperature=0.9, pos_temperature=0.5, cache='prefix')

@pytest.mark.parametrize('kind', ['toy', 'llada', 'dream'])
@pytest.mark.parametrize('refresh', [1, 3])
def test_refresh_replay_and_first_update_ratio(kind, refresh):
    "cache_refresh=r: the sampler, the exact replay and StepMerge read the same recorded prefixes; first ratios exactly 1"
    m = build(kind)
    ids, attn = prompts(m)
    r = generate(m, ids, attn, generator=make_gen(0), stepmerge_segments=3, cache_refresh=refresh, **REFRESH)
    assert r.settings.cache_refresh == refresh
    e = exact_log_probs(m, r)
    torch.testing.assert_close(e.token.detach(), r.logp_token, atol=1e-5, rtol=0)
    torch.testing.assert_close(e.pos.detach(), r.logp_pos, atol=1e-5, rtol=0)
    sm = stepmerge_log_probs(m, r, 3)                                # segments [0,2], [2,5] (both blocks), [5,8]
    torch.testing.assert_close(sm.token.detach(), r.old_token, atol=1e-6, rtol=0)
    torch.testing.assert_close(sm.pos.detach(), r.old_pos, atol=1e-6, rtol=0)
    _, met = gspo_loss(sm.token, r.old_token, sm.pos, r.old_pos, sm.counted, torch.tensor([1., -1., 0.5]))
    assert abs(met['ratio_token'] - 1) < 1e-6 and abs(met['ratio_pos'] - 1) < 1e-6
    # the same rollout replayed as the once-a-block policy: another policy
    import dataclasses
    once = dataclasses.replace(r, settings=dataclasses.replace(r.settings, cache_refresh=0))
    assert not torch.allclose(exact_log_probs(m, once).token.detach(), r.logp_token, atol=1e-4)

@pytest.mark.parametrize('refresh', [1, 2])
def test_oracle_matches_the_refreshed_sampler(refresh):
    "The enumeration oracle with cache_refresh sums to 1, gives the sampler's log-probs and its frequencies"
    # two layers: the prefix's second-layer key/values read the block, so a refresh changes them
    m = MDLM(sharp_toy(0, 2., layers=2), Tok(mask_id=1, eos_ids=(0,), pad_id=0), 'toy')
    prompt, n = torch.tensor([2, 0]), 40_000
    # blocks of 3 positions in 3 steps: refresh 2 records again before the block's last step, refresh 1 before each
    kw = dict(temperature=0.9, pos_temperature=0.5, remasking='plackett_luce', score='max_logit', gen_length=3,
              block_length=3, steps=3, cache='prefix')
    exact = enumerate_trajectories(m, prompt, cache_refresh=refresh, **kw)
    assert abs(sum(lp.exp().item() for lp in exact.values()) - 1) < 1e-9
    r = generate(m, prompt.expand(n, 2), generator=make_gen(11), cache_refresh=refresh, **kw)
    keys = rollout_keys(r)
    assert set(keys) <= set(exact)
    torch.testing.assert_close(r.logp.double(), torch.stack([exact[k] for k in keys]), atol=3e-5, rtol=0)
    counts, ks = Counter(keys), list(exact)
    assert chisquare_pooled([counts[k] for k in ks], [exact[k].exp().item() for k in ks], n) > 1e-3 / 2
    once = enumerate_trajectories(m, prompt, **kw)
    assert max(abs(once[k].exp().item() - exact[k].exp().item()) for k in ks) > 1e-3              # another policy

def test_the_stored_price_is_what_the_script_prints():
    "nbs/explanations/results/cache_refresh.json (the cache page's table): one setting measured again gives its figures"
    import json, sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root/'scripts'))
    import cache_refresh
    rows = json.loads((root/'nbs'/'explanations'/'results'/'cache_refresh.json').read_text())
    want = next(r for r in rows if (r['task'], r['block'], r['cache'], r['refresh']) == ('order', 8, 'prefix', 2))
    got = cache_refresh.cell('order', 8, 'prefix', 2)
    assert {k: got[k] for k in ('accuracy', 'per_seed', 'solved', 'tokens_per_completion')} == \
           {k: want[k] for k in ('accuracy', 'per_seed', 'solved', 'tokens_per_completion')}
    once, every = (next(r for r in rows if (r['task'], r['block'], r['cache'], r['refresh']) == ('order', 8, c, k))
                   for c, k in (('prefix', 0), ('none', 0)))
    assert once['tokens_per_completion'] < want['tokens_per_completion'] < every['tokens_per_completion'] + 1
