"Checks of `mapg.models` on tiny locally built checkpoints: loading per kind, padding, LoRA, 4-bit, missing optional packages."
import importlib.util, re
import pytest, torch, transformers
from mapg.core import toy_tokenizer, save_toy, make_gen
from mapg.models import MDLM, load_model, add_lora
from mapg.families import FAMILIES, lora_target_names, lora_regex
from mapg.standins import tiny_llada, tiny_dream, llada_shaped
from mapg.core import seeded
from nf4 import nf4_trains

def finite_close(a, b, atol):
    a, b = a.detach().float(), b.detach().float()
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    torch.testing.assert_close(a[torch.isfinite(a)], b[torch.isfinite(b)], atol=atol, rtol=0)

TINY_MLMS = {
    'bert': lambda: transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=104, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=64, max_position_embeddings=64, pad_token_id=0)),
    'roberta': lambda: transformers.RobertaForMaskedLM(transformers.RobertaConfig(vocab_size=104, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=64, max_position_embeddings=66, pad_token_id=0)),
    'distilbert': lambda: transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(vocab_size=104, dim=32, n_layers=2,
                n_heads=2, hidden_dim=64, max_position_embeddings=64, pad_token_id=0)),
}

@pytest.fixture(params=list(TINY_MLMS))
def saved_mlm(request, tmp_path):
    "A tiny AutoModelForMaskedLM of one architecture, saved with the toy tokenizer"
    seeded(0, TINY_MLMS[request.param]).save_pretrained(tmp_path)
    toy_tokenizer().save_pretrained(tmp_path)
    return tmp_path

def test_hf_mlm_loads_and_pads(saved_mlm):
    m = load_model(saved_mlm, kind='hf-mlm', dtype=torch.float32, device='cpu')
    assert (m.kind, m.mask_id, m.eos_ids, m.pad_id) == ('hf-mlm', 1, (3,), 0)
    x = torch.tensor([[40, 41, 42, 1, 1]])
    xp = torch.cat([torch.zeros(1, 3, dtype=torch.long), x], 1)
    attn = torch.arange(8)[None] >= 3
    with torch.no_grad(): finite_close(m.logits(xp, attn)[:, 3:], m.logits(x), 1e-5)
    names = m.lora_target_names()
    assert names and all('.layer.' in n for n in names)
    lm = add_lora(m, r=2)
    assert lm.model.peft_config['default'].r == 2

def test_auto_kind_and_errors(tmp_path):
    save_toy(tmp_path)
    assert load_model(tmp_path, kind='toy', device='cpu').kind == 'toy'
    assert load_model(tmp_path, device='cpu').kind == 'hf-mlm'          # a path names no family: a plain masked LM
    with pytest.raises(ValueError, match='unknown kind'): load_model(tmp_path, kind='bert')

def test_lora_defaults_and_gradients():
    m = load_model(kind='toy', device='cpu', lora=True)
    cfg = m.model.peft_config['default']
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout) == (128, 64, 0.05)
    trainable = {n for n, p in m.model.named_parameters() if p.requires_grad}
    assert trainable and all('lora_' in n for n in trainable)
    m.model.train()
    lg = m.logits(torch.tensor([[40, 41, 1, 1]]))
    lg[..., 40].sum().backward()   # an ordinary token (special ids such as 5 are excluded: -inf, no gradient)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in m.model.named_parameters() if 'lora_A' in n or 'lora_B' in n)

def test_lora_regex_matches_exactly_the_targets():
    for m in (tiny_llada(0), tiny_dream(0), llada_shaped(32, 2, 4, 64, device='cpu')):
        rx = lora_regex(m.model, m.kind)
        assert [n for n, _ in m.model.named_modules() if re.fullmatch(rx, n)] == m.lora_target_names()
    assert len(tiny_llada(0).lora_target_names()) == 2 * len(FAMILIES['llada'].lora)

def test_llada_standin_masks_padding_keys():
    "LLaDA's forward takes the mask but no position ids: pad tokens are ignored, positions are not shifted back"
    m = tiny_llada(0)
    assert (m.takes_attn, m.takes_pos) == (True, False)
    x = torch.randint(10, 1000, (1, 6), generator=make_gen(0))
    attn = torch.arange(9)[None] >= 3
    a, b = torch.cat([torch.zeros(1, 3, dtype=torch.long), x], 1), torch.cat([torch.full((1, 3), 7), x], 1)
    with torch.no_grad(): finite_close(m.logits(a, attn)[:, 3:], m.logits(b, attn)[:, 3:], 1e-5)

def test_4bit_toy_with_lora(tmp_path):
    pytest.importorskip('bitsandbytes')
    save_toy(tmp_path)
    m4 = add_lora(load_model(tmp_path, kind='toy', load_in_4bit=True, device='cpu'), r=4)   # no probe: bitsandbytes' CPU backend may refuse to train
    mf = load_model(tmp_path, kind='toy', device='cpu')
    base = m4.model.get_base_model()
    kinds = {type(mod.base_layer).__name__ for n, mod in base.named_modules() if hasattr(mod, 'base_layer') and 'lora' not in n}
    assert kinds == {'Linear4bit'}
    assert len(m4.lora_target_names()) == len(mf.lora_target_names()) == 12
    x = torch.tensor([[40, 41, 42, 1, 1, 1]])
    with torch.no_grad(): a, b = m4.logits(x), mf.logits(x)
    finite_close(a, b, 0.25 * b[torch.isfinite(b)].abs().max().item())   # NF4 error on a 64-wide toy: a fraction of the logit scale

def test_4bit_probe_decides_what_training_does(tmp_path):
    "load_model's NF4 probe accepts LoRA exactly where a rollout pass then an update's backward train every NF4 layer's input"
    pytest.importorskip('bitsandbytes')
    save_toy(tmp_path)
    trains = nf4_trains(load_model(tmp_path, kind='toy', load_in_4bit=True, device='cpu'), torch.tensor([[40, 41, 42, 1, 1, 1]]))
    lora4 = lambda: load_model(tmp_path, kind='toy', load_in_4bit=True, lora=dict(r=4), device='cpu')
    if trains: assert lora4().lora_target_names()
    else:
        with pytest.raises(RuntimeError, match=r"no gradient flows through bitsandbytes' NF4 layer .* use --load_in_4bit false"): lora4()

def test_missing_optional_packages_raise_clearly(monkeypatch, tmp_path):
    save_toy(tmp_path)
    real = importlib.util.find_spec
    for pkg, kw in (('bitsandbytes', dict(load_in_4bit=True)), ('peft', dict(lora=True))):
        monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a, _p=pkg: None if name == _p else real(name, *a))
        with pytest.raises(ImportError, match=f'pip install {pkg}'): load_model(tmp_path, kind='toy', device='cpu', **kw)
        monkeypatch.setattr(importlib.util, 'find_spec', real)

def test_llada_shaped_defaults_are_llada_8b():
    "The default shapes, checked on the meta device (no memory): about 8 billion parameters"
    m = llada_shaped(device='meta')
    cfg = m.model.config
    shapes = (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.intermediate_size, cfg.vocab_size)
    assert shapes == (4096, 32, 32, 12288, 126464)
    n = sum(p.numel() for p in m.model.parameters())
    assert 7.5e9 < n < 8.5e9, n
    assert next(m.model.parameters()).dtype == torch.bfloat16
