"""The paper protocol's answer readers (`mapg.eval_protocol.read_*`) on hand-written completions, family by family.

Each family is one way a model writes (or breaks) the format its evaluation prompt asks for, instantiated over many
answers. Its expectations are written by hand, per family, from d1's evaluation rules (`fixes=()`: what d1's
`eval/parse_and_get_acc.py` reads) and from the documented corrections (the default: the table's reading), never
computed by the readers themselves."""
import pytest
from mapg.eval_protocol import (read_gsm8k, read_math, read_countdown, read_sudoku, FIXES, paper_messages,
    paper_records, PREFILL, GSM8K_SYSTEM, MATH_SYSTEM, COUNTDOWN_SYSTEM)
from mapg.eval_results import summarize

EOS = "<|eot_id|><|endoftext|><|endoftext|>"
R = "<reasoning>\nLet me work it out step by step.\n</reasoning>\n"

# ---------------------------------------------------------------- GSM8K
VALS = [0, 3, 7, 18, 42, 64, 100, 250, 999, 5280]
BIG = [(1000, '1,000'), (1234, '1,234'), (43500, '43,500'), (70000, '70,000'), (250000, '250,000'), (1000000, '1,000,000')]

def _g(v): return float(v)

# (family, completion(v), gold(v), d1 (answer, correct), table (answer, correct)); v runs over the family's values
GSM = [
    ('box in answer', lambda v: f"{R}<answer>\n\\boxed{{{v}}}\n</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('box outside the answer tag', lambda v: f"{R}The answer is \\boxed{{{v}}}.", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('answer tag, bare number', lambda v: f"{R}<answer>\n{v}\n</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('answer tag, sentence', lambda v: f"{R}<answer>\nShe pays ${v} in total.\n</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('answer tag, several numbers: the last', lambda v: f"{R}<answer>\n3 bags of 12 cost {v}\n</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('dollar sign in the box', lambda v: f"{R}<answer>\n\\boxed{{\\${v}}}\n</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('units in the box', lambda v: f"{R}<answer>\\boxed{{{v} \\text{{ apples}}}}</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('decimal zeros', lambda v: f"{R}<answer>\\boxed{{{v}.00}}</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('several boxes: d1 the first', lambda v: f"{R}First \\boxed{{{v + 1}}}, then one less: \\boxed{{{v}}}", str,
     lambda v: (_g(v + 1), False), lambda v: (_g(v), True)),
    ('several answer blocks: d1 the first', lambda v: f"{R}<answer>{v + 2}</answer> wait, <answer>{v}</answer>", str,
     lambda v: (_g(v + 2), False), lambda v: (_g(v), True)),
    ('answer cut at L (unclosed)', lambda v: f"{R}<answer>\n{v}", str, lambda v: (None, False), lambda v: (_g(v), True)),
    ('box after the end of sequence', lambda v: f"{R}<answer>\n{v}\n</answer>{EOS}\\boxed{{{v + 5}}}", str,
     lambda v: (_g(v + 5), False), lambda v: (_g(v), True)),
    ('end-of-sequence padding', lambda v: f"{R}<answer>\n\\boxed{{{v}}}\n</answer>{EOS}", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('fbox in the answer tag: d1 reads the tag', lambda v: f"{R}<answer>\\fbox{{{v}}}</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('fbox alone', lambda v: f"{R}So it is \\fbox{{{v}}}.", str, lambda v: (None, False), lambda v: (_g(v), True)),
    ('boxed with a space', lambda v: f"{R}So it is \\boxed {{{v}}}.", str, lambda v: (None, False), lambda v: (_g(v), True)),
    ('wrong answer', lambda v: f"{R}<answer>\\boxed{{{v + 3}}}</answer>", str, lambda v: (_g(v + 3), False), lambda v: (_g(v + 3), False)),
    ('no answer at all', lambda v: f"<reasoning>\nThere are {v} apples and I am not sure.", str, lambda v: (None, False), lambda v: (None, False)),
    ('empty box, then the answer tag', lambda v: f"{R}\\boxed{{}} <answer>{v}</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('placeholder box, then the box', lambda v: f"{R}Format: \\boxed{{...}}. Answer: \\boxed{{{v}}}", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('expression in the box: its first number', lambda v: f"{R}<answer>\\boxed{{1 + {v} - 1 = {v}}}</answer>", str,
     lambda v: (1., False), lambda v: (1., False)),
    ('box over lines: d1 reads the tag', lambda v: f"{R}<answer>\\boxed{{\n{v}\n}}</answer>", str, lambda v: (_g(v), True), lambda v: (_g(v), True)),
    ('answer tag with a box and more text', lambda v: f"{R}<answer>\n\\boxed{{{v}}}\n</answer>\nSo {v + 9} is wrong.", str,
     lambda v: (_g(v), True), lambda v: (_g(v), True)),
]
GSM_BIG = [   # thousands separators (gold written as GSM8K writes it, with commas)
    ('commas in the box: d1 the first group', lambda n, s: f"{R}<answer>\\boxed{{{s}}}</answer>", lambda n, s: s,
     lambda n, s: (float(s.split(',')[0]), False), lambda n, s: (float(n), True)),
    ('commas in the answer tag: d1 the last group', lambda n, s: f"{R}<answer>\n{s}\n</answer>", lambda n, s: s,
     lambda n, s: (float(s.split(',')[-1]), False), lambda n, s: (float(n), True)),
    ('commas in a sentence', lambda n, s: f"{R}<answer>\nThe house costs ${s}.\n</answer>", lambda n, s: s,
     lambda n, s: (float(s.split(',')[-1]), False), lambda n, s: (float(n), True)),
]
NEG = [2, 3, 5, 8, 12, 20, 45, 100, 7]   # negative gold answers
GSM_NEG = [
    ('negative gold, boxed', lambda v: f"{R}<answer>\\boxed{{-{v}}}</answer>", lambda v: f"-{v}", lambda v: (-float(v), False), lambda v: (-float(v), True)),
    ('negative gold, answer tag', lambda v: f"{R}<answer>\nThe temperature is -{v} degrees.\n</answer>", lambda v: f"-{v}",
     lambda v: (-float(v), False), lambda v: (-float(v), True)),
]
GSM_CASES = ([(f"{n}/{v}", c(v), g(v), d(v), t(v)) for n, c, g, d, t in GSM for v in VALS] +
             [(f"{n}/{s}", c(v, s), g(v, s), d(v, s), t(v, s)) for n, c, g, d, t in GSM_BIG for v, s in BIG] +
             [(f"{n}/{v}", c(v), g(v), d(v), t(v)) for n, c, g, d, t in GSM_NEG for v in NEG])

def test_gsm8k_has_200_cases(): assert len(GSM_CASES) >= 200, len(GSM_CASES)

@pytest.mark.parametrize('name,text,gold,d1,table', GSM_CASES, ids=[c[0] for c in GSM_CASES])
def test_gsm8k(name, text, gold, d1, table):
    got_d1, got = read_gsm8k(text, gold, ()), read_gsm8k(text, gold)
    assert (got_d1['answer'], got_d1['correct']) == d1, got_d1
    assert (got['answer'], got['correct']) == table, got

# ---------------------------------------------------------------- MATH500
GOLDS = ['5', '-2', '\\frac{3}{4}', '\\sqrt{2}', '2\\pi', '(1,2)', '\\frac{\\sqrt{3}}{2}', '10', 'x^2+1', '\\infty']
WRONG = {'5': '6', '-2': '2', '\\frac{3}{4}': '\\frac{4}{3}', '\\sqrt{2}': '\\sqrt{3}', '2\\pi': '\\pi', '(1,2)': '(2,1)',
         '\\frac{\\sqrt{3}}{2}': '\\frac{1}{2}', '10': '100', 'x^2+1': 'x^2-1', '\\infty': '0'}

MATH = [  # (family, completion(g), d1 (answer, correct), table (answer, correct)); gold g
    ('box in answer', lambda g: f"{R}<answer>\n\\boxed{{{g}}}\n</answer>", lambda g: (g, True), lambda g: (g, True)),
    ('box outside the answer tag', lambda g: f"{R}So the answer is \\boxed{{{g}}}.", lambda g: (g, True), lambda g: (g, True)),
    ('box in dollars', lambda g: f"{R}The answer is $\\boxed{{{g}}}$.", lambda g: (g, True), lambda g: (g, True)),
    ('box, then more text', lambda g: f"{R}<answer>\\boxed{{{g}}}</answer>\nThat is all.", lambda g: (g, True), lambda g: (g, True)),
    ('two boxes, the last right', lambda g: f"{R}First \\boxed{{{WRONG[g]}}}, no: \\boxed{{{g}}}", lambda g: (g, True), lambda g: (g, True)),
    ('two boxes, the last wrong', lambda g: f"{R}First \\boxed{{{g}}}, no: \\boxed{{{WRONG[g]}}}", lambda g: (WRONG[g], False), lambda g: (WRONG[g], False)),
    ('no box: the whole text is compared', lambda g: f"{R}<answer>\n{g}\n</answer>", lambda g: (f"{R}<answer>\n{g}\n</answer>", False),
     lambda g: (f"{R}<answer>\n{g}\n</answer>", False)),
    ('unclosed box: the answer block', lambda g: f"{R}<answer>{g}</answer> and \\boxed{{{g}", lambda g: (g, True), lambda g: (g, True)),
    ('fbox', lambda g: f"{R}<answer>\\fbox{{{g}}}</answer>", lambda g: (f"\\fbox{{{g}}}", False), lambda g: (g, True)),
    ('boxed with a space', lambda g: f"{R}<answer>\\boxed {{{g}}}</answer>", lambda g: (f"{{{g}}}</answer>", False), lambda g: (g, True)),
    ('box after the end of sequence', lambda g: f"{R}<answer>\\boxed{{{g}}}</answer>{EOS}\\boxed{{{WRONG[g]}}}",
     lambda g: (WRONG[g], False), lambda g: (g, True)),
    ('end-of-sequence padding', lambda g: f"{R}<answer>\\boxed{{{g}}}</answer>{EOS}", lambda g: (g, True), lambda g: (g, True)),
    ('unclosed box, two answer blocks', lambda g: f"{R}<answer>{WRONG[g]}</answer> no, <answer>{g}</answer> so \\boxed{{",
     lambda g: (WRONG[g], False), lambda g: (g, True)),
    ('empty box, then the answer block', lambda g: f"{R}<answer>{g}</answer> \\boxed{{}}", lambda g: (g, True), lambda g: (g, True)),
    ('wrong answer', lambda g: f"{R}<answer>\\boxed{{{WRONG[g]}}}</answer>", lambda g: (WRONG[g], False), lambda g: (WRONG[g], False)),
    ('cut inside the box', lambda g: f"{R}<answer>\\boxed{{{g}", lambda g: (None, False), lambda g: (f"\\boxed{{{g}", False)),
]
# d1's normal form, pair by pair: (prediction, gold, equal for d1)
NORMAL = [('\\dfrac{3}{4}', '\\frac{3}{4}', True), ('\\tfrac34', '\\frac34', True), ('3/4', '\\frac{3}{4}', True), ('0.5', '\\frac{1}{2}', True),
          ('x = 5', '5', True), ('k = 3', '3', True), ('abc=3', '3', False), ('10\\text{ cm}', '10', True), ('90^\\circ', '90', True),
          ('\\$5', '5', True), ('50\\%', '50', True), ('\\left(1,2\\right)', '(1,2)', True), ('.5', '0.5', True), ('0.75', '\\frac{3}{4}', False),
          ('\\text{(C)}', '(C)', False), ('1,000', '1000', False), ('\\sqrt2', '\\sqrt{2}', True), ('\\frac{1}{2}', '0.5', True),
          ('2\\sqrt{3}', '\\sqrt{12}', False), ('x^2 + 1', 'x^2+1', True), ('5.0', '5', False), ('\\frac{a}{b}', 'a/b', False),
          ('\\frac12', '\\frac{1}{2}', True), ('\\dfrac{\\sqrt{3}}{2}', '\\frac{\\sqrt{3}}{2}', True), ('\\!1000', '1000', True)]
MATH_CASES = ([(f"{n}/{g}", c(g), g, d(g), t(g)) for n, c, d, t in MATH for g in GOLDS] +
              [(f"normal form/{p} vs {g}/{w}", f"{R}<answer>\\boxed{{{p}}}</answer>{fmt}", g, (p, ok), (p, ok))
               for p, g, ok in NORMAL for w, fmt in (('tag', ''), ('eos', EOS))])

def test_math_has_200_cases(): assert len(MATH_CASES) >= 200, len(MATH_CASES)

@pytest.mark.parametrize('name,text,gold,d1,table', MATH_CASES, ids=[c[0] for c in MATH_CASES])
def test_math(name, text, gold, d1, table):
    got_d1, got = read_math(text, gold, ()), read_math(text, gold)
    assert (got_d1['answer'], got_d1['correct']) == d1, got_d1
    assert (got['answer'], got['correct']) == table, got

@pytest.mark.parametrize('pred,gold', [('0.75', '\\frac34'), ('5.0', '5'), ('\\frac{6}{8}', '\\frac{3}{4}'), ('2\\sqrt{3}', '\\sqrt{12}')])
def test_math_verify_column_credits_more(pred, gold):
    r = read_math(f"<answer>\\boxed{{{pred}}}</answer>", gold, math_verify=True)
    assert (r['correct'], r['verified']) == (False, True), r

def test_math_verify_not_on_the_whole_text():
    assert read_math("<answer>5</answer>", '5', math_verify=True)['verified'] is False

# ---------------------------------------------------------------- Countdown
# (numbers, target, a correct expression, the same in LaTeX operators, a wrong expression with the same numbers)
PROBLEMS = [([30, 100, 93], 23, "30 + 93 - 100", "30 + 93 - 100", "30 + 93 + 100"),
            ([83, 18, 75], 10, "18 - (83 - 75)", "18 - (83 - 75)", "18 + 83 - 75"),
            ([2, 3, 4], 5, "2*4-3", "2 \\times 4 - 3", "2*3-4"),
            ([5, 6, 7], 37, "5*6+7", "5 \\cdot 6 + 7", "5+6*7"),
            ([10, 4, 3], 2, "(10 - 4) / 3", "(10 - 4) \\div 3", "10 - 4 / 3"),
            ([9, 8, 7], 65, "9*8-7", "9 \\times 8 - 7", "9*7-8"),
            ([12, 3, 5], 9, "12/3+5", "12 \\div 3 + 5", "12-3+5"),
            ([50, 25, 4], 8, "50/25*4", "50 \\div 25 \\times 4", "50-25-4"),
            ([7, 7, 2], 47, "7*7-2", "7 \\times 7 - 2", "7*2-7"),
            ([15, 6, 2], 24, "15*2-6", "15 \\times 2 - 6", "15*6-2")]
POWERS = [([2, 3, 1], 9, "2**3+1"), ([3, 2, 5], 14, "3**2+5"), ([2, 4, 3], 19, "2**4+3"), ([5, 2, 1], 24, "5**2-1"),
          ([2, 5, 2], 30, "2**5-2"), ([7, 2, 1], 4, "7//2+1"), ([9, 2, 3], 12, "9//2*3"), ([20, 3, 4], 10, "20//3+4"),
          ([17, 5, 2], 5, "17//5+2"), ([10, 3, 3], 6, "10//3+3")]
RP = "<reasoning>\nI try the operations one by one.\n</reasoning>\n"   # a reasoning with no digits

CD = [  # (family, completion(p), d1 correct, table correct); p = (numbers, target, expr, latex, wrong)
    ('box in answer', lambda p: f"{RP}<answer>\n\\boxed{{{p[2]}}}\n</answer>", True, True),
    ('box outside the answer tag', lambda p: f"{RP}Final: \\boxed{{{p[2]}}}", True, True),
    ('box with = target', lambda p: f"{RP}<answer>\\boxed{{{p[2]} = {p[1]}}}</answer>", True, True),
    ('box with = target and spaces', lambda p: f"{RP}<answer>\\boxed{{ {p[2]} = {p[1]} }}</answer>", True, True),
    ('LaTeX operators', lambda p: f"{RP}<answer>\\boxed{{{p[3]}}}</answer>", True, True),
    ('box in a sentence', lambda p: f"{RP}The answer is \\boxed{{{p[2]}}}.", True, True),
    ('box in dollars', lambda p: f"{RP}<answer>$\\boxed{{{p[2]}}}$</answer>", True, True),
    ('end-of-sequence padding', lambda p: f"{RP}<answer>\\boxed{{{p[2]}}}</answer>{EOS}", True, True),
    ('answer tag, no box: d1 reads the whole text', lambda p: f"{RP}<answer>\n{p[2]}\n</answer>", False, True),
    ('answer tag with = target, no box', lambda p: f"{RP}<answer>\n{p[2]} = {p[1]}\n</answer>", True, True),
    ('equation in the reasoning, wrong answer', lambda p: f"<reasoning>\n{p[2]} = {p[1]}\n</reasoning>\n<answer>\nno idea\n</answer>", True, False),
    ('unclosed box: the answer block', lambda p: f"{RP}<answer>{p[2]}</answer> \\boxed{{{p[2]}", True, True),
    ('answer cut at L, no box', lambda p: f"{RP}<answer>\n{p[2]}", False, True),
    ('two boxes, the last right', lambda p: f"{RP}\\boxed{{{p[4]}}} no: \\boxed{{{p[2]}}}", True, True),
    ('box after the end of sequence', lambda p: f"{RP}<answer>\\boxed{{{p[2]}}}</answer>{EOS}\\boxed{{{p[4]}}}", False, True),
    ('fbox', lambda p: f"{RP}<answer>\\fbox{{{p[2]}}}</answer>", False, True),
    ('boxed with a space', lambda p: f"{RP}<answer>\\boxed {{{p[2]}}}</answer>", False, True),
    ('wrong expression', lambda p: f"{RP}<answer>\\boxed{{{p[4]}}}</answer>", False, False),
    ('a number missing', lambda p: f"{RP}<answer>\\boxed{{{p[0][0]} + {p[0][1]}}}</answer>", False, False),
    ('unclosed box, two answer blocks', lambda p: f"{RP}<answer>{p[4]}</answer> no, <answer>{p[2]}</answer> \\boxed{{", False, True),
]
CD_CASES = ([(f"{n}/{p[2]}", c(p), p[0], p[1], d, t) for n, c, d, t in CD for p in PROBLEMS] +
            [(f"power or floor division/{e}", f"{RP}<answer>\\boxed{{{e}}}</answer>", ns, tg, True, False) for ns, tg, e in POWERS])

def test_countdown_has_200_cases(): assert len(CD_CASES) >= 200, len(CD_CASES)

@pytest.mark.parametrize('name,text,numbers,target,d1,table', CD_CASES, ids=[c[0] for c in CD_CASES])
def test_countdown(name, text, numbers, target, d1, table):
    assert read_countdown(text, numbers, target, ())['correct'] == d1
    assert read_countdown(text, numbers, target)['correct'] == table

def test_countdown_reads():
    "What is read, not only whether it is right"
    assert read_countdown(f"<answer>\\boxed{{30 + 93 - 100 = 23}}</answer>", [30, 100, 93], 23)['answer'] == "30 + 93 - 100"
    assert read_countdown(f"<answer>\\boxed{{5 \\times 6 + 7}}</answer>", [5, 6, 7], 37)['answer'] == "5 * 6 + 7"
    assert read_countdown("<reasoning>x</reasoning><answer>none</answer>", [1, 2, 3], 6)['answer'] == "none"
    assert read_countdown("<reasoning>x</reasoning>", [1, 2, 3], 6) == dict(answer=None, value=None, correct=False)

# ---------------------------------------------------------------- Sudoku
GRIDS = [   # puzzles of the shipped SPG split and the three worked examples' puzzles
    ('0310200404001043', '4312213434211243'), ('3102200002100320', '3142243142131324'), ('0204301001034020', '1234341221434321'),
    ('0000100420013142', '4213132424313142'), ('2001403002001420', '2341413232141423'), ('3014002020004130', '3214142323414132'),
    ('1002020100030310', '1432324141232314'), ('0010200430000040', '4312213434211243'), ('1020400320000042', '1324421324313142'),
    ('0401032000133000', '2431132442133142'), ('0024001002014032', '1324241332414132'), ('4100000414200241', '4132231414233241')]

def _right(grid, pz, sol):
    "Right blank cells of a 16-character grid (the definition: a blank cell whose character equals the solution's)"
    return sum(1 for i in range(16) if pz[i] == '0' and i < len(grid) and grid[i] == sol[i])

def _rows(s, sep): return sep.join(s[i:i + 4] for i in range(0, 16, 4))

SD = [  # (family, completion(pz, sol), the grid d1 reads, the grid the table reads)
    ('clean', lambda pz, s: f"{R}<answer>\n{s}\n</answer>", lambda pz, s: s, lambda pz, s: s),
    ('rows on lines', lambda pz, s: f"{R}<answer>\n{_rows(s, chr(10))}\n</answer>", lambda pz, s: s, lambda pz, s: s),
    ('rows with spaces', lambda pz, s: f"{R}<answer>\n{' '.join(s)}\n</answer>", lambda pz, s: s, lambda pz, s: s),
    ('bar separators', lambda pz, s: f"{R}<answer>{_rows(s, '|')}</answer>", lambda pz, s: _rows(s, '|')[:16], lambda pz, s: s),
    ('comma separators', lambda pz, s: f"{R}<answer>{','.join(s)}</answer>", lambda pz, s: ','.join(s)[:16], lambda pz, s: s),
    ('row labels', lambda pz, s: f"{R}<answer>\n" + "\n".join(f"R{k + 1}: {s[4 * k:4 * k + 4]}" for k in range(4)) + "\n</answer>",
     lambda pz, s: f"R1:{s[:4]}R2:{s[4:8]}R3:{s[8:12]}"[:16], lambda pz, s: f"1{s[:4]}2{s[4:8]}3{s[8:12]}4{s[12:]}"[:16]),
    ('code fence in the answer', lambda pz, s: f"{R}<answer>\n```\n{s}\n```\n</answer>", lambda pz, s: s, lambda pz, s: s),
    ('grid after a stray </answer>', lambda pz, s: f"{R}</answer>\n{s}", lambda pz, s: s, lambda pz, s: s),
    ('bare grid, no tags', lambda pz, s: f"<reasoning>\nThe solution is {s}.", lambda pz, s: s, lambda pz, s: s),
    ('grid before </answer>, no opening tag', lambda pz, s: f"{R}final {s}</answer>", lambda pz, s: s, lambda pz, s: s),
    ('answer cut at L', lambda pz, s: f"{R}<answer>\n{s[:4]} {s[4:8]} {s[8:12]}", lambda pz, s: '', lambda pz, s: s[:12] + '0000'),
    ('unclosed, then end of sequence', lambda pz, s: f"{R}<answer>\n{s}{EOS}", lambda pz, s: s, lambda pz, s: s),
    ('grid after the end of sequence', lambda pz, s: f"{R}<answer>\n</answer>{EOS}{s}", lambda pz, s: s, lambda pz, s: ''),
    ('two answer blocks, the first all ones', lambda pz, s: f"{R}<answer>{'1' * 16}</answer>\n<answer>{s}</answer>",
     lambda pz, s: '1' * 16, lambda pz, s: s),
    ('wrong grid', lambda pz, s: f"{R}<answer>{s.translate(str.maketrans('1234', '2341'))}</answer>",
     lambda pz, s: s.translate(str.maketrans('1234', '2341')), lambda pz, s: s.translate(str.maketrans('1234', '2341'))),
    ('too long: cut to 16', lambda pz, s: f"{R}<answer>{s}21</answer>", lambda pz, s: s, lambda pz, s: s),
    ('too short: padded', lambda pz, s: f"{R}<answer>{s[:8]}</answer>", lambda pz, s: s[:8] + '0' * 8, lambda pz, s: s[:8] + '0' * 8),
    ('empty answer, grid in the reasoning', lambda pz, s: f"<reasoning>\nFinal grid {s} done\n</reasoning>\n<answer>\n\n</answer>",
     lambda pz, s: s, lambda pz, s: s),
]
SD_CASES = [(f"{n}/{pz}", c(pz, s), pz, s, d(pz, s), t(pz, s)) for n, c, d, t in SD for pz, s in GRIDS]

def test_sudoku_has_200_cases(): assert len(SD_CASES) >= 200, len(SD_CASES)

@pytest.mark.parametrize('name,text,puzzle,solution,d1,table', SD_CASES, ids=[c[0] for c in SD_CASES])
def test_sudoku(name, text, puzzle, solution, d1, table):
    got_d1, got = read_sudoku(text, puzzle, solution, ()), read_sudoku(text, puzzle, solution)
    blanks = puzzle.count('0')
    assert (got_d1['answer'], got_d1['right'], got_d1['blanks']) == (d1, _right(d1, puzzle, solution), blanks), got_d1
    assert (got['answer'], got['right']) == (table, _right(table, puzzle, solution)), got
    assert got['solved'] == (table == solution)

def test_sudoku_pooled_not_averaged():
    "d1 and SPG divide all right blank cells by all blank cells: 1 of 1 and 0 of 9 is 10 %, not 50 %"
    items = [dict(metrics=dict(right=1, blanks=1, d1_right=1, solved=0.), reward={}),
             dict(metrics=dict(right=0, blanks=9, d1_right=0, solved=0.), reward={})]
    assert summarize(items)['accuracy'] == 10. and summarize(items)['d1'] == 10.

# ---------------------------------------------------------------- prompts and rules
def test_every_rule_changes_its_example_alone():
    from mapg.eval_protocol import read_answer
    for name, f in FIXES.items():
        task, text, gold = f.example
        key = 'right' if task == 'sudoku' else 'correct'
        assert read_answer(task, text, (), **gold)[key] != read_answer(task, text, (name,), **gold)[key] == read_answer(task, text, **gold)[key], name

def test_prompts_word_for_word():
    "The instructions as d1's evaluation files write them (their exact characters, the stray ones included)"
    assert GSM8K_SYSTEM == ("You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the final "
                            "answer in a \\boxed{}. \nRespond in the following format:\n<reasoning>\nYour reasoning here\n"
                            "</reasoning>\n<answer>\n\\boxed{...}\n</answer>")
    assert MATH_SYSTEM == ("You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the final "
                           "answer in a \\boxed{}.\nRespond in the following format:\n<reasoning>\nYour reasoning here\n"
                           "</reasoning>\n<answer>\n\\boxed{...}\n</answer>\" \n")
    assert COUNTDOWN_SYSTEM.startswith("Using only the provided numbers, create an arithmetic expression that evaluates to exactly "
                                       "the provided target number. You may use the operations +, -, *, and / as needed, but each "
                                       "number must be used exactly once. Think step-by-step. After reasoning, provide only your final "
                                       "expression inside \\boxed{} tags without including an equals sign or the target number. "
                                       "For example: \\boxed{a + b * c}Respond in the following format:\n<reasoning>\n")
    rec = dict(prompt=[dict(role='user', content='')], numbers=[4, 5, 6], target=26, puzzle='0204301001034020')
    assert paper_messages('countdown', rec)[0]['content'] == COUNTDOWN_SYSTEM + "\n\nNumbers: [4, 5, 6]\nTarget: 26"
    sd = paper_messages('sudoku', rec)[0]['content']
    assert sd.startswith("\nPlease solve the following 4x4 Sudoku puzzle.") and sd.count("Question:\nSolve the following Sudoku puzzle: ") == 3
    assert sd.endswith("</answer>\n\nQuestion: Solve the following Sudoku puzzle: 0204301001034020\n\nAnswer:\n")
    assert paper_records('countdown', [rec])[0]['prefill'] == PREFILL == '<reasoning>'
    assert paper_records('humaneval', [rec]) == [rec]                            # code keeps mapg's prompts

HOSTILE = ["", "\\boxed{", "\\boxed{}" * 50, "\\boxed " * 20, "<answer>" * 30, "</answer>" * 30, "\x00\\boxed{1}\x00",
           "<answer>\\boxed{" + "9" * 5000 + "}</answer>", "<answer>\\boxed{" + "9" * 300 + "*" + "9" * 300 + "}</answer>",
           "\\boxed{" + "(" * 500 + "1" + ")" * 500 + "}", "\\boxed{9**9**9**9}", "\\boxed{1/0}", "\\boxed{()}", "\\boxed{(1)(2)}",
           "\\boxed{\\sqrt}", "\\boxed{\\frac}", "\\boxed{1/2/3}", "\\boxed{a/b}", "\\boxed{\\text{ a}\\text{ b}}", "\\fbox{",
           "<|eot_id|>" * 10, "1" * 40, "\\boxed{nan}", "\\boxed{inf}", "<answer>```\n1 2\n```</answer>", "\u2212" * 5]

@pytest.mark.parametrize('fixes', [(), tuple(FIXES)], ids=['d1', 'table'])
def test_readers_never_raise(fixes):
    for t in HOSTILE:
        read_gsm8k(t, '18', fixes); read_math(t, '\\frac{1}{2}', fixes); read_sudoku(t, '0204301001034020', '1234341221434321', fixes)
        r = read_countdown(t, [3, 4, 5], 12, fixes)
        assert r['correct'] in (True, False)


def test_paper_score_keeps_both_readings():
    from mapg.eval_protocol import paper_score
    s = paper_score('gsm8k', "<answer>\\boxed{43,500}</answer><|eot_id|><|endoftext|>", dict(answer='43,500'))
    assert s['paper'] == dict(answer=43500., correct=True) and s['d1'] == dict(answer=43., correct=False)
    assert s['metrics'] == dict(accuracy=1., d1=0., differs=1.)
    s = paper_score('countdown', "<answer>\\boxed{2*4-3}</answer>", dict(numbers=[2, 3, 4], target=5, prompt=[], text='x'))
    assert s['metrics'] == dict(accuracy=1., d1=1., differs=0.)
