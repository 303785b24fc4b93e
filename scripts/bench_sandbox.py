"""Code-reward throughput: the 164 HumanEval canonical solutions scored through the sandbox and its judge, serial vs
parallel, and the per-program overhead over a bare interpreter: the sandbox alone (`run_program`) and the sandbox with
the judge (`judge_program`, what the code reward uses). Usage: `python scripts/bench_sandbox.py [--workers N]`."""
import argparse, gzip, json, os, statistics, subprocess, sys, time
from pathlib import Path
from mapg.data import load_data, columns, data_dir
from mapg.rewards import score_batch
from mapg import sandbox
from mapg.sandbox import run_program

def timed(f):
    t = time.perf_counter(); out = f(); return time.perf_counter() - t, out

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('--workers', type=int, default=os.cpu_count(), help='parallel sandboxes (default: CPUs)')
    ap.add_argument('--repeats', type=int, default=3, help='alternating serial/parallel measurements; the best of each is kept')
    ap.add_argument('--n', type=int, default=60, help='programs for the overhead measurement')
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
    print(f"HumanEval canonical solutions: 164/164 pass (cpus={os.cpu_count()}, workers={a.workers}, best of {a.repeats})")
    print(f"  serial   {s:6.2f} s  ({1000 * s / 164:5.1f} ms/program)   runs: {', '.join(f'{x:.2f}' for x in ser)}")
    print(f"  parallel {p:6.2f} s  ({1000 * p / 164:5.1f} ms/program)   runs: {', '.join(f'{x:.2f}' for x in par)}")
    print(f"  speed-up {s / p:.2f}x")
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

if __name__ == '__main__': main()
