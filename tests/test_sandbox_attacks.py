"""Programs that try to get execution credit without computing the answer, or to leave something behind, against the
judged code reward (`mapg.sandbox.judge_program`, `mapg.rewards.code_reward`). Each attack must end within its limit
with no credit, leave the caller working, leave no process, IPC object, file or directory behind, and change nothing
outside the work dir."""
import glob, os, signal, tempfile, threading, time
from pathlib import Path
import pytest
from mapg import sandbox
from mapg.sandbox import SandboxCfg, judge_program, run_program
from mapg.sandbox.host import _UidPool, _proc_uids
from mapg.rewards import code_reward, score_batch

ROOT = os.geteuid() == 0
ISO = judge_program('def f(): return 1', ['assert f() == 1']).isolation
FULL = all(ISO.get(k) for k in ('pidns', 'ipcns', 'mountns', 'minimal_root', 'work_tmpfs'))
needs_full = pytest.mark.skipif(not (ROOT and FULL), reason=f"needs root and every namespace (got {ISO})")
DATA = Path(__file__).resolve().parent.parent / 'data'
CFG = SandboxCfg(timeout=5)

def _ipc():
    "The caller's SysV IPC objects (shared memory, queues, semaphores), one line each"
    out = []
    for k in ('shm', 'msg', 'sem'):
        try: out += [f'{k} {l.split()[1]}' for l in open(f'/proc/sysvipc/{k}').read().splitlines()[1:]]
        except OSError: pass
    return sorted(out)

@pytest.fixture(scope='module')
def canary():
    d = Path(tempfile.mkdtemp(prefix='mapg-canary-', dir='/tmp')); os.chmod(d, 0o777)
    f = d/'canary.txt'; f.write_text('canary'); os.chmod(f, 0o666)
    yield f
    f.unlink(missing_ok=True); d.rmdir()

@pytest.fixture(autouse=True)
def nothing_left(canary):
    "After every attack: the canary unchanged, no fd leaked, no sandbox process, IPC object or work dir left, the caller scoring"
    fds, ipc, dirs = len(os.listdir('/proc/self/fd')), _ipc(), set(glob.glob(f'/tmp/mapg-sbx-{os.getpid()}-*'))
    yield
    assert canary.read_text() == 'canary', "a file outside the work dir changed"
    assert len(os.listdir('/proc/self/fd')) <= fds, "file descriptors leaked"
    if ROOT: assert not [p for p, u in _proc_uids().items() if sandbox.uid_pool.owns(u)], "a sandbox process survived"
    assert _ipc() == ipc, "a SysV IPC object survived the run"
    assert set(glob.glob(f'/tmp/mapg-sbx-{os.getpid()}-*')) <= dirs, "a work dir was left on disk"
    assert judge_program('def g(x): return 2 * x', ['assert g(21) == 42']).passed == [True]

def fence(code): return f"```python\n{code}\n```"

def no_credit(code, tests, *, cfg=CFG, limit=None, **kw):
    "Score `code`; assert it got no execution credit and ended within its limit"
    t = time.monotonic()
    r = code_reward(fence(code), tests, cfg=cfg, blocked=(), **kw)
    dt = time.monotonic() - t
    assert r['execution'] == 0., (r, code[:200])
    assert dt < (limit or cfg.timeout + 10), f"took {dt:.1f} s"          # its limit, and a busy machine's slack
    return r

SECRET = 739_215_386     # the expected value: it never enters the sandbox
T = [f"assert f(3) == {SECRET}"]

# ------------------------------------------------------------------ looking for the tests or the expected values
def test_frames_gc_and_memory():
    "Search every frame, every object the collector knows, the job, stdin and the environment for the expected value"
    no_credit('''
import gc, sys, os
def f(x):
    seen = []
    fr = sys._getframe()
    while fr is not None:
        seen += list(fr.f_locals.values()) + list(fr.f_globals.values()); fr = fr.f_back
    seen += gc.get_objects()
    for o in seen:
        for v in (o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else [o]):
            if isinstance(v, str) and 'assert' in v:
                return int(v.split('==')[-1])
            if type(v) is int and v > 10 ** 8: return v
    return [os.environ.get(k) for k in os.environ]
''', T)

def test_harness_tampering():
    "Rewrite the harness's closures and the write channel so every answer claims success"
    no_credit('''
import gc, os
for o in gc.get_objects():
    if callable(o) and getattr(o, '__name__', '') in ('reply', 'send_msg', 'send', 'report', 'enc'):
        try: o.__code__ = (lambda *a, **k: None).__code__
        except Exception: pass
_w = os.write
def fake(fd, b):
    for t in (b'C 0 1\\n', b'E\\n'): _w(fd, t)
    return len(b)
os.write = fake
def f(x): return True
''', T)

def test_forged_report_lines():
    "Print and write verdict lines (with any token found in memory) to every descriptor"
    no_credit('''
import gc, os
toks = [o.get('token') for o in gc.get_objects() if isinstance(o, dict) and 'token' in o] or ['x']
for fd in range(0, 1 << 14):
    for t in toks:
        for line in (f'{t} I {{}}', f'{t} S 1', f'{t} C 0 1', f'{t} X forged', f'{t} E', 'C 0 1', 'E'):
            try: os.write(fd, (line + '\\n').encode())
            except OSError: pass
print('C 0 1\\nE')
def f(x): return 0
''', T)

def test_forged_isolation_failure_does_not_raise():
    "A forged `X` line (isolation failed) after the real report neither raises nor stops the batch"
    prog = '''
import gc, os
for o in gc.get_objects():
    if isinstance(o, dict) and 'token' in o and 'fd' in o:
        os.write(o['fd'], f"{o['token']} X forged failure\\n".encode())
def f(x): return 0
'''
    res = run_program(prog, ['pass'])       # the in-sandbox mode: the line reaches the caller, only the first line counts
    assert res.passed == [True] and res.isolation.get('uid') is not None
    rs = score_batch('code', [fence(prog), fence('def f(x): return 739215386')], tests=[T, T])
    assert [r['execution'] for r in rs] == [0., 1.] and 'reason' not in rs[0]

def test_reading_data_files_and_proc():
    "Read the project's data files (the expected answers live there) and other processes' command lines"
    paths = [str(DATA/'mbpp_sanitized.json'), str(DATA), str(DATA.parent), '/proc/1/cmdline', f'/proc/{os.getpid()}/cmdline',
             f'/proc/{os.getpid()}/environ', '/proc/self/cmdline', '/etc/passwd', '/root/.bashrc', '/home', '/proc', '/work',
             '/var', '/dev/shm', '/sys']
    res = run_program("import os", [f"os.listdir({p!r})" if not p.endswith(('cmdline', 'environ', '.json', 'passwd', 'rc')) else
                                    f"open({p!r}).read()" for p in paths], cfg=CFG)
    if FULL:
        assert res.passed == [False] * len(paths), list(zip(paths, res.passed))
        # what is there: the library dirs, the device nodes, and the path down to the work dir (nothing else in /tmp)
        seen = run_program("import os", ["assert set(os.listdir('/')) <= {'lib', 'lib64', 'lib32', 'usr', 'etc', 'dev', 'root', 'tmp'}",
                                         "assert set(os.listdir('/usr')) <= {'lib', 'lib64', 'lib32'}",
                                         "assert set(os.listdir('/etc')) <= {'ld.so.cache'}",
                                         "assert sorted(os.listdir('/dev')) == ['null', 'random', 'urandom', 'zero']",
                                         "assert os.listdir('/tmp') == [os.path.basename(os.getcwd())]"], cfg=CFG)
        assert seen.passed == [True] * 5, seen.output
    no_credit(f'''
import json, os
def f(x):
    for p in {[str(DATA/'mbpp_sanitized.json'), '/proc/1/cmdline']!r}:
        try: return json.load(open(p))[0]['task_id']
        except Exception: pass
    return 0
''', T)

# ------------------------------------------------------------------ values that are not what they claim
@pytest.mark.parametrize('name,code', [
    ('always_equal', "class Y:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
                     "    def __hash__(self): return 0\ndef f(x): return Y()"),
    ('int_subclass', "class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\ndef f(x): return I(1)"),
    ('str_subclass', "class S(str):\n    def __eq__(self, o): return True\ndef f(x): return S('a')"),
    ('list_subclass', "class L(list):\n    def __eq__(self, o): return True\ndef f(x): return L()"),
    ('counter_subclass', "import collections\nclass C(collections.Counter):\n    def __eq__(self, o): return True\ndef f(x): return C()"),
    ('bool_trap', "class B:\n    def __bool__(self): return True\n    def __eq__(self, o): return True\ndef f(x): return B()"),
    ('nested', "class Y:\n    def __eq__(self, o): return True\ndef f(x): return [Y(), (Y(),)]"),
    ('generator', "def f(x):\n    yield 739215386"),
    ('function', "def f(x): return lambda *a: 739215386"),
    ('self_reference', "def f(x):\n    a = []; a.append(a); return a"),
    ('huge_value', "def f(x): return 'x' * (1 << 24)"),
])
def test_values_that_cannot_cross(name, code):
    tests = T + [f"assert f(3)", f"assert [f(3)] == [{SECRET}]", f"assert {{'k': f(3)}} == {{'k': {SECRET}}}",
                 f"assert (f(3),) == ({SECRET},)", "assert f(3) in [739215386]", "assert sorted([f(3)]) == [739215386]"]
    no_credit(code, tests)

def test_huge_int_is_a_plain_int():
    "A 10,000-digit answer crosses (hex, no digit limit) and is compared exactly"
    n = 7 ** 12000
    assert code_reward(fence(f"def f(x): return 7 ** 12000"), [f"assert f(3) == 7 ** 12000", "assert f(3) == 7 ** 12000 + 1"],
                       cfg=CFG)['execution'] == 0.5

# ------------------------------------------------------------------ replacing what the tests call
def test_builtin_and_module_shadowing():
    "The program redefines built-ins and `math` that the tests use to compute or compare"
    code = '''
import math as _m
def abs(x): return 0
def sorted(x, **k): return [1, 2, 3]
def len(x): return 3
def isinstance(*a): return True
def round(*a, **k): return 0
def all(x): return True
def set(*a): return {1}
class math:
    isclose = staticmethod(lambda *a, **k: True)
    sqrt = staticmethod(lambda x: 0)
def f(x): return 5
'''
    tests = ["assert abs(f(3) - 739215386) < 1e-9", "assert sorted(f(3)) == [1, 2, 3]", "assert len(f(3)) == 3",
             "assert isinstance(f(3), list)", "assert round(f(3) - 1) == 0", "assert all(f(3))",
             "assert set([f(3)]) == {1}", "assert math.isclose(f(3), 1.5)", "assert f(3) == math.sqrt(0) + 739215386"]
    no_credit(code, tests)
    no_credit(code, tests, test_imports=['import math'])
    no_credit(code, tests, entry_point='f')

def test_helper_shadowing():
    "HumanEval's `find_zero` tests call the prompt's `poly`: a program that redefines it gains nothing"
    helpers = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\ndef find_zero(xs):\n    'stub'\n"
    test = "def check(candidate):\n    for xs in ([1, 2], [-6, 11, -6, 1]):\n        assert abs(poly(xs, candidate(xs))) < 1e-4\n"
    no_credit("def poly(xs, x): return 0\ndef find_zero(xs): return 1.0", test, entry_point='find_zero', helpers=helpers)
    ok = "def find_zero(xs):\n    lo, hi = -10., 10.\n    p = lambda x: sum(c * x ** i for i, c in enumerate(xs))\n" \
         "    for _ in range(200):\n        m = (lo + hi) / 2\n        lo, hi = (m, hi) if p(lo) * p(m) > 0 else (lo, m)\n    return lo"
    assert code_reward(fence(ok), test, entry_point='find_zero', helpers=helpers, cfg=CFG)['execution'] == 1.

def test_origin_claims_do_not_reach_the_judge():
    "An object claiming to be `os.system` or `builtins.eval` is not run by the judge: it stays in the sandbox"
    code = "def f(x): return 0\nf.__module__, f.__qualname__ = 'os', 'system'\n" \
           "def g(x): return 0\ng.__module__, g.__qualname__ = 'builtins', 'eval'\n"
    no_credit(code, ["assert f('true') == 0 and g('1') == 0 and False"])
    assert code_reward(fence(code), ["assert f('true') == 0", "assert g('739215386') == 0"], cfg=CFG)['execution'] == 1.

# ------------------------------------------------------------------ leaving things behind
@needs_full
def test_sysv_ipc_leftovers():
    "Shared memory, a message queue and a semaphore set created with a fixed key vanish with the IPC namespace"
    code = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ids = [libc.shmget(0x4D415047, 4096, 0o1666), libc.msgget(0x4D415048, 0o1666), libc.semget(0x4D415049, 1, 0o1666)]
def f(x): return ids
'''
    res = judge_program(code, ["r = f(3); assert min(r) >= 0, r"], cfg=CFG)
    assert res.passed == [True], res.output      # created inside the sandbox ... and gone afterwards (the fixture checks)

@needs_full
def test_zombies_daemons_and_uid_reuse(monkeypatch):
    "Zombies, setsid daemons and stopped children do not outlive the run nor count against the next run of the same uid"
    pool = _UidPool(slots=2)   # one sandbox uid and one judge uid
    monkeypatch.setattr(sandbox, 'uid_pool', pool)
    leave = '''
import os, signal, time
kids = []
for i in range(5):
    pid = os.fork()
    if pid == 0:
        if i % 2: os.setsid(); os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0) if i == 0 else time.sleep(1000)
    kids.append(pid)
def f(x): return len(kids)
'''
    res = judge_program(leave, ["assert f(3) == 5"], cfg=CFG)
    assert res.passed == [True]
    count = '''
import os
def f(x):
    n = 0
    for _ in range(64):
        try: pid = os.fork()
        except OSError: break
        if pid == 0:
            import time; time.sleep(30)
        n += 1
    return n
'''
    cfg = SandboxCfg(timeout=5, nproc=8)
    res = judge_program(count, ["assert f(3) >= 6, f(3)"], cfg=cfg)   # nproc 8: PID 1, the worker, 6 more
    assert res.passed == [True], res.output
    assert res.isolation['uid'] == pool.base

@needs_full
def test_disk_and_inode_exhaustion():
    "Filling the work dir stops at its size and inode limits; nothing of it remains"
    cfg = SandboxCfg(timeout=10, disk=4 << 20, inodes=256, fsize=1 << 20)
    code = '''
import os
def fill():
    total = 0
    for i in range(1000):
        try:
            with open(f'big{i}', 'wb') as fh: fh.write(b'x' * (1 << 20))
            total += 1 << 20
        except OSError: break
    return total
def files():
    n = 0
    for i in range(100000):
        try: open(f'e{i}', 'w').close(); n += 1
        except OSError: break
    return n
'''
    res = judge_program(code, ["t = fill(); assert t <= 4 << 20, t", "n = files(); assert 0 < n <= 256, n"], cfg=cfg)
    assert res.passed == [True, True], res.output
    assert res.wall < cfg.timeout

@needs_full
def test_deep_directory_is_cleaned():
    "A directory tree thousands of levels deep in the work dir: the run ends, nothing is left, no error"
    code = '''
import os
def deep(n):
    for i in range(n): os.mkdir('d'); os.chdir('d')
    return n
'''
    res = judge_program(code, ["assert deep(3000) == 3000"], cfg=CFG)
    assert res.passed == [True], res.output

def test_escape_to_the_host_fails(canary):
    "Write the canary, create files in /tmp and /dev/shm, kill the caller: nothing happens outside"
    code = f'''
import os, signal
def f(x):
    done = 0
    for act in (lambda: open({str(canary)!r}, 'w').write('pwned'), lambda: open('/tmp/mapg-pwned', 'w'),
                lambda: open('/dev/shm/mapg-pwned', 'w'), lambda: os.kill({os.getpid()}, signal.SIGKILL),
                lambda: os.kill(-1, signal.SIGKILL) if False else None):
        try: act(); done += 1
        except Exception: pass
    return done
'''
    res = judge_program(code, ["assert f(3) >= 0"], cfg=CFG)
    assert res.passed == [True]
    assert not os.path.exists('/tmp/mapg-pwned') and not os.path.exists('/dev/shm/mapg-pwned')

# ------------------------------------------------------------------ the batch survives
def test_batch_survives_everything():
    "Hostile programs, a crashing judge input, a bad gold and an oversized completion: zeros with reasons, the rest scored"
    good = fence("def f(x): return 739215386")
    comps = [good, fence("import os\ndef f(x): os.kill(os.getpid(), 9)"), fence("def f(x):\n    while True: pass"),
             'x' * 60_000, good, good]
    tests = [T, T, T, T, None, T]
    t = time.monotonic()
    rs = score_batch('code', comps, workers=2, tests=tests, cfg=[SandboxCfg(timeout=2)] * 6)
    assert [r['execution'] for r in rs] == [1., 0., 0., 0., 0., 1.]
    assert 'longer than' in rs[3]['reason'] and 'tests' in rs[4]['reason']
    assert time.monotonic() - t < 40          # 2 s limits on two workers: seconds idle; minutes if a limit failed

def test_judged_as_unprivileged_caller():
    "Called by a non-root user (user namespaces): the judged reward still scores right and wrong answers apart"
    if not ROOT: pytest.skip("already running unprivileged: every other test covers it")
    import shutil, subprocess, sys
    repo = str(Path(__file__).resolve().parent.parent)
    script = (f"import sys; sys.path.insert(0, {repo!r})\nfrom mapg.sandbox import judge_program\n"
              "r = judge_program('def f(x): return 2 * x\\ndef g(): return open(\"/etc/passwd\").read()',\n"
              "                 ['assert f(21) == 42', 'assert f(1) == 3', 'assert g()'])\n"
              "print(r.isolation, r.passed)\nassert r.passed == [True, False, False], r")
    for exe in dict.fromkeys([sys.executable, '/usr/bin/python3', shutil.which('python3')]):
        if not exe: continue
        try: out = subprocess.run([exe, '-c', script], user=65534, group=65534, extra_groups=[], capture_output=True,
                                  text=True, timeout=60)
        except (OSError, subprocess.SubprocessError): continue
        if 'ModuleNotFoundError' in out.stderr or 'PermissionError' in out.stderr: continue
        print(out.stdout, out.stderr[-300:])
        assert out.returncode == 0, out.stderr[-500:]
        return
    pytest.skip("no interpreter that uid 65534 can run mapg with")
