"""Rewards never raise and never stall: extraction time grows linearly with adversarial inputs (the ratio of times at
10× the length, not wall time), huge numbers are no numbers, math equivalence gives the same answer from any thread
and under any CPU load (its bound is CPU time) and stops at its wall-clock safety net without echoing its inputs, and
a batch survives any sample."""
import logging, math, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
import pytest
from mapg import rewards_math
from mapg.rewards import (answer_tag, last_boxed, code_blocks, python_block, parse_number, single_number, soft_format,
                          strict_format, xml_tags_placed, answer_spans, math_format, unsafe_names, gsm8k_reward, math_reward,
                          sudoku_reward, countdown_reward, code_reward, score_batch, MAX_CHARS)
from mapg.rewards_math import strip_math, math_number, math_equal, have_math_verify

def _best(f, x, reps=3):
    "Best-of-`reps` CPU seconds of `f(x)` (CPU time: on a shared machine, wall time also counts the waits for a core)"
    ts = []
    for _ in range(reps):
        t = time.process_time(); f(x); ts.append(time.process_time() - t)
    return min(ts)

# (name, function, builder of an adversarial input of about n characters): each is the pattern that made a lazy or
# backtracking regex quadratic, or something close to it
CASES = [
    ('fence: openers, none closed', code_blocks, lambda n: '```py\n' * (n // 6)),
    ('fence: opener lines without newline', code_blocks, lambda n: '```' + 'x' * n),
    ('fence: many closed blocks', python_block, lambda n: '```bash\nls\n```\n' * (n // 15)),
    ('soft: closes never followed by an answer tag', soft_format, lambda n: '<reasoning>' + '</reasoning> x' * (n // 14)),
    ('soft: answer tags never closed', soft_format, lambda n: '<reasoning>' + '</reasoning><answer>' * (n // 20)),
    ('soft: whitespace runs', soft_format, lambda n: '<reasoning></reasoning>' + ' ' * n),
    ('strict: tags everywhere', strict_format, lambda n: '<reasoning>\n' + '\n</reasoning>\n<answer>\n' * (n // 24) + '\n</answer>'),
    ('xml tags', xml_tags_placed, lambda n: '<answer>\n' * (n // 9)),
    ('answer pairs never closed', answer_spans, lambda n: '<answer>' * (n // 8)),
    ('math format', math_format, lambda n: '<answer>\\boxed{' * (n // 15)),
    ('answer tag', answer_tag, lambda n: '<answer>' * (n // 8)),
    ('boxed, unclosed braces', last_boxed, lambda n: '\\boxed{' + '{' * n),
    ('number: whitespace before a dollar', parse_number, lambda n: '$' + ' ' * n + 'x'),
    ('number: digits and commas', single_number, lambda n: '1,' * (n // 2) + '1'),
    ('number: many numbers', single_number, lambda n: '1 ' * (n // 2)),
    ('strip_math', strip_math, lambda n: '\\frac{' * (n // 6)),
    ('math_number', math_number, lambda n: '1' * n + '/'),
    ('unsafe names in strings', unsafe_names, lambda n: 'x = "' + 'import ' * (n // 7) + '"'),
]

@pytest.mark.parametrize('name,f,make', CASES, ids=[c[0] for c in CASES])
def test_linear_time(name, f, make):
    "Time at 300k characters / time at 30k: linear is 10, quadratic 100; allow up to 30 (caches, noise)"
    small, big = make(30_000), make(300_000)
    f(small)                                            # warm-up
    t_small, t_big = max(_best(f, small), 2e-4), _best(f, big)
    ratio = t_big / t_small
    print(f"{name}: {1e3 * t_small:.2f} ms -> {1e3 * t_big:.2f} ms, ratio {ratio:.1f}")
    assert ratio < 30 or t_big < 0.05, f"{name}: {ratio:.1f}x slower at 10x the length ({t_big:.2f} s)"

def test_rewards_on_huge_texts_are_quick():
    "A whole reward on a text far over its cap returns zeros at once; just under the cap it is still quick"
    for n in (MAX_CHARS['gsm8k'] - 10, 3_000_000):
        t = time.perf_counter()
        assert gsm8k_reward('<answer>' * (n // 8), '18')['correct'] == 0.
        assert math_reward('\\boxed{' * (n // 7), '1')['correct'] == 0.
        assert sudoku_reward('<answer>' + '1' * n, '3014002020004130', '3214142323414132')['solved'] == 0.
        assert countdown_reward('<answer>' + '(' * n, [1, 2, 3], 6)['total'] == 0.
        assert code_reward('```python\n' * (n // 10), ['assert f() == 1'], timeout=3)['execution'] == 0.
        assert time.perf_counter() - t < 30                # a fraction of a second idle; a quadratic scan takes minutes

def test_5000_digit_numbers():
    big = '9' * 5000
    for txt in (big, f'{big}.5', f'-{big}', '1' + ',000' * 1700, f'x = {big}', f'$ {big} $'):
        assert parse_number(txt) is None and single_number(txt) is None
    fmt = "<reasoning>\nr\n</reasoning>\n<answer>\n{}\n</answer>"
    assert gsm8k_reward(fmt.format(big), '18') == dict(total=1.5, xml=0.5, soft_format=0.5, strict_format=0.5, integer=0., correct=0.)
    assert math_reward(f"\\boxed{{{big}}}", '1')['correct'] == 0.
    assert math_reward(f"\\boxed{{{big}}}", big)['correct'] == 2.0          # the same string is still the same answer
    assert math_equal(big + '/1', '1') is False
    assert countdown_reward(f"<answer>{big} + 1</answer>", [1, 2, 3], 6)['total'] == 0.

# ------------------------------------------------------------------ math equivalence off the main thread
SYMBOLIC = [(r'\frac{1}{2}\sqrt{3}', r'\frac{\sqrt{3}}{2}', True), ('-q + p', 'p - q', True), (r'2\sqrt{2}', r'\sqrt{8}', True),
            ('(x+1)^2', 'x^2+2x+1', True), ('x^2+2x', 'x^2+2x+1', False), (r'(2, 3)', r'(3, 2)', False)]

@pytest.mark.skipif(not have_math_verify(), reason="math-verify not installed")
def test_math_same_score_on_any_thread():
    main = [math_equal(p, g) for p, g, _ in SYMBOLIC]
    assert main == [e for _, _, e in SYMBOLIC]
    with ThreadPoolExecutor(3) as ex: threaded = list(ex.map(lambda pg: math_equal(pg[0], pg[1]), SYMBOLIC))
    assert threaded == main
    comps = [f"<answer>\\boxed{{{p}}}</answer>" for p, _, _ in SYMBOLIC]
    golds = [g for _, g, _ in SYMBOLIC]
    assert score_batch('math', comps, workers=3, answer=golds) == score_batch('math', comps, workers=1, answer=golds)

LOADED = SYMBOLIC + [(r'\frac{1}{2}', '0.5', True), (r'\{1, 2\}', r'\{2, 1\}', True), (r'[0, 1)', r'(0, 1]', False),
                     (r'\sin^2 x + \cos^2 x', '1', True), (r'\frac{x^2-1}{x-1}', 'x+1', True), ('2x', 'x^2', False)]

@pytest.mark.skipif(not have_math_verify(), reason="math-verify not installed")
def test_math_same_scores_under_cpu_load():
    "Two processes spinning on the CPUs change no answer: the bound is the helper's CPU time, not the wall clock"
    idle = [math_equal(p, g, timeout=1) for p, g, _ in LOADED]
    assert idle == [e for _, _, e in LOADED]
    busy = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(2)]
    try:
        rewards_math._WORKER._stop()       # a fresh helper: its import and warm-up happen under the load too
        loaded = [math_equal(p, g, timeout=1) for p, g, _ in LOADED]
    finally:
        for b in busy: b.kill(); b.wait()
    assert loaded == idle

def _hang():
    "A helper that announces itself and then never answers (stands in for a math-verify call that does not end)"
    import os, time
    os.write(1, b'R')
    while True: time.sleep(1)

def test_math_timeout_from_a_thread_and_quiet_logs(monkeypatch, caplog):
    monkeypatch.setattr(rewards_math, '_mv_serve', _hang)
    w = rewards_math._MathWorker(ceiling=0.5)
    secret = r'\frac{739215386}{3}'
    out = {}
    def ask(): out['r'] = w.equal(secret, '1', 0.2)
    t = time.monotonic()
    with caplog.at_level(logging.WARNING, logger='mapg.rewards_math'):
        th = threading.Thread(target=ask); th.start(); th.join(120)
    assert out == {'r': False} and time.monotonic() - t < 30          # a 0.5 s ceiling: the hung helper never answers
    assert 'no answer within' in caplog.text and '739215386' not in caplog.text    # lengths only, never the answer
    assert w.p is None                                                            # the hung helper was killed

def test_math_helper_logs_nothing_of_its_inputs(capfd):
    if not have_math_verify(): pytest.skip("math-verify not installed")
    math_equal(r'\frac{' * 300 + '739215386', r'\sqrt{x}')
    out, err = capfd.readouterr()
    assert '739215386' not in out + err

# ------------------------------------------------------------------ the batch survives
def test_batch_survives_bad_samples(caplog):
    fmt = "<reasoning>\nr\n</reasoning>\n<answer>\n{}\n</answer>"
    comps = [fmt.format('18'), fmt.format('18'), 'x' * (MAX_CHARS['gsm8k'] + 1), None, 12345, [{'content': fmt.format('7')}]]
    with caplog.at_level(logging.WARNING, logger='mapg.rewards'):
        rs = score_batch('gsm8k', comps, workers=2, answer=['18', 'eighteen', '18', '18', '18', '7'])
    assert [r['total'] for r in rs] == [4.0, 0., 0., 0., 0., 4.0]
    assert 'not a number' in rs[1]['reason'] and 'longer than' in rs[2]['reason']
    assert set(rs[1]) == {'total', 'xml', 'soft_format', 'strict_format', 'integer', 'correct', 'reason'}
    assert 'reason' not in rs[0] and 'reason' not in rs[3]
    assert 'x' * 50 not in caplog.text                                            # the completion is never echoed
    with pytest.raises(ValueError, match="missing column"): score_batch('gsm8k', comps)   # caller errors still raise
