"""Every GPU path of a run on the CPU, under the device guard (`mapg.device`): the model lives on a virtual `cuda:0` whose
values stay on the CPU, so a tensor left on the CPU fails here exactly as it fails on a GPU.

Covered: a rollout and an update of every loss (GSPO, GRPO, RLOO), the position term on and off, micro-batching on and off
(both of its paths), StepMerge replay of saved rollouts, the report, the before/after evaluation, a resume inside a cycle,
the evaluation of every paper task, the prefix cache (`--cache prefix`) and the benchmark's figures; `tests/test_recipes.py` runs every shipped recipe under the guard on tiny LLaDA and
Dream built from their real remote code (LoRA, checkpointing, resume). The guard itself is tested:
it changes no value, and it fails the run when any library function on the training path hands its tensors back on the CPU
(every such function is found by running the step, not listed by hand)."""
import dataclasses, importlib, json, math
from pathlib import Path
import pytest, torch
from torch import Tensor
from mapg.device import device_guard, DeviceMixError, vdevice
from mapg.config import parse_cfg
from mapg.train import train
from test_train import TINY
from upstream import tiny_checkpoint

ROOT = Path(__file__).resolve().parent.parent
GPU = torch.device('cuda:0')

@pytest.fixture(scope='module')
def cache(tmp_path_factory): return str(tmp_path_factory.mktemp('toy_cache'))

def args(out, cache, *extra): return parse_cfg([*TINY, '--output_dir', str(out), '--toy_cache', cache, '--no_progress', *extra])

def guarded(out, cache, *extra)->dict:
    with device_guard():
        s = train(*args(out, cache, *extra))
        s['device'] = s['model'].device                   # what the run saw (outside the guard every tensor is on the CPU)
        return s

def rows(out): return [json.loads(l) for l in (Path(out)/'metrics.jsonl').read_text().splitlines()]
def strip(r:dict): return {k: v for k, v in r.items() if not k.endswith('_s') and k != 'peak_gib'}   # times, and peak memory (a GPU's only)
def trainable(s): return {n: p.detach().clone() for n, p in s['model'].model.named_parameters() if p.requires_grad}

def test_the_first_gpu_crash_is_caught():
    "The mask the paper's recipe died on: made without a device, it meets the segments on the model's device"
    with device_guard() as dev:
        segments = torch.arange(6, device=dev).view(3, 2)
        with pytest.raises(DeviceMixError, match='two devices'): segments.masked_fill(~torch.zeros(3, 1, dtype=torch.bool), -1)
        assert segments.masked_fill(~torch.zeros(3, 1, dtype=torch.bool, device=dev), -1).device == dev

# (loss, advantage, pos_weight, micro_batch): micro_batch 6 >= K = 3 splits by sequence, 2 < K splits the pairs of a sequence
CASES = [('gspo', 'std', '1', None), ('gspo', 'std', '0', None), ('gspo', 'std', '1', '6'), ('gspo', 'std', '1', '2'),
         ('gspo', 'std', '0', '2'), ('grpo', 'mean', '1', None), ('grpo', 'mean', '0', '2'), ('rloo', 'rloo', '1', '6')]

@pytest.mark.parametrize('loss,adv,pos,mb', CASES)
def test_every_loss_rollout_and_update(tmp_path, cache, loss, adv, pos, mb):
    extra = ['--loss', loss, '--advantage', adv, '--pos_weight', pos] + (['--micro_batch', mb] if mb else [])
    s = guarded(tmp_path/'run', cache, '--max_steps', '2', '--save_steps', '0', *extra)
    assert s['device'] == GPU and all(vdevice(p) == GPU for p in s['model'].model.parameters())
    rs = rows(tmp_path/'run')
    assert [r['step'] for r in rs] == [1, 2] and all(math.isfinite(r['loss']) for r in rs) and not any(r['skipped'] for r in rs)
    if loss == 'gspo': assert ('ratio_pos' in rs[0]) == (pos != '0')      # GSPO clips the position ratio apart

def test_the_guard_changes_no_value(tmp_path, cache):
    "A guarded run computes bitwise what the same run computes without the guard"
    plain = train(*args(tmp_path/'plain', cache, '--max_steps', '3', '--save_steps', '0', '--micro_batch', '2'))
    g = guarded(tmp_path/'guarded', cache, '--max_steps', '3', '--save_steps', '0', '--micro_batch', '2')
    a, b = trainable(plain), trainable(g)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [strip(r) for r in rows(tmp_path/'plain')] == [strip(r) for r in rows(tmp_path/'guarded')]

def test_resume_replay_report_and_evaluation(tmp_path, cache):
    "Held-out evaluation before and after, the report, saved rollouts; a resume inside a cycle and a replay equal the run"
    full = guarded(tmp_path/'a', cache, '--max_steps', '3', '--save_steps', '1', '--eval_size', '8', '--report', 'true',
                   '--save_rollouts', 'true')
    assert {'before', 'after', 'report'} <= set(full) and Path(full['report']).exists()
    assert json.loads((tmp_path/'a'/'checkpoint-1'/'trainer_state.json').read_text())['inner'] == 1   # inside a cycle
    resumed = guarded(tmp_path/'b', cache, '--max_steps', '3', '--save_steps', '1', '--eval_size', '8', '--save_rollouts', 'true',
                      '--resume_from_checkpoint', str(tmp_path/'a'/'checkpoint-1'))
    replayed = guarded(tmp_path/'c', cache, '--max_steps', '3', '--save_steps', '0', '--eval_size', '8',
                       '--replay_rollouts', str(tmp_path/'a'/'rollouts'))
    a = trainable(full)
    for other in (resumed, replayed):
        b = trainable(other)
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert [strip(r) for r in rows(tmp_path/'a')][1:] == [strip(r) for r in rows(tmp_path/'b')]

@pytest.mark.parametrize('task', ['gsm8k', 'math', 'humaneval', 'countdown', 'sudoku'])
def test_every_paper_task_evaluates(tmp_path, task):
    "The paper's evaluation protocol (prompts, generation, answer reading, rewards) with the model on the device"
    from mapg.eval_args import EvalArgs, Cell
    from mapg.evaluate import load_for_eval, eval_cell, read_items, _records
    path = tiny_checkpoint('llada', 'standin', hidden=16, heads=2)
    a = EvalArgs(model=str(path), tasks=[task], lengths=[16], steps=8, limit=2, batch_size=2, dtype='float32',
                 max_prompt_len=16, reward_workers=1, progress=False)
    with device_guard() as dev:
        m = load_for_eval(a, device=dev)
        assert m.device == dev
        recs = _records(a, task, m.tokenizer)
        eval_cell(m, recs, Cell(task, 16, 16, a), tmp_path)
    items = read_items(sorted(tmp_path.glob('*.jsonl')))
    assert len(items) == 2 and all(i['task'] == task for i in items.values())

def test_prefix_cache_rollout_and_update(tmp_path, cache):
    "cache='prefix' over two blocks: its prefix passes, window forwards, StepMerge windows and both micro-batching paths on the device"
    for mb in ('6', '2'):
        s = guarded(tmp_path/mb, cache, '--max_steps', '2', '--save_steps', '0', '--cache', 'prefix', '--block_length', '8', '--micro_batch', mb)
        assert s['device'] == GPU
        rs = rows(tmp_path/mb)
        assert [r['step'] for r in rs] == [1, 2] and all(math.isfinite(r['loss']) for r in rs) and not any(r['skipped'] for r in rs)

def test_benchmarks_run_on_the_device():
    "Every model figure of `scripts/bench.py` (sampler, StepMerge, position term, micro-batching, passes, cycle, prefix cache) on the device"
    from mapg.bench import BenchArgs, run_benchmarks, FIGURES
    a = BenchArgs(device='cuda:0', repeats=1, batch=2, update_batch=2, gen_length=16, block_length=16, steps=8, segments=8, k=4, mu=2,
                  micro_batch=2, only=[f for f in FIGURES if f != 'code'])
    with device_guard(): figs = run_benchmarks(a, show=False)
    assert len(figs) == len(FIGURES) + 1 and all(math.isfinite(f.ratio) for f in figs)   # less code, plus cache_tokens' three

# --- the guard fails when any function on the training path returns its tensors on the CPU ---------------------------------

MODULES = ['mapg.core', 'mapg.plackett_luce', 'mapg.policy', 'mapg.sampler', 'mapg.likelihood', 'mapg.objectives', 'mapg.models',
           'mapg.families', 'mapg.compat', 'mapg.standins', 'mapg.rewards', 'mapg.data', 'mapg.config', 'mapg.checkpoints',
           'mapg.toy', 'mapg.scoring', 'mapg.stages', 'mapg.engine', 'mapg.train']

def _functions()->dict:
    "{function: [(module, name), ...]}: every public function of the training path's modules, and every module that holds it"
    mods = [importlib.import_module(m) for m in MODULES]
    fs = {}
    for m in mods:
        for n in getattr(m, '__all__', []):
            f = getattr(m, n)
            if callable(f) and not isinstance(f, type) and getattr(f, '__module__', '').startswith('mapg.'): fs[id(f)] = (f, [])
    for m in mods:
        for n, v in vars(m).items():
            if id(v) in fs: fs[id(v)][1].append((m, n))
    return dict(fs.values())

def _map(o, f):
    "`o` with `f` applied to every tensor in it (tuples, lists, dicts and dataclasses walked)"
    if isinstance(o, Tensor): return f(o)
    if isinstance(o, (list, tuple)) and not hasattr(o, '_fields'): return type(o)(_map(x, f) for x in o)
    if hasattr(o, '_fields'): return type(o)(*(_map(x, f) for x in o))
    if isinstance(o, dict): return {k: _map(v, f) for k, v in o.items()}
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.replace(o, **{fl.name: _map(getattr(o, fl.name), f) for fl in dataclasses.fields(o) if fl.init})
    return o

def _wrap(fs:dict, make, monkeypatch):
    for f, places in fs.items():
        w = make(f)
        for m, n in places: monkeypatch.setattr(m, n, w)

STEP = ('--max_steps', '1', '--save_steps', '0', '--micro_batch', '2', '--inner_updates', '1')

@pytest.fixture(scope='module')
def on_device(tmp_path_factory, cache)->list:
    "The functions that returned tensors on the device during one guarded training step (found by running it)"
    found, fs = {}, _functions()
    def make(f):
        def rec(*a, **k):
            out = f(*a, **k)
            _map(out, lambda t: found.setdefault(f.__qualname__, f) if vdevice(t) == GPU else None)
            return out
        return rec
    with pytest.MonkeyPatch.context() as mp:
        _wrap(fs, make, mp)
        guarded(tmp_path_factory.mktemp('record'), cache, *STEP)
    return sorted(found)

# CUDA accepts these CPU results: segments index device tensors (CPU index tensors are allowed), and the completion
# lengths are only read on the CPU, for metrics
TOLERATED = {'sample_segments', 'completions_text'}

def test_a_function_returning_cpu_tensors_fails_the_step(tmp_path, cache, on_device):
    "Each function that returns device tensors in the step, made to return them on the CPU: the guarded step raises"
    assert {'generate', 'stepmerge_log_probs', 'rollout_stage', 'unmask_scores', 'pick_positions'} <= set(on_device), on_device
    fs, passed = _functions(), []
    for name in on_device:
        def make(f):
            def moved(*a, **k): return _map(f(*a, **k), lambda t: t.cpu() if vdevice(t) == GPU else t)
            return moved
        with pytest.MonkeyPatch.context() as mp:
            _wrap({f: p for f, p in fs.items() if f.__qualname__ == name}, make, mp)
            try: guarded(tmp_path/name, cache, *STEP)
            except DeviceMixError: continue
        passed.append(name)
    assert set(passed) == TOLERATED, passed

def test_one_generation_per_cycle(tmp_path, cache):
    "Two rollout batches per cycle sampled in one `generate` call (a generator per batch) run under the guard, bitwise as without it"
    extra = ('--max_steps', '2', '--save_steps', '0', '--grad_accum', '2', '--per_device_batch', '4')
    plain = train(*args(tmp_path/'plain', cache, *extra))
    g = guarded(tmp_path/'guarded', cache, *extra)
    a, b = trainable(plain), trainable(g)
    assert g['device'] == GPU and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [strip(r) for r in rows(tmp_path/'plain')] == [strip(r) for r in rows(tmp_path/'guarded')]
