"""What the regression looks like (its symptoms: exact metrics, paired throughput) and whether one probe reproduces
it, decided with the project's verdict rules (:func:`judge`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_specdec.bisection.delta import Outcome
from pytest_specdec.core import stats
from pytest_specdec.core.metric_table import EXACT_FIELDS

__all__ = [
    "EXACT_FIELDS",
    "MAX_PAIRS",
    "MIN_PAIRS",
    "ProbeVerdict",
    "Symptoms",
    "exact_value",
    "find_symptoms",
    "judge",
    "ratio_text",
]

#: Pairs measured before a throughput verdict: below 6 even "every pair on one side" is not significant at 5 %
#: one-sided (Wilcoxon: the smallest p of 6 pairs is 1/64).
MIN_PAIRS = 6
#: Pairs after which an undecided throughput verdict makes the probe unresolved.
MAX_PAIRS = 12


def exact_value(values: Sequence[float] | None, temperature: Any) -> float | None:
    """The exact value of a field: every phase the same at temperature 0; else None (statistics would be needed)."""
    if not values or temperature not in (0, 0.0) or max(values) != min(values):
        return None
    return float(values[0])


@dataclass(frozen=True, slots=True)
class Symptoms:
    """How the bad configuration differs from the good one, measured here (:func:`find_symptoms`).

    ``exact``: field -> (good value, bad value) of each exact metric that differs. ``level``: the median paired
    tok/s ratio bad/good when the bad configuration is significantly slower beyond the tolerance, else None.
    """

    exact: dict[str, tuple[float, float]]
    level: float | None
    #: The bad/good paired ratios behind ``level`` (also when no throughput symptom was found).
    ratios: tuple[float, ...] = ()
    #: Why there is no throughput symptom, or the verdict line that found it.
    throughput_line: str = ""

    @property
    def regressed(self) -> bool:
        return bool(self.exact) or self.level is not None

    @property
    def midpoint(self) -> float | None:
        """The paired ratio halfway (geometrically) between the good level 1 and the bad level: ``sqrt(level)``."""
        return math.sqrt(self.level) if self.level is not None else None


def find_symptoms(
    good_exact: Mapping[str, Sequence[float]],
    bad_exact: Mapping[str, Sequence[float]],
    bad_ratios: Sequence[float],
    *,
    temperature: Any,
    tolerance_rel: float,
) -> Symptoms:
    """The symptoms of the regression from the good and bad configurations measured here.

    :param good_exact: per exact field, the per-phase values of the good configuration (``bad_exact``: the bad one).
    :param bad_ratios: paired tok/s ratios bad/good (phases interleaved).
    :param temperature: the workload temperature (exact fields need 0 on both sides).
    :param tolerance_rel: the tok/s tolerance (``tolerances.DEFAULT_TOLERANCES["output_tok_s"].rel``, 5 %): the bad
        configuration is slower when its median ratio is below ``1 - tolerance_rel`` and the one-sided Wilcoxon test
        (``stats.below_test``) finds that significant.
    """
    exact = {}
    for name in EXACT_FIELDS:
        g, b = exact_value(good_exact.get(name), temperature), exact_value(bad_exact.get(name), temperature)
        if g is not None and b is not None and g != b:
            exact[name] = (g, b)
    floor = 1.0 - tolerance_rel
    summary = stats.summarize(list(bad_ratios))
    level = None
    if summary is None:
        line = "tok/s not measured"
    else:
        test = stats.below_test(bad_ratios, floor)
        shown = f"{ratio_text(bad_ratios)}; floor x{floor:g}"
        if summary.median < floor and test.significant and test.p_value is not None:
            level = summary.median
            line = f"tok/s {shown}, {test.method} p={test.p_value:.3g}: slower"
        else:
            line = f"tok/s {shown}: not significantly slower"
    return Symptoms(exact, level, tuple(bad_ratios), line)


def ratio_text(ratios: Sequence[float]) -> str:
    """``x0.842 of good [median of 6 paired ratios, CI 0.801-0.880 (97%)]``, or ``not measured``."""
    s = stats.summarize(list(ratios))
    if s is None:
        return "not measured"
    ci = f"CI {s.ci_low:.3f}-{s.ci_high:.3f} ({s.coverage:.0%})"
    return f"x{s.median:.3f} of good [median of {s.n} paired ratios, {ci}]"


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    """:func:`judge`'s answer for one probe: an outcome, or ``pairs`` > 0 more paired phases to measure first."""

    outcome: Outcome | None
    #: "exact", "paired" or "error": what decided.
    basis: str
    line: str
    pairs: int = 0


def judge(
    symptoms: Symptoms,
    exact: Mapping[str, Sequence[float]],
    ratios: Sequence[float],
    *,
    temperature: Any,
    max_pairs: int = MAX_PAIRS,
    min_pairs: int = MIN_PAIRS,
) -> ProbeVerdict:
    """Does one probe reproduce the regression? (module docstring)

    Exact first: a field of ``symptoms.exact`` whose probe value is exact and not the bad value -> PASS (no tok/s
    needed). All exact fields at their bad value and no throughput symptom -> FAIL. Then paired tok/s against
    ``symptoms.midpoint``: fewer than ``min_pairs`` -> ask for them; significantly below the midpoint
    (``stats.below_test``) -> FAIL; significantly above (the same test on 1/ratio) -> PASS; neither -> ask for
    ``min_pairs`` more, up to ``max_pairs``, then UNRESOLVED.

    :param exact: per exact field, the probe's per-phase values; :param ratios: its paired tok/s ratios probe/good.
    :param temperature: the probe's workload temperature.
    """
    undecided = []
    for name, (good, bad) in symptoms.exact.items():
        value = exact_value(exact.get(name), temperature)
        if value is None:
            undecided.append(name)
        elif value != bad:
            where = "= good" if value == good else f"(good {good:.4g})"
            return ProbeVerdict("PASS", "exact", f"{name} {value:.4g} {where}, not the bad {bad:.4g}")
    at_bad = ", ".join(f"{name} {bad:.4g} = bad" for name, (_, bad) in symptoms.exact.items() if name not in undecided)
    if symptoms.level is None:
        if undecided:
            why = f"{', '.join(undecided)} not exact (repeats differ or temperature > 0)"
            why += " and no tok/s symptom to decide by"
            return ProbeVerdict("UNRESOLVED", "exact", why)
        return ProbeVerdict("FAIL", "exact", at_bad)
    midpoint = symptoms.midpoint
    assert midpoint is not None
    if len(ratios) < min_pairs:
        return ProbeVerdict(None, "paired", "", pairs=min_pairs - len(ratios))
    s = stats.summarize(list(ratios))
    assert s is not None
    head = f"{at_bad}; " if at_bad else ""
    text = f"{head}tok/s {ratio_text(ratios)} vs bad x{symptoms.level:.3f}, midpoint x{midpoint:.3f}"
    below = stats.below_test(ratios, midpoint)
    if s.median < midpoint and below.significant and below.p_value is not None:
        return ProbeVerdict("FAIL", "paired", f"{text}: below, p={below.p_value:.3g}")
    above = stats.below_test([1.0 / r for r in ratios if r > 0], 1.0 / midpoint)
    if s.median > midpoint and above.significant and above.p_value is not None:
        return ProbeVerdict("PASS", "paired", f"{text}: above, p={above.p_value:.3g}")
    if len(ratios) < max_pairs:
        return ProbeVerdict(None, "paired", "", pairs=min(min_pairs, max_pairs - len(ratios)))
    return ProbeVerdict("UNRESOLVED", "paired", f"{text}: neither side significant after {len(ratios)} pairs")
