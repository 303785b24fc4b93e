"""MATH decimals are compared at the precision written (issue 24, item 2): a decimal answer to an irrational reference
is right only if it is within half a unit of its last stated digit of the exact value, with at least `MIN_DECIMALS`
places (the symbolic checker's policy, kept); exact references stay exact; `math-verify`'s rounding to 6 places never
decides a decimal. Each row is checked by `math_equal` and through `math_reward`."""
from fractions import Fraction
import pytest
from mapg.rewards import math_reward
from mapg.rewards_math import math_equal, have_math_verify, MIN_DECIMALS, _within_half_unit, _decimal

needs_mv = pytest.mark.skipif(not have_math_verify(), reason="math-verify not installed")

WRONG = [   # one wrong digit past the sixth place, or too few places: never credited
    ('1.4142139', r'\sqrt{2}'), ('1.4142131', r'\sqrt{2}'), ('3.1415929', r'\pi'), ('3.1415922', r'\pi'),
    ('2.7182819', 'e'), ('2.7182811', 'e'), ('1.414', r'\sqrt{2}'), ('3.14', r'\pi'), ('2.718', 'e'),
    ('0.8660259', r'\frac{\sqrt{3}}{2}'), ('1.4142136', r'-\sqrt{2}'), ('(1.4142139, 2)', r'(\sqrt{2}, 2)'),
    ('1.4142139\\pi', r'\sqrt{2}\pi'), ('0.333333', r'\frac{1}{3}'), ('0.3333333', r'\frac{1}{3}'), ('0.14285714', r'\frac{1}{7}'),
    ('2.0000001', r'\sqrt{4}'), ('1.5', 'x'), ('14142135.6', r'10^7\sqrt{2}')]
RIGHT = [   # right to every digit stated
    ('1.4142136', r'\sqrt{2}'), ('1.414214', r'\sqrt{2}'), ('1.41421356237', r'\sqrt{2}'), ('-1.4142136', r'-\sqrt{2}'),
    ('3.1415927', r'\pi'), ('3.141593', r'\pi'), ('3.14159265358979', r'\pi'), ('2.7182818', 'e'), ('2.718282', 'e'),
    ('0.866025', r'\frac{\sqrt{3}}{2}'), ('1.0', r'\frac{\sqrt{2}}{\sqrt{2}}'), ('2.0', r'\sqrt{4}'),
    ('14142135.623731', r'10^7\sqrt{2}')]
EXACT = [   # exact references: decided without the helper, as before
    ('0.25', r'\frac{1}{4}', True), ('1.5', r'\frac{3}{2}', True), ('0.50', r'\frac{1}{2}', True), ('-1,234.5', '-1234.5', True),
    ('2.50', r'\$2.5', True), ('0.2500001', r'\frac{1}{4}', False), ('0.33', r'\frac{1}{3}', False), ('12.0', '12', True)]

@needs_mv
@pytest.mark.parametrize('pred,gold', WRONG)
def test_a_wrong_or_too_short_decimal_is_never_credited(pred, gold):
    assert math_equal(pred, gold) is False
    assert math_reward(f"<answer>\\boxed{{{pred}}}</answer>", gold)['correct'] == 0.

@needs_mv
@pytest.mark.parametrize('pred,gold', RIGHT)
def test_a_decimal_right_to_every_digit_is_credited(pred, gold):
    assert math_equal(pred, gold) is True
    assert math_reward(f"<answer>\\boxed{{{pred}}}</answer>", gold)['correct'] == 2.

@pytest.mark.parametrize('pred,gold,eq', EXACT)
def test_exact_references_stay_exact(pred, gold, eq):
    assert math_equal(pred, gold) is eq and math_equal(pred, gold, use_math_verify=False) is eq

@pytest.mark.parametrize('pred,gold', RIGHT + WRONG)
def test_without_math_verify_no_decimal_is_credited_for_an_irrational(pred, gold):
    assert math_equal(pred, gold, use_math_verify=False) is False

@needs_mv
def test_decimals_inside_a_larger_answer_compare_exactly():
    assert math_equal('0.5x', r'\frac{x}{2}') and math_equal(r'(0.5, \sqrt{2})', r'(\frac{1}{2}, \sqrt{2})')
    assert not math_equal(r'(0.5000001, \sqrt{2})', r'(\frac{1}{2}, \sqrt{2})')

def test_half_a_unit_rule():
    assert MIN_DECIMALS == 6
    third = Fraction(1, 3)
    assert _within_half_unit('0.333', third) and _within_half_unit('0.3333333', third) and not _within_half_unit('0.334', third)
    assert _within_half_unit('0.125', Fraction(1, 8)) and _within_half_unit('0.13', Fraction(1, 8))   # a tie: within half a unit
    assert [_decimal(x) for x in ('1.5', '-1,000.25', '2', r'\frac{1}{2}', '1.5e3')] == ['1.5', '-1000.25', None, None, None]
