"""Checks of `mapg.models` against checkpoints built like LLaDA's and Dream's: remote code named by `auto_map`, the family
read from config.json, the declared `transformers`, construction quirks, activation checkpointing, padding detection."""
import configparser, inspect, json, re, sys
from pathlib import Path
import pytest, torch, transformers
from packaging.specifiers import SpecifierSet
from transformers import PreTrainedModel
from mapg.core import Tok, make_gen, save_toy, toy_tokenizer
import mapg.standins as ms
from mapg.models import MDLM, add_lora, infer_kind, kind_from_config, load_model
from mapg.compat import TRANSFORMERS_RANGE, ROPE_INIT_FUNCTIONS, check_rotary, check_transformers
from mapg.standins import llada_shaped, save_standin, tiny_dream, tiny_llada
from mapg.core import toy_model
from conftest import run_child

def finite_close(a, b, atol):
    a, b = a.detach().float(), b.detach().float()
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    torch.testing.assert_close(a[torch.isfinite(a)], b[torch.isfinite(b)], atol=atol, rtol=0)

STANDINS = {'llada': tiny_llada, 'dream': tiny_dream}

@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    "Both stand-ins saved as remote-code checkpoints, in folders whose names say nothing of their family"
    root = tmp_path_factory.mktemp('ckpts')
    return {k: save_standin(mk(0), root/f'model{i}', toy_tokenizer()) for i, (k, mk) in enumerate(STANDINS.items())}

def test_declared_transformers_is_the_checked_one():
    cfg = configparser.ConfigParser(); cfg.read(Path(__file__).parents[1]/'settings.ini')
    reqs = cfg['DEFAULT']['requirements'].split()
    assert f'transformers{TRANSFORMERS_RANGE}' in reqs
    assert transformers.__version__ in SpecifierSet(TRANSFORMERS_RANGE)   # the environment is on the declared versions
    for v in ('4.57.1', '5.0.0', '5.24.0'):                              # 5.x: the remote code is adapted at load time
        for k in ('llada', 'dream'): check_transformers(k, v)
    for v in ('4.56.2', '6.0.0'):
        for k in ('llada', 'dream'):
            with pytest.raises(RuntimeError, match=re.escape(f"pip install 'transformers{TRANSFORMERS_RANGE}'")): check_transformers(k, v)
        check_transformers('toy', v)

@pytest.mark.parametrize('kind', list(STANDINS))
def test_remote_code_standin_loads_by_config(saved, kind):
    d = saved[kind]
    cfg = json.loads((d/'config.json').read_text())
    assert set(cfg['auto_map']) == {'AutoConfig', 'AutoModel'} and (d/f"{cfg['auto_map']['AutoModel'].split('.')[0]}.py").exists()
    assert infer_kind(d) == kind
    m = load_model(d, dtype=torch.float32, device='cpu', lora=dict(r=2), grad_ckpt=True)
    assert (m.kind, m.pads_ok, m.grad_ckpt) == (kind, True, True)
    base = m.model.get_base_model()
    assert type(base).__module__.startswith('transformers_modules') and type(base).__name__ == cfg['architectures'][0]
    assert len(m.lora_target_names()) == 2 * 7
    x = torch.randint(10, 1000, (2, 7), generator=make_gen(0))
    same = MDLM(STANDINS[kind](0).model, m.tok, kind, m.tokenizer)   # the same ids and tokenizer: the same ids excluded
    with torch.no_grad(): finite_close(m.logits(x), same.logits(x), 1e-5)   # LoRA B starts at zero

def test_kind_from_config_then_name(tmp_path):
    assert kind_from_config({'model_type': 'Dream', 'architectures': ['DreamModel']}) == 'dream'     # DiffuCoder
    assert kind_from_config({'model_type': 'llada', 'architectures': ['LLaDAModelLM']}) == 'llada'   # LLaDA-1.5
    assert kind_from_config({'auto_map': {'AutoModel': 'modeling_llada.LLaDAModelLM', 'AutoTokenizer': [None, 'x']}}) == 'llada'
    assert kind_from_config({'model_type': 'distilbert', 'architectures': ['DistilBertForMaskedLM']}) == 'hf-mlm'
    assert kind_from_config({'model_type': 'qwen2'}) is None
    d = save_standin(tiny_dream(0), tmp_path/'DiffuCoder-7B-cpGRPO', toy_tokenizer())   # a Dream-architecture model
    assert infer_kind(d) == 'dream'
    d = save_standin(tiny_llada(0), tmp_path/'LLaDA-1.5', toy_tokenizer())
    assert infer_kind(d) == 'llada'
    assert infer_kind(save_toy(tmp_path/'dream-distilled-bert')) == 'hf-mlm'   # the config wins over the name
    assert [infer_kind(tmp_path/n) for n in ('no-LLaDA-here', 'some-dream', 'plain')] == ['llada', 'dream', 'hf-mlm']

def test_remote_code_needs_trust(saved):
    "In a fresh process: a remote-code load registers its classes with the Auto classes for the rest of its process"
    code = (f"import transformers\ntry: transformers.AutoModel.from_pretrained({str(saved['llada'])!r}, trust_remote_code=False)\n"
            "except ValueError as e: print('refused', 'trust_remote_code' in str(e))")
    out = run_child([sys.executable, '-c', code])
    assert 'refused True' in out.stdout, out.stdout + out.stderr[-2000:]

def test_version_guard_before_loading(saved, monkeypatch):
    monkeypatch.setattr(sys.modules['transformers'], '__version__', '6.1.0')   # the module object loading may have replaced
    for k, d in saved.items():
        with pytest.raises(RuntimeError, match=r'transformers>=4\.57\.1,<6 .*installed: 6\.1\.0\)'): load_model(d, device='cpu')

def test_llada_construction_quirks():
    calls = []
    real = PreTrainedModel.post_init
    def spy(self): calls.append(type(self).__name__); return real(self)
    PreTrainedModel.post_init = spy
    try: tiny_llada(0); tiny_dream(0)
    finally: PreTrainedModel.post_init = real
    assert calls == ['TinyDream']                     # LLaDA's model class never calls post_init
    m = tiny_llada(0)
    with pytest.raises(ValueError, match='does not support gradient checkpointing'): m.model.gradient_checkpointing_enable()
    assert list(inspect.signature(m.model.tie_weights).parameters) == []
    del m.model.config.use_cache
    with pytest.raises(AttributeError, match='use_cache'): m.logits(torch.tensor([[5, 6]]))

def test_dream_rotary_quirks(saved, monkeypatch):
    monkeypatch.delitem(ROPE_INIT_FUNCTIONS, 'default')            # transformers 5's rope table: built as mapg builds Dream under 5.x
    check_rotary(tiny_dream(0).model)                               # its rotary table is the one its config defines
    assert 'default' not in ROPE_INIT_FUNCTIONS                   # 'default' is put back only while the model is built
    monkeypatch.undo()
    class Uninitialised(ms._DreamRotary):                          # a rotary buffer that loading never fills
        def __init__(self, config, device=None):
            super().__init__(config, device)
            self.inv_freq = torch.empty_like(self.inv_freq).fill_(7.)
    monkeypatch.setattr(ms, '_DreamRotary', Uninitialised)
    with pytest.raises(RuntimeError, match=r'model\.rotary_emb\.inv_freq. .*never initialised'): load_model(saved['dream'], device='cpu')

def test_rotary_check_passes_on_correct_models():
    check_rotary(tiny_dream(0).model)
    check_rotary(llada_shaped(hidden=32, layers=1, heads=4, intermediate=64, device='cpu').model)

BUILDERS = {
    'toy': lambda: MDLM(toy_model(0), Tok(1, (3,)), 'toy'),
    'llada': lambda: tiny_llada(0),
    'dream': lambda: tiny_dream(0),
    'llama': lambda: llada_shaped(hidden=32, layers=2, heads=4, intermediate=64, dtype=torch.float32, device='cpu'),
}

def _loss_grads(m, x, seed=0):
    torch.manual_seed(seed)
    m.model.zero_grad()
    loss = torch.log_softmax(m.logits(x).float(), -1)[..., 5:90].logsumexp(-1).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in m.model.named_parameters() if p.requires_grad}

def _n_saved(m, x):
    n = [0]
    def pack(t): n[0] += 1; return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t): m.logits(x).float().sum()
    return n[0]

@pytest.mark.parametrize('kind', list(BUILDERS))
def test_checkpointing_same_loss_and_grads(kind):
    m = add_lora(BUILDERS[kind](), r=4, lora_alpha=8, lora_dropout=0.1)
    m.model.train()                                                   # dropout on: the recomputation must replay it
    x = torch.randint(5, 90, (2, 12), generator=make_gen(1))
    l0, g0 = _loss_grads(m, x); n0 = _n_saved(m, x)
    assert m.set_grad_ckpt(True).grad_ckpt
    l1, g1 = _loss_grads(m, x); n1 = _n_saved(m, x)
    torch.testing.assert_close(l0, l1, rtol=0, atol=1e-6)
    assert g0.keys() == g1.keys() and len(g0) == 2 * len(m.lora_target_names())   # lora_A and lora_B
    for n in g0: torch.testing.assert_close(g0[n], g1[n], rtol=1e-5, atol=1e-7)
    assert n1 < n0 / 2, (n0, n1)                                      # the blocks' activations are recomputed
    m.set_grad_ckpt(False)
    assert not m.grad_ckpt and _n_saved(m, x) == n0

def test_checkpointing_with_padding_and_full_finetune():
    m = tiny_dream(0).set_grad_ckpt(True)
    m.model.train()
    x = torch.randint(10, 1000, (2, 8), generator=make_gen(2))
    attn = torch.arange(8)[None] >= torch.tensor([[0], [3]])
    kw = m.forward_kwargs(attn)
    m.forward(x, **kw)[..., :500].logsumexp(-1).sum().backward()
    assert all(p.grad is not None for p in m.model.parameters() if p.requires_grad)

def test_llama_stays_bidirectional_without_kv_cache():
    m = llada_shaped(hidden=32, layers=2, heads=4, intermediate=64, dtype=torch.float32, device='cpu').set_grad_ckpt(True)
    assert m.model.config.use_cache is False
    x = torch.randint(10, 1000, (1, 8), generator=make_gen(3)); y = x.clone(); y[0, -1] += 1
    with torch.no_grad(): assert (m.logits(y)[0, 0, :1000] - m.logits(x)[0, 0, :1000]).abs().max() > 1e-4

def test_llada_revision_that_ignores_the_mask_is_refused(tmp_path):
    old = load_model(save_standin(tiny_llada(0, honours_attention_mask=False), tmp_path/'a', toy_tokenizer()), device='cpu',
                     dtype=torch.float32)
    new = load_model(save_standin(tiny_llada(0), tmp_path/'b', toy_tokenizer()), device='cpu', dtype=torch.float32)
    assert (old.pads_ok, new.pads_ok) == (False, True)
    x = torch.randint(10, 1000, (2, 6), generator=make_gen(4))
    attn = torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad(): finite_close(old.logits(x, attn), new.logits(x), 1e-5)   # unpadded batches run as before
    attn[1, :2] = False
    with pytest.raises(ValueError, match=r"ignores the attention mask.*revision=.*discussion #13"): old.logits(x, attn)
    with pytest.raises(ValueError, match='ignores the attention mask'): add_lora(old, r=2).forward_kwargs(attn)
    with torch.no_grad():
        xp = torch.cat([torch.full((1, 2), 126081), x[:1]], 1)
        finite_close(new.logits(xp, torch.arange(8)[None] >= 2)[:, 2:], new.logits(x[:1]), 1e-4)

def test_toy_size():
    m = load_model(None, kind='toy', device='cpu', toy_size=dict(hidden=32, layers=3, heads=2, intermediate=40), grad_ckpt=True)
    c = m.model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size) == (32, 3, 2, 40)
    assert m.grad_ckpt and len(m.lora_target_names()) == 3 * 6
    assert load_model(None, kind='toy', device='cpu', toy_size=dict(hidden=32)).model.config.intermediate_size == 128
    with pytest.raises(TypeError): load_model(None, kind='toy', device='cpu', toy_size=dict(width=3))
