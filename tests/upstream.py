"""Tiny LLaDA and Dream checkpoints for tests, built once per test session in a temporary folder.

- `real`: from the unmodified remote code of LLaDA-8B-Instruct and Dream-7B (`UPSTREAM`: `$MAPG_UPSTREAM`, else
  `<repo>/../shared/upstream_models`), through `mapg.standins.tiny_remote_checkpoint`: real config fields, vocabularies,
  special ids and a tokenizer stand-in, small width and depth. Where the folder is absent (a user's machine) the test
  that asks for one is skipped, with one line saying why.
- `standin`: mapg's own stand-ins (`tiny_llada`, `tiny_dream`) saved as remote-code checkpoints with the same tokenizer
  stand-in (`save_standin(..., tokenizer='family')`), so the same paths are tested everywhere.

    from upstream import tiny_checkpoint, SOURCES
    path = tiny_checkpoint('llada', 'real')               # or 'standin'; sizes: hidden, layers, heads, max_positions, seed
    m = load_model(path, dtype=torch.float32, device='cpu', lora=dict(r=4))
"""
import atexit, os, shutil, tempfile
from pathlib import Path
import pytest

UPSTREAM = Path(os.environ.get('MAPG_UPSTREAM') or Path(__file__).resolve().parents[1].parent/'shared'/'upstream_models')
KINDS, SOURCES = ('llada', 'dream'), ('real', 'standin')
SIZES = dict(hidden=32, layers=2, heads=4, max_positions=None, seed=0)   # the defaults of every checkpoint built here
_root, _built = [], {}

def _folder(name:str)->Path:
    "A fresh folder under this session's temporary root (removed at exit)"
    if not _root:
        _root.append(Path(tempfile.mkdtemp(prefix='mapg-tiny-')))
        atexit.register(shutil.rmtree, _root[0], True)
    return _root[0]/f'{name}-{len(_built)}'

def has_upstream(kind:str)->bool:
    "Whether the real remote code of `kind` is there"
    return (UPSTREAM/kind).is_dir()

def tiny_checkpoint(kind:str,          # 'llada' | 'dream'
                    source:str='real', # 'real': the upstream remote code (skips when absent); 'standin': mapg's stand-in
                    **sizes            # hidden, layers, heads, max_positions (LLaDA's max_sequence_length / Dream's positions), seed
                   )->Path:
    "Path of a tiny random checkpoint of `kind`, built on first use and cached for the session"
    from mapg.standins import tiny_remote_checkpoint, save_standin, tiny_llada, tiny_dream
    if kind not in KINDS or source not in SOURCES: raise ValueError(f"kind in {KINDS}, source in {SOURCES}; got {kind!r}, {source!r}")
    bad = set(sizes) - set(SIZES)
    if bad: raise TypeError(f"unknown sizes {sorted(bad)}: expected {sorted(SIZES)}")
    s = {**SIZES, **sizes}
    if source == 'real' and not has_upstream(kind):
        pytest.skip(f"the real {kind} remote code is not at {UPSTREAM/kind} (set MAPG_UPSTREAM to its folder)")
    key = (kind, source, tuple(sorted(s.items())))
    if key not in _built:
        out = _folder(f'{kind}-{source}')
        if source == 'real': tiny_remote_checkpoint(kind, UPSTREAM/kind, out, **s)
        else:
            h, n = s['hidden'], s['max_positions']
            if kind == 'llada': m = tiny_llada(s['seed'], d_model=h, n_layers=s['layers'], n_heads=s['heads'], mlp_hidden_size=3 * h,
                                               **({'max_sequence_length': n} if n else {}))
            else: m = tiny_dream(s['seed'], hidden=h, layers=s['layers'], heads=s['heads'], **({'max_position_embeddings': n} if n else {}))
            save_standin(m, out, tokenizer='family')
        _built[key] = out
    return _built[key]
