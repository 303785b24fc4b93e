"""Every shipped recipe on the real remote code of LLaDA-8B-Instruct and Dream-7B (tiny random checkpoints built from it; see
`tests/upstream.py`), shrunk by command-line overrides only: model, lengths, batch, steps (and a local sample for a training set
that lives on the hub). The recipe's own LoRA dropout, activation checkpointing, loss, K, N and mu are kept.

- Every recipe, statically: as shipped it validates for 8 processes; shrunk, its policy loads on the real code with the
  recipe's LoRA and checkpointing, and one rollout batch is sampled, scored and given advantages under the device guard
  (a shorter one: L = T = N = 16).
- A covering subset (`TRAINED`, each member's reason beside it) trains 2 steps, resumes from step 1 (inside a cycle) to
  equal the uninterrupted run bitwise, and is evaluated by `scripts/eval.py`; training and resume run under the device
  guard (`mapg.device`), so the GPU path is checked for tensors left on the CPU. The recipes outside it differ from a
  member only in what the static check covers: a token-only recipe is its mask-aware twin with `pos_weight: 0`
  (`test_token_only_recipes_are_their_twins`), and the rewards and families are all in the subset.
- The same on mapg's stand-ins keeps the paths tested where the real code is absent: there they train; beside the real
  code, which the subset trains, they are checked statically."""
import json, runpy, sys
from pathlib import Path
import pytest, torch
from upstream import tiny_checkpoint, has_upstream
from mapg.core import make_gen
from mapg.config import parse_cfg, validate
from mapg.checkpoints import load_policy
from mapg.scoring import train_records
from mapg.stages import rollout_stage
from mapg.train import train
from mapg.device import device_guard

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted(p.name for p in (ROOT/'configs').glob('*.yaml') if not p.name.startswith('toy_'))   # the paper's recipes
# trained, resumed and evaluated: every family, every reward, the position term on and off
TRAINED = {'llada_gsm8k.yaml': "LLaDA, GSM8K's reward, mask-aware: the recipe the README's 8-GPU command runs",
           'dream_math.yaml': "Dream, mask-aware, MATH's reward (math-verify)",
           'llada_code.yaml': "the code reward: completions run in the sandbox",
           'llada_countdown.yaml': "Countdown's reward",
           'dream_sudoku_token_only.yaml': "Sudoku's reward, token-only (pos_weight 0): the position term off"}
LOCAL = {'math': 'data/samples/math_train_sample.jsonl', 'kodcode': 'data/samples/kodcode_light_rl_sample.jsonl',
         'countdown': 'data/samples/countdown_train_sample.jsonl'}       # training sets that live on the hub
EVAL_TASK = dict(gsm8k='gsm8k', math='math', code='humaneval', sudoku='sudoku', countdown='countdown')
# prompts cut to their last 16 tokens; L 32 in one block of 32 with T 32 (N 32 and K 12 of the recipes stay valid);
# 2 prompts x G 2; NF4 is refused on CPU (no gradient through 4-bit layers there)
SHRINK = ['--max_prompt_len', '16', '--gen_length', '32', '--block_length', '32', '--steps', '32', '--per_device_batch', '2', '--group_size', '2',
          '--load_in_4bit', 'false', '--eval_size', '0', '--reward_workers', '1', '--no_report', '--no_progress', '--save_steps', '1']

SIZE = dict(hidden=16, heads=2)           # the real vocabularies (126464 and 152064 rows) dominate the cost

def kind_of(name:str)->str: return 'dream' if name.startswith('dream') else 'llada'

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

def check_recipe(name:str, model:Path, tmp:Path):
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
    task = EVAL_TASK[y['task']]
    args = ['--model', str(model), '--checkpoint', str(tmp/'full'/'checkpoint-2'), '--tasks', task, '--lengths', '32', '--steps', '16',
            '--limit', '2', '--batch_size', '2', '--dtype', 'float32', '--max_prompt_len', '16', '--reward_workers', '1', '--no_progress',
            '--no_plot', '--output_dir', str(tmp/'eval')]
    script_main(ROOT/'scripts'/'eval.py', args)
    res = json.loads((tmp/'eval'/'results.json').read_text())
    assert task in json.dumps(res)

def script_main(script:Path, args:list):
    "Run `script` as `python script ARGS` would, in this process (its imports are already loaded); fail on a non-zero exit"
    old = sys.argv
    sys.argv = [str(script), *args]
    try: runpy.run_path(str(script), run_name='__main__')
    except SystemExit as e: assert e.code in (0, None), f"{script.name} {' '.join(args)} exited {e.code}"
    finally: sys.argv = old

STATIC = ['--gen_length', '16', '--block_length', '16', '--steps', '16', '--n_segments', '16']    # one short rollout; K 12 <= N 16

def check_statically(name:str, model:Path, tmp:Path):
    "The recipe validates as shipped for 8 processes; shrunk, its policy loads with its LoRA and checkpointing and one rollout batch is sampled and scored under the device guard"
    y = recipe(name)
    validate(*parse_cfg(['--config', str(ROOT/'configs'/name)]), 8)
    run, roll, upd = parse_cfg(run_args(name, model, tmp, *STATIC))
    validate(run, roll, upd, 1)
    with device_guard() as dev:
        m = load_policy(run, roll, dev)
        drops = {mod.p for n, mod in m.model.named_modules() if n.endswith('lora_dropout.default')}
        assert drops == {y['lora_dropout']} and m.grad_ckpt == y['grad_ckpt'], (drops, m.grad_ckpt)
        recs = train_records(run, m.tokenizer)[:roll.per_device_batch // roll.group_size]
        b, _ = rollout_stage(m, [r for r in recs for _ in range(roll.group_size)], roll, upd, y['task'], make_gen(run.seed, dev))
    L = roll.gen_length
    assert b.r.unmask_step.shape == (roll.per_device_batch, L) and b.r.old_pos.shape == (roll.per_device_batch, L)
    assert bool((b.r.unmask_step >= 1).all()) and bool((b.r.ids[:, b.r.prompt_len:] != b.r.mask_id).all())     # every position decided
    assert bool(torch.isfinite(b.rewards).all()) and bool(torch.isfinite(b.adv).all())
    assert {'reward', 'completion_len', 'pos_entropy'} <= set(b.metrics)

@pytest.mark.parametrize('name', RECIPES)
def test_recipe_checked_statically(tmp_path, name):
    check_statically(name, tiny_checkpoint(kind_of(name), 'real', **SIZE), tmp_path)

@pytest.mark.parametrize('name', sorted(TRAINED))
def test_recipe_trained(tmp_path, name):
    check_recipe(name, tiny_checkpoint(kind_of(name), 'real', **SIZE), tmp_path)

def test_token_only_recipes_are_their_twins():
    "Each token-only recipe is its mask-aware twin with the position term off: what the trained subset does not train is one field"
    only = [n for n in RECIPES if n.endswith('_token_only.yaml')]
    assert len(only) == len(RECIPES) // 2
    for n in only:
        a, b = recipe(n.replace('_token_only', '')), recipe(n)
        assert (a['pos_weight'], b['pos_weight']) == (1.0, 0.0), n
        assert {k for k in a if a[k] != b.get(k)} | (b.keys() - a.keys()) == {'pos_weight', 'output_dir'}, n
    assert {recipe(n)['task'] for n in TRAINED} == {y['task'] for y in map(recipe, RECIPES)}        # every reward trained
    assert {n.split('_')[0] for n in TRAINED} == {'llada', 'dream'} and {recipe(n)['pos_weight'] for n in TRAINED} == {0.0, 1.0}

@pytest.mark.parametrize('name', ['llada_gsm8k.yaml', 'dream_sudoku_token_only.yaml'])
def test_recipe_on_standin(tmp_path, name):
    "mapg's stand-ins: trained where the real code is absent; beside it (which the trained subset runs), checked statically"
    model = tiny_checkpoint(kind_of(name), 'standin', **SIZE)
    if has_upstream(kind_of(name)): check_statically(name, model, tmp_path)
    else: check_recipe(name, model, tmp_path)

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
