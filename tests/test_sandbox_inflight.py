"""Nothing a run creates outlives it, and the filter's round-five denials (issue 37, items 3 to 5): no file descriptor can be
left in flight (`sendmsg`/`sendmmsg` are denied, so no `SCM_RIGHTS` cycle holds the work dir's pages or charges the uid
after the run); Linux AIO (`io_setup`, `io_submit`, ...), `sync`/`syncfs`/`sync_file_range` and `membarrier` are
denied; the judge's decoder counts the object it builds for each handle against the run's memory. Each probe runs in
the sandbox and reports what the kernel answered; a control beside each shows ordinary work still runs."""
import os
import pytest
from mapg.sandbox import SandboxCfg, judge_program
from test_sandbox_resources import FRAME

ISO = judge_program('def f(): return 1', ['assert f() == 1']).isolation
needs_seccomp = pytest.mark.skipif(not ISO.get('seccomp'), reason="the kernel gave no seccomp filter")
CFG = SandboxCfg(timeout=20)
NR = dict(x86_64=dict(sendmmsg=307, io_setup=206, io_submit=209, io_getevents=208, sync=162, syncfs=306,
                      sync_file_range=277, membarrier=324, fsync=74),
          aarch64=dict(sendmmsg=269, io_setup=0, io_submit=2, io_getevents=4, sync=81, syncfs=267, sync_file_range=84,
                       membarrier=283, fsync=82)).get(os.uname().machine, {})

PROBES = '''
import array, ctypes, errno, os, socket
NR = {nr!r}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_errno(name, *a):
    "The errno of a raw system call (0 when it succeeded)"
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
    return ctypes.get_errno() if r < 0 else 0
def work_file(mib):
    with open('big', 'wb') as fh:
        for _ in range(mib): fh.write(b'x' * (1 << 20))
    return os.open('big', os.O_RDONLY)
def in_flight(mib=0):
    "Both ends of a socket pair and a work file sent over it (a cycle the kernel frees only at its next collection)"
    a, b = socket.socketpair()
    f = work_file(mib)
    try:
        a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [a.fileno(), b.fileno(), f]))]); r = 0
    except OSError as e: r = e.errno
    a.close(); b.close(); os.close(f)
    return r
def sendmmsg():
    a, b = socket.socketpair()
    return sys_errno('sendmmsg', a.fileno(), 0, 0, 0)
def unix_pair():
    a, b = socket.socketpair(); a.send(b'y'); return b.recv(1)
def aio_setup():
    ctx = ctypes.c_ulong(0)
    return sys_errno('io_setup', 128, ctypes.byref(ctx))
def aio_submit(): return sys_errno('io_submit', 0, 0, 0)
def aio_getevents(): return sys_errno('io_getevents', 0, 0, 0, 0, 0)
def sync(): return sys_errno('sync')
def syncfs(): return sys_errno('syncfs', work_file(0))
def sync_range(): return sys_errno('sync_file_range', work_file(0), 0, 0, 0)
def membarrier(): return sys_errno('membarrier', 0, 0)       # MEMBARRIER_CMD_QUERY
def fsync(): return sys_errno('fsync', work_file(1))
'''

def shmem_mib()->float:
    "The host's shared memory (tmpfs pages among it), MiB"
    line = next(l for l in open('/proc/meminfo') if l.startswith('Shmem:'))
    return int(line.split()[1]) / 1024

@needs_seccomp
def test_no_file_descriptor_can_be_left_in_flight():
    tests = ["assert in_flight() == errno.EPERM", "assert sendmmsg() == errno.EPERM", "assert unix_pair() == b'y'"]
    res = judge_program(PROBES.format(nr=NR), tests, cfg=CFG)
    assert res.passed == [True] * len(tests), res.judge_output

@needs_seccomp
def test_a_run_leaves_no_pages_behind():
    "A run that fills its work dir and tries to keep it in flight: the pages are the host's again once it is over"
    mib = 96
    cfg = SandboxCfg(timeout=30, disk=(mib + 8) << 20, fsize=(mib + 8) << 20, memory=(mib + 160) << 20)
    before = shmem_mib()
    res = judge_program(PROBES.format(nr=NR), [f"assert in_flight({mib}) == errno.EPERM"], cfg=cfg)
    after = shmem_mib()
    assert res.passed == [True], res.judge_output
    assert after - before < mib / 2, f"{after - before:.0f} MiB of shared memory stayed after the run"

@needs_seccomp
def test_aio_sync_and_membarrier_are_denied():
    tests = ["assert aio_setup() == errno.EPERM", "assert aio_submit() == errno.EPERM", "assert aio_getevents() == errno.EPERM",
             "assert sync() == errno.EPERM", "assert syncfs() == errno.EPERM", "assert sync_range() == errno.EPERM",
             "assert membarrier() == errno.EPERM", "assert fsync() == 0"]
    res = judge_program(PROBES.format(nr=NR), tests, cfg=CFG)
    assert res.passed == [True] * len(tests), res.judge_output


def test_handles_count_against_the_runs_memory():
    "3 MB of handles would build a million objects (about 70 MB) in the judge: past the run's 64 MiB, refused"
    cfg = SandboxCfg(timeout=30, memory=64 << 20, max_value=4 << 20)
    ok = judge_program(FRAME.format(n=1000, item='h1;'), ["assert len(f()) == 1000"], cfg=cfg)
    assert ok.passed == [True], (ok.status, ok.judge_output)                                   # the path works
    res = judge_program(FRAME.format(n=1_000_000, item='h1;'), ["assert len(f()) == 1_000_000"], cfg=cfg)
    assert res.passed == [False] and res.status == 'ok', res.judge_output

def test_the_filter_page_lists_every_denied_call():
    "The filter page's tables of denied calls are the filter's lists, number for number, on both architectures"
    import json, re
    from pathlib import Path
    from mapg.sandbox.filter import _sbx_syscalls
    page = Path(__file__).resolve().parents[1]/'nbs'/'08b_sandbox_filter.ipynb'
    md = ''.join(l for c in json.loads(page.read_text())['cells'] if c['cell_type'] == 'markdown' for l in c['source'])
    rows = re.findall(r'^\| ((?:`\w+` ?)+) \| ([\d ]+) \| ([\d —]+) \|', md, re.M)
    assert rows and all(len(n.split()) == len(a.split()) == len(b.split()) for n, a, b in rows)
    assert sorted(int(x) for _, a, _ in rows for x in a.split()) == sorted(_sbx_syscalls('x86_64')[3])
    assert sorted(int(x) for _, _, b in rows for x in b.split() if x != '—') == sorted(_sbx_syscalls('aarch64')[3])

def test_a_refused_unshare_is_tried_again():
    "A refusal the kernel may not repeat (memory, namespaces still being freed) costs a retry, not the run's namespaces"
    from mapg.sandbox.jail import _sbx_unshare
    class Libc:
        def __init__(self, fails): self.fails, self.calls = fails, []
        def unshare(self, flags):
            self.calls.append(flags)
            return -1 if len(self.calls) <= self.fails else 0
    libc, iso = Libc(2), dict(netns=False, pidns=False, ipcns=False, mountns=False)
    job = dict(namespaces=True)
    if os.geteuid() != 0: pytest.skip('the retry of the root path is what this checks')
    import unittest.mock as um
    with um.patch('builtins.open', um.mock_open(read_data='header\nheader\nlo\n')):   # the new namespace's /proc files
        _sbx_unshare(job, libc, iso)
    assert len(libc.calls) == 3 and len(set(libc.calls)) == 1                      # the same request, twice refused
    assert iso['mountns'] and iso['pidns'] and iso['ipcns'] and 'unshare_errno' in iso
