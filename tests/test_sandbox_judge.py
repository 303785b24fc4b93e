"""Attacks on the judge + sandbox design itself, by class: the judge acting on what a program names or sends, credit
without computing (shadowed test names, control-flow exceptions, reading the judge's messages back), memory outside
the limit, state that outlives a run or crosses between concurrent runs, and the judge's own confinement. Every case
is scored through `code_reward` / `judge_program`; a control program beside the attacks always scores full credit."""
import glob, os, subprocess, sys, tempfile, time
from pathlib import Path
import pytest
from mapg import sandbox
from mapg.sandbox import SandboxCfg, judge_program, run_program
from mapg.sandbox.host import _UidPool, _memcg_root, _proc_uids
from mapg.sandbox.protocol import value_codec
from mapg.rewards import code_reward, score_batch

ROOT = os.geteuid() == 0
ISO = judge_program('def f(): return 1', ['assert f() == 1']).isolation
FULL = ROOT and all(ISO.get(k) for k in ('pidns', 'ipcns', 'mountns', 'minimal_root', 'work_tmpfs'))
needs_full = pytest.mark.skipif(not FULL, reason=f"needs root and every namespace (got {ISO})")
needs_seccomp = pytest.mark.skipif(not ISO.get('seccomp'), reason="the kernel gave no seccomp filter")
needs_memcg = pytest.mark.skipif(not ISO.get('memcg'), reason=f"no per-run memory cgroup here: {_memcg_root()}")
CFG = SandboxCfg(timeout=6)
SECRET = 739_215_386
CONTROL = f"def f(x=3): return {SECRET}"

def fence(code): return f"```python\n{code}\n```"

def execution(code, tests, cfg=CFG, **kw):
    "The execution part of the code reward of `code` (nothing blocked: the sandbox alone has to hold)"
    return code_reward(fence(code), tests, cfg=cfg, blocked=(), **kw)['execution']

def _memcgs():
    v, d = _memcg_root()
    return {c for c in glob.glob(os.path.join(d, 'mapg-sbx-*')) if sandbox.uid_pool.owns(int(c.rsplit('-', 1)[1]))} if v else set()

@pytest.fixture(autouse=True)
def nothing_left():
    "After every case: no sandbox process, work dir or memory cgroup left, and the control program scores full credit"
    dirs, cgs = set(glob.glob(f'/tmp/mapg-sbx-{os.getpid()}-*')), _memcgs()
    yield
    if ROOT: assert not [p for p, u in _proc_uids().items() if sandbox.uid_pool.owns(u)], "a sandbox process survived"
    assert set(glob.glob(f'/tmp/mapg-sbx-{os.getpid()}-*')) <= dirs, "a work dir was left on disk"
    assert _memcgs() <= cgs, "a memory cgroup was left"
    assert execution(CONTROL, [f"assert f() == {SECRET}"]) == 1.

# ------------------------------------------------------------------ the judge acts on nothing the program sends
FORGE = '''
import os, stat
def _send(text):
    b = text.encode()
    for fd in range(3, 1 << 14):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode): os.write(fd, len(b).to_bytes(4, 'big') + b)
        except OSError: pass
_send({msg!r})
def f(x): return 0
'''

@pytest.mark.parametrize('kind', ['origin', 'module', 'dunders'])
def test_forged_name_tables_are_not_resolved(kind):
    "A name table written to every pipe, naming `json.loads` as the origin of `f`, `f` a module, or dunder names"
    enc = value_codec()[0]
    msgs = dict(origin=(0, 'S', True, {}, {'f': 1}, {}, {'f': ('json', 'loads')}),      # json.loads('7…6') == 7…6
                module=(0, 'S', True, {}, {'f': 1}, {'f': 'json'}, {'f': ('random', '_os.system')}),
                dunders=(0, 'S', True, {'__path__': ['/usr/lib'], '__all__': ['eval']}, {'f': 1, '__getattr__': 2}))
    code = FORGE.format(msg=enc(msgs[kind], lambda v: 1, 1 << 16))
    res = judge_program(code, [f"assert f('{SECRET}') == {SECRET}", f"from solution import g\nassert g('{SECRET}') == {SECRET}"],
                        cfg=CFG)
    assert res.passed == [False, False] and res.status == 'ok'                  # a resolved origin would give the secret

def test_dunder_names_from_the_sandbox_are_dropped():
    "A program cannot make `solution` a package or give it a module `__getattr__`: explicit imports get only its names"
    code = f"__path__ = ['/usr/lib']\ndef __getattr__(name): return lambda *a: {SECRET}\ndef f(x): return 0"
    assert execution(code, [f"from solution import g\nassert g(3) == {SECRET}"]) == 0.
    assert execution(code, ["from solution import f\nassert f(3) == 0"]) == 1.

# ------------------------------------------------------------------ test names win
WRONG = "def f(x): return 0.0\n"
SHADOWS = [   # (a wrong program that binds a test's name, the test)
    (WRONG + "from math import *\ndef isclose(*a, **k): return True",
     "from math import isclose\nfrom solution import *\nassert isclose(f(2), 4.0)"),
    (WRONG + "class math:\n    isclose = staticmethod(lambda *a, **k: True)",
     "import math\nfrom solution import *\nassert math.isclose(f(2), 4.0)"),
    (WRONG + "import math\nmath.isclose = lambda *a, **k: True",
     "assert math.isclose(f(2), 4.0)"),                                   # MBPP style: math never imported by the test
    (WRONG + "class pytest:\n    approx = staticmethod(lambda x: 0.0)",
     "import pytest\nfrom solution import *\nassert f(2) == pytest.approx(4.0)"),
    (WRONG + "def approx(x): return 0.0",
     "from pytest import approx\nfrom solution import *\nassert f(2) == approx(4.0)"),
    (WRONG + "class np:\n    allclose = staticmethod(lambda *a, **k: True)",
     "import numpy as np\nfrom solution import *\nassert np.allclose(f(2), 4.0)"),
    (WRONG + "def allclose(*a, **k): return True\n__all__ = ['allclose', 'f']",
     "from numpy import allclose\nfrom solution import *\nassert allclose(f(2), 4.0)"),
    (WRONG + "def check(c): return None",
     "def check(candidate):\n    assert candidate(2) == 4.0\nfrom solution import *\ncheck(f)"),
]

@pytest.mark.parametrize('code,test', SHADOWS, ids=['from-math', 'import-math', 'mbpp-math', 'pytest', 'from-pytest',
                                                     'numpy', 'from-numpy', 'test-def'])
def test_program_names_never_shadow_test_names(code, test):
    assert execution(code, [test]) == 0.
    right = code.replace("return 0.0", "return 4.0")                    # the same program computing: full credit
    assert execution(right, [test]) == 1.

def test_star_import_still_gives_the_programs_names():
    "`from solution import *` binds what only the program supplies: its functions, classes and constants"
    code = "LIMIT = 10\nclass Box:\n    def __init__(self, v): self.v = v\n    def get(self): return self.v\ndef f(x): return Box(x)"
    assert execution(code, ["from solution import *\nassert f(3).get() == 3 and LIMIT == 10 and Box(2).get() == 2"]) == 1.

# ------------------------------------------------------------------ exceptions are data
RAISERS = {n: f"def f(x): raise {n}()" for n in ('StopIteration', 'StopAsyncIteration', 'GeneratorExit', 'KeyboardInterrupt',
                                                 'SystemExit')}
RAISERS['named'] = "class StopIteration(Exception): pass\ndef f(x): raise StopIteration('done')"
LOOPS = ["assert all(map(lambda x: f(x) == x * x, range(5)))",
         "for a, b in zip(map(f, range(5)), [0, 1, 4, 9, 16]): assert a == b",
         "it = iter(map(f, range(3)))\nassert next(it, 'end') == 0",
         "try: f(2)\nexcept (KeyboardInterrupt, SystemExit, GeneratorExit): pass\nelse: raise AssertionError"]

@pytest.mark.parametrize('name', list(RAISERS))
def test_control_flow_exceptions_cannot_end_the_judges_loops(name):
    assert execution(RAISERS[name], LOOPS) == 0.

def test_remote_errors_carry_name_and_message():
    code = "def f(x):\n    if x < 0: raise ValueError('negative')\n    raise StopIteration('gone')"
    tests = ["import pytest\nwith pytest.raises(ValueError, match='negative'): f(-1)",
             "try: f(-1)\nexcept ValueError as e: assert e.remote_type == 'ValueError' and e.remote_message == 'negative'",
             "try: f(1)\nexcept Exception as e: assert type(e).__name__ == 'RemoteError' and e.remote_type == 'StopIteration'"]
    assert execution(code, tests) == 1.

# ------------------------------------------------------------------ the judge's messages stay with the judge
def test_failure_lines_are_not_readable_by_the_program():
    "Failed asserts with the expected value in their message: the program reads its stdout/stderr back and finds nothing"
    code = '''
import os, re
def f(x):
    seen = b''
    for fd in range(0, 1 << 14):
        try: seen += os.pread(fd, 1 << 16, 0)
        except OSError: pass
    m = re.findall(rb'\\d{9}', seen)
    return int(m[-1]) if m else 0
'''
    tests = [f"assert f(3) == {SECRET}, {SECRET}"] * 3
    res = judge_program(code, tests, cfg=CFG)
    assert res.passed == [False] * 3
    assert f'AssertionError: {SECRET}' in res.judge_output and str(SECRET) not in res.output

def test_program_output_is_its_own():
    res = judge_program("import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\ndef f(): return 1",
                        ["assert f() == 2, 'expected two'"], cfg=CFG)
    assert 'to stdout' in res.output and 'to stderr' in res.output and 'expected two' not in res.output
    assert 'expected two' in res.judge_output

# ------------------------------------------------------------------ every byte counted
@needs_full
def test_sysv_and_memfd_outside_rlimit_as_are_bounded():
    "SysV segments stop at the IPC namespace's 16 MiB; memfd_create is denied; POSIX shm has no /dev/shm"
    code = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def shm_total():
    n = 0
    for _ in range(64):
        i = libc.shmget(0, 32 << 20, 0o1600)
        if i < 0: i = libc.shmget(0, 8 << 20, 0o1600)
        if i < 0: break
        p = libc.shmat(i, None, 0)
        if p in (None, ctypes.c_void_p(-1).value): break
        ctypes.memset(p, 1, 8 << 20); n += 8 << 20
    return n
def memfd():
    try: os.memfd_create('x'); return 'made'
    except OSError as e: return e.errno
def posix_shm():
    try: open('/dev/shm/x', 'wb').write(b'x'); return 'made'
    except OSError: return 'none'
'''
    assert execution(code, ["assert shm_total() <= 16 << 20", "assert memfd() == 1", "assert posix_shm() == 'none'"]) == 1.

@needs_memcg
def test_one_memory_limit_for_the_whole_run():
    "Three children holding 150 MiB each under a 256 MiB run: the cgroup's OOM killer ends some; no credit"
    code = '''
import os, time
def f():
    kids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            b = bytearray(150 << 20)
            for i in range(0, len(b), 4096): b[i] = 1
            time.sleep(30); os._exit(0)
        kids.append(pid)
    time.sleep(2)
    return sum(os.waitpid(p, os.WNOHANG) == (0, 0) for p in kids)      # children still alive, holding their memory
'''
    cfg = SandboxCfg(timeout=8, memory=256 << 20)
    assert execution(code, ["assert f() == 3"], cfg=cfg) == 0.
    assert execution(code.replace('150 << 20', '40 << 20'), ["assert f() == 3"], cfg=cfg) == 1.   # 120 MiB in all fits

# ------------------------------------------------------------------ no shared kernel state
PROBES = '''
import ctypes, errno, fcntl, os, stat
libc = ctypes.CDLL(None, use_errno=True)
def err(rc): return ctypes.get_errno() if rc == -1 else 'allowed'
def add_key(): return err(libc.syscall({add_key}, b'user', b'mapg', b'739215386', 9, -4))
def keyctl(): return err(libc.syscall({keyctl}, 0, -4, 0))   # KEYCTL_GET_KEYRING_ID of the user keyring
def lock(how):
    f = open(os.__file__, 'rb')                                     # a read-only inode every run shares
    try:
        if how == 'flock': fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        elif how == 'posix': fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        elif how == 'ofd': fcntl.fcntl(f, 37, bytes(32))               # F_OFD_SETLK
        elif how == 'lease': fcntl.fcntl(f, 1024, fcntl.F_RDLCK)        # F_SETLEASE
        return 'allowed'
    except OSError as e: return e.errno
def inotify(): return err(libc.inotify_init1(0))
def ptrace(): return err(libc.ptrace(16, 1, 0, 0))                 # PTRACE_ATTACH to PID 1
def userns(): return err(libc.unshare(0x10000000))
'''
NR = dict(x86_64=dict(add_key=248, keyctl=250), aarch64=dict(add_key=217, keyctl=219)).get(os.uname().machine, {})

@needs_seccomp
def test_keyrings_locks_inotify_ptrace_and_namespaces_are_denied():
    code = PROBES.format(**NR)
    tests = ["assert add_key() == 1", "assert keyctl() == 1", "assert lock('flock') == 1", "assert lock('posix') == 1",
             "assert lock('ofd') == 1", "assert lock('lease') == 1", "assert inotify() == 1", "assert ptrace() == 1",
             "assert userns() == 1"]
    res = judge_program(code, tests, cfg=CFG)
    assert res.passed == [True] * len(tests), res.judge_output

@needs_seccomp
def test_a_keyring_carries_nothing_to_the_next_run():
    "Run 1 stores the answer in the uid's keyring (denied); run 2 of the same uid finds nothing"
    pool = _UidPool(slots=2)
    old, sandbox.uid_pool = sandbox.uid_pool, pool
    try:
        store = PROBES.format(**NR) + f"def f(): add_key(); return {SECRET}"
        fetch = PROBES.format(**NR) + "def f():\n    k = libc.syscall({request_key}, b'user', b'mapg', None, -4)\n" \
                "    return k if k > 0 else 0".format(request_key=NR['add_key'] + 1)
        assert execution(store, [f"assert f() == {SECRET}"]) == 1.
        assert execution(fetch, ["assert f() > 0"]) == 0.
    finally: sandbox.uid_pool = old

@needs_seccomp
def test_concurrent_runs_cannot_collude_through_shared_inodes():
    "In one batch with several workers: a publisher holds a lock on a shared library file, a copier waits to see it"
    publisher = f'''
import fcntl, os, time
def f(x=3):
    try:
        fh = open(os.__file__, 'rb'); fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB); time.sleep(2)
    except OSError: pass
    return {SECRET}
'''
    copier = f'''
import fcntl, os, time
def f(x=3):
    t = time.monotonic()
    while time.monotonic() - t < 3:
        try:
            fh = open(os.__file__, 'rb'); fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB); fcntl.flock(fh, fcntl.LOCK_UN)
        except BlockingIOError: return {SECRET}                   # someone holds it: the signal
        except OSError: pass
        time.sleep(0.01)
    return 0
'''
    comps = [fence(c) for c in (publisher, copier, CONTROL, copier, publisher, CONTROL)]
    rs = score_batch(lambda c, tests: code_reward(c, tests, cfg=SandboxCfg(timeout=10), blocked=()), comps, workers=4,
                     tests=[[f"assert f() == {SECRET}"]] * len(comps))
    assert [r['execution'] for r in rs] == [1., 0., 1., 0., 1., 1.]

def test_uid_blocks_of_concurrent_scorers_are_disjoint():
    "Eight scorer processes (the ranks of a node) each get their own block of uids"
    src = "from mapg.sandbox.host import uid_pool as p; u = p.get(); print(p.base, p.base + p.slots)"
    ps = [subprocess.Popen([sys.executable, '-c', src], stdout=subprocess.PIPE, text=True) for _ in range(8)]
    blocks = sorted(tuple(map(int, p.communicate()[0].split())) for p in ps)
    assert len(blocks) == 8 and all(a[1] <= b[0] for a, b in zip(blocks, blocks[1:]))

# ------------------------------------------------------------------ the judge is confined too
@needs_full
def test_the_judge_is_unprivileged_and_confined():
    "The dataset's own tests run without root, without the host's files, without network, under their own uid"
    canary = Path(tempfile.mkdtemp(prefix='mapg-canary-')) / 'canary.txt'
    canary.write_text('keep'); os.chmod(canary.parent, 0o777); os.chmod(canary, 0o666)
    try:
        tests = [f"open({str(canary)!r}, 'w').write('x')", "import os\nassert os.getuid() != 0 and os.geteuid() != 0",
                 f"import os\nassert not os.path.exists({str(Path.cwd() / 'README.md')!r}) and not os.path.exists('/proc/1')",
                 "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)"]
        res = judge_program("def f(): return 1", tests, cfg=CFG)
        assert res.passed == [False, True, True, False], res.judge_output
        assert canary.read_text() == 'keep'
        j = res.isolation['judge']
        assert j['uid'] != res.isolation['uid'] and sandbox.uid_pool.owns(j['uid']) and sandbox.uid_pool.owns(res.isolation['uid'])
        assert all(j[k] for k in ('netns', 'pidns', 'ipcns', 'mountns', 'minimal_root', 'no_new_privs', 'seccomp'))
    finally:
        canary.unlink(missing_ok=True); canary.parent.rmdir()
