"""Build the documentation pages without Quarto and record what nbdev's docs processing reports.

    python scripts/render_docs.py              # process every notebook, render HTML, write the report
    python scripts/render_docs.py --check      # same, and exit 1 if any notebook has an error or a warning
    python scripts/render_docs.py --only 01_mdp index --force

1. **Docs processing.** Each notebook goes through nbdev's own processors (`FilterDefaults`, exactly what
   `nbdev_proc_nbs` and `nbdev_docs` run: frontmatter, `show_doc` cards, execution of exported, import and
   `show_doc` cells, doc links), one fresh process per notebook with a time limit. Every warning and the error, if
   any, are recorded per notebook in `_docs_check/report.json`. (`nbdev_proc_nbs` itself first tries to install
   Quarto and reinstalls the package when Quarto is missing; this script skips that step.)
2. **HTML.** The processed notebooks are rendered with nbconvert and MathJax 3 (served from the `mathjax` npm
   package, without the `noundefined` extension, so an undefined macro such as `\\bm` is a MathJax error instead
   of red text). Quarto's cell options (`echo`, `output`, `include`) are honoured, links to notebooks point to
   their pages (Quarto's `output-file`), links into the published site point to the local pages, and headings get
   Pandoc's identifiers, so the link check sees the anchors the site has.

Notebooks in folders (`tutorials/`, `explanations/`) become pages in the same folders, as on the site, and the images
and data files next to the notebooks are copied along. Everything is written under `_docs_check/` (gitignored;
`MAPG_DOCS_OUT=DIR` writes elsewhere, so that checks running at the same time do not collide);
`tests/test_docs.py` opens the pages in headless Chromium.
"""
import argparse, json, os, re, shutil, subprocess, sys, time, warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/'nbs'
# Where everything goes: `_docs_check/`, or $MAPG_DOCS_OUT (so that two checks running at once do not share files)
OUT = Path(os.environ['MAPG_DOCS_OUT']).resolve() if os.environ.get('MAPG_DOCS_OUT') else ROOT/'_docs_check'
PROC, SITE, NPM = OUT/'proc', OUT/'site', OUT/'npm'
REPORT = OUT/'report.json'
SITE_URL = 'https://mapg.github.io/mapg/'       # doc_host + doc_baseurl in settings.ini
GIT_URL = 'https://github.com/mapg/mapg'         # git_url in settings.ini (no public repository: its source links are dropped)
PAPER_URL = 'https://github.com/Haran71/mask-aware-policy-gradients'   # where the paper itself points (its code)
MATHJAX = NPM/'node_modules'/'mathjax'
ASSETS = {'.png', '.jpg', '.jpeg', '.svg', '.gif', '.json', '.csv'}
CHROMIUM_NAMES = ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable')
# Flags that let Chromium run headless as root in a container, with no network chatter and a fresh profile.
CHROMIUM_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
                  '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage',
                  '--hide-scrollbars', '--mute-audio']

def rel(p)->str:
    "A notebook's name in the report and on the site: its path under nbs/ (`01_mdp.ipynb`, `tutorials/train_toy.ipynb`)"
    return Path(p).relative_to(NBS).as_posix()

def notebooks(only=None):
    "Notebooks under nbs/ that the site renders (nbdev skips names starting with `_` or `.`)"
    nbs = sorted(p for p in NBS.rglob('*.ipynb')
                 if not any(part.startswith(('_', '.')) for part in p.relative_to(NBS).parts))
    if only: nbs = [p for p in nbs if {p.stem, p.name, rel(p), rel(p)[:-len('.ipynb')]} & set(only)]
    return nbs

# ---------------------------------------------------------------- 1. nbdev's docs processing, one process each

def _worker(src, dst, res):
    "Run nbdev's docs processors on `src`, write the processed notebook to `dst` and what happened to `res` (JSON)"
    os.environ.setdefault('OMP_NUM_THREADS', '1'); os.environ.setdefault('MKL_NUM_THREADS', '1')
    os.chdir(ROOT)
    out = dict(warnings=[], error=None)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        try:
            from execnb.nbio import read_nb, write_nb
            from nbdev.processors import FilterDefaults
            os.environ['IN_TEST'] = '1'                 # as nbdev's serve_drv does
            nb = read_nb(src)
            FilterDefaults()(nb)
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            write_nb(nb, dst)
        except BaseException as e:
            import traceback
            cause = e.__cause__ or e.__context__
            out['error'] = str(e).strip() + (f'\n{type(cause).__name__}: {cause}' if cause else '')
            out['traceback'] = ''.join(traceback.format_exception(e))[-4000:]
    for w in ws: out['warnings'].append(f'{w.category.__name__}: {str(w.message).strip()}')
    Path(res).write_text(json.dumps(out))

def _stale(src, dst):
    deps = [src, ROOT/'settings.ini', Path(__file__)]
    return not dst.exists() or dst.stat().st_mtime < max(p.stat().st_mtime for p in deps)

def process(nbs, force=False, workers=1, timeout=600):
    "Process `nbs` (only those changed since their last processing unless `force`); return the per-notebook report"
    report = json.loads(REPORT.read_text()).get('notebooks', {}) if REPORT.exists() else {}
    todo = [p for p in nbs if force or rel(p) not in report or _stale(p, PROC/p.relative_to(NBS))]
    def one(src):
        dst, res = PROC/src.relative_to(NBS), OUT/'tmp'/f'{src.stem}.json'
        res.parent.mkdir(parents=True, exist_ok=True); res.unlink(missing_ok=True)
        t0 = time.time()
        cmd = [sys.executable, __file__, '_worker', str(src), str(dst), str(res)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            r = json.loads(res.read_text()) if res.exists() else dict(
                warnings=[], error=f'the docs processing process died (exit {p.returncode}): {p.stderr[-2000:]}')
        except subprocess.TimeoutExpired: r = dict(warnings=[], error=f'the docs processing took more than {timeout}s')
        if r['error']: dst.unlink(missing_ok=True)
        r['seconds'] = round(time.time() - t0, 1)
        print(f"  {rel(src)}: {r['seconds']}s" + (' ERROR' if r['error'] else '') +
              (f", {len(r['warnings'])} warning(s)" if r['warnings'] else ''), flush=True)
        return rel(src), r
    with ThreadPoolExecutor(workers) as ex:
        for name, r in ex.map(one, todo): report[name] = r
    names = {rel(p): p for p in notebooks()}
    for k in report:
        if k in names: report[k]['notes'] = card_notes(names[k])
    return {k: v for k, v in sorted(report.items()) if k in names}

def _cards(cell_src):
    "Names that get a `show_doc` card from one exported cell: public functions and classes, `@patch`ed methods"
    import ast
    try: tree = ast.parse(cell_src)
    except SyntaxError: return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and (not n.name.startswith('_') or any(getattr(d, 'id', None) == 'patch' for d in n.decorator_list))]

def card_notes(nb_path):
    "What a reader would miss: cells whose several cards come out in reverse order, an opening without the paper's link"
    cells = json.loads(Path(nb_path).read_text())['cells']
    notes = [f'one cell, several cards (shown in reverse order): {names}' for c in cells
             if c['cell_type'] == 'code' and re.match(r'\s*#\|\s*exports?\b', ''.join(c['source']))
             and len(names := _cards(''.join(c['source']))) > 1]
    prose = [''.join(c['source']) for c in cells if c['cell_type'] == 'markdown']
    if len(prose) > 1 and PAPER_URL not in prose[0] + prose[1]:
        notes.append("the opening paragraph does not link the paper (cite its section and equations with a link)")
    return notes

# ---------------------------------------------------------------- 2. HTML with nbconvert and MathJax 3

_TEMPLATE = r"""{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
<script>
window.__pageErrors = [];
window.addEventListener('error', e => window.__pageErrors.push(String(e.message || (e.target && e.target.src) || e)), true);
window.MathJax = {
  loader: {paths: {mathjax: 'mathjax/es5'}},
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true, packages: {'[-]': ['noundefined']}},
  startup: {pageReady: () => MathJax.startup.defaultPageReady().then(
      () => { document.documentElement.dataset.mathjax = 'done'; },
      e => { document.documentElement.dataset.mathjax = 'failed: ' + e; })}
};
window.addEventListener('load', () => {
  const broken = [...document.images].filter(i => !i.complete || i.naturalWidth === 0).length;
  document.documentElement.dataset.brokenImages = String(broken);
  document.documentElement.dataset.loaded = 'yes';
  setTimeout(() => { document.documentElement.dataset.errors = JSON.stringify(window.__pageErrors); }, 0);
});
</script>
<script src="mathjax/es5/tex-chtml-full.js" id="MathJax-script"></script>
{%- endblock html_head_js_mathjax -%}
{%- block html_head_css -%}
<style>
body { max-width: 1100px; margin: 0 auto; padding: 1rem 2rem; }
.description { font-style: italic; font-size: 135%; opacity: 70%; }
.jp-Cell { padding: 0 !important; }
</style>
{%- endblock html_head_css -%}
"""

_DIRECTIVE = re.compile(r'^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')
def _directives(src):
    "Quarto/nbdev `#|` options at the top of a cell and the source without them"
    lines, opts = src.splitlines(), {}
    while lines and (m := _DIRECTIVE.match(lines[0])):
        opts[m.group(1)] = m.group(2).lower(); lines.pop(0)
    return opts, '\n'.join(lines)

def pandoc_id(text):
    "The identifier Pandoc (and so Quarto) gives a heading"
    s = ''.join(c for c in text.lower() if c.isalnum() or c in '_-.' or c.isspace())
    s = re.sub(r'\s+', '-', s.strip())
    s = re.sub(r'^[^a-z]+', '', s)
    return s or 'section'

def _frontmatter(nb):
    "Title, description and output file from the YAML frontmatter cell that nbdev writes"
    import yaml
    for c in nb.cells:
        if c.cell_type == 'raw' and c.source.lstrip().startswith('---'):
            fm = yaml.safe_load(c.source.strip().strip('-')) or {}
            return c, fm
    return None, {}

def page_name(nb_path):
    "The page a processed notebook becomes (nbdev's `output-file`, e.g. `01_mdp.ipynb` -> `mdp.html`)"
    import nbformat
    _, fm = _frontmatter(nbformat.read(nb_path, as_version=4))
    folder = Path(nb_path).parent.relative_to(PROC if PROC in Path(nb_path).parents else NBS).as_posix()
    name = fm.get('output-file') or re.sub(r'^\d+[a-z]?_', '', nb_path.stem) + '.html'
    return name if folder == '.' else f'{folder}/{name}'

def _prepare(nb, pages, here='.'):
    "Apply Quarto's cell options and frontmatter to a processed notebook so nbconvert renders what Quarto would"
    import nbformat
    fm_cell, fm = _frontmatter(nb)
    cells = []
    for c in nb.cells:
        if c is fm_cell: continue
        if c.cell_type == 'code':
            opts, src = _directives(c.source)
            if opts.get('include') == 'false': continue
            c.source = src
            if opts.get('echo') == 'false' or not src.strip(): c.metadata['transient'] = {'remove_source': True}
            if opts.get('output') == 'false': c.outputs = []
            if not c.outputs and not src.strip(): continue
            for o in c.outputs:
                md = o.get('data', {}).get('text/markdown')
                if md is not None: o['data']['text/markdown'] = _fix_md(md, pages, here)
        elif c.cell_type == 'markdown': c.source = _fix_md(c.source, pages, here)
        cells.append(c)
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    desc = fm.get('description')
    head = f"# {fm.get('title', '')}" + (f'\n\n<div class="description">{markdown2html_mistune(desc)}</div>' if desc else '')
    nb.cells = ([nbformat.v4.new_markdown_cell(head)] if fm.get('title') else []) + cells
    return fm

def _fix_md(md, pages, here='.'):
    "Pandoc link attributes dropped; links to notebooks and into the published site point to the local pages"
    md = re.sub(r'(\]\([^)\s]*\))\{[^}]*\}', r'\1', md)
    def link(m):
        url = m.group(2)
        site = url.startswith(SITE_URL)
        if site: url = url[len(SITE_URL):]
        path, _, frag = url.partition('#')
        if re.match(r'[a-z]+:|/', path): return m.group(0)
        nb = path if site else os.path.normpath(os.path.join(here, path)).replace(os.sep, '/')
        if nb in pages: path = os.path.relpath(pages[nb], here).replace(os.sep, '/')   # the notebook's page, from this page
        elif site: path = os.path.relpath(path, here).replace(os.sep, '/') if path else path
        return m.group(1) + path + ('#' + frag if frag else '') + ')'
    return re.sub(r'(\]\()([^)\s]+)(?=\))\)', link, md)

def render(nb_path, pages):
    "HTML page for one processed notebook; returns its title"
    import nbformat
    from bs4 import BeautifulSoup
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    nb = nbformat.read(nb_path, as_version=4)
    name = nb_path.relative_to(PROC).as_posix()
    here = os.path.dirname(name) or '.'
    fm = _prepare(nb, pages, here)
    ex = HTMLExporter(template_file='mapg_check.html.j2', extra_loaders=[DictLoader({'mapg_check.html.j2': _TEMPLATE})])
    ex.exclude_input_prompt = ex.exclude_output_prompt = True
    html, _ = ex.from_notebook_node(nb, resources={'metadata': {'name': fm.get('title', nb_path.stem)}})
    soup = BeautifulSoup(html, 'html.parser')
    for a in soup.select('a.anchor-link'): a.decompose()
    for h in soup.find_all(re.compile('^h[1-6]$')): h['id'] = pandoc_id(h.get_text())
    up = '../' * pages[name].count('/')
    for a in soup.find_all('a', href=True):              # what Quarto does for links to pages with output-file
        if a['href'].startswith(SITE_URL): a['href'] = up + a['href'][len(SITE_URL):]
    out = str(soup).replace("'mathjax/es5'", f"'{up}mathjax/es5'").replace('"mathjax/es5/', f'"{up}mathjax/es5/')
    (SITE/pages[name]).parent.mkdir(parents=True, exist_ok=True)
    (SITE/pages[name]).write_text(out)
    return fm.get('title', '')

def ensure_mathjax():
    "MathJax 3 from the npm registry, once, under _docs_check/npm (returns False when npm is missing)"
    if (MATHJAX/'es5'/'tex-chtml-full.js').exists(): return True
    shared = ROOT/'_docs_check'/'npm'/'node_modules'/'mathjax'
    if OUT != ROOT/'_docs_check' and (shared/'es5'/'tex-chtml-full.js').exists():     # reuse the default folder's copy
        MATHJAX.parent.mkdir(parents=True, exist_ok=True); MATHJAX.symlink_to(shared, target_is_directory=True); return True
    npm = shutil.which('npm')
    if not npm: return False
    NPM.mkdir(parents=True, exist_ok=True)
    subprocess.run([npm, 'install', '--no-audit', '--no-fund', '--silent', '--prefix', str(NPM), 'mathjax@3'], check=False)
    return (MATHJAX/'es5'/'tex-chtml-full.js').exists()

def find_chromium():
    return next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)

def ensure_chromium():
    "Debian's chromium, installed with apt-get when missing and allowed (root); returns its path or None"
    if (c := find_chromium()) or os.geteuid() != 0 or not shutil.which('apt-get'): return c
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    subprocess.run(['apt-get', 'update', '-qq'], env=env, check=False)
    subprocess.run(['apt-get', 'install', '-y', '-qq', 'chromium'], env=env, check=False)
    return find_chromium()

def build_site(report):
    "Render every processed notebook that has no error; returns {notebook: page}"
    SITE.mkdir(parents=True, exist_ok=True)
    for old in SITE.rglob('*.html'): old.unlink()
    for f in NBS.rglob('*'):                             # images and data next to the notebooks (Quarto copies what pages use)
        if f.suffix.lower() in ASSETS and not any(x.startswith(('_', '.')) for x in f.relative_to(NBS).parts):
            (SITE/f.relative_to(NBS)).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, SITE/f.relative_to(NBS))
    if ensure_mathjax() and not (SITE/'mathjax').exists(): (SITE/'mathjax').symlink_to(MATHJAX.resolve(), target_is_directory=True)
    ok = [PROC/n for n, r in report.items() if not r['error'] and (PROC/n).exists()]
    pages = {p.relative_to(PROC).as_posix(): page_name(p) for p in ok}
    for p in ok:
        n = p.relative_to(PROC).as_posix()
        report[n]['page'] = pages[n]
        report[n]['title'] = render(p, pages)
    return pages

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--only', nargs='*', help='notebook names (e.g. 01_mdp index)')
    ap.add_argument('--force', action='store_true', help='process notebooks even if unchanged')
    ap.add_argument('--workers', type=int, default=1)
    ap.add_argument('--no-html', action='store_true', help='docs processing only')
    ap.add_argument('--check', action='store_true', help='exit 1 if any notebook has a docs error or warning')
    ap.add_argument('--browser', action='store_true', help='also make sure Chromium is installed (apt-get, as root)')
    a = ap.parse_args(argv)
    t0 = time.time()
    print(f'== docs processing (nbdev processors) -> {PROC}', flush=True)
    report = process(notebooks(a.only), force=a.force, workers=a.workers)
    if not a.no_html:
        print(f'== HTML (nbconvert, MathJax 3) -> {SITE}', flush=True)
        build_site(report)
    if a.browser: print('chromium:', ensure_chromium() or 'not available')
    OUT.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps(dict(notebooks=report), indent=1))
    bad = {n: r for n, r in report.items() if r['error'] or r['warnings']}
    for n, r in bad.items():
        print(f'-- {n}:' + (f"\n   ERROR {r['error'][:600]}" if r['error'] else ''))
        for w in r['warnings']: print('   WARNING ' + w[:600].replace('\n', '\n   '))
    for n, r in report.items():
        for note in r.get('notes', []): print(f'   note {n}: {note}')
    print(f'{len(report) - len(bad)} of {len(report)} notebooks processed with no error and no warning ({time.time() - t0:.0f}s)')
    if a.check and bad: sys.exit(1)

if __name__ == '__main__':
    if sys.argv[1:2] == ['_worker']: _worker(*sys.argv[2:5])
    else: main()
