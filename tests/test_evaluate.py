"End-to-end checks of `mapg.evaluate` and `scripts/eval.py` on the toy model (CPU, offline)."
import json, os, shutil, sys
from pathlib import Path
import pytest, torch
import mapg.evaluate as ev
from mapg.eval_args import EvalArgs, eval_checkpoints
from mapg.evaluate import evaluate, read_items
from mapg.paper import PUBLISHED
from mapg.eval_results import Results, markdown_tables, write_results
from mapg.eval_protocol import PAPER_TASKS, PREFILL
from conftest import free_port, run_child

ROOT = Path(__file__).resolve().parents[1]
TASKS = ['gsm8k', 'math', 'humaneval', 'mbpp', 'sudoku', 'countdown']
TOY = dict(model='toy', lengths=[32], limit=2, batch_size=1, max_prompt_len=480, reward_workers=2, progress=False)
CLI = ['--model', 'toy', '--lengths', '32', '--limit', '2', '--batch_size', '1', '--max_prompt_len', '480',
       '--reward_workers', '2', '--no_progress', '--no_plot']

def _env():
    return dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))

@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "The toy model evaluated on the first 2 items of every shipped evaluation set"
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp('eval')
    res = evaluate(EvalArgs(tasks=TASKS, output_dir=str(out), **TOY))
    return out, res

def test_every_dataset_end_to_end(run):
    out, res = run
    cells = res['rows'][0]['cells']
    assert sorted(cells) == sorted(f"{t}_L32_b32" for t in TASKS)
    for name, c in cells.items():
        assert c['n'] == 2 and c['errors'] == 0 and 0 <= c['accuracy'] <= 100, (name, c)
        items = read_items((out/'items'/'base').glob(f"{name}.rank*.jsonl"))
        assert sorted(items) == ['0', '1']
        for it in items.values():
            assert {'prompt', 'completion', 'answer', 'reward', 'metrics', 'id', 'steps', 'protocol'} <= set(it)
            assert it['steps'] == 16 and it['protocol'] == 'paper'
            if c['task'] in PAPER_TASKS:       # the paper's prompt, the whole canvas, both readings of it
                assert it['prompt'].endswith(PREFILL) and {'raw', 'read'} <= set(it) and isinstance(it['raw'], str)
                assert set(it['read']) == {'paper', 'd1'}
            else: assert 'total' in it['reward']   # code: mapg's prompts and tests under both protocols
    assert 'solved' in cells['sudoku_L32_b32'] and 'd1' in cells['gsm8k_L32_b32'] and 'math_verify' in cells['math_L32_b32']
    assert all('differs' in cells[f"{t}_L32_b32"] for t in PAPER_TASKS)
    s = cells['sudoku_L32_b32']
    assert s['accuracy'] == round(100 * s['right_total'] / s['blanks_total'], 2)   # pooled over puzzles

def test_files_written_and_parsable(run):
    out, res = run
    back = json.loads((out/'results.json').read_text())
    assert back['rows'] == json.loads(json.dumps(res['rows']))
    assert back['settings']['score'] == 'max_logprob' and back['settings']['remasking'] == 'greedy'
    md = (out/'results.md').read_text()
    for title in ('Table 1 (main_results)', 'Table 3 (planning_results)', 'Sudoku: cell accuracy', 'How the answers were read'):
        assert title in md
    # every markdown table row has as many cells as its header
    for block in md.split('\n\n'):
        rows = [l for l in block.splitlines() if l.startswith('|')]
        if rows: assert len({l.count('|') for l in rows}) == 1, block
    line = next(l for l in md.splitlines() if l.startswith('| LLaDA-8B-Instruct |') and '69.5' in l)
    assert line.split('|')[2].strip() == '-'                      # our GSM8K 32 column: not in the paper
    ours = next(l for l in md.splitlines() if l.startswith('| mapg, paper protocol: base |'))
    assert ours.split('|')[2].strip() == f"{res['rows'][0]['cells']['gsm8k_L32_b32']['accuracy']:.1f}"
    assert (out/'run.json').exists()

def test_chart(run, tmp_path):
    _, res = run
    write_results(res, tmp_path, plot=True)
    html = (tmp_path/'results.html').read_text()
    assert 'plotly' in html.lower() and 'mapg, paper protocol: base' in html

def test_resume_skips_finished_items(run, tmp_path, monkeypatch):
    out, res = run
    shutil.copytree(out, tmp_path/'r', dirs_exist_ok=True)
    f = tmp_path/'r'/'items'/'base'/'countdown_L32_b32.rank0.jsonl'
    lines = f.read_text().splitlines()
    before = read_items([f])
    gone = json.loads(lines[-1])['key']
    f.write_text('\n'.join(lines[:-1]) + '\n' + lines[-1][:25])    # last item lost, half a line left by the interruption
    calls = []
    real = ev.generate
    monkeypatch.setattr(ev, 'generate', lambda m, ids, *a, **k: calls.append(ids.shape[0]) or real(m, ids, *a, **k))
    res2 = evaluate(EvalArgs(tasks=TASKS, output_dir=str(tmp_path/'r'), **TOY))
    assert calls == [1]                                          # one batch (of 1 prompt) generated again, nothing else
    after = read_items([f])
    assert after[gone]['completion'] == before[gone]['completion']
    assert res2['rows'] == res['rows']
    calls.clear()
    evaluate(EvalArgs(tasks=TASKS, output_dir=str(tmp_path/'r'), **TOY))
    assert calls == []

def test_run_settings_checked(run, tmp_path):
    out, _ = run
    shutil.copytree(out, tmp_path/'r')
    with pytest.raises(ValueError, match=r"other \['score'\]"):
        evaluate(EvalArgs(tasks=['gsm8k'], output_dir=str(tmp_path/'r'), **dict(TOY, limit=1), score='max_logit'))

def test_run_saved_before_protocols_is_mapg(run, tmp_path):
    "A run.json without `protocol` was written by the training-prompt evaluation: the paper's protocol may not reuse its items"
    out, _ = run
    shutil.copytree(out, tmp_path/'r')
    cfg = json.loads((tmp_path/'r'/'run.json').read_text()); cfg.pop('protocol')
    (tmp_path/'r'/'run.json').write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"other \['protocol'\]: \['mapg'\] \(now \['paper'\]\)"):
        evaluate(EvalArgs(tasks=['gsm8k'], output_dir=str(tmp_path/'r'), **dict(TOY, limit=1)))

def test_two_processes_same_as_one(run, tmp_path):
    out, res = run
    tasks = ['gsm8k', 'sudoku']
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_port', str(free_port()),
           str(ROOT/'scripts'/'eval.py'), *CLI, '--tasks', *tasks, '--output_dir', str(tmp_path/'two')]
    p = run_child(cmd, env=_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    files = sorted(x.name for x in (tmp_path/'two'/'items'/'base').iterdir())
    assert any('rank1' in x for x in files) and any('rank0' in x for x in files), files   # both processes worked
    got = json.loads((tmp_path/'two'/'results.json').read_text())['rows'][0]['cells']
    for t in tasks:
        name = f"{t}_L32_b32"
        assert got[name] == res['rows'][0]['cells'][name]
        one = read_items((out/'items'/'base').glob(f"{name}.rank*.jsonl"))
        two = read_items((tmp_path/'two'/'items'/'base').glob(f"{name}.rank*.jsonl"))
        assert {k: v['completion'] for k, v in one.items()} == {k: v['completion'] for k, v in two.items()}

def test_checkpoint_directory_final_and_best(tmp_path):
    "A run directory with a full-weights checkpoint and a LoRA adapter: one row each, then final and best"
    from mapg.core import save_toy
    from mapg.models import load_model, add_lora
    save_toy(tmp_path/'run'/'checkpoint-10'/'model', seed=1)
    m = add_lora(load_model(kind='toy', device='cpu'), r=4, lora_alpha=8)
    torch.nn.init.normal_(next(p for n, p in m.model.named_parameters() if 'lora_B' in n), std=1.)
    m.model.save_pretrained(tmp_path/'run'/'checkpoint-20'/'adapter')
    for n in (10, 20):
        (tmp_path/'run'/f'checkpoint-{n}'/'config.json').write_text('{"task": "sudoku"}')   # the trainer's own config
        (tmp_path/'run'/f'checkpoint-{n}'/'trainer_state.json').write_text('{"step": %d}' % n)
    save_toy(tmp_path/'run'/'checkpoint-30'/'model', seed=2)              # being written: no trainer_state.json, skipped
    res = evaluate(EvalArgs(checkpoint=str(tmp_path/'run'), tasks=['sudoku'], output_dir=str(tmp_path/'out'), **TOY))
    labels = [r['label'] for r in res['rows']]
    assert labels == ['step-10', 'step-20', 'final (step-20)', 'best (chosen on the test set, per cell)']
    c = {r['kind']: r['cells']['sudoku_L32_b32'] for r in res['rows'][2:]}
    assert c['final']['accuracy'] == res['rows'][1]['cells']['sudoku_L32_b32']['accuracy']
    assert c['best']['accuracy'] == max(r['cells']['sudoku_L32_b32']['accuracy'] for r in res['rows'][:2])
    assert c['best']['step'] in (10, 20)
    a = [read_items((tmp_path/'out'/'items'/l).glob('*.jsonl')) for l in ('step-10', 'step-20')]
    assert a[0]['0']['completion'] != a[1]['0']['completion']     # the two checkpoints really are different models
    md = (tmp_path/'out'/'results.md').read_text()
    assert 'on the test set itself' in md and '| mapg, paper protocol: final (step-20) |' in md

def test_help_documents_every_option():
    p = run_child([sys.executable, str(ROOT/'scripts'/'eval.py'), '--help'], env=_env())
    assert p.returncode == 0, p.stderr
    text = ' '.join(p.stdout.split())
    from dataclasses import fields
    for f in fields(EvalArgs):
        assert f"--{f.name}" in text, f.name
    assert text.count('(default:') >= len(fields(EvalArgs))      # every option has its help line

# A second transcription of the paper's tables, typed column by column (task and length first, then the rows in the
# paper's order), against which `PUBLISHED` (typed row by row) is checked.
_MAIN_ROWS = ['LLaDA-8B-Instruct', 'LLaDA-1.5', 'd1', 'wd1', 'UniGRPO', 'GDPO', 'SPG w/ Mixture', 'StepMerge', 'MAPG (paper)']
_MAIN_COLS = {
    ('gsm8k', 128): [69.5, 70.4, 72.2, 74.6, 74.9, 78.4, 78.5, 78.0, 81.0],
    ('gsm8k', 256): [77.2, 80.5, 80.6, 81.5, 82.5, 82.8, 83.9, 83.3, 85.9],
    ('gsm8k', 512): [79.8, 81.9, 81.3, 83.0, 82.7, 85.0, 84.5, 84.8, 87.1],
    ('math', 128): [28.2, 26.8, 31.4, 31.0, 32.4, 33.2, 33.4, 33.1, 37.4],
    ('math', 256): [32.4, 32.2, 36.0, 37.4, 37.4, 39.6, 40.0, 39.1, 42.2],
    ('math', 512): [34.6, 35.8, 39.4, 39.0, 39.4, 41.4, 41.8, 41.2, 44.2],
    ('humaneval', 128): [27.4, None, 29.3, None, None, 26.2, 31.0, 30.5, 33.2],
    ('humaneval', 256): [35.5, None, 39.0, None, None, 39.6, 40.6, 39.9, 43.1],
    ('humaneval', 512): [37.8, None, 34.8, None, None, 39.0, 41.1, 40.7, 44.0],
    ('mbpp', 128): [36.2, None, 42.0, None, None, 43.6, 44.3, 44.9, 47.1],
    ('mbpp', 256): [41.2, None, 45.5, None, None, 50.6, 50.6, 50.1, 52.8],
    ('mbpp', 512): [40.4, None, 41.6, None, None, 47.1, 50.8, 50.9, 53.4]}
_PLAN_ROWS = ['LLaDA-8B-Instruct', 'LLaDA-1.5', 'd1', 'wd1', 'UniGRPO', 'SPG w/ Mixture', 'MAPG (paper)']
_PLAN_COLS = {
    ('sudoku', 128): [5.7, 7.4, 7.2, 33.1, 59.0, 82.9, 84.5],
    ('sudoku', 256): [27.7, 26.9, 32.5, 32.1, 67.0, 94.0, 94.9],
    ('sudoku', 512): [26.2, 29.0, 29.3, 22.5, 62.9, 93.1, 96.2],
    ('countdown', 128): [18.8, 21.9, 30.9, 48.8, 44.5, 68.8, 69.3],
    ('countdown', 256): [16.8, 21.1, 30.9, 52.3, 43.0, 70.7, 71.4],
    ('countdown', 512): [16.8, 21.5, 34.4, 50.8, 57.0, 70.3, 71.0]}
_DREAM_ROWS = ['Dream-7B', 'd1', 'wd1', 'ESPO', 'SPG w/ Mixture', 'MAPG (paper)']
_DREAM_COLS = {
    ('gsm8k', 128): [75.8, 77.0, 76.3, 79.6, 80.1, 82.5],
    ('gsm8k', 256): [81.3, 81.9, 82.4, 82.3, 82.6, 84.1],
    ('gsm8k', 512): [80.7, 81.7, 82.9, 82.0, 83.5, 86.4],
    ('math', 128): [38.2, 39.4, 39.5, 40.3, 41.1, 43.8],
    ('math', 256): [45.7, 46.9, 47.4, 47.4, 48.5, 50.3],
    ('math', 512): [48.0, 48.9, 50.5, 50.3, 50.7, 52.9],
    ('sudoku', 128): [9.3, 64.4, 29.5, 71.7, 72.1, 73.4],
    ('sudoku', 256): [2.1, 69.7, 39.2, 72.3, 72.4, 74.1],
    ('sudoku', 512): [14.0, 51.1, 30.3, 71.3, 71.9, 74.3]}
_BLOCK_ROWS = ['LLaDA-8B-Instruct', 'LLaDA-1.5', 'd1', 'wd1', 'UniGRPO', 'SPG w/ Mixture', 'StepMerge', 'MAPG (paper)']
_BLOCK_COLS = {   # (task, block) at L = 256; 256 = the full sequence
    ('gsm8k', 32): [77.2, 80.5, 80.6, 81.5, 82.5, 83.9, 83.3, 85.9],
    ('math', 32): [32.4, 32.2, 36.0, 37.4, 37.4, 40.0, 39.1, 42.2],
    ('gsm8k', 64): [78.6, 81.0, 80.9, 82.5, 82.3, 84.1, 83.7, 86.3],
    ('math', 64): [33.2, 35.4, 37.6, 37.4, 37.4, 41.1, 40.2, 43.6],
    ('gsm8k', 256): [23.9, 41.4, 57.5, 56.7, 50.0, 58.8, 58.7, 63.1],
    ('math', 256): [17.8, 20.4, 22.6, 25.0, 24.2, 24.0, 23.8, 27.5]}

@pytest.mark.parametrize('key,names,cols,col_key', [
    ('main', _MAIN_ROWS, _MAIN_COLS, lambda t, L: (t, L, 32)),
    ('planning', _PLAN_ROWS, _PLAN_COLS, lambda t, L: (t, L, 32)),
    ('dream', _DREAM_ROWS, _DREAM_COLS, lambda t, L: (t, L, 32)),
    ('block', _BLOCK_ROWS, _BLOCK_COLS, lambda t, b: (t, 256, b))])
def test_published_rows_match_second_transcription(key, names, cols, col_key):
    t = PUBLISHED[key]
    assert list(t.rows) == names
    assert set(t.columns) == {col_key(*k) for k in cols}
    for k, vals in cols.items():
        assert [t.rows[n][col_key(*k)] for n in names] == vals, (key, k)

def test_published_tables_agree_with_each_other():
    "The block-32 column of the ablation is Table 1 at L = 256 for the rows both hold"
    main, block = PUBLISHED['main'].rows, PUBLISHED['block'].rows
    for n in set(main) & set(block):
        for task in ('gsm8k', 'math'): assert main[n][(task, 256, 32)] == block[n][(task, 256, 32)], (n, task)

def test_code_scoring_gets_the_prompt_helpers():
    "HumanEval/50's tests call `encode_shift`, defined in the prompt: scoring passes the records' `helpers` to the judge"
    from mapg.data import load_data, read_records, data_dir
    rec = next(r for r in load_data('humaneval') if r['id'] == 'HumanEval/50')
    raw = next(h for h in read_records(data_dir()/'humaneval.jsonl.gz') if h['task_id'] == 'HumanEval/50')
    only_the_function = f"```python\ndef decode_shift(s: str):\n{raw['canonical_solution']}```"
    assert 'encode_shift' not in only_the_function and rec['helpers']
    scored = ev._score('humaneval', [only_the_function], [rec], workers=1)
    assert scored[0]['execution'] == 1., scored
    without = ev._score('humaneval', [only_the_function], [dict(rec, helpers=None)], workers=1)
    assert without[0]['execution'] < 1.                           # the tests need the prompt's helper

def test_math_scored_from_threads():
    "MATH rewards run with several workers (the checker works from threads)"
    from mapg.data import load_data
    recs = load_data('math', limit=4)
    comps = [f"<reasoning>x</reasoning>\n<answer>\\boxed{{{r['answer']}}}</answer>" for r in recs]
    one, four = ev._score('math', comps, recs, workers=1), ev._score('math', comps, recs, workers=4)
    assert one == four and all(s['total'] > 0 for s in four), four


def test_mapg_protocol_keeps_the_training_prompts_and_reward(run, tmp_path):
    "protocol='mapg' is the evaluation as it was: the training prompts and the reward's metrics; one protocol per output_dir"
    from mapg.data import load_data
    from mapg.core import toy_tokenizer
    out = tmp_path/'m'
    res = evaluate(EvalArgs(tasks=['gsm8k', 'sudoku'], output_dir=str(out), protocol='mapg', **dict(TOY, limit=1)))
    assert res['protocol'] == 'mapg' and all(r['protocol'] == 'mapg' for r in res['rows'])
    for t in ('gsm8k', 'sudoku'):
        it = read_items((out/'items'/'base').glob(f"{t}_L32_b32.rank*.jsonl"))['0']
        rec = load_data(t, tok=toy_tokenizer(), limit=1)[0]
        assert rec['text'].endswith(it['prompt']) and not it['prompt'].endswith(PREFILL)
        assert 'total' in it['reward'] and 'read' not in it and it['protocol'] == 'mapg'
    sud = res['rows'][0]['cells']['sudoku_L32_b32']
    assert 'right_total' not in sud and abs(sud['accuracy'] - 100 * sud['reward']['cells']) < .01   # the mean per puzzle
    md = (out/'results.md').read_text()
    assert '| mapg, mapg protocol: base |' in md and 'paper protocol' not in md and "mapg's: the training prompts" in md
    with pytest.raises(ValueError, match=r"other \['protocol'\]"):
        evaluate(EvalArgs(tasks=['gsm8k'], output_dir=str(out), **dict(TOY, limit=1)))

def test_run_directory_with_only_incomplete_checkpoints(tmp_path):
    from mapg.core import save_toy
    save_toy(tmp_path/'run'/'checkpoint-5'/'model', seed=1)
    with pytest.raises(FileNotFoundError, match='no complete checkpoint'):
        eval_checkpoints(tmp_path/'run')

def test_rows_follow_the_model_kind_not_the_name(run):
    "A directory named 'dream-...' holding LLaDA still gets LLaDA's rows; the kind comes from the results (config.json)"
    _, res = run
    md = markdown_tables(Results(res, base='dream-finetune', model_kind='llada'))
    assert '## Table 1 (main_results)' in md and '## Table 4 (dream)' not in md
    md = markdown_tables(Results(res, model_kind='dream'))
    assert '## Table 4 (dream)' in md and 'SPG results are obtained by running their publicly available code.' in md
    assert '## Other cells' in md and 'HumanEval 32 b32' in md     # no Dream table holds code: placed, not dropped
