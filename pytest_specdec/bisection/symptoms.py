"""What the regression looks like (its symptoms: exact metrics, paired throughput) and whether one probe reproduces
one of them, each symptom judged on its own.

**Exact** (accept length/rate at temperature 0, :func:`judge_exact`): GOOD and BAD are measured twice, so that
identical repeats show the metric is exact here; a probe then needs one measured phase, and its value decides:
all exact fields at BAD's value reproduces, any other value does not. No statistics, no tok/s.

**Throughput** (paired tok/s ratios probe/reference, phases interleaved): the sequential verdicts of
``judge.sequential`` (t-test on log ratios, looks fixed in advance, alpha spent per look), three outcomes each.
The symptom (:func:`throughput_check`): ``FAILED`` when BAD is significantly slower than the reference and its
estimate beyond the tolerance, ``passed`` when the interval's worse end is inside the tolerance, else
``undecided`` (more pairs, up to the budget). A probe (:func:`judge_throughput`): reproduces when its ratio is
significantly below the midpoint between no change and BAD's level (``decide_floor`` ``below``), does not when
significantly above, and stays open, then *unresolved* at the budget (ddmin's "?"). :func:`pairs_to_split` says
whether a probe can decide at all within the budget, at the spread measured so far.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import scipy.stats as sps

from pytest_specdec.bisection.delta import Outcome
from pytest_specdec.core.metric_table import EXACT_FIELDS
from pytest_specdec.core.stats import geometric_mean
from pytest_specdec.judge import sequential

__all__ = [
    "EXACT_FIELDS",
    "MAX_PAIRS",
    "MIN_PAIRS",
    "ProbeVerdict",
    "Symptoms",
    "design",
    "exact_symptoms",
    "exact_value",
    "geometric_mean",
    "judge_exact",
    "judge_throughput",
    "log_ratio_sd",
    "pairs_to_split",
    "ratio_text",
    "throughput_check",
    "throughput_line",
]

#: Pairs at a throughput verdict's first look (a t-test on log ratios decides a x0.5 level at 3 pairs; a Wilcoxon
#: test could not below 6).
MIN_PAIRS = 3
#: Pairs after which an open throughput verdict is undecided (a probe: unresolved): as many as a verdict of the
#: plugin measures by default (``sequential.DEFAULT_MAX_REPEATS``); pairs are cheap beside a launch.
MAX_PAIRS = sequential.DEFAULT_MAX_REPEATS


def design(max_pairs: int = MAX_PAIRS, min_pairs: int = MIN_PAIRS) -> sequential.Design:
    """The looks of a throughput verdict: ``Design(min_pairs, max_pairs)`` (3, 5, 8, 12 pairs by default)."""
    return sequential.Design(min(min_pairs, max_pairs), max_pairs)


def exact_value(values: Sequence[float] | None, temperature: Any) -> float | None:
    """The exact value of a field: every phase the same at temperature 0; else None (statistics would be needed)."""
    if not values or temperature not in (0, 0.0) or max(values) != min(values):
        return None
    return float(values[0])


def exact_symptoms(
    good: Mapping[str, Sequence[float]], bad: Mapping[str, Sequence[float]], temperature: Any
) -> dict[str, tuple[float, float]]:
    """field -> (GOOD's value, BAD's value) for each exact field that is exact on both sides and differs."""
    out = {}
    for name in EXACT_FIELDS:
        g, b = exact_value(good.get(name), temperature), exact_value(bad.get(name), temperature)
        if g is not None and b is not None and g != b:
            out[name] = (g, b)
    return out


def ratio_text(ratios: Sequence[float], versus: str = "good") -> str:
    """``x0.842 of good [geometric mean of 6 paired ratios, CI 0.801-0.880 (97.9%)]``, or ``not measured``."""
    decision = sequential.decide_floor(list(ratios), 1.0, design(max(len(ratios), MIN_PAIRS)))
    if decision.n == 0:
        return "not measured"
    n = decision.n
    return f"x{decision.estimate:.3f} of {versus} [geometric mean of {n} paired ratio{'s' if n != 1 else ''}, " \
        f"{decision.interval()}]"  # fmt: skip


@dataclass(frozen=True, slots=True)
class Symptoms:
    """How BAD differs from GOOD, measured here.

    ``exact``: field -> (GOOD's value, BAD's value) of each exact metric that differs. ``throughput``: the outcome
    of :func:`throughput_check` on BAD's paired ratios (``FAILED``: slower beyond the tolerance). ``level``: BAD's
    ratio (geometric mean) when ``FAILED``, or ``undecided`` with the estimate beyond the tolerance (suspected: a
    noisy runner), else None.
    """

    exact: dict[str, tuple[float, float]]
    level: float | None
    #: BAD's paired ratios against GOOD.
    ratios: tuple[float, ...] = ()
    #: The throughput verdict's line.
    throughput_line: str = ""
    throughput: str = "passed"

    @property
    def regressed(self) -> bool:
        return bool(self.exact) or self.level is not None


def throughput_check(
    ratios: Sequence[float], tolerance_rel: float, look: sequential.Design
) -> tuple[str, sequential.Decision]:
    """Is the paired ratio probe/reference slower beyond ``tolerance_rel``? (module docstring)

    ``FAILED``: ``decide_floor`` against no change (1.0) says ``below`` and the estimate is below
    ``1 - tolerance_rel``; ``passed``: ``decide_floor`` against ``1 - tolerance_rel`` says ``above`` (the interval's
    worse end inside the tolerance); else ``undecided``. Both calls see the same interval.

    :returns: (outcome, the decision against the tolerance, whose interval the line shows).
    """
    floor = 1.0 - tolerance_rel
    at_limit = sequential.decide_floor(list(ratios), floor, look)
    if at_limit.verdict == "above":
        return "passed", at_limit
    at_one = sequential.decide_floor(list(ratios), 1.0, look)
    if at_one.verdict == "below" and at_one.estimate < floor:
        return "FAILED", at_limit
    return "undecided", at_limit


def throughput_line(outcome: str, decision: sequential.Decision, tolerance_rel: float, versus: str = "good") -> str:
    """``tok/s x0.612 of good [...]: slower beyond 5% (FAILED)``."""
    words = {"FAILED": f"slower beyond {tolerance_rel:.0%} (FAILED)",
             "passed": f"within {tolerance_rel:.0%} (passed)",
             "undecided": f"undecided at {tolerance_rel:.0%}"}  # fmt: skip
    if decision.n == 0:
        return "tok/s not measured"
    if outcome == "undecided" and decision.estimate < 1.0 - tolerance_rel:
        words["undecided"] += ", the estimate beyond it: bisected as suspected"
    n = decision.n
    shown = f"x{decision.estimate:.3f} of {versus} [geometric mean of {n} paired ratio{'s' if n != 1 else ''}, " \
        f"{decision.interval()}]"  # fmt: skip
    return f"tok/s {shown}: {words[outcome]}"


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    """One probe's answer: an outcome, or ``pairs`` > 0 more paired phases to measure first."""

    outcome: Outcome | None
    #: "exact", "paired" or "error": what decided.
    basis: str
    line: str
    pairs: int = 0


def judge_exact(
    exact_symptom: Mapping[str, tuple[float, float]], values: Mapping[str, Sequence[float]]
) -> ProbeVerdict:
    """Does the probe reproduce the exact symptom? One measured phase decides (the metric was seen to be exact on
    GOOD and BAD): every field of ``exact_symptom`` at BAD's value -> FAIL, a field at another value -> PASS, a field
    not measured -> UNRESOLVED.

    :param values: per exact field, the probe's per-phase values (the first is used; more must agree).
    """
    at_bad = []
    for name, (good, bad) in exact_symptom.items():
        got = values.get(name) or []
        if not got:
            return ProbeVerdict("UNRESOLVED", "exact", f"{name} not measured")
        if max(got) != min(got):
            return ProbeVerdict("UNRESOLVED", "exact", f"{name} repeats differ ({min(got):.4g}-{max(got):.4g})")
        value = float(got[0])
        if value != bad:
            where = "= good" if value == good else f"(good {good:.4g})"
            return ProbeVerdict("PASS", "exact", f"{name} {value:.4g} {where}, not the bad {bad:.4g}")
        at_bad.append(f"{name} {bad:.4g} = bad")
    return ProbeVerdict("FAIL", "exact", "; ".join(at_bad))


def judge_throughput(
    level: float, ratios: Sequence[float], look: sequential.Design, versus: str = "good"
) -> ProbeVerdict:
    """Does the probe reproduce the throughput symptom? Its paired ratios against the midpoint ``sqrt(level)``
    between no change and BAD's level, by ``sequential.decide_floor``: ``below`` -> FAIL, ``above`` -> PASS,
    ``open`` -> ask for the pairs up to the next look, UNRESOLVED after the last.

    :param level: BAD's paired ratio to the same reference (< 1).
    """
    midpoint = math.sqrt(level)
    n = len(ratios)
    points = look.points
    if n < points[0]:
        return ProbeVerdict(None, "paired", "", pairs=points[0] - n)
    decision = sequential.decide_floor(list(ratios), midpoint, look)
    text = (f"tok/s x{decision.estimate:.3f} of {versus} [geometric mean of {n} paired ratio{'s' if n != 1 else ''}, "
            f"{decision.interval()}]"
            f" vs bad x{level:.3f}, midpoint x{midpoint:.3f}")  # fmt: skip
    if decision.verdict == "below":
        return ProbeVerdict("FAIL", "paired", f"{text}: below")
    if decision.verdict == "above":
        return ProbeVerdict("PASS", "paired", f"{text}: above")
    later = [p for p in points if p > n]
    if later:
        return ProbeVerdict(None, "paired", text, pairs=later[0] - n)
    return ProbeVerdict("UNRESOLVED", "paired", f"{text}: undecided after {n} pair{'s' if n != 1 else ''}")


def log_ratio_sd(*samples: Sequence[float]) -> float | None:
    """The pooled standard deviation of one pair's log ratio over ``samples`` (each a probe's paired ratios, each
    with its own mean); None with fewer than 2 ratios in every sample."""
    logs = [[math.log(r) for r in sample if r > 0] for sample in samples]
    logs = [x for x in logs if len(x) >= 2]
    df = sum(len(x) - 1 for x in logs)
    if not df:
        return None
    ss = sum(sum((v - sum(x) / len(x)) ** 2 for v in x) for x in logs)
    return math.sqrt(ss / df)


def pairs_to_split(level: float, sd: float, look: sequential.Design) -> int:
    """About how many pairs a probe needs before :func:`judge_throughput` can tell a probe at BAD's ``level`` from one
    at no change: the midpoint sqrt(level) lies |ln level| / 2 from either on the log scale, and a look's one-sided
    interval is ``z(1 - alpha_per_look) * sd / sqrt(n)`` wide (the normal quantile: many pairs).

    Example: level 0.90, sd 0.185 (a host-bound tiny model on one H200 without CUDA graphs), ``Design(3, 24)``:
    z 2.39, distance 0.0527 -> 71 pairs. Level 0.48, sd 0.05: 1 pair.
    """
    distance = abs(math.log(level)) / 2.0
    if distance <= 0.0:
        return sys.maxsize
    z = float(sps.norm.ppf(1.0 - look.alpha_per_look))
    return max(1, math.ceil((z * sd / distance) ** 2))
