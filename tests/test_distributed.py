"""The engines users launch, on two CPU processes (gloo): DDP and DeepSpeed ZeRO-2 through `accelerate launch` with the
shipped accelerate configs (the 8-GPU ones shrunk on the command line). On the same replayed rollouts both take one optimizer
step per trainer step at the same learning rates, with the same gradient norms and updates; each resumes bitwise."""
import json, os, sys
from pathlib import Path
import pytest, torch
sys.path.insert(0, str(Path(__file__).resolve().parent))
from safetensors.torch import load_file

pytest.importorskip('deepspeed', reason='DeepSpeed is a dev dependency (pip install -e ".[dev]")')
from mapg.config import parse_cfg
from mapg.train import train
from conftest import free_port, run_child

ROOT = Path(__file__).resolve().parent.parent
ACC = ROOT/'configs'/'accelerate'
LR = 1e-3
TINY = ['--config', str(ROOT/'configs'/'toy_sudoku.yaml'), '--toy_hidden', '32', '--toy_layers', '1', '--toy_heads', '2',
        '--toy_pretrain_steps', '5', '--group_size', '4', '--grad_accum', '2', '--inner_updates', '2', '--n_segments', '4',
        '--segments_per_update', '3', '--learning_rate', str(LR), '--warmup_ratio', '0.5', '--max_steps', '3', '--save_steps', '1',
        '--eval_size', '0', '--no_report', '--no_progress']
SHRINK_8GPU = ['--num_processes', '2', '--mixed_precision', 'no']     # 2 CPU processes, fp32
SHRINK = {'8gpu_ddp.yaml': ['--num_processes', '2'], '8gpu_zero2.yaml': SHRINK_8GPU,
          'cpu.yaml': [], 'cpu_zero2.yaml': []}

@pytest.fixture(scope='module')
def rec(tmp_path_factory):
    "A one-process run that records its rollouts (replayed by every engine below) and builds the toy cache"
    d = tmp_path_factory.mktemp('dist')
    train(*parse_cfg([*TINY, '--per_device_batch', '8', '--toy_cache', str(d/'cache'), '--output_dir', str(d/'rec'), '--save_rollouts']))
    return d

def launch(d:Path, config:str, out:str, *extra, port:int):
    cmd = [sys.executable, '-m', 'accelerate.commands.launch', '--config_file', str(ACC/config), *SHRINK[config],
           '--main_process_port', str(port), str(ROOT/'scripts'/'train.py'), *TINY, '--per_device_batch', '4',
           '--toy_cache', str(d/'cache'), '--replay_rollouts', str(d/'rec'/'rollouts'), '--output_dir', str(d/out), *extra]
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'TORCH_EXTENSIONS_DIR': str(d/'torch_extensions')}
    p = run_child(cmd, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return p

def rows(d:Path): return [json.loads(l) for l in (d/'metrics.jsonl').read_text().splitlines()]
def weights(ck:Path): return load_file(ck/'model'/'model.safetensors')
def strip(r:dict): return {k: v for k, v in r.items() if not k.endswith('_s')}

@pytest.fixture(scope='module')
def runs(rec):
    "DDP and ZeRO-2 over 3 steps (8-GPU configs, shrunk), each resumed from step 1 (inside a cycle) with the CPU configs"
    d = rec
    p = launch(d, '8gpu_zero2.yaml', 'zero2', port=free_port())
    launch(d, '8gpu_ddp.yaml', 'ddp', port=free_port())
    launch(d, 'cpu.yaml', 'ddp_resumed', '--resume_from_checkpoint', str(d/'ddp'/'checkpoint-1'), port=free_port())
    launch(d, 'cpu_zero2.yaml', 'zero2_resumed', '--resume_from_checkpoint', str(d/'zero2'/'checkpoint-1'), port=free_port())
    return d, p

def test_deepspeed_engaged(runs):
    d, p = runs
    ck = d/'zero2'/'checkpoint-3'
    shards = sorted(f.name for f in (ck/'pytorch_model').glob('*optim_states.pt'))
    assert shards == ['zero_pp_rank_0_mp_rank_00_optim_states.pt', 'zero_pp_rank_1_mp_rank_00_optim_states.pt']   # every rank's shard
    assert not (d/'ddp'/'checkpoint-3'/'pytorch_model').exists()
    assert (d/'ddp'/'checkpoint-3'/'optimizer.bin').exists() and (d/'ddp'/'checkpoint-3'/'rank1.pt').exists()
    # on CPU processes DeepSpeed's collectives are gloo's: it compiled no op (its shared-memory one takes a C++ build)
    assert not list((d/'torch_extensions').glob('*/*')), list((d/'torch_extensions').glob('*/*'))

@pytest.mark.parametrize('engine', ['ddp', 'zero2'])
def test_one_optimizer_step_per_trainer_step(runs, engine):
    rs = rows(runs[0]/engine)
    assert [r['optimizer_steps'] for r in rs] == [1, 2, 3]
    assert [r['lr'] for r in rs] == pytest.approx([LR / 2, LR, LR])        # warmup of 2 steps, stepped once per step, any process count
    assert all(r['skipped'] == 0 for r in rs)

def test_ddp_and_zero2_agree(runs):
    d = runs[0]
    a, b = rows(d/'ddp'), rows(d/'zero2')
    for x, y in zip(a, b):
        assert x['lr'] == y['lr']
        for k in ('reward', 'loss', 'ratio_token', 'ratio_pos', 'grad_norm'): assert x[k] == pytest.approx(y[k], rel=1e-4, abs=1e-6), k
    wa, wb = weights(d/'ddp'/'checkpoint-3'), weights(d/'zero2'/'checkpoint-3')
    w0 = weights(d/'ddp'/'checkpoint-1')
    assert wa.keys() == wb.keys()
    moved = 0
    for n in wa:
        # attention key biases shift every score of a query equally: their gradient is zero up to rounding, which Adam scales to +-lr
        if n.endswith('attention.self.key.bias'): continue
        torch.testing.assert_close(wa[n], wb[n], rtol=1e-4, atol=1e-5, msg=n)
        moved += int(not torch.equal(wa[n], w0[n]))
    assert moved > len(wa) // 2                                             # the comparison is of weights that trained

@pytest.mark.parametrize('engine', ['ddp', 'zero2'])
def test_resume_is_bitwise(runs, engine):
    d = runs[0]
    full, res = d/engine, d/f'{engine}_resumed'
    assert [strip(r) for r in rows(full)][1:] == [strip(r) for r in rows(res)]
    wa, wb = weights(full/'checkpoint-3'), weights(res/'checkpoint-3')
    for n in wa: assert torch.equal(wa[n], wb[n]), n

def test_readme_8gpu_command_shrunk(tmp_path):
    "The README's 8-GPU command, as written, on 2 CPU processes: the LLaDA GSM8K recipe on a tiny real-code LLaDA (LoRA, dropout, checkpointing)"
    from upstream import tiny_checkpoint
    from test_recipes import SHRINK, SIZE
    model = tiny_checkpoint('llada', 'real', **SIZE)
    readme = (ROOT/'README.md').read_text()
    assert 'accelerate launch --config_file configs/accelerate/8gpu_zero2.yaml scripts/train.py --config configs/llada_gsm8k.yaml' in readme
    cmd = [sys.executable, '-m', 'accelerate.commands.launch', '--config_file', 'configs/accelerate/8gpu_zero2.yaml',
           *SHRINK_8GPU, '--main_process_port', str(free_port()), 'scripts/train.py', '--config', 'configs/llada_gsm8k.yaml',
           '--model', str(model), *SHRINK, '--per_device_batch', '1', '--max_steps', '2', '--output_dir', str(tmp_path/'run')]
    p = run_child(cmd, env={**os.environ, 'OMP_NUM_THREADS': '1'}, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    rs = rows(tmp_path/'run')
    assert [r['optimizer_steps'] for r in rs] == [1, 2] and not any(r['skipped'] for r in rs)
    ck = tmp_path/'run'/'checkpoint-2'
    assert len(list((ck/'pytorch_model').glob('zero_pp_rank_*_optim_states.pt'))) == 2
    assert (ck/'adapter'/'adapter_config.json').exists()
    assert json.loads((ck/'config.json').read_text())['grad_ckpt'] is True

ONE_GPU = ('accelerate launch --config_file configs/accelerate/1gpu.yaml scripts/train.py --config configs/llada_gsm8k.yaml '
           '--per_device_batch 6 --grad_accum 8 --micro_batch 36')

def test_readme_1gpu_command_shrunk(tmp_path):
    "The README's one-GPU command, as written (one process: 8 rollout batches of one group of 6 per step), lengths shrunk, on tiny real-code LLaDA"
    from upstream import tiny_checkpoint
    from test_recipes import SIZE
    model = tiny_checkpoint('llada', 'real', **SIZE)
    assert ONE_GPU in ' '.join((ROOT/'README.md').read_text().replace('\\\n', ' ').split())
    words = ONE_GPU.split()
    cmd = [sys.executable, '-m', 'accelerate.commands.launch', *words[2:4], *words[4:], '--model', str(model), '--load_in_4bit', 'false',
           '--max_prompt_len', '8', '--gen_length', '12', '--block_length', '12', '--steps', '12', '--n_segments', '12',
           '--eval_size', '0', '--reward_workers', '1', '--no_report', '--no_progress', '--max_steps', '1', '--output_dir', str(tmp_path/'run')]
    p = run_child(cmd, env={**os.environ, 'OMP_NUM_THREADS': '1'}, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert 'were not passed' not in p.stderr                          # the config sets what accelerate asks for
    rs = rows(tmp_path/'run')
    assert [r['optimizer_steps'] for r in rs] == [1] and not any(r['skipped'] for r in rs)
    assert rs[0]['fwd_per_seq'] == 12 + 12                           # T, then K = 12 pairs per sequence, micro-batched by 3 sequences
    saved = json.loads((tmp_path/'run'/'config.json').read_text())
    assert (saved['per_device_batch'], saved['grad_accum'], saved['micro_batch']) == (6, 8, 36)
