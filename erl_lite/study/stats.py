"""Paired statistics over seeds: every variant of a seed starts from the same adapter and plays the same tasks,
so two variants are compared seed by seed, on the differences (ERL - control), not as independent samples.

- :func:`sign_flip_p`: the exact permutation test of "the paired differences are symmetric about 0": under that
  null each difference's sign is a coin flip, so the p-value is the share of all 2^n sign patterns whose sum is
  at least as far from 0 as the observed one. It assumes no distribution. Its smallest possible value is
  2 / 2^n: 0.0625 at 5 seeds, so five seeds can never show a difference at the 5% level; ten can (0.002).
- :func:`t_interval`: mean +- Student's t quantile x sd / sqrt(n). Its coverage, measured by simulation
  (``tests/test_study.py``): at least 0.93 for the nominal 0.95 on normal paired differences at ten and at five
  seeds (the 3-seed percentile bootstrap it replaced: below 0.85); about 0.88 at ten seeds where one seed in five
  falls in a far cluster (a run stuck at its start beside runs that learned), about 0.64 at one in ten, where
  most samples hold no such seed. There the sign-flip p-value, which needs no distribution, is the one to read.
- :func:`verdict`: a variant is called ahead only where the test rejects at :data:`ALPHA`, the p-value beside it.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import statistics

#: Nominal coverage of every interval, and the test level that goes with it.
COVERAGE = 0.95
ALPHA = 1 - COVERAGE
#: Up to this many seeds the sign-flip test enumerates every sign pattern; above, it samples this many.
EXACT_UP_TO, DRAWS = 16, 2**16


def sign_flip_p(diffs: list[float]) -> float:
    """Two-sided p-value of the exact sign-flip permutation test on paired differences (1.0 for none).

    Example:
        >>> sign_flip_p([0.1] * 5), sign_flip_p([0.1] * 10), sign_flip_p([0.2, -0.2])
        (0.0625, 0.001953125, 1.0)
    """
    n = len(diffs)
    observed = abs(sum(diffs))
    slack = 1e-9 * (1 + sum(map(abs, diffs)))  # float sums of the same values in another order
    if n <= EXACT_UP_TO:
        patterns = itertools.product((1, -1), repeat=n)
    else:
        rng = random.Random(0)
        patterns = ([rng.choice((1, -1)) for _ in diffs] for _ in range(DRAWS))
    hits = total = 0
    for signs in patterns:
        total += 1
        hits += abs(sum(s * d for s, d in zip(signs, diffs))) >= observed - slack
    return hits / total if n else 1.0


@functools.lru_cache(maxsize=None)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for ``p`` in (0.5, 1), by bisection on its CDF, itself Simpson's rule over the density
    (scipy is not a dependency, and :mod:`statistics` has only the normal).

    Example:
        >>> round(t_quantile(0.975, 9), 3), round(t_quantile(0.975, 1), 2)
        (2.262, 12.71)
    """
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    density = lambda u: scale * (1 + u * u / df) ** (-(df + 1) / 2)

    def cdf(x: float, n: int = 2000) -> float:
        h = x / n
        inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, n))
        return 0.5 + (density(0.0) + inner + density(x)) * h / 3

    low, high = 0.0, 100.0
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def t_interval(values: list[float], coverage: float = COVERAGE) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` and its Student t interval (low = high = mean for one value).

    Example:
        >>> [round(x, 3) for x in t_interval([1.0, 2.0, 3.0])]
        [2.0, -0.484, 4.484]
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t_quantile((1 + coverage) / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def verdict(names: tuple[str, str], diffs: list[float], higher: bool = True, p: float | None = None) -> str:
    """Which of two variants is ahead on paired ``diffs`` (first - second): only where the sign-flip test's
    p-value (or ``p``, another test's) is below :data:`ALPHA`; ``higher``: whether a larger value is better.

    Example:
        >>> verdict(("ERL", "RLVR"), [0.3] * 10), verdict(("ERL", "RLVR"), [0.3] * 5)
        ('ERL ahead of RLVR (p = 0.002)', 'no difference shown (p = 0.062)')
    """
    p = sign_flip_p(diffs) if p is None else p
    if p >= ALPHA:
        return f"no difference shown (p = {p:.3f})"
    first_better = (statistics.fmean(diffs) > 0) == higher
    ahead, behind = names if first_better else names[::-1]
    return f"{ahead} ahead of {behind} (p = {p:.3f})"
