"""Rewards and loaders on the real data (the project's `data/` copies): every gold item scores full marks, perturbed
ones do not, and no reward raises on any string."""
import gzip, itertools, json, math, os, subprocess, sys, types
from fractions import Fraction
from pathlib import Path
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st
from mapg.rewards import (gsm8k_reward, math_reward, code_reward, sudoku_reward, countdown_reward, REWARDS, batch_reward,
                          score_batch, task_metrics, eval_arith, parse_number, unsafe_names)
from mapg.rewards_math import math_equal, have_math_verify
from mapg.data import load_data, columns, make_sudoku, sudoku_grids, sudoku_count, read_records, sudoku_train
from mapg.core import make_gen

DATA = Path(__file__).resolve().parent.parent/'data'
FMT = "<reasoning>\nFirst I work it out.\nThen I check it.\n</reasoning>\n<answer>\n{}\n</answer>"

def _jsonl(name): return [json.loads(l) for l in (DATA/name).open()]

# ---------------------------------------------------------------- GSM8K
GSM = _jsonl('gsm8k_test.jsonl')

def test_gsm8k_gold_gets_maximum():
    golds = [r['answer'].split('####')[-1].strip() for r in GSM]
    res = [gsm8k_reward(FMT.format(g), g) for g in golds]
    full = sum(r['total'] == 4.0 for r in res)
    commas, negs = [g for g in golds if ',' in g], [g for g in golds if g.startswith('-')]
    print(f"GSM8K test: {full}/{len(golds)} gold answers score 4.0 ({len(commas)} with commas, {len(negs)} negative)")
    assert len(golds) == 1319 and full == 1319 and len(commas) == 14 and len(negs) == 2
    # the raw solution field works as the gold too, and the answer may be written differently
    assert all(gsm8k_reward(FMT.format(g.replace(',', '')), r['answer'])['total'] == 4.0 for g, r in zip(golds, GSM))
    for g in golds:
        v = parse_number(g)
        for w in (f"${int(v):,}", f"{v}.0", f"{v} dollars"): assert gsm8k_reward(FMT.format(w), g)['correct'] == 2.0, (w, g)

def test_gsm8k_perturbed_answers_are_wrong():
    golds = [parse_number(r['answer'].split('####')[-1]) for r in GSM]
    for v in golds:
        for w in (v + 1, v - 1, v * 10, -v if v else 1):
            r = gsm8k_reward(FMT.format(f"{w}"), f"{v}")
            assert r['correct'] == 0.0 and r['total'] == 2.0, (v, w, r)
        assert gsm8k_reward(FMT.format(f"{v} or {v + 1}"), f"{v}")['correct'] == 0.0

def test_gsm8k_peer_bugs_fixed():
    multi = "<reasoning>\nline one\nline two\n</reasoning>\n<answer>\n1,000\n</answer>"
    assert gsm8k_reward(multi, '1000') == dict(total=4.0, xml=0.5, soft_format=0.5, strict_format=0.5, integer=0.5, correct=2.0)
    assert gsm8k_reward(FMT.format('-12'), '-12')['integer'] == 0.5     # str.isdigit would say no

# ---------------------------------------------------------------- MATH
M500 = _jsonl('math500_test.jsonl')

def test_math500_gold_gets_maximum():
    res = [math_reward(FMT.format(f"The answer is $\\boxed{{{r['answer']}}}$."), r['answer']) for r in M500]
    full = sum(r['total'] == 3.0 for r in res)
    print(f"MATH500: {full}/{len(M500)} gold answers score 3.0")
    assert len(M500) == 500 and full == 500
    assert all(math_reward(FMT.format(f"\\boxed{{{r['answer']}}}"), r['solution'])['total'] == 3.0 for r in M500)  # gold from the solution

def test_math500_perturbed_integers_are_wrong():
    ints = [r['answer'] for r in M500 if parse_number(r['answer']) is not None and parse_number(r['answer']).denominator == 1]
    for a in ints:
        r = math_reward(FMT.format(f"\\boxed{{{parse_number(a) + 1}}}"), a)
        assert r == dict(total=1.0, format=1.0, correct=0.0), (a, r)
    print(f"MATH500: {len(ints)} integer answers, each +1 scored wrong")
    assert len(ints) > 250

EQUIV = [  # (pred, gold, equivalent, decided without math-verify)
    (r'\frac{1}{2}', r'\dfrac{1}{2}', True, True), (r'\frac12', '0.5', True, True), (r'\tfrac{1}{2}', '1/2', True, True),
    ('14/3', r'\frac{14}{3}', True, True), (r'(3,\frac{\pi}{2})', r'\left( 3, \frac{\pi}{2} \right)', True, True),
    (r'\left(3,\dfrac{\pi}{2}\right)', r'\left( 3, \frac{\pi}{2} \right)', True, True), (r'\sqrt2', r'\sqrt{2}', True, True),
    ('90', r'90^\circ', True, True), ('5', 'x=5', True, True), ('Evelyn', r'\text{Evelyn}', True, True),
    ('6-5i', '6 - 5i', True, True), ('2,220', '2220', True, True), ('0.50', r'\frac{1}{2}', True, True),
    ('10', r'10\%', True, True), (r'\$18', '18', True, True), ('  42 ', '42', True, True), ('1.5', r'\frac{3}{2}', True, True),
    (r'\frac{1}{2}\sqrt{3}', r'\frac{\sqrt{3}}{2}', True, False), ('-q + p', 'p - q', True, False),
    ('-2,1', '1,-2', True, False), ('(x+1)^2', 'x^2+2x+1', True, False), (r'\pi/2', r'\frac{\pi}{2}', True, False),
    (r'2\sqrt{2}', r'\sqrt{8}', True, False),
    (r'\frac{1}{3}', r'\frac{1}{2}', False, True), ('0.05', '0.5', False, True), ('6+5i', '6-5i', False, True),
    ('222', '2220', False, True), ('2', r'\sqrt{2}', False, True), (r'\text{Emily}', r'\text{Evelyn}', False, True),
    (r'(\frac{\pi}{2}, 3)', r'(3, \frac{\pi}{2})', False, True), ('5x', 'x=5', False, True), ('[1,2]', '[1,2)', False, True),
    (r'-\infty', r'\infty', False, True), ('2', '1, 2, 3', False, True), (r'3\sqrt13', r'3\sqrt{13}', False, True),
    ('x^2+2x', 'x^2+2x+1', False, True), (r'\frac{2}{4}x', 'x', False, True)]

@pytest.mark.parametrize('pred,gold,eq,fallback', EQUIV)
def test_math_equivalence_table(pred, gold, eq, fallback):
    if have_math_verify(): assert math_equal(pred, gold) == eq
    assert math_equal(pred, gold, use_math_verify=False) == (eq and fallback)   # the fallback never accepts a wrong answer
    assert math_reward(f"<answer>\\boxed{{{pred}}}</answer>", gold)['correct'] == (2.0 * eq if have_math_verify() else 2.0 * (eq and fallback))

def test_math_format_backslash_b():
    assert math_reward("<answer>\boxed{2}</answer>", '2')['format'] == 0.75   # a backspace, not \boxed
    assert math_reward(r"<answer>\boxed{2}</answer>", '2')['format'] == 1.0

def test_math_verify_version():
    if not have_math_verify(): pytest.skip("math-verify not installed")
    from importlib.metadata import version
    print('math-verify', version('math-verify'))

# ---------------------------------------------------------------- code
def _fence(code): return f"Here is my solution.\n```python\n{code}\n```\n"

def test_humaneval_canonical_and_broken():
    recs = load_data('humaneval')
    he = [json.loads(l) for l in gzip.open(DATA/'humaneval.jsonl.gz')]
    gold = score_batch('code', [_fence(h['prompt'] + h['canonical_solution']) for h in he], workers=2, **columns(recs))
    broken = score_batch('code', [_fence(h['prompt'] + "    return None\n") for h in he], workers=2, **columns(recs))
    n_gold, n_broken = sum(r['execution'] == 1.0 for r in gold), sum(r['execution'] < 1.0 for r in broken)
    print(f"HumanEval: {n_gold}/164 canonical solutions pass, {n_broken}/164 `return None` variants fail")
    assert n_gold == 164 and n_broken == 164
    assert all(r['format'] == 1.0 for r in gold + broken)

def test_mbpp_canonical():
    recs = load_data('mbpp', 'test')
    mb = {r['task_id']: r for r in json.load(open(DATA/'mbpp_sanitized.json'))}
    comps = [_fence(mb[r['id']]['code']) for r in recs]
    # blocked=() scores task 100 too; the generous timeout keeps the slowest reference solution (task 123, ~3 s of CPU)
    # from failing on a loaded machine: this checks correctness, not speed
    free = score_batch(lambda c, tests, test_imports, entry_point: code_reward(c, tests, entry_point=entry_point,
                                                                               test_imports=test_imports, blocked=(), timeout=60),
                       comps, workers=2, **columns(recs))
    blocked = [r['id'] for r in recs if unsafe_names(mb[r['id']]['code'])]
    print(f"MBPP test: {sum(x['execution'] == 1 for x in free)}/{len(recs)} canonical solutions pass; "
          f"blocked by the unsafe-module list: {blocked}")
    assert len(recs) == 257 and all(x['execution'] == 1.0 for x in free)
    assert blocked == [100]                      # its canonical solution imports sys (sys.maxsize)
    r100 = next(r for r in recs if r['id'] == 100)
    assert code_reward(_fence(mb[100]['code']), r100['tests'], test_imports=r100['test_imports']) == dict(total=1.0, format=1.0, execution=0.0)

def test_kodcode_schema_sample():
    recs = load_data('kodcode', 'train', source=DATA/'samples'/'kodcode_light_rl_sample.jsonl')
    rows = read_records(DATA/'samples'/'kodcode_light_rl_sample.jsonl')
    sols = score_batch('code', [_fence(r['solution']) for r in rows], **columns(recs))
    assert [s['total'] for s in sols] == [2.0] * 4
    assert [len(r['tests']) for r in recs] == [4, 2, 3, 3]      # test functions (class methods, parametrized)
    bad = score_batch('code', [_fence(r['solution'].replace('return ', 'return None and ')) for r in rows], **columns(recs))
    assert all(0 <= s['execution'] < 1 for s in bad)

def test_code_reward_format_parts():
    tests = ["assert f(2) == 4"]
    assert code_reward(_fence("def f(x): return x * 2"), tests) == dict(total=2.0, format=1.0, execution=1.0)
    assert code_reward(_fence("def f(x) return x * 2"), tests) == dict(total=0.5, format=0.5, execution=0.0)
    assert code_reward("def f(x): return x * 2", tests) == dict(total=0.0, format=0.0, execution=0.0)
    assert code_reward("```python\ndef f(x): return x * 2", tests)['total'] == 0.0      # unclosed fence

# ---------------------------------------------------------------- Sudoku
@pytest.mark.parametrize('split', ['test', 'test_d1'])
def test_sudoku_gold(split):
    recs = load_data('sudoku', split)
    res = score_batch('sudoku', [FMT.format(r['solution']) for r in recs], **columns(recs))
    print(f"Sudoku {split}: {sum(r['total'] == 1.0 for r in res)}/{len(recs)} gold solutions score 1.0 and are solved")
    assert all(r == dict(total=1.0, cells=1.0, solved=1.0) for r in res)
    multi = sum(sudoku_count(r['puzzle'], limit=2) > 1 for r in recs)
    assert multi == (0 if split == 'test' else 124)

MALFORMED = ['', 'no answer at all', '<answer>', '<answer></answer>', '<answer>x</answer>', '<answer>' + '9' * 500,
             '<answer>abcd</answer>', '<answer>١٢٣٤</answer>', '</answer><answer', '<answer>\x00\x00</answer>', None, 123]

def test_sudoku_malformed():
    pz, sol = '3014002020004130', '3214142323414132'
    for m in MALFORMED:
        r = sudoku_reward(m, pz, sol)
        assert r['total'] == 0.0 and r['solved'] == 0.0, (m, r)

# ---------------------------------------------------------------- Countdown
def _solve(nums, target):
    "An expression using each number once that equals target (brute force), or None"
    ops = '+-*/'
    for a, b, c in itertools.permutations(nums):
        for o1, o2 in itertools.product(ops, ops):
            for e in (f"({a} {o1} {b}) {o2} {c}", f"{a} {o1} ({b} {o2} {c})"):
                r = eval_arith(e)
                if r and r[0] is not None and r[0] == target: return e
    return None

def test_countdown_gold():
    recs = load_data('countdown')
    sols = [_solve(r['numbers'], r['target']) for r in recs]
    solvable = [(r, s) for r, s in zip(recs, sols) if s]
    res = [countdown_reward(FMT.format(s), r['numbers'], r['target']) for r, s in solvable]
    print(f"Countdown test: {len(solvable)}/{len(recs)} solvable; {sum(x['total'] == 1.0 for x in res)} gold expressions score 1.0")
    assert len(recs) == 256 and len(solvable) == 256 and all(x['total'] == 1.0 for x in res)
    for r, s in solvable[:50]:   # a wrong number, a missing number, a wrong value
        assert countdown_reward(FMT.format(s + ' + 0'), r['numbers'], r['target'])['total'] == 0.1
        assert countdown_reward(FMT.format(f"{r['numbers'][0]} + {r['numbers'][1]}"), r['numbers'], r['target'])['total'] == 0.1

def test_countdown_malformed():
    for m in MALFORMED + ['<answer>__import__("os").system("x")</answer>', '<answer>2 ** 99999999</answer>',
                          '<answer>' + '(' * 500 + '1' + ')' * 500 + '</answer>', '<answer>30 + 100 - 93 = 37</answer>']:
        assert countdown_reward(m, [30, 100, 93], 37)['total'] == 0.0, m

# ---------------------------------------------------------------- no reward raises, on any string
FRAGMENTS = ['<reasoning>', '</reasoning>', '<answer>', '</answer>', '\n', ' ', '\\boxed{', '\\boxed ', '\\fbox{', '{', '}',
             '$', '```python\n', '```\n', '```', '1,000', '-3', '18', '.', '\\frac{1}{2}', '\\frac', '\\sqrt', '^', '=',
             '3214142323414132', '(', ')', '+', '/', '0', 'def f(x):\n    return x\n', 'import os\n', '\x00', 'é', '١']
texts = st.one_of(st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=40).map(''.join))

def _check(r, hi):
    assert isinstance(r, dict) and 'total' in r
    assert all(type(v) is float and math.isfinite(v) for v in r.values()), r
    assert -1e-9 <= r['total'] <= hi + 1e-9, r

@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_text_rewards_never_raise(s):
    _check(gsm8k_reward(s, '18'), 4.0)
    _check(gsm8k_reward(s, '-1,000'), 4.0)
    _check(math_reward(s, r'\frac{1}{2}'), 3.0)
    _check(sudoku_reward(s, '3014002020004130', '3214142323414132'), 1.0)
    _check(countdown_reward(s, [30, 100, 93], 37), 1.0)

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(texts, st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=20).map(lambda xs: f"```python\n{''.join(xs)}\n```")))
def test_code_reward_never_raises(s):
    _check(code_reward(s, ["assert f(1) == 1"], timeout=3), 2.0)

# ---------------------------------------------------------------- batch adapter, registry, metrics
def test_trl_adapter():
    recs = load_data('gsm8k', limit=4)
    comps = [[{'role': 'assistant', 'content': FMT.format(r['answer'])}] for r in recs]
    f = batch_reward('gsm8k')
    assert f(prompts=[r['prompt'] for r in recs], completions=comps, completion_ids=None, **columns(recs)) == [4.0] * 4
    assert batch_reward('gsm8k', 'correct')(completions=comps, answer=['0'] * 4) == [0.0] * 4
    assert set(REWARDS) == {'gsm8k', 'math', 'code', 'sudoku', 'countdown', 'order'}
    assert task_metrics('math', dict(total=3.0, format=1.0, correct=2.0)) == dict(accuracy=1.0)

# ---------------------------------------------------------------- loaders
def test_shipped_counts():
    got = {(n, s): len(load_data(n, s)) for n, s in [('gsm8k', 'train'), ('gsm8k', 'test'), ('math', 'test'), ('humaneval', 'test'),
           ('mbpp', 'test'), ('mbpp', 'prompt'), ('mbpp', 'validation'), ('mbpp', 'train'), ('sudoku', 'test'), ('sudoku', 'test_d1'),
           ('countdown', 'test')]}
    assert list(got.values()) == [7473, 1319, 500, 164, 257, 7, 43, 120, 256, 500, 256]

def test_records_carry_reward_columns():
    import inspect
    for name in ['gsm8k', 'math', 'humaneval', 'mbpp', 'sudoku', 'countdown']:
        r = load_data(name, limit=1)[0]
        params = list(inspect.signature(REWARDS[r['task']]).parameters)[1:]
        need = [p for p in params if inspect.signature(REWARDS[r['task']]).parameters[p].default is inspect.Parameter.empty]
        assert all(k in r for k in need), (name, need)
        assert r['prompt'][0]['role'] == 'user' and r['prompt'][0]['content']

def test_local_files_in_hub_schemas():
    smp = DATA/'samples'
    mt = load_data('math', 'train', source=smp/'math_train_sample.jsonl')
    assert [r['answer'] for r in mt] == [r'\frac{3}{4}', '3, -3', r'\left( 3, \frac{\pi}{2} \right)']
    sols = [row['solution'] for row in read_records(smp/'math_train_sample.jsonl')]
    assert [math_reward(FMT.format(s), r['answer'])['total'] for s, r in zip(sols, mt)] == [3.0] * 3
    cd = load_data('countdown', 'train', source=smp/'countdown_train_sample.jsonl')
    assert [(r['numbers'], r['target']) for r in cd] == [([30, 100, 93], 37), ([4, 6, 1], 24), ([12, 2, 1], 6)]

def test_hub_names_go_through_datasets(monkeypatch):
    calls = []
    rows = {'KodCode/KodCode-Light-RL-10K': read_records(DATA/'samples'/'kodcode_light_rl_sample.jsonl'),
            'Jiayi-Pan/Countdown-Tasks-3to4': read_records(DATA/'samples'/'countdown_train_sample.jsonl'),
            'ankner/math-500': read_records(DATA/'samples'/'math_train_sample.jsonl'),
            'someone/gsm8k-copy': _jsonl('gsm8k_test.jsonl')[:5]}
    fake = types.ModuleType('datasets')
    def load_dataset(name, config=None, split=None): calls.append((name, config, split)); return rows[name]
    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, 'datasets', fake)
    assert len(load_data('kodcode', 'train')) == 4
    assert len(load_data('countdown', 'train')) == 3
    assert len(load_data('math', 'train')) == 3
    assert [r['answer'] for r in load_data('gsm8k', 'test', source='someone/gsm8k-copy')] == ['18', '3', '70000', '540', '20']
    assert calls == [('KodCode/KodCode-Light-RL-10K', None, 'train'), ('Jiayi-Pan/Countdown-Tasks-3to4', None, 'train'),
                     ('ankner/math-500', None, 'train'), ('someone/gsm8k-copy', None, 'test')]
    monkeypatch.setitem(sys.modules, 'datasets', None)   # not installed
    with pytest.raises(ImportError, match='needs `datasets`'): load_data('kodcode', 'train')

def test_shipped_and_local_files_go_through_datasets():
    "Every dataset is read with `datasets` (shipped files and local paths with `load_dataset('json'/'csv')`), not at import"
    code = ("import sys; import mapg.data as d; assert 'datasets' not in sys.modules, 'imported with mapg.data';"
            "import datasets; calls = []; real = datasets.load_dataset;"
            "datasets.load_dataset = lambda *a, **k: calls.append(a[0]) or real(*a, **k);"
            "d.load_data('gsm8k'); d.load_data('mbpp'); d.load_data('sudoku');"
            f"d.load_data('kodcode', 'train', source={str(DATA/'samples'/'kodcode_light_rl_sample.jsonl')!r});"
            "assert calls == ['json', 'json', 'csv', 'json'], calls")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-500:]

def test_chat_template_prompt():
    from mapg.core import toy_tokenizer
    r = load_data('sudoku', tok=toy_tokenizer(), limit=1)[0]
    assert r['text'].startswith('<|user|>') and r['text'].endswith('Answer:\n<|eot|><|assistant|>')
    assert r['text'].count('Question:') == 4                    # three worked examples, then the puzzle

def test_sudoku_generator_keeps_test_solutions_out():
    test_sols = {r['solution'] for r in load_data('sudoku', 'test')}
    d1_sols = {r['solution'] for r in load_data('sudoku', 'test_d1')}
    train = make_sudoku(500, make_gen(0))
    assert not {r['solution'] for r in train} & test_sols
    assert len({r['solution'] for r in train}) > 150              # draws from the 200 grids left
    assert all(sudoku_count(r['puzzle'], limit=2) == 1 for r in train)
    strict = make_sudoku(50, make_gen(0), exclude=test_sols | d1_sols)
    assert not {r['solution'] for r in strict} & (test_sols | d1_sols)
    assert len(set(sudoku_grids()) - test_sols - d1_sols) == 43
    assert make_sudoku(20, make_gen(3)) == make_sudoku(20, make_gen(3)) != make_sudoku(20, make_gen(4))
    recs = sudoku_train(8, make_gen(0))
    assert all(sudoku_reward(FMT.format(r['solution']), r['puzzle'], r['solution'])['total'] == 1.0 for r in recs)
