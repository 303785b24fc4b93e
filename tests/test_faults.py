"""`mapg.faults` against real faults: `kill -9` at chosen points of a save, a real full disk (a 1 MiB tmpfs; skipped,
saying why, where it cannot be mounted), real SIGTERM and SIGINT to a training loop, a lock held by a live process and
one left by a killed one, tables of bad YAML and bad data files, and the one-line errors of an entry point as a shell
sees them."""
import ast, dataclasses, errno, gzip, json, os, select, signal, subprocess, sys, textwrap, time
from pathlib import Path

import pytest
import mapg.faults as F
from mapg.faults import *
from mapg.inputs import *
from mapg.faults import MARKER
from conftest import HANG, run_child

ROOT = Path(__file__).resolve().parent.parent

def _default_sigint():
    "SIGINT as a terminal delivers it: a suite started in the background inherits it ignored, and Python then keeps it so"
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def child(code:str, *args)->subprocess.Popen:
    "A Python subprocess running `code` with `args` in sys.argv[1:]"
    return subprocess.Popen([sys.executable, '-u', '-c', textwrap.dedent(code), *map(str, args)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, 'OMP_NUM_THREADS': '1'},
                            preexec_fn=_default_sigint)

def wait_for(p:subprocess.Popen, word:str, timeout:float=HANG)->str:
    "Read `p`'s stdout (unbuffered: lines that came together are all seen) until a line holding `word`"
    end, fd = time.monotonic() + timeout, p.stdout.fileno()
    if not hasattr(p, 'seen'): p.seen = ''
    while True:
        lines = p.seen.split('\n')
        for i, l in enumerate(lines[:-1]):
            if word in l: p.seen = '\n'.join(lines[i + 1:]); return l
        if (left := end - time.monotonic()) <= 0 or not select.select([fd], [], [], left)[0]: break
        if not (b := os.read(fd, 1 << 16)): break
        p.seen += b.decode()
    p.kill(); out, err = p.communicate()
    raise AssertionError(f"the child never printed {word!r} (rc {p.returncode}): {p.seen[-500:]} {out[-500:]} {err[-2000:]}")

def names(d:Path)->list: return sorted(p.name for p in d.iterdir())

def save(out:Path, step:int, files:dict|None=None)->Path:
    "A finished checkpoint `out/checkpoint-<step>` holding `files` (name: bytes)"
    with saving(out/f'checkpoint-{step}') as d:
        for k, v in (files or {'state.json': json.dumps(dict(step=step)).encode()}).items():
            (d/k).parent.mkdir(parents=True, exist_ok=True); (d/k).write_bytes(v)
    return out/f'checkpoint-{step}'

# ---------------------------------------------------------------- kill -9 at chosen points of a save

SAVE = '''
import sys, time, shutil
from pathlib import Path
import mapg.faults as F
out, step, point = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def pause(name, f):
    def g(*a, **k):
        print(name, flush=True); time.sleep(60); return f(*a, **k)
    return g
if point == 'fsync': F._fsync = pause('fsync', F._fsync)
if point == 'rename': F._replace = pause('rename', F._replace)
if point == 'cleanup': F.shutil.rmtree = pause('cleanup', shutil.rmtree)
with F.saving(out/f'checkpoint-{step}') as d:
    (d/'state.json').write_text('{"step": %d}' % step)
    with open(d/'big.bin', 'wb') as f:
        for i in range(40 if point == 'writing' else 2):
            f.write(b'x' * 65536); f.flush()
            if point == 'writing' and i == 3: print('writing', flush=True)
            time.sleep(0.5 if point == 'writing' else 0)
print('saved', flush=True)
'''

@pytest.mark.parametrize('point', ['writing', 'fsync', 'rename'])
def test_kill9_during_a_save_keeps_the_previous_checkpoint(tmp_path, point):
    c1 = save(tmp_path, 1)
    p = child(SAVE, tmp_path, 2, point)
    wait_for(p, point)
    p.kill(); p.communicate()
    assert p.returncode == -signal.SIGKILL
    assert (tmp_path/'checkpoint-2.tmp').is_dir() and not (tmp_path/'checkpoint-2').exists()
    assert is_complete(tmp_path/'checkpoint-2.tmp') == (point == 'rename')     # even a finished .tmp is never resumed from
    msgs = []
    assert latest_checkpoint(tmp_path, warn=msgs.append) == c1
    assert msgs == [f"ignored in {tmp_path}: checkpoint-2.tmp (an unfinished save)"]
    assert verify(c1) == c1 and json.loads((c1/'state.json').read_text()) == dict(step=1)
    c2 = save(tmp_path, 2)                                                    # the next save of step 2 clears the stale folder
    assert names(tmp_path) == ['checkpoint-1', 'checkpoint-2'] and latest_checkpoint(tmp_path) == c2

def test_kill9_while_replacing_a_checkpoint_of_the_same_step(tmp_path):
    "A resumed run saves step 2 again: killed while the old folder is deleted, the new checkpoint-2 is already whole"
    save(tmp_path, 1); save(tmp_path, 2, {'old.bin': b'old'})
    p = child(SAVE, tmp_path, 2, 'cleanup')
    wait_for(p, 'cleanup')
    p.kill(); p.communicate()
    c2 = latest_checkpoint(tmp_path, warn=lambda m: None)
    assert c2 == tmp_path/'checkpoint-2' and sorted(json.loads((c2/MARKER).read_text())['files']) == ['big.bin', 'state.json']

def test_replacing_without_renameat2(tmp_path, monkeypatch):
    monkeypatch.setattr(F, '_exchange', lambda a, b: False)
    save(tmp_path, 3, {'a': b'1'}); save(tmp_path, 3, {'b': b'22'})
    assert names(tmp_path) == ['checkpoint-3'] and names(tmp_path/'checkpoint-3') == [MARKER, 'b']
    assert verify(tmp_path/'checkpoint-3')

def test_damaged_files_are_found_before_loading(tmp_path):
    c = save(tmp_path, 4, {'model.safetensors': b'w' * 5000, 'optimizer.bin': b'o' * 300, 'sub/random_states_1.pkl': b'r'})
    (c/'optimizer.bin').write_bytes(b'o' * 299)
    with pytest.raises(CheckpointError, match=r'checkpoint-4: damaged: optimizer.bin has 299 bytes, 300 were saved$'): verify(c)
    (c/'optimizer.bin').write_bytes(b'o' * 300); (c/'sub'/'random_states_1.pkl').unlink()
    with pytest.raises(CheckpointError, match='damaged: sub/random_states_1.pkl is missing'): verify(c)
    (c/'sub'/'random_states_1.pkl').write_bytes(b'r'); (c/'model.safetensors').write_bytes(b'W' + b'w' * 4999)
    with pytest.raises(CheckpointError, match=r'model.safetensors differs from what was saved \(CRC-32\)'): verify(c)

# ---------------------------------------------------------------- a real full disk

@pytest.fixture
def tiny_disk(tmp_path):
    "A 1 MiB tmpfs: a disk that really fills up"
    mnt = tmp_path/'disk'; mnt.mkdir()
    try: r = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', str(mnt)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e: pytest.skip(f"cannot mount a tmpfs for a real full disk ({e})")
    if r.returncode: pytest.skip(f"cannot mount a tmpfs for a real full disk (needs root): {(r.stderr or r.stdout).strip()}")
    yield mnt
    subprocess.run(['umount', '-l', str(mnt)], capture_output=True)

def _full_disk_checks(mnt:Path, err:SaveError, step:int=2):
    msg = str(err)
    assert msg == f"no space left on device while saving checkpoint-{step} to {mnt}; the previous checkpoint {mnt}/checkpoint-1 is intact"
    assert '\n' not in msg and isinstance(err, OSError)
    assert names(mnt) == ['checkpoint-1']                                     # the failed save left nothing behind
    assert verify(mnt/'checkpoint-1') and latest_checkpoint(mnt) == mnt/'checkpoint-1'

def test_full_disk_plain_write(tiny_disk):
    save(tiny_disk, 1, {'model.bin': b'm' * 100_000})
    with pytest.raises(SaveError) as e:
        with saving(tiny_disk/'checkpoint-2') as d: (d/'model.bin').write_bytes(b'm' * (2 << 20))
    _full_disk_checks(tiny_disk, e.value)
    assert save(tiny_disk, 2, {'model.bin': b'm' * 100_000}) == latest_checkpoint(tiny_disk)   # the space came back

def test_full_disk_torch_save(tiny_disk):
    "`torch.save` reports a full disk as a RuntimeError ('file write failed'): still one line, still no space"
    import torch
    save(tiny_disk, 1, {'model.bin': b'm' * 1000})
    with pytest.raises(SaveError) as e:
        with saving(tiny_disk/'checkpoint-2') as d: torch.save({'w': torch.zeros(1 << 19)}, d/'model.pt')
    _full_disk_checks(tiny_disk, e.value)

def test_full_disk_while_writing_the_manifest(tiny_disk):
    "Every file fit, then the manifest did not: no COMPLETE, no checkpoint-2"
    save(tiny_disk, 1, {'model.bin': b'm' * 1000})
    with pytest.raises(SaveError) as e:
        with saving(tiny_disk/'checkpoint-2') as d:
            with open(d/'fill.bin', 'wb', buffering=0) as f:
                try:
                    while True: f.write(b'x' * 4096)
                except OSError as x: assert x.errno == errno.ENOSPC
    _full_disk_checks(tiny_disk, e.value)

# ---------------------------------------------------------------- real signals

LOOP = '''
import sys, time
from pathlib import Path
from mapg.faults import Preemption, saving
out, grace, slow = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == '1'
def checkpoint(step, seconds=0.):
    with saving(out/f'checkpoint-{step}') as d:
        (d/'state.json').write_text('{"step": %d}' % step)
        if seconds: print('saving', flush=True); time.sleep(seconds)
with Preemption(grace=grace) as pre:
    step = 0
    while True:
        time.sleep(0.05)                                   # an optimizer step
        step += 1
        if step == 1: checkpoint(1)
        print(f'step {step}', flush=True)
        if pre.requested:                                  # the safe point: the end of the step
            checkpoint(step, 60 if slow else 0)
            print(f'saved checkpoint-{step}; resume with --resume_from_checkpoint latest', flush=True)
            sys.exit(pre.exit_code)
'''

@pytest.mark.parametrize('sig,code', [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_saves_at_the_next_step_and_exits(tmp_path, sig, code):
    p = child(LOOP, tmp_path, 1.0, 0)
    wait_for(p, 'step 3')
    p.send_signal(sig)
    out, err = p.communicate(timeout=HANG)
    assert p.returncode == code, err
    step = int(out.split('saved checkpoint-')[1].split(';')[0])
    assert step >= 3 and latest_checkpoint(tmp_path) == tmp_path/f'checkpoint-{step}'
    assert json.loads((tmp_path/f'checkpoint-{step}'/'state.json').read_text()) == dict(step=step)
    assert err.splitlines() == [f"{sig.name}: stopping after this step, with a checkpoint (a second signal exits at once)"]

def test_second_signal_exits_at_once_and_the_last_checkpoint_stays(tmp_path):
    p = child(LOOP, tmp_path, 0.2, 1)
    wait_for(p, 'step 2')
    p.send_signal(signal.SIGTERM)
    wait_for(p, 'saving')                                   # the save takes 60 s
    time.sleep(0.3)
    t = time.monotonic(); p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=HANG)
    assert p.returncode == 143 and time.monotonic() - t < 30 and 'saved' not in out     # the save would take 60 s
    assert err.splitlines()[-1] == "SIGTERM again: exiting now (the last complete checkpoint is intact)"
    assert latest_checkpoint(tmp_path, warn=lambda m: None) == tmp_path/'checkpoint-1'

def test_one_stop_delivered_twice_is_one_request(tmp_path):
    "Ctrl-C reaches the worker, and its launcher forwards a SIGTERM: the run still saves, and exits 130"
    p = child(LOOP, tmp_path, 1.0, 0)
    wait_for(p, 'step 2')
    p.send_signal(signal.SIGINT); p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=HANG)
    assert p.returncode == 130 and 'saved checkpoint-' in out and len(err.splitlines()) == 1

# ---------------------------------------------------------------- one run per output directory

HOLD = '''
import sys, time
from mapg.faults import RunLock
with RunLock(sys.argv[1], command='train.py --config a.yaml'):
    print('locked', flush=True)
    if sys.argv[2] == 'hold': time.sleep(60)
'''

def test_a_live_holder_is_refused_with_its_pid_and_a_killed_one_is_taken_over(tmp_path):
    p = child(HOLD, tmp_path, 'hold')
    wait_for(p, 'locked')
    with pytest.raises(RunLocked) as e: RunLock(tmp_path).acquire()
    assert e.value.pid == p.pid
    assert str(e.value).startswith(f"output_dir: {tmp_path} is in use by pid {p.pid} on ") and 'train.py --config a.yaml' in str(e.value)
    p.kill(); p.communicate()
    msgs = []
    with RunLock(tmp_path, warn=msgs.append):
        assert json.loads((tmp_path/'run.lock').read_text())['pid'] == os.getpid()
    assert len(msgs) == 1 and msgs[0].startswith(f"taking over the stale lock of pid {p.pid} in {tmp_path} (started ")
    assert msgs[0].endswith('; no longer running)')

def test_a_finished_run_leaves_the_lock_free(tmp_path):
    p = child(HOLD, tmp_path, 'exit')
    p.communicate(timeout=HANG)
    assert p.returncode == 0 and (tmp_path/'run.lock').read_text() == ''
    msgs = []
    with RunLock(tmp_path, warn=msgs.append): pass
    assert msgs == []

# ---------------------------------------------------------------- non-finite values never reach the weights

def test_a_nan_loss_skips_the_step_and_the_weights_stay_finite():
    import torch
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1); opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    guard, x = StepGuard(max_skips=2), torch.randn(4, 3)
    rewards, n, why = finite_or_zero(torch.tensor([1., float('nan'), 0., float('inf')]))
    assert (n, why) == (2, {1: 'nan', 3: '+inf'}) and rewards.isfinite().all()
    stepped = []
    for poison in (False, True, False, True, True):
        before = [p.detach().clone() for p in net.parameters()]
        loss = (net(x).squeeze(-1) * rewards).mean() * (float('nan') if poison else 1.)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.)
        try: ok = guard.check(loss=loss, grad_norm=gn)
        except NonFiniteError as e:
            assert str(e).startswith('2 consecutive optimizer steps skipped (last: loss is nan, grad_norm is nan)'); break
        if ok: opt.step()
        opt.zero_grad(set_to_none=True)
        stepped.append(ok)
        assert all(p.isfinite().all() for p in net.parameters())
        if not ok: assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert stepped == [True, False, True, False] and guard.skipped == 3

# ---------------------------------------------------------------- YAML values checked as the command line checks them

def _train_cfgs()->tuple:
    "RunCfg, RolloutCfg and UpdateCfg with the field names and annotation strings of mapg/config.py (read, not imported: fast)"
    tree = ast.parse((ROOT/'mapg'/'config.py').read_text())
    out = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ('RunCfg', 'RolloutCfg', 'UpdateCfg'):
            fs = [(s.target.id, ast.unparse(s.annotation), dataclasses.field(default=None)) for s in node.body if isinstance(s, ast.AnnAssign)]
            out.append(dataclasses.make_dataclass(node.name, fs))
    assert len(out) == 3
    return tuple(out)

CFGS = _train_cfgs()

BAD_YAML = [   # (file contents, the field the message names, what it says)
    ('max_steps: 3\n\tseed: 1\n', '--config', 'line 2, column 1: while scanning for the next token'),
    ('seed:\t1\n', '--config', "YAML wants spaces there, not a tab"),
    (b'model: caf\xe9\n', '--config', 'line 1, column 11: invalid UTF-8 (byte 0xe9)'),
    (b'\xff\xfe\x00m\x00:\x00', '--config', 'line 1, column 1: invalid UTF-8 (byte 0xff)'),
    ('max_steps: 3\nseed: 1\nmax_steps: 4\n', 'max_steps', 'given twice (lines 1 and 3)'),
    ('max_steps: 2.5\n', 'max_steps', 'must be an integer, got 2.5'),
    ('max_steps: true\n', 'max_steps', 'must be an integer, got true'),
    ('max_steps: null\n', 'max_steps', 'must be an integer, got null'),
    ('max_steps:\n', 'max_steps', 'must be an integer, got null'),
    ('max_steps: [1, 2]\n', 'max_steps', 'must be an integer, got a list [1, 2]'),
    ('max_steps: {a: 1}\n', 'max_steps', 'must be an integer, got a mapping'),
    ("max_steps: '3'\n", 'max_steps', "must be an integer, got text '3'"),
    ('max_steps: 1e3\n', 'max_steps', "must be an integer, got text '1e3'"),
    ('micro_batch: 1.5\n', 'micro_batch', 'must be an integer or null, got 1.5'),
    ('learning_rate: true\n', 'learning_rate', 'must be a number, got true'),
    ('learning_rate: fast\n', 'learning_rate', "must be a number, got text 'fast'"),
    ('learning_rate: .nan\n', 'learning_rate', 'must be a finite number, got nan'),
    ('learning_rate: .inf\n', 'learning_rate', 'must be a finite number, got inf'),
    ('warmup_ratio: nan\n', 'warmup_ratio', "must be a number, got text 'nan'"),
    ('learning_rate: [3.0e-6]\n', 'learning_rate', 'must be a number, got a list'),
    ('report: 1\n', 'report', 'must be true or false, got 1'),
    ('report: maybe\n', 'report', "must be true or false, got text 'maybe'"),
    ('report: null\n', 'report', 'must be true or false, got null'),
    ('model: 7\n', 'model', 'must be text, got the number 7 (quote it)'),
    ('data_source: 0123\n', 'data_source', 'must be text or null, got the number 83 (quote it)'),
    ('model: null\n', 'model', 'must be text, got null'),
    ('model: [a, b]\n', 'model', 'must be text, got a list'),
    ('learning_rat: 1.0e-6\n', 'learning_rat', 'unknown field (did you mean learning_rate?)'),
    ('zzz: 1\n', 'zzz', 'unknown field; --help lists the fields'),
    ('- max_steps\n- 3\n', '--config', 'expected field: value pairs at the top, got a list'),
    ('toy\n', '--config', 'expected field: value pairs at the top, got a text'),
    ('1: 2\n', '--config', 'field names are text, got 1'),
    ('model: "toy\n', '--config', 'while scanning a quoted scalar: found unexpected end of stream'),
    ('max_steps: 1\n---\nseed: 2\n', '--config', 'expected a single document in the stream'),
    ('model: a: b\n', '--config', 'line 1, column 9: mapping values are not allowed here'),
    ('a: \x00\n', '--config', 'line 1, column 4: a character YAML does not allow (code 0x0)'),
    ('seed: *x\n', '--config', "found undefined alias 'x'"),
]

@pytest.mark.parametrize('text,field,msg', BAD_YAML, ids=[f'{i}:{str(t)[:20]}' for i, (t, _, _) in enumerate(BAD_YAML)])
def test_bad_yaml_is_one_line_naming_the_field_and_the_file(tmp_path, text, field, msg):
    p = tmp_path/'run.yaml'
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    with pytest.raises(ConfigError) as e: check_types(read_yaml(p), CFGS, file=p)
    s = str(e.value)
    assert s.startswith(f'{field}: ') and msg in s and s.endswith(f' (in {p})') and '\n' not in s, s
    assert e.value.field == field and e.value.file == str(p)

def test_missing_and_unreadable_yaml(tmp_path):
    with pytest.raises(ConfigError, match=rf'^--config: no such file \(in {tmp_path}/none.yaml\)$'): read_yaml(tmp_path/'none.yaml')
    with pytest.raises(ConfigError, match=r'^--config: is a folder, not a YAML file'): read_yaml(tmp_path)

def test_good_yaml_comes_back_typed(tmp_path):
    p = tmp_path/'ok.yaml'
    p.write_text('\ufeffmax_steps: 5\nlearning_rate: 3e-6\nlora_alpha: 64\nmicro_batch: null\ndata_source: ~\nreport: false\nmodel: toy\n')
    v = check_types(read_yaml(p), CFGS, file=p)
    assert v == dict(max_steps=5, learning_rate=3e-6, lora_alpha=64., micro_batch=None, data_source=None, report=False, model='toy')
    assert type(v['lora_alpha']) is float
    for y in sorted((ROOT/'configs').glob('*.yaml')): check_types(read_yaml(y), CFGS, file=y)   # every shipped recipe passes

# ---------------------------------------------------------------- data files before any model load

BAD_DATA = [   # (file name, contents, what the message says)
    ('empty.jsonl', '', 'is empty: no records'),
    ('blank.jsonl', '\n\n  \n', 'is empty: no records'),
    ('bad.jsonl', '{"question": "q", "answer": "1"}\n{"question": "q" "answer": "2"}\n', "line 2: invalid JSON (Expecting ',' delimiter, column "),
    ('trailing.jsonl', '{"question": "q", "answer": "1"}\n{"question": "q", "answer": "2",}\n', 'line 2: invalid JSON (Expecting property name'),
    ('missing.jsonl', '{"question": "q", "answer": "1"}\n{"question": "q"}\n', "line 2 lacks the column(s) ['answer']"),
    ('list.jsonl', '["q", "a"]\n', 'line 1: a record is a JSON object, this is a list'),
    ('utf.jsonl', b'{"question": "\xe9", "answer": "1"}\n', 'line 1: invalid UTF-8'),
    ('empty.csv', '', 'is empty: no header row'),
    ('header.csv', 'question,answer\n', 'holds no rows'),
    ('cols.csv', 'question,solution\nq,1\n', "header lacks the column(s) ['answer'] (it has ['question', 'solution'])"),
    ('short.csv', 'question,answer\nq,1\nq\n', 'line 3: 1 fields, the header has 2'),
    ('long.csv', 'question,answer\nq,1,extra\n', 'line 2: 3 fields, the header has 2'),
    ('obj.json', '{"question": "q", "answer": "1"}', 'a .json data file holds a list of records, this one a mapping'),
    ('emptylist.json', '[]', 'is empty: no records'),
    ('empty.json', '', 'is empty: no records'),
    ('bad.json', '[{"question": "q",\n "answer": }]', 'line 2, column 12: invalid JSON (Expecting value)'),
    ('rec.json', '[{"question": "q", "answer": "1"}, {"answer": "2"}]', "record 2 lacks the column(s) ['question']"),
    ('empty.jsonl.gz', '', 'is empty: no records'),
    ('missing.jsonl.gz', '{"question": "q"}\n', "line 1 lacks the column(s) ['answer']"),
    ('data.parquet', 'x', "unsupported data file type '.parquet'"),
]

@pytest.mark.parametrize('name,text,msg', BAD_DATA, ids=[n for n, _, _ in BAD_DATA])
def test_bad_data_file_names_the_file_and_the_row(tmp_path, name, text, msg):
    p = tmp_path/name
    b = text.encode() if isinstance(text, str) else text
    p.write_bytes(gzip.compress(b) if name.endswith('.gz') else b)
    with pytest.raises(ConfigError) as e: check_records_file(p, {'question', 'answer'})
    s = str(e.value)
    assert s.startswith('data_source: ') and msg in s and s.endswith(f' (in {p})') and '\n' not in s, s

def test_good_data_files_are_counted(tmp_path):
    rows = [dict(question=f'q{i}', answer=str(i)) for i in range(5)]
    files = {'a.jsonl': ''.join(json.dumps(r) + '\n' for r in rows), 'a.json': json.dumps(rows),
             'a.csv': 'question,answer\n' + ''.join(f"{r['question']},{r['answer']}\n" for r in rows)}
    for name, text in files.items():
        for gz in (False, True):
            p = tmp_path/(name + '.gz' * gz)
            p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
            assert check_records_file(p, {'question', 'answer'}) == 5, p
    (tmp_path/'bad.jsonl.gz').write_bytes(b'not gzip at all')
    with pytest.raises(ConfigError, match='not a readable gzip file'): check_records_file(tmp_path/'bad.jsonl.gz')
    with pytest.raises(ConfigError, match=f'^eval_source: no such file'): check_records_file(tmp_path/'none.csv', field='eval_source')

# ---------------------------------------------------------------- the entry point as a shell sees it

ENTRY = '''
import sys, time
from mapg.faults import cli_main, ConfigError
def main(args):
    if args[:1] == ['config']: raise ConfigError('max_steps', 'must be an integer, got 2.5', 'run.yaml')
    if args[:1] == ['file']: open('/nonexistent/data.jsonl')
    if args[:1] == ['wait']: print('ready', flush=True); time.sleep(60)
    if args[:1] == ['bug']: {}['x']
    print('args', args)
cli_main(main)
'''

@pytest.mark.parametrize('args,env,code,err', [
    (['config'], '', 2, ['error: max_steps: must be an integer, got 2.5 (in run.yaml)']),
    (['file'], '', 2, ["error: [Errno 2] No such file or directory: '/nonexistent/data.jsonl'"]),
    (['config', '--debug'], '', 1, None), (['config'], '1', 1, None), (['bug'], '', 1, None)])
def test_entry_point_errors(args, env, code, err):
    p = run_child([sys.executable, '-c', ENTRY, *args], cwd=ROOT, env={**os.environ, 'MAPG_DEBUG': env})
    assert p.returncode == code
    if err: assert p.stderr.splitlines() == err
    else: assert p.stderr.startswith('Traceback (most recent call last)') and len(p.stderr.splitlines()) > 3

def test_entry_point_debug_flag_is_removed_and_ctrl_c_is_one_line():
    p = run_child([sys.executable, '-c', ENTRY, 'x', '--debug', 'y'], cwd=ROOT)
    assert (p.returncode, p.stdout) == (0, "args ['x', 'y']\n")
    p = child(ENTRY, 'wait')
    wait_for(p, 'ready')
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=HANG)
    assert (p.returncode, err) == (130, 'interrupted (Ctrl-C)\n')
