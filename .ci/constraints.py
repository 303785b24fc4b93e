"""Regenerate `constraints.txt`: the exact versions a fresh `pip install torch==2.13.0 -e ".[dev]"` resolves to today.

The README's set-up command installs with `-c constraints.txt`, so pip takes these versions at once instead of searching
the declared ranges (`settings.ini`), which stay as wide as mapg really supports for users who install it into their own
environment. Run this after changing a requirement, or to move to newer releases, then run the whole suite with the new
file before committing it:

    python .ci/constraints.py            # resolve afresh (no install), write constraints.txt, print what moved
    python .ci/constraints.py --check    # exit 1 if a fresh resolution differs from constraints.txt (writes nothing)

The resolution is pip's own (`pip install --dry-run --ignore-installed --report`) in the running interpreter, so the
file is for that Python and platform (its header says which); it may take minutes, since pip searches the ranges here."""
import argparse, json, platform, re, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT/'constraints.txt'
TORCH = 'torch==2.13.0'              # the README installs this first (the CPU wheel on a CPU machine)

def norm(name:str)->str:
    "A package name as pip compares it (PEP 503): `Foo_Bar.baz` and `foo-bar-baz` are one package"
    return re.sub(r'[-_.]+', '-', name).lower()

def resolve()->dict:
    "Package name -> version of a fresh resolution of torch and mapg with its dev extra (mapg itself left out)"
    with tempfile.TemporaryDirectory() as d:
        rep = Path(d)/'report.json'
        cmd = [sys.executable, '-m', 'pip', 'install', '--dry-run', '--ignore-installed', '--quiet', '--report', str(rep),
               TORCH, '-e', f'{ROOT}[dev]']
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if p.returncode: sys.exit(f"pip could not resolve the requirements:\n{p.stdout[-3000:]}{p.stderr[-5000:]}")
        got = json.loads(rep.read_text())['install']
    pins = {}
    for r in got:
        name, version = r['metadata']['name'], r['metadata']['version']
        if norm(name) == 'mapg': continue
        pins[norm(name)] = version.split('+')[0]    # a local label (2.13.0+cpu) is the wheel's build, not a version
    return dict(sorted(pins.items()))

def read(path:Path)->dict:
    "The pins of a constraints file"
    if not path.exists(): return {}
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split('#')[0].strip()
        if '==' in line:
            name, version = line.split('==')
            pins[norm(name.strip())] = version.strip()
    return pins

def moved(old:dict, new:dict)->list[str]:
    "One line per package whose pin changed, appeared or disappeared"
    out = [f"{n}: {old[n]} -> {new[n]}" for n in new if n in old and old[n] != new[n]]
    out += [f"{n}: added {new[n]}" for n in new if n not in old]
    out += [f"{n}: removed (was {old[n]})" for n in old if n not in new]
    return out

def render(pins:dict)->str:
    head = ["# The versions the README's set-up command installs (`pip install -e \".[dev]\" -c constraints.txt`): a fresh",
            "# resolution of torch 2.13.0 and mapg's dev extra, against which the whole suite was run. Regenerate with",
            "# `python .ci/constraints.py` (it prints what moved), then run the suite. The package's own ranges are in settings.ini.",
            f"# Resolved on {time.strftime('%Y-%m-%d')} for CPython {platform.python_version()} on {sys.platform} {platform.machine()}."]
    return '\n'.join(head + [f"{n}=={v}" for n, v in pins.items()]) + '\n'

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--check', action='store_true', help="compare a fresh resolution with constraints.txt; write nothing")
    args = p.parse_args()
    t0 = time.time()
    old, new = read(OUT), resolve()
    diff = moved(old, new)
    print(f"resolved {len(new)} packages in {time.time() - t0:.0f} s; {len(diff)} moved" + (':' if diff else ''))
    for line in diff: print('  ' + line)
    if args.check: sys.exit(1 if diff else 0)
    OUT.write_text(render(new))
    print(f"wrote {OUT.relative_to(ROOT)}")
