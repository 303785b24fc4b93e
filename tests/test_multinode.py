"""Multi-node, rehearsed on one machine: two `accelerate launch` calls, one per machine (`--num_machines 2
--machine_rank 0|1`, one CPU process each, gloo), meet at 127.0.0.1 on a free port with the shipped ZeRO-2 config shrunk
on the command line. On the same replayed rollouts the two machines train bitwise as one machine's two processes do,
resume bitwise, and shard the evaluation's items as they do. DeepSpeed's default multi-node launcher, pdsh, finds no
hostfile here and runs each machine alone, a world of one, without an error: `--deepspeed_multinode_launcher standard`
(torchrun) joins them."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest, torch
sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest.importorskip('deepspeed', reason='DeepSpeed is a dev dependency (pip install -e ".[dev]")')
from mapg.config import parse_cfg
from mapg.train import train
from conftest import HANG, free_port, run_child
from test_distributed import TINY, SHRINK_8GPU, rows, strip, weights

ROOT = Path(__file__).resolve().parent.parent
ZERO2 = ROOT/'configs'/'accelerate'/'8gpu_zero2.yaml'
# accelerate's --num_processes (2, in SHRINK_8GPU) counts the processes of every machine
TWO_MACHINES = ['--num_machines', '2', '--main_process_ip', '127.0.0.1', '--deepspeed_multinode_launcher', 'standard']
N_ITEMS, CELL = 6, 'sudoku_L16_b16'

def _env(d:Path)->dict:
    # LOGLEVEL: torchrun's agent logs its rendezvous (this machine's group rank, its processes' global ranks)
    return {**os.environ, 'OMP_NUM_THREADS': '1', 'TORCH_EXTENSIONS_DIR': str(d/'torch_extensions'), 'LOGLEVEL': 'INFO'}

def accelerate(port:int, rank:int|None=None)->list:
    "`accelerate launch` of the ZeRO-2 config on 2 CPU processes: one machine's (rank None), or machine `rank` of 2"
    where = [] if rank is None else [*TWO_MACHINES, '--machine_rank', str(rank)]
    return [sys.executable, '-m', 'accelerate.commands.launch', '--config_file', str(ZERO2), *SHRINK_8GPU, *where,
            '--main_process_port', str(port)]

def train_args(d:Path, out:str, *extra)->list:
    return [str(ROOT/'scripts'/'train.py'), *TINY, '--per_device_batch', '4', '--toy_cache', str(d/'cache'),
            '--replay_rollouts', str(d/'rec'/'rollouts'), '--output_dir', str(d/out), *extra]

def eval_args(d:Path, out:str)->list:
    "The two-machine run's final checkpoint (and the toy it started from), on the first N_ITEMS held-out puzzles"
    return [str(ROOT/'scripts'/'eval.py'), '--model', str(d/'two'/'checkpoint-3'), '--limit', str(N_ITEMS),
            '--output_dir', str(d/out), '--no_plot', '--no_progress']

def one_machine(d:Path, script:list):
    p = run_child([*accelerate(free_port()), *script], env=_env(d), cwd=d)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]

def _wait(procs:list, timeout:float)->list:
    "Exit codes once both are done or one has failed (the other would wait for it); None for one still running"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs) and not any(p.poll() for p in procs):
        time.sleep(0.2)
    codes = [p.poll() for p in procs]
    for p in procs:
        if p.poll() is None: p.terminate()          # torchrun's agent stops its workers (in sessions of their own)
    for p in procs:
        try: p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return codes

def two_machines(d:Path, name:str, script:list, timeout:float=HANG)->list:
    "Machines 0 and 1 of a launch of `script`, started together on this one: their outputs (a failure shows both)"
    port, logs, procs = free_port(), [d/f'{name}.machine{r}.log' for r in (0, 1)], []
    for r, log in enumerate(logs):
        with open(log, 'w') as f:
            procs.append(subprocess.Popen([*accelerate(port, r), *script], stdout=f, stderr=subprocess.STDOUT,
                                          env=_env(d), cwd=d, start_new_session=True))
    codes = _wait(procs, timeout)
    outs = [log.read_text() for log in logs]
    if codes != [0, 0]:
        pytest.fail(f"`{name}` on two machines: exit codes {codes} (None: still running after {timeout:.0f} s)\n"
                    + ''.join(f"machine {r}, last lines:\n{o[-4000:]}\n" for r, o in enumerate(outs)), pytrace=False)
    return outs

def assert_one_world(outs:list):
    "Each machine's launcher started one process, of one world of two: machine r's is global rank r"
    for r, out in enumerate(outs):
        for s in (f'group_rank={r}', 'group_world_size=2', 'local_ranks=[0]', f'global_ranks=[{r}]',
                  'global_world_sizes=[2]'):
            assert s in out, f"machine {r}: no {s!r} in its launcher's log:\n{out[-3000:]}"

@pytest.fixture(scope='module')
def rec(tmp_path_factory):
    "A one-process run that records its rollouts (replayed by every launch below) and builds the toy cache"
    d = tmp_path_factory.mktemp('multinode')
    train(*parse_cfg([*TINY, '--per_device_batch', '8', '--toy_cache', str(d/'cache'), '--output_dir', str(d/'rec'),
                      '--save_rollouts']))
    return d

@pytest.fixture(scope='module')
def runs(rec):
    "ZeRO-2 over 3 steps on one machine and on two, and the two-machine run resumed from step 1 into a new folder"
    d = rec
    one_machine(d, train_args(d, 'one'))
    outs = two_machines(d, 'two', train_args(d, 'two'))
    resume = ['--resume_from_checkpoint', str(d/'two'/'checkpoint-1')]
    two_machines(d, 'two_resumed', train_args(d, 'two_resumed', *resume))
    return d, outs

@pytest.fixture(scope='module')
def evals(runs):
    "`scripts/eval.py` on the two-machine run's final checkpoint, on one machine's two processes and on two machines"
    d = runs[0]
    one_machine(d, eval_args(d, 'eval_one'))
    return d, two_machines(d, 'eval_two', eval_args(d, 'eval_two'))

def test_two_machines_are_one_world(runs):
    d, outs = runs
    assert_one_world(outs)
    ck = d/'two'/'checkpoint-3'
    shards = sorted(f.name for f in (ck/'pytorch_model').glob('*optim_states.pt'))
    assert shards == ['zero_pp_rank_0_mp_rank_00_optim_states.pt', 'zero_pp_rank_1_mp_rank_00_optim_states.pt']
    assert sorted(f.name for f in ck.glob('rank*.pt')) == ['rank0.pt', 'rank1.pt']

def test_two_machines_train_as_one(runs):
    "The same metrics (timings aside) and, at every checkpoint, the same trainable parameters, to the bit"
    d = runs[0]
    one, two = rows(d/'one'), rows(d/'two')
    assert [r['optimizer_steps'] for r in two] == [1, 2, 3] and not any(r['skipped'] for r in two)
    assert [strip(r) for r in two] == [strip(r) for r in one]
    for step in (1, 2, 3):
        wa, wb = weights(d/'one'/f'checkpoint-{step}'), weights(d/'two'/f'checkpoint-{step}')
        assert wa.keys() == wb.keys()
        for n in wa: assert torch.equal(wa[n], wb[n]), (step, n)
    w1, w3 = weights(d/'two'/'checkpoint-1'), weights(d/'two'/'checkpoint-3')
    assert sum(not torch.equal(w1[n], w3[n]) for n in w1) > len(w1) // 2     # the comparison is of weights that trained

def test_two_machines_resume_bitwise(runs):
    d = runs[0]
    full, res = d/'two', d/'two_resumed'
    assert [strip(r) for r in rows(full)][1:] == [strip(r) for r in rows(res)]
    wa, wb = weights(full/'checkpoint-3'), weights(res/'checkpoint-3')
    for n in wa: assert torch.equal(wa[n], wb[n]), n

def test_eval_shards_over_two_machines(evals):
    "The same results.json; each rank wrote its own share of the items (rank r: items r, r + 2, ...), the same bytes"
    d, outs = evals
    assert_one_world(outs)
    one, two = (json.loads((d/o/'results.json').read_text()) for o in ('eval_one', 'eval_two'))
    for res in (one, two): res['settings'].pop('output_dir')
    assert two == one
    assert [r['label'] for r in two['rows']] == ['base', 'checkpoint-3']
    assert all(r['cells'][CELL]['n'] == N_ITEMS for r in two['rows'])
    for label in ('base', 'checkpoint-3'):
        for r in (0, 1):
            for name in (f'{CELL}.rank{r}.jsonl', f'{CELL}.rank{r}.sums.json'):
                a, b = (d/o/'items'/label/name for o in ('eval_one', 'eval_two'))
                assert b.read_bytes() == a.read_bytes(), name
            items = (d/'eval_two'/'items'/label/f'{CELL}.rank{r}.jsonl').read_text().splitlines()
            assert [json.loads(l)['key'] for l in items] == [str(i) for i in range(r, N_ITEMS, 2)]

def test_the_pages_command_is_the_rehearsed_one():
    "The 8-GPU tutorial's two-machine command: the rehearsal's flags, and a recipe that the 16 processes accept as written"
    import shlex
    from mapg.config import validate
    from test_pages import EIGHT, _sh_block
    cmd = shlex.split(_sh_block(EIGHT, '## Past one machine'))
    assert cmd[:2] == ['accelerate', 'launch']
    flags = dict(zip(cmd[2::2], cmd[3::2]))
    assert flags['--config_file'] == 'configs/accelerate/8gpu_zero2.yaml' and flags['--deepspeed_multinode_launcher'] == 'standard'
    assert (flags['--num_machines'], flags['--num_processes'], flags['--machine_rank']) == ('2', '16', '0')
    script = cmd[cmd.index('scripts/train.py') + 1:]
    run, roll, upd = parse_cfg([a.replace('configs/', str(ROOT/'configs') + '/', 1) for a in script])
    validate(run, roll, upd, 16)
    assert roll.per_device_batch * 16 * upd.grad_accum == 48                # the recipe's completions per optimizer step
    assert ' '.join(cmd) in ' '.join((ROOT/'README.md').read_text().split())      # the README shows the same command
