"""Every shipped recipe on the real remote code of LLaDA-8B-Instruct and Dream-7B (tiny random checkpoints built from it; see
`tests/upstream.py`), shrunk by command-line overrides only: model, lengths, batch, steps (and a local sample for a training set
that lives on the hub). The recipe's own LoRA dropout, activation checkpointing, loss, K, N and mu are kept. Each trains 2 steps,
resumes from step 1 (inside a cycle) to equal the uninterrupted run bitwise, and is evaluated by `scripts/eval.py`. Training and
resume run under the device guard (`mapg.device`), so every recipe's GPU path is checked for tensors left on the CPU.
The same runs on mapg's stand-ins keep the paths tested where the real code is absent."""
import json, os, subprocess, sys
from pathlib import Path
import pytest, torch
from upstream import tiny_checkpoint
from mapg.config import parse_cfg
from mapg.train import train
from mapg.device import device_guard

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted(p.name for p in (ROOT/'configs').glob('*.yaml') if not p.name.startswith('toy_'))   # the paper's recipes
LOCAL = {'math': 'data/samples/math_train_sample.jsonl', 'kodcode': 'data/samples/kodcode_light_rl_sample.jsonl',
         'countdown': 'data/samples/countdown_train_sample.jsonl'}       # training sets that live on the hub
EVAL_TASK = dict(gsm8k='gsm8k', math='math', code='humaneval', sudoku='sudoku', countdown='countdown')
# prompts cut to their last 16 tokens; L 32 in one block of 32 with T 32 (N 32 and K 12 of the recipes stay valid);
# 2 prompts x G 2; NF4 is refused on CPU (no gradient through 4-bit layers there)
SHRINK = ['--max_prompt_len', '16', '--gen_length', '32', '--block_length', '32', '--steps', '32', '--per_device_batch', '2', '--group_size', '2',
          '--load_in_4bit', 'false', '--eval_size', '0', '--reward_workers', '1', '--no_report', '--no_progress', '--save_steps', '1']

SIZE = dict(hidden=16, heads=2)           # the real vocabularies (126464 and 152064 rows) dominate the cost

def recipe(name:str)->dict:
    import yaml
    return yaml.safe_load((ROOT/'configs'/name).read_text())

def run_args(name:str, model:Path, out:Path, *extra)->list:
    y = recipe(name)
    src = ['--data_source', str(ROOT/LOCAL[y['dataset']])] if y['dataset'] in LOCAL else []
    return ['--config', str(ROOT/'configs'/name), '--model', str(model), '--output_dir', str(out), *SHRINK, *src, *extra]

def trainable(ck:Path)->dict: return torch.load(ck/'pytorch_model.bin', weights_only=True)
def rows(out:Path): return [json.loads(l) for l in (out/'metrics.jsonl').read_text().splitlines()]
def strip(r:dict): return {k: v for k, v in r.items() if not k.endswith('_s')}

def guarded(args:list)->dict:
    "`train` with the model on a virtual GPU (`mapg.device`): a tensor left on the CPU fails as it would on a GPU"
    with device_guard(): return train(*parse_cfg(args))

def check_recipe(name:str, model:Path, tmp:Path, evaluate:bool=True):
    y = recipe(name)
    full = guarded(run_args(name, model, tmp/'full', '--max_steps', '2'))
    rs = rows(tmp/'full')
    assert [r['step'] for r in rs] == [1, 2] and [r['optimizer_steps'] for r in rs] == [1, 2] and not any(r['skipped'] for r in rs)
    assert ('ratio_pos' in rs[0]) == (y['pos_weight'] > 0)
    net = full['model'].model
    # the recipe's own settings reached the model: LoRA with its dropout, activation checkpointing
    drops = {m.p for n, m in net.named_modules() if n.endswith('lora_dropout.default')}
    assert drops == {y['lora_dropout']}, drops
    assert full['model'].grad_ckpt == y['grad_ckpt']
    guarded(run_args(name, model, tmp/'resumed', '--max_steps', '2', '--resume_from_checkpoint', str(tmp/'full'/'checkpoint-1')))
    assert json.loads((tmp/'full'/'checkpoint-1'/'trainer_state.json').read_text())['inner'] == 1   # inside a cycle: buffer restored
    assert [strip(r) for r in rows(tmp/'resumed')] == [strip(r) for r in rs[1:]]
    a, b = trainable(tmp/'full'/'checkpoint-2'), trainable(tmp/'resumed'/'checkpoint-2')
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    moved = sum(not torch.equal(a[k], v) for k, v in trainable(tmp/'full'/'checkpoint-1').items())
    assert moved > 0
    if not evaluate: return
    task = EVAL_TASK[y['task']]
    cmd = [sys.executable, str(ROOT/'scripts'/'eval.py'), '--model', str(model), '--checkpoint', str(tmp/'full'/'checkpoint-2'),
           '--tasks', task, '--lengths', '32', '--steps', '16', '--limit', '2', '--batch_size', '2', '--dtype', 'float32', '--max_prompt_len', '16',
           '--reward_workers', '1', '--no_progress', '--no_plot', '--output_dir', str(tmp/'eval')]
    p = subprocess.run(cmd, env={**os.environ, 'OMP_NUM_THREADS': '1'}, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    res = json.loads((tmp/'eval'/'results.json').read_text())
    assert task in json.dumps(res)

@pytest.mark.parametrize('name', RECIPES)
def test_recipe_on_real_code(tmp_path, name):
    kind = 'dream' if name.startswith('dream') else 'llada'
    check_recipe(name, tiny_checkpoint(kind, 'real', **SIZE), tmp_path, evaluate=not name.endswith('_token_only.yaml'))

@pytest.mark.parametrize('name', ['llada_gsm8k.yaml', 'dream_sudoku_token_only.yaml'])
def test_recipe_on_standin(tmp_path, name):
    kind = 'dream' if name.startswith('dream') else 'llada'
    check_recipe(name, tiny_checkpoint(kind, 'standin', **SIZE), tmp_path)

@pytest.mark.parametrize('name', RECIPES)
def test_one_gpu_flags_keep_the_recipe(name):
    "On one process, the flags `validate` suggests (and the README shows) divide, keep 48 completions per step and 3 sequences per forward"
    from mapg.faults import ConfigError
    from mapg.config import validate
    run, roll, upd = parse_cfg(['--config', str(ROOT/'configs'/name)])
    assert roll.per_device_batch * 8 * upd.grad_accum == 48
    with pytest.raises(ConfigError, match='--per_device_batch 6 --grad_accum 8 --micro_batch 36') as e: validate(run, roll, upd, 1)
    fix = str(e.value).split(' use ')[1].split(' (')[0].split()
    run, roll, upd = parse_cfg(['--config', str(ROOT/'configs'/name), *fix])
    validate(run, roll, upd, 1)
    assert roll.per_device_batch * upd.grad_accum == 48 and upd.micro_batch // upd.segments_per_update == 3
