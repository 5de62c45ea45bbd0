"""Rank correlations over seeds: an interval that stays inside [-1, 1], or the count of seeds where they agree."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "studies"))

import findings  # noqa: E402


def test_a_t_interval_on_rho_leaves_the_range_and_the_fisher_one_does_not():
    rhos = [0.6, 0.314, -0.086]  # the Dr. GRPO checkpoint's entropy rank correlations, 6 buckets a seed
    assert findings.t_interval(rhos)[2] > 1  # what the READMEs quoted: +0.28 [-0.58, +1.13]
    s = findings.rank_correlation(rhos, 6)
    assert s["form"] == "interval"
    assert -1 < s["low"] < s["rho"] < s["high"] < 1
    assert findings.rank_correlation_text(s) == "+0.28 [-0.58, +0.86] (Fisher z, 3 seeds)"


def test_every_interval_stays_inside_minus_one_to_one():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        k, n = int(rng.integers(1, 6)), int(rng.integers(4, 12))
        rhos = rng.uniform(-0.999, 0.999, k)
        s = findings.rank_correlation(rhos, n)
        if s["form"] == "interval":
            assert -1 <= s["low"] <= s["high"] <= 1
            centre = np.tanh(np.arctanh(rhos).mean())
            assert s["low"] <= centre <= s["high"]
        low, high = findings.fisher_interval(float(rhos[0]), n)
        assert -1 <= low <= rhos[0] <= high <= 1


def test_seeds_that_agree_give_the_count_not_an_interval():
    s = findings.rank_correlation([0.657, 0.771, 0.829], 6)
    assert s["form"] == "count" and math.isnan(s["low"])
    assert findings.rank_correlation_text(s) == "+0.75 (positive in 3 of 3 seeds)"
    assert findings.rank_correlation_text(findings.rank_correlation([1.0, 1.0, 1.0], 6)) == "+1.00 in 3 of 3 seeds"
    assert findings.rank_correlation_text(findings.rank_correlation([-0.8, -1.0, -1.0], 4)) == \
        "-0.93 (negative in 3 of 3 seeds)"
    # a seed at +-1 has an infinite Fisher z: the count even where the signs differ
    mixed = findings.rank_correlation([1.0, -0.4, 0.2], 4)
    assert mixed["form"] == "count"
    assert findings.rank_correlation_text(mixed) == "+0.27 (positive in 2 of 3 seeds)"


def test_the_within_seed_sampling_is_a_floor_on_the_width():
    # three seeds whose z values nearly coincide but differ in sign cannot give a narrower interval than six
    # points' own sampling: 1.96 * 1.06 / sqrt(3 * 3) on the z scale
    s = findings.rank_correlation([0.01, -0.01, 0.0], 6)
    half = 1.96 * findings.SPEARMAN_SE / 3
    assert s["high"] == pytest.approx(np.tanh(half), abs=1e-9)
    assert s["low"] == pytest.approx(-np.tanh(half), abs=1e-9)


def test_what_has_no_interval_says_so():
    assert all(math.isnan(v) for v in findings.fisher_interval(1.0, 6))
    assert all(math.isnan(v) for v in findings.fisher_interval(0.5, 3))  # three points: no Fisher z
    one = findings.rank_correlation([0.2], 3)
    assert one["form"] == "none"
    assert findings.rank_correlation_text(one) == "+0.20 (1 seed, 3 points: no interval)"
    single = findings.rank_correlation([0.2], 6)
    assert single["form"] == "interval"
    assert (single["low"], single["high"]) == findings.fisher_interval(0.2, 6)
    assert findings.rank_correlation([float("nan"), 0.5, 0.4], 6)["seeds"] == 2  # a constant's nan is dropped
    assert findings.rank_correlation([], 6)["form"] == "none"
