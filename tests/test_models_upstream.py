"""`mapg.models`, the sampler and the likelihood on tiny checkpoints that run the real LLaDA and Dream remote code
(skipped, with one line, where `../shared/upstream_models` is absent) and on mapg's stand-ins of them: loading with
LoRA and checkpointing, forward, backward, generation, decoding; only real tokens sampled; generation that leaves the
model trainable; the length limit; dropout with checkpointing; seeded LoRA; 4-bit with LoRA exactly where it trains."""
import json, math
import pytest, torch, transformers
from upstream import tiny_checkpoint, UPSTREAM, KINDS, SOURCES
from mapg.core import make_gen, eval_mode
from mapg.models import load_model, checkpoint_errors
from mapg.standins import LLADA_TOKENS, DREAM_TOKENS
from mapg.sampler import generate
from mapg.likelihood import exact_log_probs
from nf4 import nf4_trains

torch.set_num_threads(1)
BOTH = [(k, s) for s in SOURCES for k in KINDS]
IDS = [f'{k}-{s}' for k, s in BOTH]
ROWS, N_TOKENS = {'llada': 126464, 'dream': 152064}, {'llada': 126349, 'dream': 151667}
TEXTS = ["Solve the 4x4 Sudoku 1.3.|.2.4|..1.|4..2 and answer in <answer></answer>.",
         "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. #### 72",
         "Using the numbers [3, 7, 25], create an equation that equals 46: <answer>25 + 3 * 7</answer>"]

def load(kind, source, **kw):
    return load_model(tiny_checkpoint(kind, source, **kw.pop('sizes', {})), dtype=torch.float32, device='cpu', **kw)

def prompt_ids(m, n=2):
    return torch.tensor([m.tokenizer(TEXTS[i % 3][:20], add_special_tokens=False)['input_ids'][:12] for i in range(n)])

@pytest.mark.parametrize('kind', KINDS)
def test_real_fields_vocabulary_and_tokenizer(kind):
    d = tiny_checkpoint(kind, 'real')
    cfg = json.loads((d/'config.json').read_text())
    for f in (UPSTREAM/kind).glob('*.py'): assert (d/f.name).read_bytes() == f.read_bytes()   # the unmodified code, copied
    if kind == 'llada':
        real = json.loads((UPSTREAM/'llada'/'config.json').read_text())
        sizes = {'d_model', 'n_layers', 'n_heads', 'n_kv_heads', 'mlp_hidden_size'}
        assert set(cfg) == set(real) and {k for k in real if cfg[k] != real[k]} == sizes
        assert (cfg['d_model'], cfg['n_layers'], cfg['vocab_size'], cfg['mask_token_id'], cfg['max_sequence_length']) == (32, 2, 126464, 126336, 4096)
    else:
        assert (cfg['architectures'], cfg['model_type'], cfg['vocab_size'], cfg['mask_token_id'], cfg['rope_theta']) == (['DreamModel'], 'Dream', 152064, 151666, 1e6)
        assert (cfg['bos_token_id'], cfg['eos_token_id'], cfg['pad_token_id'], cfg['tie_word_embeddings'], cfg['use_sliding_window']) == (151643,) * 3 + (False, False)
        assert cfg['num_key_value_heads'] < cfg['num_attention_heads']      # grouped-query attention
    m = load(kind, 'real')
    assert type(m.model).__module__.startswith('transformers_modules') and m.pads_ok
    assert (len(m.tokenizer), m.model.get_output_embeddings().weight.shape[0]) == (N_TOKENS[kind], ROWS[kind])
    if kind == 'llada':
        assert isinstance(m.tokenizer, transformers.PreTrainedTokenizerFast) and m.tokenizer.chat_template == json.loads(
            (UPSTREAM/'llada'/'tokenizer_config.json').read_text())['chat_template']
        assert [m.tokenizer.convert_tokens_to_ids(t) for t in ('<|startoftext|>', '<|endoftext|>', '<|mdm_mask|>', '<|eot_id|>')] == [126080, 126081, 126336, 126348]
        assert m.tokenizer.convert_ids_to_tokens(LLADA_TOKENS) == '<|startoftext|>'
    else:
        assert type(m.tokenizer).__name__ == 'DreamTokenizer'
        assert [m.tokenizer.convert_tokens_to_ids(t) for t in ('<|endoftext|>', '<|im_end|>', '<|beginoftext|>', '<|mask|>')] == [151643, 151645, 151665, 151666]
        assert m.tokenizer.convert_ids_to_tokens(DREAM_TOKENS) == '<|endoftext|>'
        with pytest.raises(TypeError): m.tokenizer.decode([151700])           # the real tokenizer raises on an id with no token
    assert m.decode([N_TOKENS[kind] + 5, ROWS[kind] - 1, 10**6, -1]) == ''      # the adapter drops such ids
    for t in TEXTS: assert m.decode(m.tokenizer(t, add_special_tokens=False)['input_ids']) == t
    chat = m.tokenizer.apply_chat_template([dict(role='user', content=TEXTS[0])], tokenize=False, add_generation_prompt=True)
    assert TEXTS[0] in chat and m.tokenizer.decode(m.tokenizer(chat, add_special_tokens=False)['input_ids']) == chat

@pytest.mark.parametrize('kind,source', BOTH, ids=IDS)
def test_load_forward_backward_generate_decode(kind, source):
    m = load(kind, source, lora=dict(r=4), grad_ckpt=True)
    assert (m.kind, m.grad_ckpt, m.n_tokens, len(m.lora_target_names())) == (kind, True, N_TOKENS[kind], 2 * 7)
    x = prompt_ids(m)
    r = generate(m, x, gen_length=8, block_length=4, steps=4, generator=make_gen(0), stepmerge_segments=2)
    assert r.completion.shape == (2, 8) and not (r.completion == m.mask_id).any()
    e = exact_log_probs(m, r)
    torch.testing.assert_close(e.token, r.logp_token, atol=2e-4, rtol=0)
    torch.testing.assert_close(e.pos, r.logp_pos, atol=2e-4, rtol=0)
    assert all(isinstance(m.decode(c), str) for c in r.completion)
    m.model.train()
    lg = m.logits(r.ids)
    assert lg.shape == (2, r.ids.shape[1], ROWS[kind]) and torch.isinf(lg[0, 0]).sum() == len(m.excluded) + ROWS[kind] - N_TOKENS[kind]
    lg.float().log_softmax(-1).gather(-1, r.ids[..., None]).mean().backward()
    grads = [p.grad for n, p in m.model.named_parameters() if p.requires_grad]
    assert len(grads) == 2 * 7 * 2 and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(bool(g.abs().sum() > 0) for g in grads) == len(grads) // 2   # every lora_B (lora_A's gradient is 0 while B is 0)

@pytest.mark.parametrize('kind,source', BOTH, ids=IDS)
def test_only_real_tokens_are_sampled(kind, source):
    "A head biased towards ids with no token and non-text special ids: the raw model prefers them, the sampler never draws them"
    m = load(kind, source)
    ban = m.banned(ROWS[kind])
    no_token = torch.arange(ROWS[kind]) >= N_TOKENS[kind]
    assert ban[no_token].all() and ban.sum() == len(m.excluded) + int(no_token.sum())
    assert not ban[list(m.eos_ids)].any() and ban[m.mask_id]
    bias = torch.where(ban, 30., 0.)
    m.model.get_output_embeddings().register_forward_hook(lambda mod, a, out: out + bias)
    x = prompt_ids(m)
    with torch.no_grad(): raw = m.model(input_ids=torch.cat([x, torch.full((2, 8), m.mask_id)], 1)).logits
    assert ban[raw.argmax(-1)].all()                                          # unrestricted, the model would draw them
    for kw in (dict(temperature=1.0), dict(temperature=0., remasking='greedy', score='max_logprob'), dict(score='token_logprob')):
        r = generate(m, x, gen_length=8, block_length=8, steps=4, generator=make_gen(1), **kw)
        assert not ban[r.completion].any()
        e = exact_log_probs(m, r)                                             # the replay excludes the same ids
        torch.testing.assert_close(e.token, r.logp_token, atol=2e-4, rtol=0)
        torch.testing.assert_close(e.pos, r.logp_pos, atol=2e-4, rtol=0)
        assert all(isinstance(m.decode(c), str) for c in r.completion)

@pytest.mark.parametrize('source', SOURCES)
def test_generation_leaves_the_model_trainable(source):
    "LLaDA's code rebuilds its shared rotary cache for a canvas longer than max_sequence_length: never in inference mode"
    m = load('llada', source, sizes=dict(max_positions=32), lora=dict(r=4))
    calls = []
    m.model.get_base_model().register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match=r"a canvas of 38 tokens \(prompt 30 \+ gen_length 8\) is longer than the model's 32 "
                                         r"positions \(max_sequence_length\): set max_prompt_len <= 24"):
        generate(m, torch.full((1, 30), 40), gen_length=8, block_length=8, steps=2)
    assert calls == []                                                        # refused before any forward pass
    with pytest.raises(ValueError, match='longer than the model'): m.logits(torch.full((1, 33), 40))
    r = generate(m, torch.full((2, 24), 40), gen_length=8, block_length=8, steps=2, generator=make_gen(0))   # fits exactly
    with torch.no_grad(): m.model(input_ids=torch.full((1, 48), 40))          # the model's own cache, rebuilt longer
    m.model.train()
    m.logits(r.ids[:, :10]).float().logsumexp(-1).mean().backward()          # a later backward still works
    assert all(p.grad is not None for n, p in m.model.named_parameters() if 'lora_B' in n)
    if source == 'real':                                                      # what generation under inference_mode did
        m2 = load('llada', 'real', sizes=dict(max_positions=32))
        with torch.inference_mode(): m2.model(input_ids=torch.full((1, 48), 40))
        with pytest.raises(RuntimeError, match='[Ii]nference tensors'):
            with torch.enable_grad(): m2.model.get_input_embeddings().weight.requires_grad_(); m2.logits(torch.full((1, 6), 40)).sum().backward()

def _grads(m, x, seed, under_eval=False):
    torch.manual_seed(seed)
    m.model.zero_grad()
    with eval_mode(m.model) if under_eval else torch.enable_grad():
        loss = m.logits(x).float().log_softmax(-1)[..., 40:90].logsumexp(-1).mean()
    with checkpoint_errors(): loss.backward()          # after eval_mode ended: the model is back in training mode
    return loss.detach(), {n: p.grad.clone() for n, p in m.model.named_parameters() if p.requires_grad}

@pytest.mark.parametrize('kind,source', BOTH + [('toy', 'toy')], ids=IDS + ['toy'])
def test_dropout_and_checkpointing_agree(kind, source):
    lora = dict(r=4, lora_dropout=0.3, init_lora_weights=False)   # nonzero B: dropout changes the loss
    m = load_model(kind='toy', device='cpu', lora=lora) if kind == 'toy' else load(kind, source, lora=lora)
    m.model.train()
    x = torch.randint(40, 90, (2, 12), generator=make_gen(3))
    l0, g0 = _grads(m, x, 0)
    assert not torch.equal(l0, _grads(m, x, 1)[0])                            # dropout is on: other draws, another loss
    for under_eval in (False, True):
        a, ga = _grads(m.set_grad_ckpt(False), x, 0, under_eval)
        b, gb = _grads(m.set_grad_ckpt(True), x, 0, under_eval)
        assert m.model.training
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
        for n in ga: torch.testing.assert_close(ga[n], gb[n], atol=1e-6, rtol=1e-5)
    e = _grads(m.set_grad_ckpt(True), x, 5, True)[0]
    with eval_mode(m.model), torch.no_grad(): ref = m.logits(x).float().log_softmax(-1)[..., 40:90].logsumexp(-1).mean()
    torch.testing.assert_close(e, ref, atol=1e-6, rtol=0)                     # under eval_mode: no dropout at all

@pytest.mark.parametrize('kind,source', [('llada', 'real'), ('dream', 'real'), ('llada', 'standin')], ids=['llada-real', 'dream-real', 'llada-standin'])
def test_lora_init_is_seeded(kind, source):
    lora = lambda m: {n: p.detach().clone() for n, p in m.model.named_parameters() if 'lora_' in n}
    a, b, c = (lora(load(kind, source, lora=dict(r=4), seed=s)) for s in (3, 3, 4))
    assert list(a) == list(b) and all(torch.equal(a[n], b[n]) for n in a)
    assert any(not torch.equal(a[n], c[n]) for n in a if 'lora_A' in n)

def test_4bit_lora_exactly_where_it_trains():
    "NF4 with LoRA loads exactly where this machine's bitsandbytes trains through the real code's NF4 layers (`nf4_trains`), else is refused naming the flag"
    pytest.importorskip('bitsandbytes')
    d = tiny_checkpoint('llada', 'real', hidden=64)                         # bitsandbytes' CPU kernel: sizes >= 64
    m = load_model(d, load_in_4bit=True, device='cpu')                        # no LoRA (evaluation): loads
    assert type(dict(m.model.named_modules())['model.transformer.blocks.0.q_proj']).__name__ == 'Linear4bit'
    lora4 = lambda: load_model(d, load_in_4bit=True, lora=dict(r=4), device='cpu')
    if nf4_trains(m, prompt_ids(m)): assert lora4().lora_target_names()
    else:
        with pytest.raises(RuntimeError, match=r"no gradient flows through bitsandbytes' NF4 layer .* use --load_in_4bit false"): lora4()
