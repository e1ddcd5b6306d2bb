"""Bisect: which difference between a good and a bad profile caused a regression.

``diffs`` (the differences and applying them) < ``prior`` (which are likely culprits of which symptom) < ``delta``
(Zeller's ddmin) < ``symptoms`` (does a probe reproduce a symptom) < ``search`` (the bisect) < ``report`` (its
lines); ``probes`` launches and measures the servers.
The names below are the package's face (``probes`` is imported on its own: it pulls in the measuring stack).
"""

from pytest_specdec.bisection.delta import Outcome, ddmin
from pytest_specdec.bisection.diffs import (
    Difference,
    NotBisectable,
    apply,
    config_key,
    differences,
    launch_key,
    not_bisectable,
)
from pytest_specdec.bisection.report import bisect_hint, report_lines
from pytest_specdec.bisection.search import (
    BisectResult,
    BudgetSpent,
    Cause,
    ProbeRecord,
    Probes,
    bisect,
    estimate,
    one_at_a_time,
)
from pytest_specdec.bisection.symptoms import (
    EXACT_FIELDS,
    MAX_PAIRS,
    MIN_PAIRS,
    ProbeVerdict,
    Symptoms,
    judge_exact,
    judge_throughput,
    ratio_text,
    throughput_check,
)

__all__ = [
    "EXACT_FIELDS",
    "MAX_PAIRS",
    "MIN_PAIRS",
    "BisectResult",
    "BudgetSpent",
    "Cause",
    "Difference",
    "NotBisectable",
    "Outcome",
    "ProbeRecord",
    "ProbeVerdict",
    "Probes",
    "Symptoms",
    "apply",
    "bisect",
    "bisect_hint",
    "config_key",
    "ddmin",
    "differences",
    "estimate",
    "judge_exact",
    "judge_throughput",
    "launch_key",
    "not_bisectable",
    "one_at_a_time",
    "ratio_text",
    "report_lines",
    "throughput_check",
]
