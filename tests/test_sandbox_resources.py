"""Everything a run can consume is counted (issue 24, item 3): disk reserved with `fallocate` past `RLIMIT_FSIZE`,
memory the judge spends decoding one answer, sockets of families that network namespaces do not cover (AF_VSOCK),
and the page-cache calls through which runs could signal each other (`fadvise`, `mincore`, `cachestat`,
`readahead`, `preadv2(RWF_NOWAIT)`, `madvise(MADV_WILLNEED | MADV_PAGEOUT | ...)`). Each probe runs in the sandbox and
reports what the kernel answered; the judge asserts on it. A control beside them shows ordinary work still runs."""
import os
import pytest
from mapg.sandbox import SandboxCfg, judge_program

ISO = judge_program('def f(): return 1', ['assert f() == 1']).isolation
needs_seccomp = pytest.mark.skipif(not ISO.get('seccomp'), reason="the kernel gave no seccomp filter")
CFG = SandboxCfg(timeout=10)
NR = dict(x86_64=dict(fadvise=221, mincore=27, cachestat=451, readahead=187, fallocate=285),
          aarch64=dict(fadvise=223, mincore=232, cachestat=451, readahead=213, fallocate=47)).get(os.uname().machine, {})

PROBES = '''
import ctypes, errno, mmap, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_errno(*a):
    "The errno of a raw system call (0 when it succeeded)"
    r = libc.syscall(*[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
    return ctypes.get_errno() if r < 0 else 0
def family(f):
    try: socket.socket(f, socket.SOCK_STREAM).close(); return 0
    except OSError as e: return e.errno
def vsock(): return family(40)                                  # AF_VSOCK
def inet(): return family(socket.AF_INET)
def unix_pair():
    a, b = socket.socketpair(); a.sendall(b'x'); r = b.recv(1); a.close(); b.close(); return r
def fallocate_stdout(): return sys_errno({fallocate}, 1, 1, 0, 1 << 30)        # FALLOC_FL_KEEP_SIZE on the output file
def fallocate_work():
    with open('big', 'wb') as fh: return sys_errno({fallocate}, fh.fileno(), 0, 0, 1 << 30)
def lib():   # a file every run reads: the standard library, bind-mounted read-only from the host
    return os.open(os.__file__, os.O_RDONLY)
def fadvise(): fd = lib(); return sys_errno({fadvise}, fd, 0, 0, 4)          # POSIX_FADV_DONTNEED: evicts shared pages
def readahead(): fd = lib(); return sys_errno({readahead}, fd, 0, 1 << 16)
def cachestat():
    fd = lib(); rng = (ctypes.c_uint64 * 2)(0, 1 << 16); out = (ctypes.c_uint64 * 8)()
    return sys_errno({cachestat}, fd, rng, out, 0)
def mincore():
    libc.mmap.restype = ctypes.c_void_p
    p = libc.mmap(None, ctypes.c_size_t(4096), 1, 1, lib(), ctypes.c_long(0))     # PROT_READ, MAP_SHARED
    return sys_errno({mincore}, p, 4096, (ctypes.c_ubyte * 1)())
def nowait():   # after a full read the pages are cached: without the filter this succeeds
    fd = lib(); b = bytearray(4096)
    while os.read(fd, 1 << 16): pass
    try: os.preadv(fd, [b], 0, os.RWF_NOWAIT); return 0
    except OSError as e: return e.errno
def plain_preadv():
    fd = lib(); b = bytearray(16)
    return os.preadv(fd, [b], 0)
def madvise(advice):
    fd = lib()
    m = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
    try: m.madvise(advice); return 0
    except OSError as e: return e.errno
def anon_dontneed():
    m = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS); m[:5] = b'hello'; m.madvise(mmap.MADV_DONTNEED); return m[:5]
'''

@needs_seccomp
def test_other_socket_families_are_denied_unix_works():
    res = judge_program(PROBES.format(**NR), ["assert vsock() != 0", "assert inet() != 0", "assert unix_pair() == b'x'"], cfg=CFG)
    assert res.passed == [True, True, True], res.judge_output

@needs_seccomp
def test_fallocate_is_denied_and_writes_stay_bounded():
    "Reserving disk on the host's output file (or in the work dir) fails; `posix_fallocate` falls back to bounded writes"
    tests = ["assert fallocate_stdout() == errno.EOPNOTSUPP", "assert fallocate_work() == errno.EOPNOTSUPP"]
    res = judge_program(PROBES.format(**NR), tests[:2], cfg=CFG)
    assert res.passed == [True, True], res.judge_output
    res = judge_program("import os\ndef grow():\n    try: os.posix_fallocate(1, 0, 1 << 30); return 'grew'\n"
                        "    except OSError as e: return e.errno", ["assert grow() != 'grew'"], cfg=SandboxCfg(timeout=10, fsize=1 << 20))
    assert res.passed == [True], res.judge_output
    assert len(res.output) <= SandboxCfg().max_output

@needs_seccomp
def test_page_cache_probes_are_denied():
    tests = ["assert fadvise() == errno.EPERM", "assert readahead() == errno.EPERM", "assert cachestat() == errno.EPERM",
             "assert mincore() == errno.EPERM", "assert nowait() in (errno.EOPNOTSUPP, errno.ENOSYS)", "assert plain_preadv() == 16",
             "assert madvise(mmap.MADV_WILLNEED) == errno.EPERM", "assert madvise(getattr(mmap, 'MADV_PAGEOUT', 21)) == errno.EPERM",
             "assert madvise(getattr(mmap, 'MADV_COLD', 20)) == errno.EPERM", "assert anon_dontneed() == bytes(5)"]
    res = judge_program(PROBES.format(**NR), tests, cfg=CFG)
    assert res.passed == [True] * len(tests), res.judge_output

FRAME = '''
import os, stat
def f():
    n = {n}
    text = ('t3;i1;s1:Rl%d;' % n + '{item}' * n).encode()  # one answer to call 1: a list of n items (empty sets, handles)
    frame = len(text).to_bytes(4, 'big') + text
    for fd in range(3, 1 << 14):                           # the pipes keep the host's numbers, which a busy host pushes high
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode): os.write(fd, frame)
        except OSError: pass
    os._exit(0)
'''

def test_an_answer_decodes_within_the_runs_memory():
    "2.4 MB of empty sets would decode to about 200 MB in the judge; the budget of one answer is the run's memory"
    cfg = SandboxCfg(timeout=30, memory=64 << 20)      # a CPU shared with other tests: time is not what is tested here
    busy = [os.pipe() for _ in range(60)]              # a long-lived test process holds many files: the run's pipes get numbers past 100
    try:
        ok = judge_program(FRAME.format(n=1000, item='S0;'), ["assert len(f()) == 1000"], cfg=cfg)
        assert ok.passed == [True], (ok.status, ok.judge_output)                                   # the path works
        res = judge_program(FRAME.format(n=800_000, item='S0;'), ["assert len(f()) == 800_000"], cfg=cfg)
    finally:
        for a, b in busy: os.close(a); os.close(b)
    assert res.passed == [False] and res.status == 'ok', res.judge_output
