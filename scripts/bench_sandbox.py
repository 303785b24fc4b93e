"""Code-reward throughput: the 164 HumanEval canonical solutions scored through the sandbox and its judge, serial vs
parallel, and the per-program overhead over a bare interpreter: the sandbox alone (`run_program`) and the sandbox with
the judge (`judge_program`, what the code reward uses). Usage: `python scripts/bench_sandbox.py [--workers N]`."""
import argparse, gzip, importlib.util, json, os, resource, statistics, subprocess, sys, time
from pathlib import Path
from mapg.data import load_data, columns, data_dir
from mapg.rewards import score_batch
from mapg import sandbox
from mapg.sandbox import run_program

def timed(f):
    t = time.perf_counter(); out = f(); return time.perf_counter() - t, out

def cpu_of(f):
    "CPU seconds `f()` used in this process and in every process it started and reaped (load-independent)"
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    f()
    c, d = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(getattr(y, k) - getattr(x, k) for x, y in ((a, c), (b, d)) for k in ('ru_utime', 'ru_stime'))

def compare(baseline:str, n:int):
    "Interleaved per-program wall and CPU: a baseline `sandbox.py` (its scoring path) against this one"
    b = Path(baseline)
    # a module file, or a package folder (mapg/sandbox/ as `git archive` writes it)
    spec = (importlib.util.spec_from_file_location('baseline_sandbox', b/'__init__.py', submodule_search_locations=[str(b)])
            if b.is_dir() else importlib.util.spec_from_file_location('baseline_sandbox', b))
    old = sys.modules['baseline_sandbox'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
    judge = getattr(sandbox, 'judge_program', None) or sandbox.run_program
    old_judge = getattr(old, 'judge_program', None)   # the baseline's scoring path (its run_program before the judge)
    ways = dict(baseline=lambda: (old_judge or old.run_program)('def f(): return 1', ['assert f() == 1']),
                scoring=lambda: judge('def f(): return 1', ['assert f() == 1']),
                sandbox_only=lambda: run_program('def f(): return 1', ['assert f() == 1']))
    wall, cpu = {k: [] for k in ways}, {k: [] for k in ways}
    for _ in range(n):
        for k, f in ways.items():
            t = time.perf_counter(); c = cpu_of(f); wall[k].append(time.perf_counter() - t); cpu[k].append(c)
    print(f"Interleaved against {baseline} (median of {n}; CPU = all processes of the run):")
    for k in ways: print(f"  {k:12s} wall {1000 * statistics.median(wall[k]):6.1f} ms   CPU {1000 * statistics.median(cpu[k]):6.1f} ms")

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('--workers', type=int, default=os.cpu_count(), help='parallel sandboxes (default: CPUs)')
    ap.add_argument('--repeats', type=int, default=3, help='alternating serial/parallel measurements; the best of each is kept')
    ap.add_argument('--n', type=int, default=60, help='programs for the overhead measurement')
    ap.add_argument('--baseline', help="an older mapg/sandbox.py, or mapg/sandbox/ folder, to time against, interleaved (e.g. from `git archive`)")
    a = ap.parse_args()
    recs = load_data('humaneval')
    he = [json.loads(l) for l in gzip.open(data_dir()/'humaneval.jsonl.gz')]
    comps = [f"```python\n{h['prompt']}{h['canonical_solution']}\n```" for h in he]
    cols = columns(recs)
    score = lambda w: score_batch('code', comps, workers=w, **cols)
    score(a.workers)                                  # warm-up (page cache, first imports)
    ser, par = [], []
    for _ in range(a.repeats):
        for w, acc in ((1, ser), (a.workers, par)):
            dt, res = timed(lambda: score(w))
            assert sum(r['execution'] == 1.0 for r in res) == 164, "a canonical solution failed"
            acc.append(dt)
    s, p = min(ser), min(par)
    cpu = cpu_of(lambda: score(1))
    print(f"HumanEval canonical solutions: 164/164 pass (cpus={os.cpu_count()}, workers={a.workers}, best of {a.repeats})")
    print(f"  serial   {s:6.2f} s  ({1000 * s / 164:5.1f} ms/program)   runs: {', '.join(f'{x:.2f}' for x in ser)}")
    print(f"  parallel {p:6.2f} s  ({1000 * p / 164:5.1f} ms/program)   runs: {', '.join(f'{x:.2f}' for x in par)}")
    print(f"  speed-up {s / p:.2f}x; CPU per program (all its processes) {1000 * cpu / 164:.1f} ms")
    # per-program overhead: a sandboxed trivial program vs the same interpreter started bare (no isolation)
    bare = [timed(lambda: subprocess.run([sys.executable, '-I', '-S', '-c', 'x = 1'], check=True))[0] for _ in range(a.n)]
    box = [run_program('x = 1', ['assert x == 1']).wall for _ in range(a.n)]
    judge = getattr(sandbox, 'judge_program', None)     # absent before the judge existed
    jdg = [judge('def f(): return 1', ['assert f() == 1']).wall for _ in range(a.n)] if judge else []
    iso = run_program('pass').isolation
    mb, mx = statistics.median(bare), statistics.median(box)
    print(f"Per-program cost (median of {a.n}): bare `python -I -S` {1000 * mb:.1f} ms, sandboxed {1000 * mx:.1f} ms, "
          f"sandbox overhead {1000 * (mx - mb):.1f} ms")
    if jdg: print(f"  judged (sandbox + judge process): {1000 * statistics.median(jdg):.1f} ms, "
                  f"overhead {1000 * (statistics.median(jdg) - mb):.1f} ms")
    print(f"  isolation applied: {iso}")
    print(f"  load average at the end: {os.getloadavg()[0]:.2f} (shared machine: compare runs taken together)")
    if a.baseline: compare(a.baseline, a.n)

if __name__ == '__main__': main()
