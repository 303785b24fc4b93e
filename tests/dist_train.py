"Run under `torch.distributed.run --nproc_per_node 2` by tests/test_train.py: one rollout batch's rewards and advantages, then two training steps"
import os, sys, torch
from pathlib import Path
from accelerate import Accelerator
from mapg.config import parse_cfg
from mapg.train import train
from mapg.checkpoints import load_policy
from mapg.scoring import train_records, next_prompts
from mapg.stages import rollout_stage

out, cache = Path(os.environ['MAPG_TEST_OUT']), os.environ['MAPG_TEST_CACHE']
root = Path(__file__).resolve().parent.parent
args = ['--config', str(root/'configs'/'toy_sudoku.yaml'), '--toy_hidden', '32', '--toy_layers', '1', '--toy_heads', '2',
        '--toy_pretrain_steps', '5', '--per_device_batch', '6', '--group_size', '4', '--eval_size', '0', '--no_report',
        '--inner_updates', '2', '--segments_per_update', '3', '--n_segments', '4', '--toy_cache', cache,
        '--max_steps', '2', '--save_steps', '0', '--save_rollouts', '--output_dir', str(out/'two')]
run, roll, upd = parse_cfg(args)
acc = Accelerator(cpu=True)
assert acc.num_processes == 2, acc.num_processes
rank = acc.process_index
with acc.main_process_first(): m = load_policy(run, roll, acc.device)
recs = [r for r in next_prompts(train_records(run, m.tokenizer), 3, dict(epoch=0, cursor=0), run.seed) for _ in range(4)]
from mapg.core import make_gen
b, _ = rollout_stage(m, recs, roll, upd, 'sudoku', make_gen(rank), rank, 2, acc.gather)
torch.save(b.rewards, out/f'rew_rank{rank}.pt'); torch.save(b.adv, out/f'adv_rank{rank}.pt')
s = train(run, roll, upd)
torch.save({n: p.detach().cpu() for n, p in s['model'].model.named_parameters() if p.requires_grad}, out/f'params_rank{rank}.pt')
