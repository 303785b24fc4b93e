"Slower checks of `mapg.sampler`: the sampled distribution against exact enumeration (every mode), larger invariant runs, padding on every adapter kind."
import math, subprocess, sys, os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
import pytest, torch
from scipy import stats
from mapg.core import Tok, toy_model, toy_tokenizer, make_gen, sharp_toy
from mapg.models import MDLM
from mapg.standins import tiny_dream, tiny_llada, llada_shaped
from mapg.policy import REMASKING, SCORES, GenSettings, unmask_scores
from mapg.sampler import generate, enumerate_trajectories, rollout_keys
from mapg.plackett_luce import pl_log_prob

def tiny_mdlm(seed=0, scale=2.):
    "The sharp toy fixture with ids [PAD]=0, [MASK]=1, 2 (two proposable tokens), EOS 0"
    return MDLM(sharp_toy(seed, scale), Tok(mask_id=1, eos_ids=(0,), pad_id=0), 'toy')

def chisquare_pooled(counts, probs, n, min_expected=5.):
    "Pearson's chi-square p-value, pooling the cells whose expected count is below `min_expected` into one"
    exp = [p * n for p in probs]
    big = [i for i, e in enumerate(exp) if e >= min_expected]
    small = [i for i, e in enumerate(exp) if e < min_expected]
    obs_b, exp_b = [counts[i] for i in big], [exp[i] for i in big]
    if small: obs_b.append(sum(counts[i] for i in small)); exp_b.append(sum(exp[i] for i in small))
    return stats.chisquare(obs_b, exp_b).pvalue

CANVASES = [dict(gen_length=3, block_length=3, steps=3),     # one position per step: 3! orders
            dict(gen_length=3, block_length=3, steps=2),     # uneven: 2 then 1
            dict(gen_length=4, block_length=2, steps=2)]     # two blocks, 2 positions in one step

N_CASES = len(CANVASES) * len(REMASKING) * len(SCORES)

@pytest.mark.parametrize('canvas', CANVASES, ids=['k1', 'k21', '2blocks'])
@pytest.mark.parametrize('remasking', REMASKING)
@pytest.mark.parametrize('score', SCORES)
def test_sampled_distribution_is_exact(canvas, remasking, score):
    "Sampled trajectory frequencies match the enumerated probabilities, and the recorded log-probs equal them"
    m, prompt, n = tiny_mdlm(), torch.tensor([2, 0]), 40_000
    kw = dict(temperature=0.9, pos_temperature=0.5, remasking=remasking, score=score, **canvas)
    exact = enumerate_trajectories(m, prompt, **kw)
    assert abs(sum(lp.exp().item() for lp in exact.values()) - 1) < 1e-9
    r = generate(m, prompt.expand(n, 2), generator=make_gen(11), **kw)
    keys = rollout_keys(r)
    assert set(keys) <= set(exact)
    lp_exact = torch.stack([exact[k] for k in keys])
    torch.testing.assert_close(r.logp.double(), lp_exact, atol=1e-5, rtol=0)
    counts, ks = Counter(keys), list(exact)
    pval = chisquare_pooled([counts[k] for k in ks], [exact[k].exp().item() for k in ks], n)
    # 27 parametrised cases share a 1e-3 false-alarm budget (Bonferroni): a correct sampler fails one with probability 1e-3
    assert pval > 1e-3 / N_CASES, f"chi-square p-value {pval:.2e} over {len(ks)} trajectories"

def test_temperature_zero_greedy_is_deterministic():
    m, prompt = tiny_mdlm(), torch.tensor([2, 0])
    kw = dict(gen_length=3, block_length=3, steps=3, temperature=0., remasking='greedy', score='max_logprob')
    exact = enumerate_trajectories(m, prompt, **kw)
    assert len(exact) == 1 and list(exact.values())[0].item() == 0.
    r = generate(m, prompt.expand(5, 2), **kw)
    assert set(rollout_keys(r)) == set(exact) and (r.logp == 0).all()

def check_rollout(r, prompt):
    s, B, L = r.settings, r.B, r.L
    assert torch.equal(r.ids[:, :r.prompt_len], prompt)
    assert not (r.completion == r.mask_id).any()
    assert torch.equal((r.unmask_step - 1) // s.steps_per_block, (torch.arange(L, device=r.ids.device) // s.block_length).expand(B, L))
    for t, k in enumerate(s.k, 1):
        at = r.unmask_step == t
        assert (at.sum(-1) == k).all()
        assert torch.equal(r.unmask_rank[at].view(B, k).sort(-1).values, torch.arange(k, device=r.ids.device).expand(B, k))
        assert torch.equal(r.picks_at(t).sort(-1).values, at.nonzero()[:, 1].view(B, k))
    assert torch.isfinite(r.logp).all() and (r.logp <= 1e-4).all()

@pytest.mark.parametrize('remasking', REMASKING)
@pytest.mark.parametrize('score', SCORES)
def test_invariants_larger(remasking, score):
    tok = toy_tokenizer()
    m = MDLM(toy_model(1), Tok.from_tokenizer(tok, extra_eos=(4,)), 'toy', tok)
    prompt = torch.randint(5, 100, (4, 9), generator=make_gen(0))
    for L, bl, T in [(64, 16, 32), (60, 20, 36), (32, 32, 32)]:
        r = generate(m, prompt, gen_length=L, block_length=bl, steps=T, remasking=remasking, score=score, generator=make_gen(1))
        check_rollout(r, prompt)
        if score == 'token_logprob':
            assert r.proposals.shape == (4, T, bl)
            seen = r.proposals >= 0                                   # eligible at step t: the block's masked positions
            for t in (1, T // 2, T):
                off = r.block_of(t) * bl
                assert torch.equal(seen[:, t - 1], r.eligible_at(t)[:, off:off + bl])

def replay_logp(m, r):
    "Recompute the behaviour log-probabilities of `r` step by step, from the definitions"
    s, P = r.settings, r.prompt_len
    lt, lpos = torch.zeros(r.B, r.L), torch.zeros(r.B, r.L)
    for t in range(1, r.T + 1):
        with torch.no_grad(): lg = m.logits(r.state_at(t), r.attn)[:, P:].float()
        el, picks, x = r.eligible_at(t), r.picks_at(t), r.completion
        lsm = torch.log_softmax(lg / s.temperature, -1)
        lt.scatter_(1, picks, lsm.gather(-1, x[..., None])[..., 0].gather(1, picks))
        v = unmask_scores(lg, s.score, x)
        for i in range(picks.shape[1]):
            lp = pl_log_prob(v, picks[:, :i + 1], el, s.pos_temperature) - pl_log_prob(v, picks[:, :i], el, s.pos_temperature)
            lpos.scatter_(1, picks[:, i:i + 1], lp[:, None])
    return lt, lpos

@pytest.mark.parametrize('build', [tiny_dream, tiny_llada, lambda: llada_shaped(32, 2, 4, 64, device='cpu', dtype=torch.float32)],
                         ids=['dream', 'llada', 'llada_shaped'])
def test_replay_on_family_standins(build):
    "Rollouts of the Dream (shifted logits) and LLaDA stand-ins replay to the recorded log-probs"
    m = build()
    prompt = torch.randint(10, 1000, (3, 5), generator=make_gen(2))
    attn = torch.ones(3, 5, dtype=torch.bool); attn[0, :2] = False
    for score in ('max_logit', 'max_logprob'):
        r = generate(m, prompt, attn, gen_length=8, block_length=4, steps=4, score=score, generator=make_gen(3))
        check_rollout(r, prompt)
        lt, lpos = replay_logp(m, r)
        torch.testing.assert_close(lt, r.logp_token, atol=2e-4, rtol=0)
        torch.testing.assert_close(lpos, r.logp_pos, atol=2e-4, rtol=0)

def padded(prompts, pad_id=0):
    P = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (P - len(p)) + p for p in prompts])
    return ids, torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])

def _roberta():
    import transformers
    cfg = transformers.RobertaConfig(vocab_size=104, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    cfg._attn_implementation = 'sdpa'
    torch.manual_seed(0)
    return MDLM(transformers.RobertaForMaskedLM(cfg).eval(), Tok(1, (3,), 0), 'hf-mlm')

def _distilbert():
    import transformers
    cfg = transformers.DistilBertConfig(vocab_size=104, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64,
                                        pad_token_id=0)
    torch.manual_seed(0)
    return MDLM(transformers.DistilBertForMaskedLM(cfg).eval(), Tok(1, (3,), 0), 'hf-mlm')

@pytest.mark.parametrize('build', [lambda: MDLM(toy_model(0), Tok(1, (3, 4), 0), 'toy'), _roberta, _distilbert, tiny_dream,
                                   lambda: llada_shaped(32, 2, 4, 64, device='cpu', dtype=torch.float32)],
                         ids=['toy', 'roberta', 'distilbert', 'dream', 'llada_shaped'])
def test_left_padded_batch_equals_single_prompts(build):
    m = build()
    prompts = [[10, 11, 12], [20, 21, 22, 23, 24, 25], [30, 31, 32, 33]]
    ids, attn = padded(prompts)
    kw = dict(gen_length=12, block_length=4, steps=6, temperature=0., remasking='greedy', score='max_logprob')
    rb = generate(m, ids, attn, **kw)
    for i, p in enumerate(prompts):
        ri = generate(m, torch.tensor([p]), **kw)
        assert torch.equal(rb.completion[i], ri.completion[0]), i
        assert torch.equal(rb.unmask_step[i], ri.unmask_step[0]), i

def test_determinism_and_generator_device():
    m = MDLM(toy_model(0), Tok(1, (3, 4), 0), 'toy')
    prompt = torch.randint(5, 100, (3, 6), generator=make_gen(0))
    kw = dict(gen_length=16, block_length=8, steps=8, score='token_logprob')
    a, b = generate(m, prompt, generator=make_gen(9), **kw), generate(m, prompt, generator=make_gen(9), **kw)
    for f in ('ids', 'unmask_step', 'unmask_rank', 'logp_token', 'logp_pos', 'proposals', 'logp_prop'):
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    elsewhere = SimpleNamespace(device=torch.device('cuda'))          # a generator on another device than the model
    with pytest.raises(ValueError, match='generator is on cuda'): generate(m, prompt, generator=elsewhere, **kw)

def test_rollout_tensors_can_enter_autograd():
    "The records are ordinary tensors"
    m = MDLM(toy_model(0), Tok(1, (3, 4), 0), 'toy')
    r = generate(m, torch.randint(5, 100, (2, 4), generator=make_gen(0)), gen_length=8, block_length=8, steps=4, generator=make_gen(1))
    w = torch.ones(2, 8, requires_grad=True)
    (w * r.logp_pos * r.logp_token).sum().backward()
    assert not r.ids.is_inference() and w.grad is not None

def test_generation_builds_no_inference_tensors():
    "Forward passes run without gradients but outside inference mode: a cache a model builds there can enter a later backward"
    m = MDLM(toy_model(0), Tok(1, (3, 4), 0), 'toy')
    seen, cache = [], {}
    def hook(mod, args, out):
        seen.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled(), mod.training))
        if 'w' not in cache: cache['w'] = torch.randn(out.logits.shape[-1], generator=make_gen(0))   # built during generation
        return out
    m.model.register_forward_hook(hook)
    m.model.train()
    generate(m, torch.randint(5, 100, (2, 4), generator=make_gen(0)), gen_length=8, block_length=8, steps=4, generator=make_gen(1))
    assert seen == [(False, False, False)] * 4 and m.model.training          # no grad, no inference mode, eval mode; mode restored
    (m.logits(torch.tensor([[5, 6, 1]])).float().log_softmax(-1)[..., 10:] * cache['w'][10:]).sum().backward()
    assert not cache['w'].is_inference()

def test_long_canvas_refused_before_any_forward():
    m = MDLM(toy_model(0, max_len=24), Tok(1, (3, 4), 0), 'toy')
    calls = []
    m.model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match=r"a canvas of 26 tokens \(prompt 10 \+ gen_length 16\) is longer than the model's 24 "
                                         r"positions \(max_position_embeddings\): set max_prompt_len <= 8"):
        generate(m, torch.full((1, 10), 7), gen_length=16, block_length=8, steps=4)
    with pytest.raises(ValueError, match=r"use a canvas of at most 24 tokens"):
        generate(m, torch.full((1, 2), 7), gen_length=32, block_length=8, steps=4)
    assert calls == []
    r = generate(m, torch.full((1, 8), 7), gen_length=16, block_length=8, steps=4, generator=make_gen(0))
    assert r.ids.shape == (1, 24) and len(calls) == 4
