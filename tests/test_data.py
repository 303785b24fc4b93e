"The shipped data files are exactly the ones data/SOURCES.md describes (sha256, bytes, record counts)."
import gzip, hashlib, json, re, csv
from pathlib import Path
import pytest

DATA = Path(__file__).resolve().parent.parent/'data'

def _rows():
    "(file, records, bytes, sha256) from the table in SOURCES.md"
    out = []
    for line in (DATA/'SOURCES.md').read_text().splitlines():
        m = re.match(r'\| `([^`]+)` \|', line)
        if not m: continue
        cols = [c.strip() for c in line.strip('|').split('|')]
        out.append((m.group(1), int(re.match(r'\d+', cols[-3]).group()), int(cols[-2]), cols[-1]))
    return out

ROWS = _rows()

def _count(path):
    raw = gzip.open(path, 'rt').read() if path.suffix == '.gz' else path.read_text()
    if '.jsonl' in path.name: return sum(1 for l in raw.splitlines() if l.strip() and json.loads(l) is not None)
    if path.suffix == '.json': return len(json.loads(raw))
    return len(list(csv.DictReader(raw.splitlines())))

def test_table_lists_every_file():
    assert len(ROWS) == 8
    assert {r[0] for r in ROWS} == {p.name for p in DATA.iterdir() if p.name != 'SOURCES.md' and p.is_file()}

@pytest.mark.parametrize('name,records,nbytes,sha', ROWS, ids=[r[0] for r in ROWS])
def test_file_matches_sources(name, records, nbytes, sha):
    path = DATA/name
    data = path.read_bytes()
    assert len(data) == nbytes, f"{name}: {len(data)} bytes, SOURCES.md says {nbytes}"
    assert hashlib.sha256(data).hexdigest() == sha, f"{name}: sha256 differs from SOURCES.md"
    assert _count(path) == records, f"{name}: record count differs from SOURCES.md"
