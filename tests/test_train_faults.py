"""Faults lose nothing, end to end through `scripts/train.py`: real SIGTERM, Ctrl-C and kill -9 (during a save too), a real full
disk, two runs into one folder, non-finite rewards and losses, resumes that change the configuration, and a table of bad
inputs each refused in one line before any model is loaded."""
import json, math, os, signal, subprocess, sys, time
from pathlib import Path
import pytest, torch
from mapg.faults import cli_main, latest_checkpoint, verify, NonFiniteError
from mapg.config import parse_cfg
from mapg.train import train
from mapg.checkpoints import load_policy
from conftest import HANG, run_child

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT/'scripts'/'train.py'
TINY = ['--toy_hidden', '32', '--toy_layers', '1', '--toy_heads', '2', '--toy_pretrain_steps', '5', '--per_device_batch', '8',
        '--group_size', '4', '--eval_size', '0', '--no_report', '--no_progress', '--inner_updates', '2', '--segments_per_update', '3',
        '--n_segments', '4']

@pytest.fixture(scope='module')
def cache(tmp_path_factory):
    c = tmp_path_factory.mktemp('toy_cache')
    train(*parse_cfg(['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), *TINY, '--toy_cache', str(c), '--max_steps', '1',
                      '--save_steps', '0', '--output_dir', str(c/'warm')]))        # builds the pretrained toy once
    return str(c)

def args(out, cache, *extra): return [*TINY, '--toy_cache', cache, '--output_dir', str(out), *extra]
def rows(out): return [json.loads(l) for l in (Path(out)/'metrics.jsonl').read_text().splitlines() if l.strip()]
ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'}

def start(*a, code:str|None=None):
    "scripts/train.py in a subprocess (or a driver `code` that patches the trainer first, then runs the script)"
    cmd = [sys.executable, str(SCRIPT), *a] if code is None else [sys.executable, '-c', code, *a]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)

def wait_rows(out:Path, n:int, p, timeout=HANG):
    t = time.time()
    while time.time() - t < timeout:
        if (out/'metrics.jsonl').exists() and len(rows(out)) >= n: return
        if p.poll() is not None: pytest.fail(f"exited {p.returncode}: {p.stderr.read()[-3000:]}")
        time.sleep(0.2)
    p.kill(); _, err = p.communicate()
    pytest.fail(f'no {n} rows in {out} after {timeout} s: {err[-3000:]}')

DRIVER = """import runpy, sys, os, signal
import mapg.train as T
{patch}
sys.argv = [{script!r}] + sys.argv[1:]
runpy.run_path({script!r}, run_name='__main__')
"""
def driver(patch:str)->str: return DRIVER.format(patch=patch, script=str(SCRIPT))

@pytest.mark.parametrize('sig,code', [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_saves_then_exits(tmp_path, cache, sig, code):
    out = tmp_path/'run'
    p = start(*args(out, cache, '--max_steps', '400', '--save_steps', '0'))
    wait_rows(out, 2, p)
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=HANG)
    assert p.returncode == code, stderr[-2000:]
    assert 'Traceback' not in stderr and 'Traceback' not in stdout
    step = len(rows(out))
    ck = latest_checkpoint(out)
    assert ck is not None and ck.name == f'checkpoint-{step}'                # saved at the end of the step it was in
    assert '--resume_from_checkpoint latest' in stdout
    r = run_child([sys.executable, str(SCRIPT), *args(out, cache, '--max_steps', str(step + 1), '--save_steps', '0',
                        '--resume_from_checkpoint', 'latest')], env=ENV, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [x['step'] for x in rows(out)] == list(range(1, step + 2))

def test_kill_during_save_keeps_the_last_complete_checkpoint(tmp_path, cache):
    "kill -9 in the middle of writing checkpoint-2: `latest` is checkpoint-1 (the half-written folder ignored) and resume works"
    out = tmp_path/'run'
    patch = """
real = T.save_checkpoint
def save(acc, d, *a, **k):
    if d.name == 'checkpoint-2':
        real_save = T.torch.save
        def dying(obj, f, *x, **y):
            real_save(obj, f, *x, **y); os.kill(os.getpid(), signal.SIGKILL)
        T.torch.save = dying
    return real(acc, d, *a, **k)
T.save_checkpoint = save
"""
    p = start(*args(out, cache, '--max_steps', '3', '--save_steps', '1'), code=driver(patch))
    p.communicate(timeout=HANG)
    assert p.returncode == -signal.SIGKILL
    assert (out/'checkpoint-2.tmp').exists() and not (out/'checkpoint-2').exists()
    assert latest_checkpoint(out, warn=lambda m: None).name == 'checkpoint-1'
    r = run_child([sys.executable, str(SCRIPT), *args(out, cache, '--max_steps', '3', '--save_steps', '1',
                        '--resume_from_checkpoint', 'latest')], env=ENV, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'checkpoint-2.tmp (an unfinished save)' in r.stderr                # one warning line names what was ignored
    assert [x['step'] for x in rows(out)] == [1, 2, 3] and verify(out/'checkpoint-3')

def test_full_disk_fails_the_save_and_keeps_the_previous_checkpoint(tmp_path, cache):
    mnt = tmp_path/'small'; mnt.mkdir()
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=8m', 'tmpfs', str(mnt)], capture_output=True).returncode:
        pytest.skip('cannot mount a tmpfs here (needs root)')
    try:
        out = mnt/'run'
        patch = """
real = T.save_checkpoint
def save(acc, d, *a, **k):
    r = real(acc, d, *a, **k)
    if d.name == 'checkpoint-1':          # the disk fills up after the first checkpoint
        with open(d.parent.parent/'filler', 'wb') as f:
            try:
                while True: f.write(b'x' * (1 << 16))
            except OSError: pass
    return r
T.save_checkpoint = save
"""
        p = start(*args(out, cache, '--max_steps', '3', '--save_steps', '1'), code=driver(patch))
        _, stderr = p.communicate(timeout=HANG)
        assert p.returncode == 1, stderr[-2000:]
        line = stderr.strip().splitlines()[-1]
        assert line.startswith('error: no space left on device while saving checkpoint-2') and 'checkpoint-1 is intact' in line, line
        assert verify(out/'checkpoint-1') and not (out/'checkpoint-2').exists() and not (out/'checkpoint-2.tmp').exists()
    finally: subprocess.run(['umount', '-l', str(mnt)])

def test_second_run_into_one_folder_is_refused(tmp_path, cache):
    out = tmp_path/'run'
    a = start(*args(out, cache, '--max_steps', '400', '--save_steps', '0'))
    try:
        wait_rows(out, 1, a)
        b = run_child([sys.executable, str(SCRIPT), *args(out, cache, '--max_steps', '2')], env=ENV, cwd=ROOT)
        assert b.returncode == 2
        assert f"is in use by pid {a.pid}" in b.stderr and len(b.stderr.strip().splitlines()) == 1, b.stderr
    finally:
        a.kill(); a.communicate()

def test_nonfinite_rewards_score_zero(tmp_path, cache, monkeypatch):
    import mapg.stages as S
    real = S.score_completions
    def nan_some(task, texts, records, workers=1):
        rew, parts, mets = real(task, texts, records, workers)
        rew = rew.clone(); rew[::3] = float('nan')
        return rew, parts, mets
    monkeypatch.setattr(S, 'score_completions', nan_some)
    s = train(*parse_cfg(['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), *args(tmp_path/'run', cache, '--max_steps', '2', '--save_steps', '1')]))
    rs = rows(tmp_path/'run')
    assert all(r['reward_nonfinite'] == pytest.approx(3 / 8) and math.isfinite(r['reward']) and r['skipped'] == 0 for r in rs)
    assert all(torch.isfinite(p).all() for p in s['model'].model.parameters())

def test_nonfinite_loss_skips_the_step_and_stops_the_run(tmp_path, cache, monkeypatch):
    from mapg import objectives
    import mapg.stages as S
    real = S.get_loss
    def nan_loss(name):
        f = real(name)
        def g(*a, **k):
            loss, met = f(*a, **k)
            return loss * float('nan'), {**met, 'loss': float('nan')}
        return g
    run, roll, upd = parse_cfg(['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), *args(tmp_path/'run', cache, '--max_steps', '6', '--save_steps', '1')])
    before = {n: p.detach().clone() for n, p in load_policy(run, roll, 'cpu').model.named_parameters()}
    monkeypatch.setattr(S, 'get_loss', nan_loss)
    with pytest.raises(NonFiniteError, match='3 consecutive optimizer steps skipped'): train(run, roll, upd)
    rs = rows(tmp_path/'run')
    assert [r['skipped'] for r in rs] == [1, 1, 1] and rs[-1]['skipped_total'] == 3
    w = torch.load(latest_checkpoint(tmp_path/'run')/'pytorch_model.bin')
    for n, v in w.items(): assert torch.equal(v, before[n]), n                # no NaN, and no step, reached the weights

def test_resume_refuses_a_changed_field_and_allows_max_steps(tmp_path, cache):
    base = ['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), *args(tmp_path/'run', cache, '--save_steps', '1')]
    train(*parse_cfg([*base, '--max_steps', '1']))
    with pytest.raises(ValueError, match=r'learning_rate: changed since .*checkpoint-1 \(learning_rate: 5e-05 -> 0.001\)'):
        train(*parse_cfg([*base, '--max_steps', '2', '--learning_rate', '1e-3', '--resume_from_checkpoint', 'latest']))
    train(*parse_cfg([*base, '--max_steps', '2', '--resume_from_checkpoint', 'latest']))
    assert [r['step'] for r in rows(tmp_path/'run')] == [1, 2]

def test_first_step_runs_at_a_nonzero_lr(tmp_path, cache):
    train(*parse_cfg(['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), *args(tmp_path/'run', cache, '--max_steps', '4',
                      '--save_steps', '0', '--warmup_ratio', '0.5', '--learning_rate', '1e-3')]))
    assert [r['lr'] for r in rows(tmp_path/'run')] == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3])   # the rate each step used

# ---------------------------------------------------------------------------------------------------------------------
# bad inputs: one line `error: FIELD: reason`, exit 2, before any model load, nothing written

def _yaml(tmp, text:str|bytes):
    p = tmp/'c.yaml'
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return ['--config', str(p)]

def _data(tmp, name, text):
    p = tmp/name; p.write_text(text)
    return ['--task', 'gsm8k', '--dataset', 'gsm8k', '--data_source', str(p)]

BAD = [  # (field named, reason fragment, command-line arguments or a function of the temp folder giving them)
    ('learning_rate', 'finite', ['--learning_rate', 'inf']), ('learning_rate', 'finite', ['--learning_rate', 'nan']),
    ('learning_rate', '> 0', ['--learning_rate', '0']), ('learning_rate', '> 0', ['--learning_rate', '-1']),
    ('warmup_ratio', 'finite', ['--warmup_ratio', 'nan']), ('warmup_ratio', '<= 1', ['--warmup_ratio', '2']),
    ('max_grad_norm', '> 0', ['--max_grad_norm', '-1']), ('max_grad_norm', '> 0', ['--max_grad_norm', '0']),
    ('eps_low', '>= 0', ['--eps_low', '-1']), ('eps_low', '< 1', ['--eps_low', '1']), ('eps_high', '>= 0', ['--eps_high', '-0.1']),
    ('adam_beta1', '< 1', ['--adam_beta1', '1.5']), ('adam_beta2', '< 1', ['--adam_beta2', '1']),
    ('weight_decay', '>= 0', ['--weight_decay', '-1']), ('lora_dropout', '< 1', ['--lora_dropout', '1']),
    ('temperature', 'temperature', ['--temperature', '-1']), ('pos_temperature', 'finite', ['--pos_temperature', 'nan']),
    ('pos_weight', '>= 0', ['--pos_weight', '-1']), ('max_steps', '>= 1', ['--max_steps', '0']),
    ('grad_accum', '>= 1', ['--grad_accum', '0']), ('per_device_batch', '>= 1', ['--per_device_batch', '0']),
    ('group_size', '>= 1', ['--group_size', '0']), ('inner_updates', '>= 1', ['--inner_updates', '0']),
    ('segments_per_update', '>= 1', ['--segments_per_update', '0']), ('n_segments', '>= 1', ['--n_segments', '0']),
    ('micro_batch', '>= 1', ['--micro_batch', '0']), ('save_steps', '>= 0', ['--save_steps', '-1']),
    ('reward_workers', '>= 0', ['--reward_workers', '-1']), ('eval_size', '>= 0', ['--eval_size', '-1']),
    ('max_skipped_steps', '>= 1', ['--max_skipped_steps', '0']), ('save_total_limit', '>= 0', ['--save_total_limit', '-1']),
    ('gen_length', 'multiple of block_length', ['--gen_length', '12']), ('steps', 'more than the block_length', ['--steps', '32']),
    ('remasking', 'expected one of', ['--remasking', 'x']), ('score', 'expected one of', ['--score', 'x']),
    ('task', 'unknown task', ['--task', 'chess']), ('dataset', 'unknown dataset', ['--dataset', 'nope']),
    ('loss', 'unknown loss', ['--loss', 'ppo']), ('advantage', 'unknown advantage', ['--advantage', 'z']),
    ('model_kind', 'unknown kind', ['--model_kind', 'gpt']), ('dtype', 'expected bfloat16', ['--dtype', 'float16']),
    ('report_to', 'expected none', ['--report_to', 'x']),
    ('output_dir', 'is a file', lambda t: ['--output_dir', str((t/'f').touch() or t/'f')]),
    ('data_source', 'no such file', lambda t: ['--task', 'gsm8k', '--dataset', 'gsm8k', '--data_source', str(t/'none.jsonl')]),
    ('data_source', 'is empty', lambda t: _data(t, 'e.jsonl', '')),
    ('data_source', 'line 2: invalid JSON', lambda t: _data(t, 'b.jsonl', '{"question": "q", "answer": "#### 1"}\n{oops\n')),
    ('data_source', 'cannot be read', lambda t: _data(t, 'c.jsonl', '{"prompt": "q"}\n')),
    ('max_steps', 'must be an integer, got 2.5', lambda t: _yaml(t, 'max_steps: 2.5\n')),
    ('max_steps', 'must be an integer', lambda t: _yaml(t, 'max_steps: true\n')),
    ('max_steps', 'must be an integer', lambda t: _yaml(t, 'max_steps: null\n')),
    ('learning_rate', 'must be a number', lambda t: _yaml(t, 'learning_rate: [1, 2]\n')),
    ('learnig_rate', 'unknown field (did you mean learning_rate?)', lambda t: _yaml(t, 'learnig_rate: 1\n')),
    ('seed', 'given twice', lambda t: _yaml(t, 'seed: 1\nseed: 2\n')),
    ('--config', 'tab', lambda t: _yaml(t, 'seed:\t1\n\tmax_steps: 2\n')),
    ('--config', 'UTF-8', lambda t: _yaml(t, b'task: sudoku\xff\n')),
    ('--config', 'field: value pairs', lambda t: _yaml(t, '- 1\n- 2\n')),
]

@pytest.mark.parametrize('field,reason,extra', BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_input_one_line_before_any_model_load(tmp_path, cache, monkeypatch, capsys, field, reason, extra):
    from mapg import models, checkpoints
    monkeypatch.setattr(checkpoints, 'load_model', lambda *a, **k: pytest.fail('a model was loaded'))
    monkeypatch.setattr(models.MDLM, 'forward', lambda *a, **k: pytest.fail('a forward pass ran'))
    out = tmp_path/'out'
    extra = extra(tmp_path) if callable(extra) else extra
    base = [] if '--config' in extra else ['--config', str(ROOT/'configs'/'toy_sudoku.yaml')]
    a = [*base, *TINY, '--toy_cache', cache, '--output_dir', str(out), *extra]
    with pytest.raises(SystemExit) as e: cli_main(lambda x: train(*parse_cfg(x)), a)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {field}: ") and reason in err[0], err[0]
    if '--output_dir' not in extra: assert not out.exists()                   # nothing written

def test_cli_error_is_one_line_and_debug_keeps_the_traceback(tmp_path):
    r = run_child([sys.executable, str(SCRIPT), '--learning_rate', 'inf', '--output_dir', str(tmp_path/'o')], env=ENV)
    assert r.returncode == 2 and r.stderr.strip() == 'error: learning_rate: must be a finite number, got inf', r.stderr
    r = run_child([sys.executable, str(SCRIPT), '--learning_rate', 'inf', '--debug', '--output_dir', str(tmp_path/'o')], env=ENV)
    assert r.returncode != 0 and 'Traceback' in r.stderr
