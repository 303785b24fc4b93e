"""The GPU check's environment in one folder: the wheels a lent GPU machine lacks, pinned by `constraints.txt`, and the
real modelling code of LLaDA and Dream, prepared here (where the package registry can be reached) for a machine that
reaches nothing.

    python scripts/gpu_env.py                       # writes .gpuenv/ (ignored by git) and prints its sizes
    python scripts/gpu_env.py --check               # lists what would go, downloads nothing

The folder holds `wheels/` (every package of mapg's runtime closure that the GPU image lacks, plus the pinned
transformers, tokenizers, huggingface-hub and peft, whose versions decide how the remote code builds), `wheels_nf4/`
(bitsandbytes alone: about 43 MB, so it travels in a second call when the first is full), and `upstream/` (the
`llada/` and `dream/` folders of `$MAPG_UPSTREAM` or `../shared/upstream_models`). On the GPU machine, from the
repository's root:

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpuenv/wheels/*.whl && export PYTHONPATH=/tmp/site:$PWD MAPG_UPSTREAM=$PWD/.gpuenv/upstream

and, for NF4, the same line with `.gpuenv/wheels_nf4/*.whl`. The image's own torch and accelerate are used.
"""
import argparse, re, shutil, subprocess, sys
from importlib.metadata import distribution, PackageNotFoundError
from pathlib import Path
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT/'.gpuenv'
UPSTREAM = ROOT.parent/'shared'/'upstream_models'
# the GPU image's Python packages (the device tool's KINDS.md, read 2026-11-17): used from the image, never carried
IMAGE = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath
msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro onnx
onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken
timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp""".split())
# carried at the constraints' version even though the image has one: they decide how the remote code builds and loads
PINNED = {'transformers', 'tokenizers', 'huggingface-hub', 'peft'}
NF4 = {'bitsandbytes'}
# the GPU image's interpreter and platform tags
TAGS = ['--python-version', '3.12', '--implementation', 'cp', '--only-binary=:all:'] + [
    a for p in ('manylinux_2_35_x86_64', 'manylinux_2_34_x86_64', 'manylinux_2_28_x86_64', 'manylinux_2_24_x86_64',
                'manylinux_2_17_x86_64', 'manylinux2014_x86_64', 'manylinux1_x86_64', 'any') for a in ('--platform', p)]

def norm(name:str)->str: return re.sub(r'[-_.]+', '-', name).lower()

def pins(path:Path=ROOT/'constraints.txt')->dict:
    "Package -> version of a constraints file"
    return {norm(n): v for n, v in re.findall(r'^([A-Za-z0-9_.\-]+)==(\S+)', path.read_text(), re.M)}

def requirements(settings:Path=ROOT/'settings.ini')->list:
    "mapg's runtime requirements (settings.ini) and bitsandbytes for NF4"
    line = re.search(r'^requirements\s*=\s*(.*)$', settings.read_text(), re.M).group(1)
    return [Requirement(r).name for r in line.split()] + sorted(NF4)

def closure(names)->set:
    "Every package `names` need, read from the installed distributions' metadata (the set-up's environment)"
    seen, todo = set(), list(names)
    while todo:
        n = norm(todo.pop())
        if n in seen: continue
        seen.add(n)
        try: reqs = distribution(n).requires or []
        except PackageNotFoundError: raise SystemExit(f"error: {n} is not installed here: run the README's set-up first")
        for r in map(Requirement, reqs):
            if not r.marker or r.marker.evaluate({'extra': ''}): todo.append(r.name)
    return seen

def plan()->dict:
    "Folder -> {package: version} to download"
    p, need = pins(), closure(requirements())
    carry = sorted(n for n in need if n not in IMAGE or n in PINNED)
    missing = [n for n in carry if n not in p]
    if missing: raise SystemExit(f"error: constraints.txt pins no version of {missing}")
    return {'wheels': {n: p[n] for n in carry if n not in NF4}, 'wheels_nf4': {n: p[n] for n in carry if n in NF4}}

def mib(path:Path)->float: return sum(f.stat().st_size for f in path.rglob('*') if f.is_file()) / 2**20

def main(out:Path=OUT, upstream:Path=UPSTREAM, check:bool=False):
    folders = plan()
    for f, pkgs in folders.items(): print(f"{f}/: " + ', '.join(f"{n}=={v}" for n, v in pkgs.items()))
    if check: return folders
    for f, pkgs in folders.items():
        d = out/f
        if d.exists(): shutil.rmtree(d)
        d.mkdir(parents=True)
        cmd = [sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', *TAGS, '-d', str(d), *(f'{n}=={v}' for n, v in pkgs.items())]
        subprocess.run(cmd, check=True)
    if not upstream.is_dir(): raise SystemExit(f"error: upstream: no folder {upstream} (set MAPG_UPSTREAM or pass --upstream)")
    if (out/'upstream').exists(): shutil.rmtree(out/'upstream')
    for kind in ('llada', 'dream'): shutil.copytree(upstream/kind, out/'upstream'/kind)
    for f in (*folders, 'upstream'): print(f"{out.name}/{f}: {mib(out/f):.1f} MiB")
    print(f"with the working tree ({tree_mib():.1f} MiB), a call carrying {out.name}/wheels and {out.name}/upstream sends "
          f"{tree_mib() + mib(out/'wheels') + mib(out/'upstream'):.1f} MiB of 64; {out.name}/wheels_nf4 goes in a call of its own")
    return folders

def tree_mib()->float:
    "MiB of the files git tracks or would add (what travels to the GPU machine besides the carried folders)"
    fs = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=ROOT, capture_output=True, text=True).stdout
    return sum((ROOT/f).stat().st_size for f in fs.split('\0') if f and (ROOT/f).is_file()) / 2**20

if __name__ == '__main__':
    import os
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', type=Path, default=OUT, help='folder to write (default: .gpuenv)')
    p.add_argument('--upstream', type=Path, default=Path(os.environ.get('MAPG_UPSTREAM') or UPSTREAM),
                   help="folder holding llada/ and dream/ remote code (default: $MAPG_UPSTREAM, else ../shared/upstream_models)")
    p.add_argument('--check', action='store_true', help='list the packages that would go, download nothing')
    a = p.parse_args()
    main(a.out, a.upstream, a.check)
