"""End-to-end: the policy gradient built from `generate` + `exact_log_probs` + the REINFORCE loss is unbiased.

On a tiny masked diffusion LM (3 completion positions, 2 proposable tokens, one position kept per step) every
trajectory can be enumerated: `mapg.mdp.exact_pg` gives the exact gradient of J and its token and position parts with
respect to every weight of the model. The Monte-Carlo estimate from the library's own sampling and scoring path must
converge to the full gradient, and the token-only estimate to the token part, missing the position part."""
import math
import pytest, torch
from torch.func import functional_call
from mapg.core import Tok, sharp_toy, toy_model, make_gen
from mapg.models import MDLM
from mapg.sampler import generate
from mapg.likelihood import exact_log_probs, stepmerge_log_probs
from mapg.objectives import rloo_loss, gspo_loss
from mapg.mdp import TinyMDP, exact_pg

IDS = (0, 2)               # proposable token ids (1 is [MASK], never proposed)
PROMPT = torch.tensor([2, 0])
SET = dict(gen_length=3, block_length=3, steps=3, temperature=0.9, pos_temperature=0.5)

def reward_ids(x):         # on token ids of the completion
    return float(x[0] == 2) + 0.5 * float(x[2] == 0)

def tiny(seed=3, scale=1.):
    return MDLM(sharp_toy(seed, scale, max_len=8).double(), Tok(mask_id=1, eos_ids=(), pad_id=0), 'toy')

def exact_grads(m, score):
    "J and the exact gradient parts with respect to the flattened weights, by enumeration (mapg.mdp)"
    names = [n for n, _ in m.model.named_parameters()]
    shapes = [p.shape for _, p in m.model.named_parameters()]
    theta0 = torch.cat([p.detach().flatten() for p in m.model.parameters()])
    def make_policy(theta):
        params = dict(zip(names, [t.view(s) for t, s in zip(theta.split([math.prod(s) for s in shapes]), shapes)]))
        def policy(z):
            ids = torch.cat([PROMPT, torch.tensor([m.mask_id if t is None else IDS[t] for t in z])])[None]
            return functional_call(m.model, params, args=(), kwargs=dict(input_ids=ids)).logits[0, len(PROMPT):][:, list(IDS)]
        return policy
    mdp = TinyMDP(n=3, V=2, ks=(1, 1, 1), reward=lambda x: reward_ids([IDS[t] for t in x]))
    return exact_pg(mdp, make_policy, theta0, score=score, tau=SET['pos_temperature'], tok_tau=SET['temperature'])

def mc_grads(m, score, n_chunks, chunk):
    "Per-chunk REINFORCE estimates of grad J through generate -> exact_log_probs -> rloo_loss(reduce='sum'): (full, token-only)"
    gen, full, tok = make_gen(0), [], []
    for _ in range(n_chunks):
        r = generate(m, PROMPT.expand(chunk, 2), score=score, generator=gen, **SET)
        R = torch.tensor([reward_ids(x) for x in r.completion.tolist()], dtype=torch.float64)
        e = exact_log_probs(m, r)
        lt, lp = e.token, e.pos
        for pos_weight, out in ((1., full), (0., tok)):
            m.model.zero_grad()
            loss, _ = rloo_loss(lt, None, lp, None, torch.ones_like(lt, dtype=torch.bool), R, pos_weight=pos_weight, reduce='sum')
            loss.backward(retain_graph=True)
            out.append(-torch.cat([p.grad.flatten() for p in m.model.parameters()]))
    return torch.stack(full), torch.stack(tok)    # [n_chunks, n_params] each

@pytest.mark.parametrize('score', ['max_logit', 'max_logprob'])
def test_policy_gradient_unbiased(score):
    m = tiny()
    ex = exact_grads(m, score)
    g, g_tok, g_pos = ex['grad'], ex['grad_token'], ex['grad_position']
    assert torch.allclose(g, g_tok + g_pos, atol=1e-12)
    full, tok = mc_grads(m, score, 30, 500)
    d_pos = g_pos / g_pos.norm()
    dirs = torch.cat([d_pos[None], torch.nn.functional.normalize(torch.randn(8, g.numel(), generator=make_gen(1), dtype=torch.float64), dim=1)])
    def proj(est): p = est @ dirs.T; return p.mean(0), p.std(0) / math.sqrt(len(p))
    f_mean, f_se = proj(full)
    t_mean, t_se = proj(tok)
    ex_full, ex_tok = dirs @ g, dirs @ g_tok
    print(f"\n{score}: along the position part: exact {ex_full[0]:.4f}, MC full {f_mean[0]:.4f}±{f_se[0]:.4f}, "
          f"exact token part {ex_tok[0]:.4f}, MC token-only {t_mean[0]:.4f}±{t_se[0]:.4f}")
    assert ((f_mean - ex_full).abs() <= 5 * f_se).all(), (f_mean, ex_full, f_se)
    assert ((t_mean - ex_tok).abs() <= 5 * t_se).all(), (t_mean, ex_tok, t_se)
    assert (t_mean[0] - ex_full[0]).abs() > 8 * t_se[0]        # token-only misses the position direction

def test_ratio_is_one_at_first_update():
    "Old log-probs (no grad, at sampling time) and new ones (with grad, model in train mode with dropout) agree"
    net = toy_model(0, vocab_size=3, hidden=16, layers=1, heads=2, max_len=16)
    net.config.hidden_dropout_prob = 0.3
    for mod in net.modules():
        if isinstance(mod, torch.nn.Dropout): mod.p = 0.3
    m = MDLM(net, Tok(mask_id=1, eos_ids=(0,), pad_id=0), 'toy')
    r = generate(m, torch.tensor([[2, 0, 2]] * 4), gen_length=8, block_length=4, steps=8, generator=make_gen(0))
    with torch.no_grad(): old = stepmerge_log_probs(m, r, 4)
    old_t, old_p = old.token, old.pos
    net.train()
    new = stepmerge_log_probs(m, r, 4, segments=torch.tensor([[0, 2]] * 4))
    lt, lp, counted = new.token, new.pos, new.counted
    assert net.training and lt.requires_grad
    loss, met = gspo_loss(lt, old_t, lp, old_p, counted, torch.tensor([1., -1., 0.5, 0.]))
    assert abs(met['ratio_token'] - 1) < 1e-6 and abs(met['ratio_pos'] - 1) < 1e-6
    assert met['clip_frac_token'] == 0 and met['clip_frac_pos'] == 0
