"""GSM8K answers whose sign stands apart from the digits or is a dash, and answers that are comma lists or decimal
commas: the reward (`parse_number`, `single_number`, `gsm8k_reward`) and the paper protocol's table reading
(`read_gsm8k`, fixes `signs` and `comma_lists`) read −18 or no number, never 18; d1's reading (`fixes=()`) stays what
d1 reads. Every expected value is written by hand; d1's are those its reader gives on these strings."""
from fractions import Fraction as F
from mapg.rewards import single_number, parse_number, gsm8k_reward
from mapg.eval_protocol import read_gsm8k, FIXES

FMT = "<reasoning>\nThe loss is 18 dollars a day.\n</reasoning>\n<answer>\n{}\n</answer>"
# −18 written with a sign apart from its digits (spaces, a currency symbol, markup) or as a dash of another kind
APART = ['-$18', '- 18', '-\\boxed{18}', '–18', '—18', '-\\$18', '-**18**', '-*18*', '-_18_', '\\(- 18\\)',
         '-\\(18\\)', '-€18', '-£18', '-¥18', '-₹18', '- $18', '-\\$ 18', '– 18', '— 18', '−$18', '−18',
         '-\\boxed {18}']
# −18 with a `-` next to the digits: −18 already, and to d1's reader too
GLUED = ['$-18', '$-18$', '\\(-18\\)', '-18', '**-18**', '\\boxed{-18}']
IN_TEXT = ['The loss is -$18.', 'It is –18 degrees', 'x = -\\$18 a day', 'She is down −€18', 'So it is -\\boxed{18}.',
           'Answer: - 18']
# a dash with spaces on both sides after a word separates: no sign
SEPARATED = ['Final answer - 18', 'It is – 18 degrees', 'The total — 18']
LISTS = ['18,20', '18,5', '18,20,22', '1,000,5', '1,0000', '18,5 kg', 'x = 18,5', 'They cost 18,20 each']
THOUSANDS = {'1,000': 1000, '1,234,567': 1234567, '-1,000': -1000, '$1,000,000': 1000000, '1,000.5': F(2001, 2),
             '-$1,234': -1234, '– 1,000': -1000}

def _misread(f, cases:dict)->dict:
    "The cases `f` reads otherwise than expected: {input: (read, expected)}"
    return {s: (got, want) for s, want in cases.items() if (got := f(s)) != want}

def test_parse_number_keeps_the_sign():
    cases = {**{s: F(-18) for s in APART + GLUED}, '$18': 18, '\\boxed{18}': 18, '**18**': 18, '€18': 18,
             '\\(18\\)': 18, '--18': None, '-−18': None, '- -18': None, '-': None, '$': None}
    assert not (bad := _misread(parse_number, cases)), bad

def test_single_number_keeps_the_sign():
    cases = {**{s: F(-18) for s in APART + GLUED + IN_TEXT}, **{s: 18 for s in SEPARATED}, '18 dollars': 18, 'well—18': 18,
             # a dash after a number is a minus or a range: two numbers
             '20 - 2': None, '18–20': None, '20−2': None, 'x = 20 - 18': None}
    assert not (bad := _misread(single_number, cases)), bad

def test_comma_lists_and_decimal_commas_are_no_number():
    # a comma and a space, or a word, part two numbers: none either; thousands separators keep working
    cases = {**{s: None for s in LISTS + ['18, 20', '18 and 20', '18 , 20']}, **THOUSANDS, 'It costs $1,234.': 1234}
    assert not (bad := _misread(single_number, cases)), bad
    whole = {**dict.fromkeys(LISTS), **THOUSANDS}
    assert not (bad := _misread(parse_number, whole)), bad

def test_gsm8k_reward_credits_only_the_right_sign():
    bad = {}
    for s in APART + GLUED + IN_TEXT:
        got = [gsm8k_reward(FMT.format(s), g)['correct'] for g in ('18', '-18', '#### -18')]
        if got != [0., 2., 2.]: bad[s] = got
    assert not bad, bad
    whole = {s: gsm8k_reward(FMT.format(s), '-18')['integer'] for s in APART + GLUED}
    assert set(whole.values()) == {0.5}, whole                         # each of them is one integer
    assert gsm8k_reward(FMT.format('18'), '18') == dict(total=4., xml=.5, soft_format=.5, strict_format=.5, integer=.5,
                                                        correct=2.)

def test_gsm8k_reward_scores_no_list():
    bad = {s: g for s in LISTS for g in ('18', '20', '5', '18.5', '1000', '0')
           if gsm8k_reward(FMT.format(s), g)['correct'] != 0.}
    assert not bad, bad
    assert gsm8k_reward(FMT.format('18,5'), '18')['integer'] == 0.
    assert [gsm8k_reward(FMT.format(s), '1000')['correct'] for s in ('1,000', '$1,000', '1000')] == [2., 2., 2.]

def _reads(text:str, fixes=None)->tuple:
    "(answer, correct against 18, correct against −18) of `<answer>text</answer>`"
    kw = {} if fixes is None else dict(fixes=fixes)
    r18, r_18 = (read_gsm8k(f"<answer>{text}</answer>", g, **kw) for g in ('18', '-18'))
    assert r18['answer'] == r_18['answer']
    return r18['answer'], r18['correct'], r_18['correct']

# d1's reading (`fixes=()`) of the forms, as its reader gives it: a sign apart from the digits, or any dash but `-`,
# is lost (18, right against a gold 18), and a negative gold is never right
D1_SIGN = {**{s: (18., True, False) for s in APART}, '$-18': (-18., False, False), '$-18$': (-18., False, False),
           '\\(-18\\)': (-18., False, False), '-18': (-18., False, False), '**-18**': (-18., False, False),
           '\\boxed{-18}': (-18., False, False)}

def test_read_gsm8k_keeps_the_sign_d1_does_not():
    boxed = {f"\\boxed{{{s}}}": (18., True, False) for s in APART if 'boxed' not in s}
    boxed.update({'\\boxed{-18}': (-18., False, False), '\\boxed{\\boxed{- 18}}': (18., True, False)})
    table = {s: _reads(s) for s in [*D1_SIGN, *boxed]}
    assert not (bad := {s: r for s, r in table.items() if r != (-18., False, True)}), bad
    d1 = {**D1_SIGN, **boxed}
    assert not (bad := {s: (_reads(s, ()), want) for s, want in d1.items() if _reads(s, ()) != want}), bad

def test_read_gsm8k_reads_no_number_from_a_comma_list():
    # d1: a box's first number, an answer tag's last; the table reads no number from a list or a decimal comma
    d1 = {'18,20': 20., '18,5': 5., '18,20,22': 22., '1,000,5': 5., '\\boxed{18,20}': 18., '\\boxed{18,5}': 18.,
          '\\boxed{18,20,22}': 18., '\\boxed{1,000,5}': 1.}
    assert {s: _reads(s, ())[0] for s in d1} == d1
    assert {s: _reads(s) for s in d1} == {s: (None, False, False) for s in d1}
    assert _reads('\\boxed{18,5}', ())[1] is True                       # d1 credits the decimal 18,5 against 18
    # numbers parted by a space or a word keep d1's rule both ways: a box's first, an answer tag's last
    kept = {'18, 20': 20., '18 and 20': 20., '\\boxed{18, 20}': 18., '\\boxed{18 and 20}': 18., '1,234,567': 1234567.}
    assert {s: _reads(s)[0] for s in kept} == kept
    assert {s: _reads(s, ())[0] for s in kept} == {**kept, '1,234,567': 567.}

def test_the_fixes_are_named_and_each_works_alone():
    assert {'signs', 'comma_lists'} <= set(FIXES) and all(FIXES[n].tasks == 'GSM8K' for n in ('signs', 'comma_lists'))
    for name, text in [('signs', '-$18'), ('comma_lists', '\\boxed{18,5}')]:
        other = next(n for n in ('signs', 'comma_lists') if n != name)
        alone, table, d1, without = (_reads(text, fx)[:2] for fx in ((name,), None, (), (other,)))
        assert alone == table != d1 == without, (name, alone, table, d1, without)
    # the gold keeps its own reading: `negative_gold` alone decides whether −18 can be right
    assert _reads('-$18', ('signs',)) == (-18., False, False) and _reads('-$18', ('signs', 'negative_gold'))[2] is True

def test_glue_signs():
    import time
    from mapg.rewards import glue_signs
    assert [glue_signs(s) for s in ['-$18', '- 18', '-\\boxed{18}', '–18', '−$18', '-**18**', '\\(- 18\\)']] == \
           ['$-18', ' -18', '\\boxed{-18}', '-18', '$-18', '**-18**', '\\( -18\\)']
    for s in ['20 - 2', '18–20', 'well—18', 'x-18', '-\n18', '- x', '-18']: assert glue_signs(s) == s, s
    def cpu(s):
        t = time.process_time(); glue_signs(s); single_number(s); parse_number(s); return time.process_time() - t
    for make in (lambda n: '-' + ' ' * n + 'x', lambda n: '- $' * (n // 3), lambda n: '1 -' * (n // 3),
                 lambda n: '-' + '\\boxed{' * (n // 7), lambda n: '-1,' * (n // 3)):
        small, big = min(cpu(make(30_000)) for _ in range(3)), min(cpu(make(300_000)) for _ in range(3))
        assert big / max(small, 2e-4) < 30 or big < 0.05, (make(20), small, big)
