"Run every notebook under `nbs/` as a pytest case, exactly as `nbdev_test` does (same flags from settings.ini)."
import os, pytest
from pathlib import Path
from nbdev.config import get_config
from nbdev.test import test_nb as _run_nb

cfg = get_config()
NBS = sorted(p for p in Path(cfg.nbs_path).rglob('*.ipynb')
             if not any(part.startswith(('_', '.')) for part in p.relative_to(cfg.nbs_path).parts)
             and not (p.parent/'.notest').exists())
FLAGS = os.environ.get('MAPG_TEST_FLAGS', '').split()   # e.g. MAPG_TEST_FLAGS="slow" also runs the slow cells

@pytest.mark.parametrize('nb', NBS, ids=[str(p.relative_to(cfg.nbs_path)) for p in NBS])
def test_notebook(nb):
    skip = [f for f in cfg.tst_flags.split() if f not in FLAGS]
    ok, secs = _run_nb(nb, skip_flags=skip, force_flags=FLAGS, do_print=False, showerr=True, basepath=cfg.config_path)
    print(f"{nb.name}: {secs:.1f}s")
    assert ok, f"{nb.name} failed (the error is printed above)"
