"""What `load_model` adapts in the real remote code of LLaDA and Dream under transformers 5 (the table in the compat page,
*Versions*), each change checked on a tiny checkpoint built from that code (`tests/upstream.py`), and the adapted models
giving the logits the unadapted code gives under transformers 4.57. CI runs this file in its second leg, with a
transformers 5 overlay in front of the dev environment (`.ci/run`); the 4.57 reference runs in a subprocess without the
overlay. Under transformers 4 the file is skipped, with one line."""
import json, os, shutil, sys
import pytest, torch, transformers
from safetensors.torch import load_file
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from upstream import tiny_checkpoint, UPSTREAM, KINDS
from mapg.models import load_model
from mapg.compat import check_rotary
from conftest import run_child

pytestmark = pytest.mark.skipif(int(transformers.__version__.split('.')[0]) < 5,
                                reason=f"runs under transformers 5 (CI's second leg); installed: {transformers.__version__}")
torch.set_num_threads(1)
X = {'llada': [[126080, 40, 41, 42, 126336, 126336], [50, 51, 52, 53, 126336, 126336]],
     'dream': [[151644, 40, 41, 42, 151666, 151666], [50, 51, 52, 53, 151666, 151666]]}
COLS = slice(None, None, 997)     # every 997th vocabulary column (and the argmax over all of them) is compared

def logits(m, kind):
    with torch.no_grad(): lg = m.logits(torch.tensor(X[kind])).float()
    return lg[..., COLS], lg.argmax(-1)

REF = """import json, sys, torch, transformers
from mapg.models import load_model
out = {'version': transformers.__version__}
for kind, path, x in json.loads(sys.argv[1]):
    m = load_model(path, dtype=torch.float32, device='cpu')
    with torch.no_grad(): lg = m.logits(torch.tensor(x)).float()
    out[kind] = [lg[..., ::997].tolist(), lg.argmax(-1).tolist(), list(m.adapted)]
print(json.dumps(out))"""

@pytest.fixture(scope='module')
def under_4():
    "The logits of both tiny checkpoints under transformers 4 ($MAPG_TF4_PYTHON, else this interpreter without $PYTHONPATH)"
    jobs = [(k, str(tiny_checkpoint(k, 'real')), X[k]) for k in KINDS]
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'} | {'OMP_NUM_THREADS': '1'}
    p = run_child([os.environ.get('MAPG_TF4_PYTHON', sys.executable), '-c', REF, json.dumps(jobs)], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if not out['version'].startswith('4.'): pytest.skip(f"no transformers 4 to compare with (found {out['version']}): set MAPG_TF4_PYTHON")
    return out

def same_as_4(m, kind, under_4):
    lg, am = logits(m, kind)
    ref, ref_am, ref_adapted = under_4[kind]
    assert ref_adapted == []                                                  # under 4.x the code runs as it is
    torch.testing.assert_close(lg, torch.tensor(ref), atol=2e-5, rtol=1e-5)
    assert am.tolist() == ref_am

def test_llada_loads_adapted(capsys, under_4):
    path = tiny_checkpoint('llada', 'real')
    m = load_model(path, dtype=torch.float32, device='cpu')
    assert set(m.adapted) == {'config.use_cache=False', 'LLaDAModelLM.tie_weights(**kwargs)', 'post_init'}
    lines = [l for l in capsys.readouterr().out.splitlines() if 'adapted' in l]
    assert lines == [f"LLaDAModelLM (llada): its code adapted to transformers {transformers.__version__}: {', '.join(m.adapted)}"]
    base = m.model
    assert type(base).__module__.startswith('transformers_modules') and type(base).__name__ == 'LLaDAModelLM'
    assert base.config.use_cache is False and base.all_tied_weights_keys == {}  # what post_init registers, registered
    for f in ('modeling_llada.py', 'configuration_llada.py'): assert (path/f).read_bytes() == (UPSTREAM/'llada'/f).read_bytes()
    saved = load_file(str(path/'model.safetensors'))                        # post_init ran without re-initialising weights
    assert all(torch.equal(p, saved[n]) for n, p in base.state_dict().items() if n in saved) and len(saved) == len(base.state_dict())
    same_as_4(m, 'llada', under_4)

def test_dream_loads_adapted(under_4):
    m = load_model(tiny_checkpoint('dream', 'real'), dtype=torch.float32, device='cpu')
    n_rotary = 1 + 2                                                          # the model's and each of its 2 layers'
    assert m.adapted == ('DreamGenerationConfig.validate(**kwargs)', "rope 'default'", f'rotary inv_freq recomputed ({n_rotary} modules)')
    assert 'default' not in ROPE_INIT_FUNCTIONS                               # transformers' table as it was
    check_rotary(m.model)
    gc = m.model.generation_config                                            # Dream's from_pretrained replaced it
    assert type(gc).__name__ == 'DreamGenerationConfig'
    gc.update(steps=8)                                                        # calls validate with transformers 5's keywords
    x = torch.tensor(X['dream'][:1])[:, :4]                                   # Dream's own generation (its mixin) runs too
    out = m.model.diffusion_generate(x, generation_config=gc, max_new_tokens=4, steps=4, return_dict_in_generate=True)
    assert out.sequences.shape == (1, 8) and (out.sequences[:, 4:] != m.mask_id).all()
    same_as_4(m, 'dream', under_4)

@pytest.mark.parametrize('kind', KINDS)
def test_dtype_and_same_logits_as_4x(kind, under_4):
    "`dtype` (4.57 and 5.x both take it) loads bf16 weights; the rotary frequencies stay float32; float32 matches 4.57"
    m = load_model(tiny_checkpoint(kind, 'real'), dtype=torch.bfloat16, device='cpu')
    assert {p.dtype for p in m.model.parameters()} == {torch.bfloat16}
    check_rotary(m.model)
    same_as_4(load_model(tiny_checkpoint(kind, 'real'), dtype=torch.float32, device='cpu'), kind, under_4)

def test_unadaptable_code_is_refused(tmp_path):
    "Code that imports a helper removed in transformers 5 is refused, naming the version and the fix"
    d = shutil.copytree(tiny_checkpoint('llada', 'real'), tmp_path/'llada-old-helper')
    f = d/'modeling_llada.py'
    f.write_text(f.read_text().replace('from transformers.cache_utils import Cache\n', 'from transformers.cache_utils import Cache\n'
                                       'from transformers.pytorch_utils import find_pruneable_heads_and_indices\n', 1))
    with pytest.raises(RuntimeError, match=rf"llada's modelling code in .* does not load under transformers {transformers.__version__}, "
                                           r"even with what mapg adapts .*ImportError.*find_pruneable_heads_and_indices.*"
                                           r"pip install 'transformers>=4.57.1,<5'"):
        load_model(d, dtype=torch.float32, device='cpu')
