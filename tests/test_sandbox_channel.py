"""The page-cache channel between runs (issue 24, item 3), at a tiny size through `scripts/sandbox_channel.py`: the
measurement yields its table, the sender's reads set exactly the pages it meant to (the host's `mincore`, not a
timing), and no way a run might evict a page the host has cached works from inside the jail. No timing is asserted:
the bandwidth and error rate are measured by the script and documented on the sandbox page."""
import errno, importlib.util, os
from pathlib import Path
import pytest
from mapg.sandbox import judge_program

ISO = judge_program('def f(): return 1', ['assert f() == 1']).isolation
needs_jail = pytest.mark.skipif(not (ISO.get('seccomp') and ISO.get('minimal_root')),
                                reason=f"needs the seccomp filter and the minimal root (got {ISO})")
_spec = importlib.util.spec_from_file_location('sandbox_channel', Path(__file__).resolve().parent.parent/'scripts'/'sandbox_channel.py')
sc = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(sc)

@pytest.fixture(scope='module')
def measured():
    return sc.measure(bits=16, trials=1, spacing=16, wait=0.3, seed=1)

def test_threshold_splits_two_clusters():
    lat = [1200, 900, 45000, 1500, 52000, 38000]
    assert [int(x < sc.threshold(lat)) for x in lat] == [1, 1, 0, 1, 0, 0]

@needs_jail
def test_the_table_has_every_mode_and_field(measured):
    for mode in ('sequential', 'concurrent'):
        (r,) = measured[mode]
        assert set(r) >= {'bits', 'errors', 'wall', 'cut_us', 'lat1_us', 'lat0_us', 'set_right', 'late'}
        assert r['bits'] == 16 and 0 <= r['errors'] <= 16 and r['wall'] > 0
    text = sc.table(measured)
    for k in ('sequential', 'concurrent', 'BER', 'bits/s', 'fadvise_dontneed', 'memory_pressure'): assert k in text

@needs_jail
def test_sender_sets_exactly_its_pages(measured):
    "The sequential sender's reads, seen by the host's `mincore`: its 1-pages cached, its 0-pages not"
    assert measured['sequential'][0]['set_right'] == 16

@needs_jail
def test_no_way_from_the_jail_evicts_a_host_page(measured):
    """Every host-cached page stays cached; the calls that would evict are denied by the filter. Each way has its own run,
    checked against a control group the run never touches; reading under pressure is judged where a memory cgroup
    bounds the run (without one, its reads are charged to the host, whose reclaim may take any page)"""
    ev = measured['evict']
    rows = {k: (e, n, c) for k, e, n, c, t in ev['rows']}
    assert set(rows) == {'fadvise_dontneed', 'madv_dontneed', 'madv_free', 'madv_remove', 'madv_cold', 'madv_pageout',
                         'madv_collapse', 'msync_invalidate', 'memory_pressure'}
    judged = {k: v for k, v in rows.items() if k != 'memory_pressure' or ev['memcg']}
    assert all(c == 8 for e, n, c in judged.values()), f"the host's own reclaim took control pages in every try: {ev}"
    assert all(n == 8 for e, n, c in judged.values()), ev
    for k in ('fadvise_dontneed', 'madv_cold', 'madv_pageout'): assert rows[k][0] == errno.EPERM, ev
    if ev['memcg'] and measured['size'] > 2 * ev['memory']:       # the reads under pressure did reclaim, their own pages
        assert ev['file_cached'] < 1, "the run's reads were not reclaimed"

def test_a_way_is_tried_again_while_the_control_lost_pages(monkeypatch):
    "A row whose control group lost pages (the host's reclaim, not the run) is probed again, up to `tries` times"
    seen = []
    def fake_try_way(path, groups, way, cfg):
        seen.append(way)
        return 0, 8, (8 if seen.count(way) == 2 or way != 'madv_free' else 3), True
    monkeypatch.setattr(sc, 'try_way', fake_try_way)
    monkeypatch.setattr(sc.os.path, 'getsize', lambda p: 4 * sc.PAGE)
    monkeypatch.setattr(sc, 'cached', lambda path, pages: [True] * len(pages))
    ev = sc.eviction('f', sc.SandboxCfg(), tries=3)
    assert [r[0] for r in ev['rows']] == list(sc.WAYS) and seen.count('madv_free') == 2
    assert [r[3:] for r in ev['rows'] if r[0] == 'madv_free'] == [(8, 2)]
    assert all(r[3:] == (8, 1) for r in ev['rows'] if r[0] != 'madv_free')
