"""The documentation site, read as a researcher reads it.

Static checks of the notebooks' prose (no browser needed), then nbdev's docs processing over every notebook
(`scripts/render_docs.py`: no error, no warning), then every page opened in headless Chromium: it loads, has its
title, MathJax 3 typesets it without error, it shows no traceback or error output, its figures are there, and none
of its internal links is dead, no table on it is broken. The Tutorials and Explanations of the sidebar are pages of
their own, each with a figure, and no page prints a raw Markdown table. Screenshots of the index, a reference page and
a tutorial are saved to `_docs_check/screenshots/`. The browser part skips, saying why, where Chromium or MathJax cannot be had.
"""
import functools, http.server, json, os, re, runpy, subprocess, sys, tempfile, threading
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatch
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest, yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'scripts'))
import render_docs as rd

NBS, NBS_DIR = rd.notebooks(), rd.NBS
IDS = [rd.rel(p)[:-len('.ipynb')] for p in NBS]
SHOTS = rd.OUT/'screenshots'
SHOT_PAGES = {'index.ipynb': 'index.png', '01_mdp.ipynb': 'reference_mdp.png', 'tutorials/train_toy.ipynb': 'tutorial_train_toy.png'}
# Pages known to print a raw Markdown table, with what they need; a page that stops printing one fails until it is removed here.
RAW_TABLES_KNOWN = {}
# Every exported record, with the notebook whose page must document its fields one by one.
RECORDS = {'mapg.core.Tok': '00_core', 'mapg.policy.GenSettings': '04_policy', 'mapg.sampler.Rollout': '05_sampler',
           'mapg.families.Family': '03_families', 'mapg.sandbox.SandboxCfg': '08_sandbox', 'mapg.data.DataSpec': '11_data',
           'mapg.mdp.TinyMDP': '01_mdp', 'mapg.mdp.Step': '01_mdp', 'mapg.mdp.Trajectory': '01_mdp',
           'mapg.likelihood.LogProbs': '06_likelihood', 'mapg.config.RunCfg': '12_config', 'mapg.config.RolloutCfg': '12_config',
           'mapg.config.UpdateCfg': '12_config', 'mapg.stages.Batch': '12c_stages',
           'mapg.paper.PaperTable': '13_paper', 'mapg.eval_args.EvalArgs': '13c_eval_args', 'mapg.eval_args.Cell': '13c_eval_args',
           'mapg.bench.Figure': '14_bench', 'mapg.bench.BenchArgs': '14_bench', 'mapg.eval_protocol.Fix': '13a_eval_protocol',
           'mapg.sandbox.RunResult': '08_sandbox'}

def _cells(nb_path, kinds=('markdown',)):
    return [''.join(c['source']) for c in json.loads(nb_path.read_text())['cells'] if c['cell_type'] in kinds]

def _title(nb_path):
    "The notebook's title: its first level-1 markdown heading"
    for src in _cells(nb_path):
        if m := re.search(r'^#\s+(.+?)\s*$', src, re.M): return m.group(1)

# ---------------------------------------------------------------- prose: what a reader of the project has

@pytest.mark.parametrize('nb', NBS, ids=IDS)
def test_prose_stands_on_its_own(nb):
    "No citation of files a reader does not have, equations cited by the paper's numbers, LaTeX that MathJax 3 knows"
    problems = []
    for src in _cells(nb, ('markdown', 'code')):
        for m in re.finditer(r'(DESIGN|PAPER)\.md[^\n]{0,30}', src): problems.append(f'cites {m.group(0)!r}')
        for m in re.finditer(r'(Eqs?\.|Appendix|§)\s*`[a-z_:]+`', src): problems.append(f'cites a LaTeX label: {m.group(0)!r}')
    for src in _cells(nb):
        if re.search(r'\\bm\b', src): problems.append(r'uses \bm, which MathJax 3 lacks (write \boldsymbol)')
    assert not problems, f'{nb.name}: ' + '; '.join(dict.fromkeys(problems))

def _gpu_or_slow_cells_run_by_docs(nb_path):
    from nbdev.process import NBProcessor
    from nbdev.processors import _do_eval
    cells = NBProcessor(nb_path, rm_directives=False).nb.cells
    return [c.source[:80] for c in cells if c.cell_type == 'code' and {'gpu', 'slow'} & set(c.directives_) and _do_eval(c)]

@pytest.mark.parametrize('nb', NBS, ids=IDS)
def test_gpu_and_slow_cells_not_run_by_docs(nb):
    "nbdev's docs step runs every cell holding an import: a `gpu` or `slow` cell must hold none (nor be exported)"
    assert not (bad := _gpu_or_slow_cells_run_by_docs(nb)), f'{nb.name}: docs mode would run {bad}'

@pytest.mark.parametrize('rec', RECORDS, ids=list(RECORDS))
def test_records_documented_field_by_field(rec):
    "`show_doc` drops a dataclass's field comments: the page renders `fields_table(Name)`, built from the module at docs time"
    import dataclasses, importlib
    mod, _, name = rec.rpartition('.')
    try: cls = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e: pytest.fail(f'{rec} cannot be imported: {e}')
    nb = next(NBS_DIR.glob(f'{RECORDS[rec]}*.ipynb'), None)
    assert nb, f'no notebook {RECORDS[rec]}*.ipynb'
    from mapg.core import fields_table
    cell = next((c for c in json.loads(nb.read_text())['cells'] if c['cell_type'] == 'code'
                 and re.search(rf'^fields_table\({name}\)\s*$', ''.join(c['source']), re.M)), None)
    assert cell is not None, f'{nb.name}: no cell `fields_table({name})` (with `#| echo: false` and `#| exec_doc`) under its card'
    src = ''.join(cell['source'])
    assert re.search(r'^#\|\s*exec_doc', src, re.M) and re.search(r'^#\|\s*echo:\s*false', src, re.M), \
        f'{nb.name}: the fields_table({name}) cell needs `#| echo: false` and `#| exec_doc`'
    md = fields_table(cls)._repr_markdown_().splitlines()
    test_rows = [l for l in md if re.match(r'\| `', l)]
    assert [re.match(r'\| `(\w+)`', l).group(1) for l in test_rows] == [f.name for f in dataclasses.fields(cls)]
    assert all(l.count('|') == 5 for l in md), f'{name}: a pipe breaks its table: {md}'
    hand = [l for t in _cells(nb) for l in t.splitlines() if l.startswith('| Field | Type | Default | Meaning |')]
    assert not hand, f'{nb.name}: a hand-kept field table is left beside fields_table({name})'


def _sections():
    sb = yaml.safe_load((NBS_DIR/'sidebar.yml').read_text())['website']['sidebar']['contents']
    return {s['section']: s['contents'] for s in sb if isinstance(s, dict) and 'section' in s}

def _flat(entries:list)->list:
    "The entries of a sidebar section, with its sub-sections (a room's notebooks) opened"
    return [x for e in entries for x in (_flat(e['contents']) if isinstance(e, dict) and 'section' in e else [e])]

def test_sidebar():
    "Get started, Tutorials, Explanations, Reference; every numbered notebook is in Reference; every link resolves"
    sections = _sections()
    assert list(sections)[:4] == ['Get started', 'Tutorials', 'Explanations', 'Reference']
    ref = _flat(sections['Reference'])
    globs = [e['auto'] for e in ref if isinstance(e, dict) and 'auto' in e]
    files = [e if isinstance(e, str) else e.get('href', '') for e in ref]
    for nb in NBS:
        if re.match(r'\d\d', nb.name): assert nb.name in files or any(fnmatch(nb.name, g) for g in globs), nb.name
    for sec in sections.values():
        for e in _flat(sec):
            href = e if isinstance(e, str) else e.get('href')
            if not href: continue
            path, _, frag = href.partition('#')
            assert (NBS_DIR/path).exists(), f'sidebar links to missing {href}'
            heads = [m for src in _cells(NBS_DIR/path) for m in re.findall(r'^#+\s+(.+?)\s*$', src, re.M)]
            assert not frag or frag in {rd.pandoc_id(h) for h in heads}, f'sidebar links to a missing section: {href}'

def _has_figure(nb_path):
    "An image among the notebook's outputs, or a Markdown image whose file exists next to it"
    cells = json.loads(nb_path.read_text())['cells']
    if any({'image/png', 'image/svg+xml', 'image/jpeg'} & set(o.get('data', {})) for c in cells for o in c.get('outputs', [])): return True
    imgs = [u for c in cells if c['cell_type'] == 'markdown' for u in re.findall(r'!\[[^\]]*\]\(([^)\s]+)\)', ''.join(c['source']))]
    return any((nb_path.parent/unquote(u)).exists() for u in imgs if not re.match(r'[a-z]+:', u))

@pytest.mark.parametrize('section,folder', [('Tutorials', 'tutorials'), ('Explanations', 'explanations')])
def test_tutorials_and_explanations_are_pages(section, folder):
    "Each entry is a notebook of its own in its folder (not a link into a reference page), with at least one figure"
    entries = [e if isinstance(e, str) else e.get('href', '') for e in _sections()[section]]
    assert len(entries) >= 2, entries
    for href in entries:
        assert href.startswith(folder + '/') and '#' not in href, f'{section} links to {href}, not a page of its own in {folder}/'
        assert (NBS_DIR/href).exists(), f'{section}: {href} does not exist'
        assert _has_figure(NBS_DIR/href), f'{href} has no figure'

_RAW_TABLE = re.compile(r'^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)+\|?\s*$', re.M)
def _raw_tables(nb_path):
    "Outputs that print a Markdown table as text (stdout, or a plain-text result with no rich display)"
    out = []
    for i, c in enumerate(json.loads(nb_path.read_text())['cells']):
        for o in c.get('outputs', []):
            d = o.get('data', {})
            txt = ''.join(o.get('text', '')) if o.get('output_type') == 'stream' else \
                  ''.join(d.get('text/plain', '')) if not {'text/markdown', 'text/html', 'image/png'} & set(d) else ''
            if _RAW_TABLE.search(txt): out.append(f'cell {i}: {txt[:80]!r}')
    return out

@pytest.mark.parametrize('nb', NBS, ids=IDS)
def test_no_raw_markdown_tables(nb):
    "Tables are rendered (a rich display), never printed as pipes and dashes"
    raw, known = _raw_tables(nb), RAW_TABLES_KNOWN.get(rd.rel(nb))
    if known:
        assert raw, f'{rd.rel(nb)} no longer prints a raw table: remove it from RAW_TABLES_KNOWN'
        pytest.xfail(f'{rd.rel(nb)}: {known}')
    assert not raw, f'{rd.rel(nb)} prints a raw Markdown table: {raw}'

def test_index_links_work_on_site_and_github():
    "Relative links in the index resolve from nbs/ (the site) and, as README.md renders them, from the repository"
    readme = runpy.run_path(str(ROOT/'.ci'/'readme.py'))['render']()
    index = '\n'.join(_cells(NBS_DIR/'index.ipynb'))
    link = re.compile(r'\]\(([^)\s]+)\)')
    site = [u for u in link.findall(index) if not re.match(r'[a-z]+:|#', u)]
    gh = [u for u in link.findall(readme) if not re.match(r'[a-z]+:|#', u)]
    assert site and gh
    dead = [u for u in site if not (NBS_DIR/unquote(u.split('#')[0])).exists()]
    dead += [f'README: {u}' for u in gh if not (ROOT/unquote(u.split('#')[0])).exists()]
    assert not dead, dead

# ---------------------------------------------------------------- nbdev's docs processing

@pytest.fixture(scope='session')
def report():
    "Process the notebooks that changed since the last run and render their pages (scripts/render_docs.py)"
    p = subprocess.run([sys.executable, str(ROOT/'scripts'/'render_docs.py')], cwd=ROOT, capture_output=True, text=True)
    assert rd.REPORT.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(rd.REPORT.read_text())['notebooks']

@pytest.mark.parametrize('nb', NBS, ids=IDS)
def test_docs_processing_clean(report, nb):
    r = report.get(rd.rel(nb))
    assert r, f'{rd.rel(nb)} was not processed'
    assert not r['error'], f"{nb.name}: nbdev's docs processing fails:\n{r['error']}"
    assert not r['warnings'], f"{nb.name}: nbdev's docs processing warns:\n" + '\n'.join(r['warnings'])

# ---------------------------------------------------------------- the pages in headless Chromium

@pytest.fixture(scope='session')
def chromium():
    c = rd.find_chromium()
    if not c: pytest.skip("Chromium is not installed: `apt-get update && apt-get install -y chromium` (Debian) "
                          "or `python scripts/render_docs.py --browser` as root enables the browser check")
    return c

@pytest.fixture(scope='session')
def server(report):
    if not (rd.SITE/'mathjax'/'es5'/'tex-chtml-full.js').exists():
        pytest.skip('MathJax 3 is not available (it comes from the npm registry: install npm)')
    handler = functools.partial(_Quiet, directory=str(rd.SITE))
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f'http://127.0.0.1:{srv.server_address[1]}/'
    srv.shutdown()

class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass

def _chromium(exe, *args, timeout=90):
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([exe, *rd.CHROMIUM_FLAGS, f'--user-data-dir={profile}', '--virtual-time-budget=20000', *args],
                              capture_output=True, text=True, timeout=timeout)

@pytest.fixture(scope='session')
def doms(report, chromium, server):
    "Every page's DOM after load and MathJax typesetting, two Chromium processes at a time"
    pages = {n: r['page'] for n, r in report.items() if r.get('page')}
    def dump(item):
        n, page = item
        p = _chromium(chromium, '--dump-dom', server + page)
        return n, p.stdout if p.returncode == 0 else f'<!-- chromium failed ({p.returncode}): {p.stderr[-1500:]} -->'
    with ThreadPoolExecutor(2) as ex: res = dict(ex.map(dump, pages.items()))
    SHOTS.mkdir(parents=True, exist_ok=True)
    for n, png in SHOT_PAGES.items():
        if n in pages:
            (SHOTS/png).unlink(missing_ok=True)
            _chromium(chromium, '--window-size=1280,2200', f'--screenshot={SHOTS/png}', server + pages[n])
    return res

def _ids(page, cache={}):
    from bs4 import BeautifulSoup
    if page not in cache:
        f = rd.SITE/page
        soup = BeautifulSoup(f.read_text(), 'html.parser') if f.exists() else None
        cache[page] = None if soup is None else {t.get('id') for t in soup.find_all(id=True)} | {t.get('name') for t in soup.find_all('a', attrs={'name': True})}
    return cache[page]

def _dead_links(soup, page):
    dead = []
    for a in soup.find_all('a', href=True):
        href = a['href']
        if href.startswith(rd.SITE_URL): href = href[len(rd.SITE_URL):]
        u = urlsplit(href)
        if u.scheme or href.startswith('//'): continue          # external: not checked offline
        target = page if not u.path else os.path.normpath(str(Path(page).parent/unquote(u.path)))
        ids = _ids(target)
        if ids is None: dead.append(href)
        elif u.fragment and unquote(u.fragment) not in ids: dead.append(href)
    return dead

@pytest.mark.parametrize('nb', NBS, ids=IDS)
def test_page_in_browser(report, doms, nb):
    from bs4 import BeautifulSoup
    r = report.get(rd.rel(nb), {})
    assert r.get('page'), f"{nb.name} has no page: nbdev's docs processing failed: {str(r.get('error'))[:1500]}"
    dom = doms[rd.rel(nb)]
    soup = BeautifulSoup(dom, 'html.parser')
    root, problems = soup.find('html'), []
    assert root is not None and root.get('data-loaded') == 'yes', f'{r["page"]} did not load: {dom[:2000]}'
    title = soup.title.get_text(strip=True) if soup.title else ''
    if not title or title != _title(nb): problems.append(f'title {title!r}, expected {_title(nb)!r}')
    if root.get('data-mathjax') != 'done': problems.append(f"MathJax did not finish: {root.get('data-mathjax')}")
    errs = sorted({e.get('data-mjx-error') or e.get_text() for e in soup.select('[data-mjx-error], mjx-merror')})
    if errs: problems.append(f'MathJax errors: {errs}')
    if (js := json.loads(root.get('data-errors') or '[]')): problems.append(f'page errors: {js}')
    text = soup.get_text(' ')
    if 'Traceback (most recent call last)' in text or soup.select('[data-mime-type="application/vnd.jupyter.stderr"]'):
        shown = [e.get_text(' ', strip=True)[:200] for e in soup.select('[data-mime-type="application/vnd.jupyter.stderr"]')]
        problems.append(f'traceback or error output shown: {shown}')
    n_figs = sum(1 for c in json.loads((rd.PROC/rd.rel(nb)).read_text())['cells'] for o in c.get('outputs', [])
                 if {'image/png', 'image/svg+xml', 'image/jpeg'} & set(o.get('data', {})))
    n_imgs = len(soup.select('.jp-OutputArea-output img, .jp-OutputArea-output svg'))
    if n_imgs < n_figs: problems.append(f'{n_figs} figures in the notebook, {n_imgs} on the page')
    if root.get('data-broken-images', '0') != '0': problems.append(f"{root.get('data-broken-images')} broken image(s)")
    if (dead := _dead_links(soup, r['page'])): problems.append(f'dead internal links: {sorted(set(dead))}')
    for t in soup.select('.jp-RenderedMarkdown table, .jp-RenderedHTMLCommon table'):
        widths = {len(tr.find_all(['td', 'th'])) for tr in t.find_all('tr')}
        cells = [c.get_text() for c in t.find_all(['td', 'th'])]
        if len(widths) > 1 or any('\\|' in c for c in cells):
            problems.append(f'broken table (row widths {sorted(widths)}): {" | ".join(cells[:8])[:200]}')
    raw = [m for c in json.loads((rd.PROC/rd.rel(nb)).read_text())['cells'] for o in c.get('outputs', [])
           for blk in re.findall(r'```python(.*?)```', ''.join(o.get('data', {}).get('text/markdown', '')), re.S)
           for m in re.findall(r'\[[^\]]*\]\([^)]*\)', blk)]
    if raw: problems.append(f'raw markdown links in signatures: {raw[:5]}')
    repo = [a['href'] for a in soup.find_all('a', href=True) if a['href'].startswith(rd.GIT_URL + '/blob/')]
    if repo: problems.append(f"{len(repo)} link(s) into settings.ini's git_url, which has no public repository: {repo[:3]}")
    cards = ' '.join(''.join(o.get('data', {}).get('text/markdown', '')) for c in json.loads((rd.PROC/rd.rel(nb)).read_text())['cells']
                     for o in c.get('outputs', []))
    noise = sorted({m for m in re.findall(r'\w+:(?:VAR_KEYWORD|VAR_POSITIONAL)|\w+:NoneType=None', cards)})
    if noise: problems.append(f'signatures not as written in the code: {noise[:5]}')
    assert not problems, f"{r['page']} ({nb.name}): " + '; '.join(problems)

def test_screenshots_saved(doms):
    for png in SHOT_PAGES.values():
        f = SHOTS/png
        assert f.exists() and f.stat().st_size > 20_000, f'no screenshot {f}'
