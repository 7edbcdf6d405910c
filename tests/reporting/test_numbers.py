"""Issue 42: one formatter writes every number with its interval in the report."""

from __future__ import annotations

import math

from weightgraft.reporting.numbers import number, with_interval


def test_accuracies_take_three_decimals_and_their_intervals_two():
    assert with_interval(0.8125, 0.70111, 0.9, digits=3, interval_digits=2) == "0.812 [0.70, 0.90]"
    assert with_interval(0.5, 0.25, 0.75) == "0.50 [0.25, 0.75]"


def test_a_missing_interval_leaves_the_value_and_a_missing_value_says_so():
    assert with_interval(0.5, None, None, digits=3) == "0.500"
    assert with_interval(None, 0.1, 0.2) == "n/a" and with_interval(math.nan, 0.1, 0.2) == "n/a"
    assert with_interval(None, None, None, missing="undefined") == "undefined"


def test_effects_are_signed_and_small_probabilities_keep_two_digits():
    assert with_interval(-0.25, -0.5, 0.125, digits=3, interval_digits=2, sign=True) == "-0.250 [-0.50, +0.12]"
    assert number(4e-4, small=True) == "4.0e-04" and number(4e-4) == "0.000"
    assert number(0.0, small=True) == "0.000"


def test_shares_are_whole_percentages():
    assert with_interval(0.5, 0.25, 0.875, as_percent=True) == "50% [25%, 88%]"
    assert with_interval(0.5, None, None, as_percent=True) == "50%"
