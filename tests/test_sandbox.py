"""Hostile programs against `mapg.sandbox` (and the code reward): each run ends within its limit, scores 0 (or the
right fraction), leaves the canary files outside the sandbox untouched, and the calling process keeps working."""
import os, shutil, signal, socket, subprocess, sys, tempfile, threading, time
from pathlib import Path
import pytest
from mapg import sandbox
from mapg.sandbox import SandboxCfg, run_program, run_many
from mapg.sandbox.host import _proc_uids
from mapg.rewards import code_reward, unsafe_names

ROOT = os.geteuid() == 0
ISO = run_program('pass').isolation          # what this platform applies (uid drop, read-only fs, network namespace)
RO_FS, NETNS = ISO.get('readonly_fs', False), ISO.get('netns', False)

@pytest.fixture(scope='module')
def canary():
    "A protected canary (root-owned, 0644, in a 0755 dir) and a world-writable one, both reachable from the sandbox"
    d = Path(tempfile.mkdtemp(prefix='mapg-canary-', dir='/tmp')); os.chmod(d, 0o755)
    f = d/'canary.txt'; f.write_text('canary'); os.chmod(f, 0o644)
    ww = Path(tempfile.mkdtemp(prefix='mapg-canary-ww-', dir='/tmp')); os.chmod(ww, 0o777)
    g = ww/'open.txt'; g.write_text('world'); os.chmod(g, 0o666)
    yield dict(dir=d, file=f, ww_dir=ww, ww_file=g)
    shutil.rmtree(d, ignore_errors=True); shutil.rmtree(ww, ignore_errors=True)

def _snap(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode) for p in sorted(d.iterdir())}

@pytest.fixture(autouse=True)
def untouched(canary):
    "After every test: canaries unchanged, no file descriptor leaked, and a plain program still scores right"
    before, before_ww = _snap(canary['dir']), _snap(canary['ww_dir'])
    fds = len(os.listdir('/proc/self/fd'))
    yield
    assert _snap(canary['dir']) == before, "the protected canary dir changed"
    if RO_FS or not ROOT: assert _snap(canary['ww_dir']) == before_ww, "the world-writable canary dir changed"
    assert len(os.listdir('/proc/self/fd')) <= fds, "file descriptors leaked"
    assert run_program('x = 1', ['assert x == 1']).passed == [True]

def _within(res, cfg, slack=10):
    "The run ended by its wall limit: a slack for a busy machine's teardown, far below what an unenforced limit would take"
    assert res.wall < cfg.timeout + slack, f"the run took {res.wall:.2f} s with a {cfg.timeout} s limit"

def test_isolation_applied():
    print('isolation:', ISO)
    if ROOT:
        assert ISO['uid'] != 0 and ISO['uid'] != os.getuid()
        assert ISO['no_new_privs']

def test_infinite_loop():
    cfg = SandboxCfg(timeout=2)
    res = run_program("def spin():\n    while True: pass", ["assert 1 + 1 == 2", "spin()", "assert True"], cfg=cfg)
    assert (res.status, res.passed, res.frac) == ('timeout', [True, False, False], 1/3)
    _within(res, cfg)

def test_signal_handlers_that_ignore_termination():
    prog = ("import signal, time\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM, signal.SIGXFSZ, signal.SIGUSR1):\n"
            "    signal.signal(s, signal.SIG_IGN)\n")
    cfg = SandboxCfg(timeout=2)
    res = run_program(prog, ["time.sleep(100)"], cfg=cfg)
    assert (res.status, res.passed) == ('timeout', [False])
    _within(res, cfg)
    cfg = SandboxCfg(timeout=2, case_timeout=0.5)   # the per-case alarm cannot be ignored either: the wall limit ends it
    res = run_program(prog, ["while True: pass"], cfg=cfg)
    assert (res.status, res.passed) == ('timeout', [False])
    _within(res, cfg)

def test_cpu_limit():
    cfg = SandboxCfg(timeout=20, cpu=1)
    res = run_program("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)", ["while True: pass"], cfg=cfg)
    assert res.status == 'crashed' and res.passed == [False] and res.returncode == -signal.SIGKILL
    assert res.wall < cfg.timeout, f"RLIMIT_CPU should end it after ~2 s of CPU, before the wall limit ({cfg.timeout} s); took {res.wall:.1f} s"

FORK_BOMB = """
import os
def bomb():
    n = 0
    while True:
        try: pid = os.fork()
        except OSError: return n
        if pid == 0:
            while True:
                try: os.fork()
                except OSError: pass
        n += 1
"""

def test_fork_bomb():
    cfg = SandboxCfg(timeout=3)
    seen, stop = [0], threading.Event()
    def watch():   # count the bomb's processes while it runs (uids of this process's sandbox block)
        while not stop.is_set():
            seen[0] = max(seen[0], sum(sandbox.uid_pool.owns(u) for u in _proc_uids().values())); time.sleep(0.05)
    t = threading.Thread(target=watch); t.start()
    other = {}
    def neighbour(): other['r'] = run_program('x = 2', ['assert x * 21 == 42'], cfg=SandboxCfg(timeout=10))
    time.sleep(0.01)
    try:
        n = threading.Thread(target=neighbour)
        res_box = {}
        b = threading.Thread(target=lambda: res_box.update(r=run_program(FORK_BOMB, ["n = bomb(); print('forks', n); assert n < 8"], cfg=cfg)))
        b.start(); time.sleep(0.5); n.start(); b.join(); n.join()
    finally:
        stop.set(); t.join()
    res = res_box['r']
    print(res.output[:200], 'max sandbox processes seen:', seen[0])
    assert res.passed == [True], "fork() kept succeeding: RLIMIT_NPROC did not hold for the sandbox uid"
    _within(res, cfg)
    assert other['r'].passed == [True], "a concurrent sandbox was disturbed by the fork bomb"
    if ROOT:
        assert seen[0] <= cfg.nproc + 1, f"{seen[0]} sandbox processes at once with nproc={cfg.nproc}"
        assert not [p for p, u in _proc_uids().items() if u == res.isolation['uid']], "bomb processes survived the run"

def test_memory_bomb():
    cfg = SandboxCfg(timeout=10, memory=512 << 20)
    res = run_program("big = []", ["x = bytearray(8 << 30)", "while True: big.append(bytearray(64 << 20))",
                                   "big.clear(); assert sum(range(10)) == 45"], cfg=cfg)
    assert (res.status, res.passed) == ('ok', [False, False, True])
    assert 'MemoryError' in res.output
    _within(res, cfg)

def test_deep_recursion():
    res = run_program("def f(n): return f(n + 1) + 1", ["assert True", "f(0)", "assert True"])
    assert (res.status, res.passed) == ('ok', [True, False, True])        # RecursionError: the case fails, the run goes on
    cfg = SandboxCfg(timeout=4)   # no recursion limit: the frames fill the memory limit (or the C stack) or the time runs out
    res = run_program("import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n): return f(n + 1) + 1", ["assert True", "f(0)", "assert True"], cfg=cfg)
    assert res.passed[:2] == [True, False] and res.status in ('ok', 'crashed', 'timeout'), res
    _within(res, cfg)

def test_huge_output():
    cfg = SandboxCfg(timeout=10, fsize=4 << 20, max_output=1000)
    res = run_program("", ["print('x' * 100)", "while True: print('y' * 65536)", "assert True"], cfg=cfg)
    assert (res.status, res.passed) == ('ok', [True, False, True])   # Python ignores SIGXFSZ: writes past the limit raise
    assert len(res.output.encode()) <= 1000 and res.output.startswith('x' * 100)
    _within(res, cfg)
    res = run_program("import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)",
                      ["print('x' * 100)", "while True: print('y' * 65536)", "assert True"], cfg=cfg)
    assert (res.status, res.passed, res.returncode) == ('crashed', [True, False, False], -signal.SIGXFSZ)
    assert len(res.output.encode()) <= 1000
    _within(res, cfg)

def test_shell_and_subprocess(canary):
    f, d = canary['file'], canary['dir']
    cases = [f"assert os.system('echo pwned > {f}') == 0",
             f"assert os.system('rm -rf {d}') == 0 and not os.path.exists({str(d)!r})",
             f"subprocess.run(['sh', '-c', 'echo pwned >> {f}'], check=True)",
             f"subprocess.run(['touch', '{d}/new.txt'], check=True)",
             f"assert os.popen('id -u').read().strip() == '0'",
             "subprocess.run(['sudo', '-n', 'true'], check=True)"]
    res = run_program("import os, subprocess", cases, cfg=SandboxCfg(timeout=10))
    assert res.status == 'ok' and res.passed == [False] * len(cases), res.output

def test_socket():
    srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(); srv.setblocking(False)
    port = srv.getsockname()[1]
    try:
        res = run_program("import socket", [f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')",
                                            "socket.create_connection(('1.1.1.1', 53), timeout=2)",
                                            "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))"],
                          cfg=SandboxCfg(timeout=10))
        if NETNS:
            assert res.passed == [False, False, False], res.output
            with pytest.raises(BlockingIOError): srv.accept()   # nothing reached the caller's loopback
    finally: srv.close()

TRICKS = {  # name: (code defining f, statically blocked)
    'dunder_import': ("def f():\n    __import__('os').remove({f!r})\n    return 1", True),
    'importlib': ("import importlib\ndef f():\n    importlib.import_module('os').remove({f!r})\n    return 1", False),
    'builtins_module': ("import builtins\ndef f():\n    builtins.open({f!r}, 'w').write('x')\n    return 1", True),
    'dunder_builtins': ("def f():\n    __builtins__['open']({f!r}, 'w')\n    return 1", True),
    'string_built_builtins': ("def f():\n    b = globals()['__buil' + 'tins__']\n"
                              "    o = b['op' + 'en'] if isinstance(b, dict) else getattr(b, 'op' + 'en')\n"
                              "    o({f!r}, 'w').write('x')\n    return 1", False),
    'exec_import': ("def f():\n    exec(\"import os; os.remove({f!r})\")\n    return 1", True),
    'compiled_import': ("def f():\n    g = {{}}\n    exec(compile('import o' + 's', 'x', 'exec'), g)\n"
                        "    g['o' + 's'].unlink({f!r})\n    return 1", False),
    'rebind_exec': ("import builtins\nbuiltins.exec = lambda *a, **k: None\ndef f(): return 0", True),
}

@pytest.mark.parametrize('name', list(TRICKS))
def test_import_tricks(name, canary):
    code, blocked = TRICKS[name]
    code = code.format(f=str(canary['file']))
    assert bool(unsafe_names(code)) == blocked
    r = code_reward(f"```python\n{code}\n```", ["assert f() == 1"])
    assert r == dict(total=1.0, format=1.0, execution=0.0), r
    res = run_program(code, ["assert f() == 1"])       # without the static block-list: the sandbox alone holds
    assert res.passed == [False], res.output

def test_rebinding_builtins_does_not_fake_passes():
    res = run_program("import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.compile = lambda *a, **k: None",
                      ["assert False", "assert 1 == 2"])
    assert res.passed == [False, False]
    res = run_program("import os\nos.write = lambda *a: 0", ["assert True"])   # the harness kept its own os.write
    assert res.passed == [True]

def test_exit_calls():
    res = run_program("import sys, os\ndef bye(): sys.exit(0)", ["assert True", "bye()", "assert True"])
    assert (res.status, res.passed) == ('ok', [True, False, True])   # SystemExit fails only its case
    res = run_program("import os", ["assert True", "os._exit(0)", "assert True"])
    assert (res.status, res.passed) == ('crashed', [True, False, False])
    res = run_program("import sys\nsys.exit(0)", ["assert True"])
    assert (res.setup_ok, res.passed) == (False, [False])
    res = run_program("import os, signal", ["assert True", "os.kill(os.getpid(), signal.SIGKILL)", "assert True"])
    assert (res.status, res.passed) == ('crashed', [True, False, False])
    assert code_reward("```python\nimport sys\ndef f(): return 1\n```", ["assert f() == 1"])['execution'] == 0.

def test_files_outside_the_work_dir(canary):
    f, d, ww, wwf = (str(canary[k]) for k in ('file', 'dir', 'ww_dir', 'ww_file'))
    tag = os.urandom(4).hex()
    protected = [f"open({f!r}, 'w').write('x')", f"open({f!r}, 'a').write('x')", f"os.remove({f!r})",
                 f"os.rename({f!r}, {f + '.moved'!r})", f"os.chmod({f!r}, 0o777)", f"os.utime({f!r}, (0, 0))",
                 f"shutil.rmtree({d!r})", f"open({d + '/new.txt'!r}, 'w')", f"os.truncate({f!r}, 0)",
                 f"os.link({f!r}, 'hard'); open('hard', 'w').write('x')", f"os.symlink({f!r}, 'soft'); open('soft', 'w').write('x')"]
    world = [f"open({wwf!r}, 'w').write('x')", f"os.remove({wwf!r})", f"open({ww + '/new.txt'!r}, 'w')",
             f"open('/tmp/mapg-escape-{tag}', 'w')", f"open('/dev/shm/mapg-escape-{tag}', 'w')",
             f"open('/var/tmp/mapg-escape-{tag}', 'w')"]
    inside = ["open('inside.txt', 'w').write('ok'); assert open('inside.txt').read() == 'ok'",
              "import tempfile; tempfile.NamedTemporaryFile(delete=False).write(b'ok')", "os.makedirs('a/b/c')"]
    res = run_program("import os, shutil", protected + world + inside, cfg=SandboxCfg(timeout=10))
    np, nw = len(protected), len(world)
    assert res.passed[:np] == [False] * np, res.output
    if RO_FS: assert res.passed[np:np + nw] == [False] * nw, res.output
    assert res.passed[np + nw:] == [True] * len(inside), res.output
    for p in [f'/tmp/mapg-escape-{tag}', f'/dev/shm/mapg-escape-{tag}', f'/var/tmp/mapg-escape-{tag}']:
        if RO_FS: assert not os.path.exists(p)
        elif os.path.exists(p): os.remove(p)

def test_environment_secrets(monkeypatch):
    secret = 'hunter2-' + os.urandom(6).hex()
    monkeypatch.setenv('MAPG_TEST_SECRET', secret)
    cases = [f"assert {secret!r} in str(dict(os.environ))", "assert 'MAPG_TEST_SECRET' in os.environ",
             f"assert {secret!r} in open('/proc/{os.getpid()}/environ').read()",
             f"assert {secret!r} in open('/proc/{os.getppid()}/environ').read()",
             f"assert b'MAPG' in open('/proc/{os.getpid()}/cmdline', 'rb').read() or True",
             "print(dict(os.environ))"]
    res = run_program("import os", cases)
    assert res.passed[:2] == [False, False]
    if ROOT: assert res.passed[2:4] == [False, False], res.output
    assert secret not in res.output

@pytest.mark.skipif(not ROOT, reason="an unprivileged sandbox shares the caller's uid and could signal it")
def test_kill_everything_reachable():
    jobs = [dict(code="import os, signal", tests=["os.kill(-1, signal.SIGKILL)"]),
            dict(code="import os, signal", tests=[f"os.kill({os.getpid()}, signal.SIGKILL)", f"os.killpg({os.getpgid(0)}, signal.SIGKILL)"])] + \
           [dict(code=f"x = {i}", tests=["import time; time.sleep(0.3)", f"assert x == {i}"]) for i in range(4)]
    res = run_many(jobs, workers=3)
    assert res[1].passed == [False, False]
    assert [r.passed for r in res[2:]] == [[True, True]] * 4   # neighbours survive kill(-1) (distinct uids)

def test_escaped_processes_are_swept():
    prog = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n    os._exit(0)\n"
    res = run_program(prog, ["assert True"])
    assert res.passed == [True]
    if ROOT:
        time.sleep(0.1)
        assert not [p for p, u in _proc_uids().items() if u == res.isolation['uid']], "a setsid'd grandchild survived"

def test_pool_mixes_hostile_and_plain_programs():
    plain = [dict(code=f"def f(): return {i}", tests=[f"assert f() == {i}", f"assert f() == {i + 1}"]) for i in range(6)]
    hostile = [dict(code="while True: pass"), dict(code="import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"),
               dict(code="x = bytearray(1 << 40)"), dict(code="print('z' * (1 << 26))")]
    jobs = [j for pair in zip(plain, hostile + hostile[:2]) for j in pair]
    t = time.monotonic()
    res = run_many(jobs, cfg=SandboxCfg(timeout=3), workers=2)
    assert [r.passed for r in res[::2]] == [[True, False]] * 6
    assert time.monotonic() - t < 3 * 6 / 2 + 30          # six 3 s limits on two workers, and a busy machine's slack

def _unprivileged_python():
    "An interpreter that uid 65534 can run and import mapg with (None if there is none)"
    repo = str(Path(__file__).resolve().parent.parent)
    for exe in dict.fromkeys([sys.executable, '/usr/bin/python3', shutil.which('python3')]):
        if not exe: continue
        try: r = subprocess.run([exe, '-c', f'import sys; sys.path.insert(0, {repo!r}); import mapg.sandbox'],
                                user=65534, group=65534, extra_groups=[], capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError): continue
        if r.returncode == 0: return exe, repo
    return None

def test_as_unprivileged_caller():
    "The sandbox called by a non-root user: user namespaces give the read-only filesystem and no network where allowed"
    if not ROOT: pytest.skip("already running unprivileged: the other tests cover it")
    found = _unprivileged_python()
    if found is None: pytest.skip("no interpreter that uid 65534 can run mapg with")
    exe, repo = found
    d = Path(tempfile.mkdtemp(dir='/tmp')); os.chmod(d, 0o777)
    f = d/'mine.txt'; f.write_text('mine'); os.chown(f, 65534, 65534)
    script = (f"import sys; sys.path.insert(0, {repo!r})\nfrom mapg.sandbox import run_program\n"
              f"r = run_program('', [\"open({str(f)!r}, 'w').write('x')\", \"open('inside.txt', 'w').write('ok')\", "
              f"\"import socket; socket.create_connection(('127.0.0.1', 9), timeout=1)\"])\n"
              "print(r.isolation, r.passed)\n"
              "assert r.passed[1] and r.isolation['uid'] == 65534\n"
              "if r.isolation['readonly_fs']: assert r.passed[0] is False\n"
              "if r.isolation['netns']: assert r.passed[2] is False\n")
    out = subprocess.run([exe, '-c', script], user=65534, group=65534, extra_groups=[], capture_output=True, text=True, timeout=60)
    print(out.stdout, out.stderr[-500:])
    assert out.returncode == 0
    if 'readonly_fs\': True' in out.stdout: assert f.read_text() == 'mine'
    shutil.rmtree(d)

def test_isolation_failure_refuses_to_run(monkeypatch):
    "A child that cannot isolate itself reports it and the program is not run: the caller gets a SandboxError"
    from mapg import sandbox
    src = sandbox.child_program().replace("child_main()\n", "def no_way(job): raise PermissionError('no way')\n"
                                          "sys.modules['mapg.sandbox.child'].confine = no_way\nchild_main()\n")
    monkeypatch.setattr(sandbox, 'child_program', lambda: src)
    with pytest.raises(sandbox.SandboxError, match='no way'): sandbox.run_program("open('ran.txt', 'w')", ["assert True"])
