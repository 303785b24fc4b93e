"""The page-cache timing channel between sandbox runs (issue 24, item 3), measured through `mapg.sandbox`'s public API.

Every run sees the same host library files through read-only bind mounts, so their pages share the host's page cache.
A *sender* run encodes bits by reading (1) or not reading (0) one byte of chosen pages of a large library file; a
*receiver* run times a one-byte `pread` of each of those pages and prints the latencies; a bit is decoded as 1 when
the read was fast (cached). The threshold splits the receiver's log-latencies in two (a 1-D 2-means, the same
computation the receiver could make itself). Sequential: the receiver runs after the sender ends. Concurrent: both
are jobs of one `run_many` batch (two workers) and the receiver waits `--wait` seconds before it times its reads.

A page carries a bit only while it is *not* cached: no call inside the jail can evict one (the `evict` rows try each
way, the host checks with `mincore`), so the host script evicts the file once at the start, standing in for the
host's memory pressure, and every trial uses pages of its own. The host also reads the true cache state of each sent
page (`mincore`, outside the jail) to separate what the sender did from what the receiver decoded.

Usage: `python scripts/sandbox_channel.py [--bits 128] [--trials 3] [--file PATH]` (default: the largest file of the
interpreter's and the system's library dirs, which every run sees)."""
import argparse, ctypes, math, os, random, sys, sysconfig, time
from mapg.sandbox import SandboxCfg, run_program, run_many

PAGE = os.sysconf('SC_PAGE_SIZE')
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype, _libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                                           ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

def target_file()->str:
    "The largest regular file directly in the interpreter's or the system's library dirs (all bound into the jail)"
    dirs = [sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('LIBPL'), '/usr/lib/x86_64-linux-gnu',
            '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib']
    files = [os.path.join(d, f) for d in dirs if d and os.path.isdir(d) for f in os.listdir(d)]
    files = [f for f in files if os.path.isfile(f) and not os.path.islink(f) and os.access(f, os.R_OK)]
    return max(files, key=os.path.getsize)

def evict(path:str):
    "Host side: drop the file's unmapped pages from the page cache (what memory pressure does; the jail cannot)"
    fd = os.open(path, os.O_RDONLY)
    try: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally: os.close(fd)

def cached(path:str,      # the file
           pages:list     # page indices
          )->list:        # True where that page is in the page cache
    "Host side: the true cache state of `pages` (`mincore` on a shared read-only mapping, outside the jail)"
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, 1, 1, fd, 0)          # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value): raise OSError(ctypes.get_errno(), 'mmap failed')
        vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
        try:
            if _libc.mincore(addr, size, vec) != 0: raise OSError(ctypes.get_errno(), 'mincore failed')
        finally: _libc.munmap(addr, size)
    finally: os.close(fd)
    return [bool(vec[p] & 1) for p in pages]

def supply()->tuple:
    "`(files, pages, pages cached)` of the library files every run sees (the dirs the jail binds, no site-packages)"
    std = os.path.dirname(os.__file__)
    lib = os.path.join(sys.base_prefix, 'lib')
    dirs = ['/lib', '/lib64', '/lib32', '/usr/lib', '/usr/lib64', '/usr/lib32', lib if std.startswith(lib + os.sep) else std]
    seen, files, pages, hot = set(), 0, 0, 0
    for d in dict.fromkeys(os.path.realpath(d) for d in dirs if os.path.isdir(d)):
        for r, ds, fs in os.walk(d):
            ds[:] = [x for x in ds if x != 'site-packages']
            for f in fs:
                p = os.path.join(r, f)
                if os.path.islink(p) or not os.path.isfile(p) or p in seen or not os.path.getsize(p): continue
                seen.add(p); n = -(-os.path.getsize(p) // PAGE)
                try: hot += sum(cached(p, range(n)))
                except OSError: continue
                files, pages = files + 1, pages + n
    return files, pages, hot

def sender(path:str, pages:list)->str:
    "The sender program: reads one byte of each page it sends a 1 on"
    return f"import os\nfd = os.open({path!r}, os.O_RDONLY)\nfor p in {pages!r}: os.pread(fd, 1, p * {PAGE})\n"

def receiver(path:str, pages:list, wait:float=0.)->str:
    "The receiver program: after `wait` s, times a one-byte read of each page and prints the latencies (ns)"
    return (f"import os, time\nfd = os.open({path!r}, os.O_RDONLY)\ntime.sleep({wait})\nt0 = time.time()\nlat = []\n"
            "for _ in range(3): a = time.perf_counter_ns(); os.pread(fd, 1, 0)   # warm-up on page 0 (never a sent page)\n"
            f"for p in {pages!r}:\n    a = time.perf_counter_ns(); os.pread(fd, 1, p * {PAGE}); lat.append(time.perf_counter_ns() - a)\n"
            "print('T0', t0)\nprint('LAT', *lat)\n")

def threshold(lat:list)->float:
    "The split of the log-latencies into two groups with the least within-group spread (1-D 2-means, exhaustive)"
    xs = sorted(math.log(max(x, 1)) for x in lat)
    best, cut = None, xs[-1] + 1
    for i in range(1, len(xs)):
        a, b = xs[:i], xs[i:]
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        sse = sum((x - ma) ** 2 for x in a) + sum((x - mb) ** 2 for x in b)
        if best is None or sse < best: best, cut = sse, (xs[i - 1] + xs[i]) / 2
    return math.exp(cut)

def parse(out:str)->tuple:
    "`(latencies, start time)` from a receiver's output"
    lines = dict(l.split(' ', 1) for l in out.splitlines() if l.startswith(('LAT ', 'T0 ')))
    return [int(x) for x in lines['LAT'].split()], float(lines['T0'])

def trial(path:str, pages:list, bits:list, concurrent:bool, wait:float, cfg:SandboxCfg)->dict:
    "One sender run and one receiver run over `pages` (uncached at the start); what was sent, set and decoded"
    ones = [p for p, b in zip(pages, bits) if b]
    t = time.perf_counter()
    if concurrent:
        s, r = run_many([dict(code=sender(path, ones) + "import time\nprint('DONE', time.time())\n"),
                         dict(code=receiver(path, pages, wait))], cfg=cfg, workers=2)
    else: s, r = run_program(sender(path, ones) + "import time\nprint('DONE', time.time())\n", cfg=cfg), None
    set_ = cached(path, pages)                 # after the sender (sequential), or after both (concurrent)
    if not concurrent: r = run_program(receiver(path, pages), cfg=cfg)
    dt = time.perf_counter() - t
    assert s.setup_ok and r.setup_ok, (s.output, r.output)
    lat, t0 = parse(r.output)
    done = float([l for l in s.output.splitlines() if l.startswith('DONE ')][0].split()[1])
    cut = threshold(lat)
    got = [int(x < cut) for x in lat]
    med = lambda xs: sorted(xs)[len(xs) // 2] / 1000 if xs else float('nan')
    return dict(bits=len(bits), errors=sum(g != b for g, b in zip(got, bits)), wall=dt, cut_us=cut / 1000,
                set_right=sum(c == bool(b) for c, b in zip(set_, bits)) if not concurrent else None,
                lat1_us=med([l for l, b in zip(lat, bits) if b]), lat0_us=med([l for l, b in zip(lat, bits) if not b]),
                late=t0 < done)

EVICT = '''
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long
P, PAGES = {page}, {pages!r}
fd = os.open({path!r}, os.O_RDONLY)
def fadvise(ps):
    r = libc.syscall(ctypes.c_long({fadv}), fd, ctypes.c_long(ps[0] * P), ctypes.c_long(len(ps) * P), 4)   # POSIX_FADV_DONTNEED
    return ctypes.get_errno() if r < 0 else 0
def advise(advice):
    def f(ps):   # the pages mapped and touched first: COLD and PAGEOUT act on mapped pages only
        m = mmap.mmap(fd, len(ps) * P, prot=mmap.PROT_READ, offset=ps[0] * P)
        for i in range(len(ps)): m[i * P]
        try: m.madvise(advice); return 0
        except OSError as e: return e.errno
    return f
def pressure(ps):   # read the rest of the file through a small memory cgroup, far enough that readahead misses the probes
    n, lo, hi = os.fstat(fd).st_size, PAGES[0][0] * P - (16 << 20), (PAGES[-1][-1] + 1) * P
    for off in range(0, n, 1 << 20):
        if not lo < off < hi: os.pread(fd, 1 << 20, off)
    return 0
def msync(ps):       # MS_INVALIDATE on a shared mapping of the pages
    libc.mmap.restype = ctypes.c_void_p
    addr = libc.mmap(None, ctypes.c_size_t(len(ps) * P), 1, 1, fd, ctypes.c_long(ps[0] * P))
    r = libc.msync(ctypes.c_void_p(addr), ctypes.c_size_t(len(ps) * P), 2)     # MS_INVALIDATE
    return ctypes.get_errno() if r < 0 else 0
WAYS = dict(fadvise_dontneed=fadvise, madv_dontneed=advise(4), madv_free=advise(8), madv_remove=advise(9),
            madv_cold=advise(20), madv_pageout=advise(21), madv_collapse=advise(25), msync_invalidate=msync,
            memory_pressure=pressure)
print('EV', {way!r}, WAYS[{way!r}](PAGES[{i}]))
'''

WAYS = ('fadvise_dontneed', 'madv_dontneed', 'madv_free', 'madv_remove', 'madv_cold', 'madv_pageout', 'madv_collapse',
        'msync_invalidate', 'memory_pressure')

def try_way(path:str, groups:list, way:str, cfg:SandboxCfg)->tuple:
    """Host-cache every group, then one run tries `way` on its own group: `(errno in the jail, its pages still cached,
    control pages still cached, memcg)`; the last group is the control, cached by the host and untouched by the run"""
    fd = os.open(path, os.O_RDONLY)
    for g in groups:
        for p in g: os.pread(fd, 1, p * PAGE)          # cached by the host, charged outside the run
    os.close(fd)
    nr = dict(x86_64=221, aarch64=223)[os.uname().machine]
    i = WAYS.index(way)
    res = run_program(EVICT.format(page=PAGE, pages=groups, path=path, fadv=nr, way=way, i=i), cfg=cfg)
    assert res.setup_ok, res.output
    (e,) = [int(l.split()[2]) for l in res.output.splitlines() if l.startswith('EV ')]
    return e, sum(cached(path, groups[i])), sum(cached(path, groups[-1])), res.isolation.get('memcg')

def eviction(path:str, cfg:SandboxCfg, per:int=8, base:int=0, tries:int=3)->dict:
    """Each way a run might evict pages the host has cached, one run per way: rows `(way, errno in the jail, pages still
    cached of per, control pages still cached of per, tries)`, and the part of the file cached after the last run (the
    reads under memory pressure show their own reclaim there). A way is tried again, up to `tries` times, while the
    control group lost pages: then the host's own reclaim was at work, and the row could not tell the run's doing."""
    groups = [list(range(base + i * 256, base + i * 256 + per)) for i in range(len(WAYS) + 1)]   # 1 MiB apart
    rows, memcg = [], None
    for way in WAYS:
        for t in range(1, tries + 1):
            e, n, ctl, memcg = try_way(path, groups, way, cfg)
            if ctl == per: break
        rows.append((way, e, n, ctl, t))
    n = os.path.getsize(path) // PAGE
    return dict(rows=rows, file_cached=sum(cached(path, range(n))) / n, memory=cfg.memory, memcg=memcg)

def measure(path:str|None=None, bits:int=128, trials:int=3, spacing:int=16, wait:float=0.5, seed:int=0,
            modes:tuple=('sequential', 'concurrent'), probe:bool=True)->dict:
    "Bits, errors and bits/s per mode, and the eviction table; the file is evicted once at the start and once at the end"
    path = path or target_file()
    npages, n = os.path.getsize(path) // PAGE, len(modes) * trials * bits
    end = npages - (2900 if probe else 0)                # the last pages are the eviction probe's
    rng, cfg = random.Random(seed), SandboxCfg(timeout=30, memory=64 << 20, max_output=1 << 20)
    evict(path)
    cand = list(range(spacing, end, spacing))
    free = [p for p, c in zip(cand, cached(path, cand)) if not c]   # pages someone maps stay cached: not used
    if len(free) < n: raise ValueError(f"{path}: {len(free)} uncached pages {spacing} apart, {n} needed: "
                                       "lower --bits, --trials or --spacing")
    slots = iter(free)
    out = dict(file=path, size=os.path.getsize(path), pages_cached_after_evict=len(cand) - len(free))
    for mode in modes:
        rows = []
        for _ in range(trials):
            pages = [next(slots) for _ in range(bits)]
            rows.append(trial(path, pages, [rng.randrange(2) for _ in pages], mode == 'concurrent', wait, cfg))
        out[mode] = rows
    if probe: out['evict'] = eviction(path, cfg, base=end + 32)
    evict(path)
    return out

def table(m:dict)->str:
    "The measurement as text"
    lines = [f"file {m['file']} ({m['size'] / 2**20:.0f} MiB); candidate pages still cached after the host's eviction "
             f"(not used): {m['pages_cached_after_evict']}",
             f"{'mode':11s} {'bits':>5s} {'errors':>6s} {'BER':>6s} {'wall s':>7s} {'bits/s':>7s} {'1 (cached) us':>13s} "
             f"{'0 us':>7s} {'sender set right':>16s} {'receiver early':>14s}"]
    for mode in ('sequential', 'concurrent'):
        if mode not in m: continue
        rs = m[mode]
        b, e, w = sum(r['bits'] for r in rs), sum(r['errors'] for r in rs), sum(r['wall'] for r in rs)
        sr = '-' if rs[0]['set_right'] is None else f"{sum(r['set_right'] for r in rs)}/{b}"
        l1 = sorted(r['lat1_us'] for r in rs)[len(rs) // 2]; l0 = sorted(r['lat0_us'] for r in rs)[len(rs) // 2]
        lines.append(f"{mode:11s} {b:5d} {e:6d} {e / b:6.3f} {w:7.2f} {b / w:7.0f} {l1:13.1f} {l0:7.1f} {sr:>16s} "
                     f"{sum(r['late'] for r in rs) if mode == 'concurrent' else 0:>12d}/{len(rs)}")
    if 'evict' in m:
        ev = m['evict']
        lines.append("eviction from inside the jail (8 host-cached pages each, one run per way): way, errno, pages still "
                     "cached, control pages still cached, tries")
        lines += [f"  {k:17s} {os.strerror(e) if e else 'ok':28s} {n}/8 {c:5d}/8 {t:3d}" for k, e, n, c, t in ev['rows']]
        lines.append(f"  after the run {100 * ev['file_cached']:.0f}% of the file is cached (run memory "
                     f"{ev['memory'] >> 20} MiB, memory cgroup: {ev['memcg']})")
    return '\n'.join(lines)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--file', help='the shared file (default: the largest in the library dirs)')
    ap.add_argument('--bits', type=int, default=128, help='bits per trial (one sender run and one receiver run)')
    ap.add_argument('--trials', type=int, default=3, help='trials per mode')
    ap.add_argument('--spacing', type=int, default=16, help='pages between two sent pages (keeps readahead off them)')
    ap.add_argument('--wait', type=float, default=0.5, help='seconds the concurrent receiver waits before it reads')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--no-supply', action='store_true', help="skip counting the uncached pages of the jail's library files")
    a = ap.parse_args()
    t = time.perf_counter()
    m = measure(a.file, a.bits, a.trials, a.spacing, a.wait, a.seed)
    print(table(m))
    if not a.no_supply:
        f, n, hot = supply()
        print(f"supply: the jail shows {f} library files, {n * PAGE / 2**30:.2f} GiB; {(n - hot) * PAGE / 2**30:.2f} GiB "
              f"({n - hot} pages) uncached now: about {(n - hot) // a.spacing} bits {a.spacing} pages apart, "
              "until the host's memory pressure evicts more")
    print(f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f} took {time.perf_counter() - t:.1f} s "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")

if __name__ == '__main__': main()
