"""The bisect report (fixed-width lines), and the hint a stored-compare failure gives to run a bisect."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from pytest_specdec.bisection.search import BisectResult, ProbeRecord
from pytest_specdec.bisection.symptoms import Symptoms, exact_value, ratio_text

__all__ = ["bisect_hint", "report_lines"]


def _effect_text(rec: ProbeRecord | None, symptoms: Symptoms, temperature: Any) -> str:
    if rec is None:
        return "not measured alone"
    if rec.error is not None:
        return f"does not run alone ({rec.error})"
    parts = []
    for name, (good, _) in symptoms.exact.items():
        value = exact_value(rec.exact.get(name), temperature)
        if value is not None:
            parts.append(f"{name} {good:.4g} -> {value:.4g} (exact)" if value != good else f"{name} = good")
    if rec.ratios:
        parts.append(f"tok/s {ratio_text(rec.ratios)}")
    return "; ".join(parts) or "no change measured"


def report_lines(result: BisectResult) -> list[str]:
    """The bisect report, fixed-width lines: the symptoms, each cause with its culprits and its effect alone, what
    was harmless, what no profile can apply, then launches and server-seconds.

    Example (the incident on the reference server)::

        bisect: 2 causes (3 of 7 differences) in 11 launches, 151 server-s, 2.9 min
        symptoms: accept_length 2.333 -> 2.032 (exact); tok/s x0.402 of good [...]: slower
        cause 1: accept_length 2.333 -> 2.032 (exact); tok/s x0.84 of good [...]
          speculative.aux_hidden_state_layer_ids: (absent) -> [-1, 1, 3]
          extra_args --ref-embedding-capture: (absent) -> patched
        cause 2: tok/s x0.52 of good [...]
          env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 20
        harmless: env HF_HUB_OFFLINE: (unset) -> 1; ...
    """
    s = result.symptoms
    temperature = result.temperature
    symptom_parts = [f"{name} {g:.4g} -> {b:.4g} (exact)" for name, (g, b) in s.exact.items()]
    symptom_parts.append(s.throughput_line)
    cost = (f"{result.launches} launches, {result.server_s:.0f} server-s, "
            f"{result.wall_s / 60:.1f} min")  # fmt: skip
    lines = []
    if not s.regressed:
        lines.append(f"bisect: no regression reproduced here ({cost})")
        lines.append(f"symptoms: none: {'; '.join(symptom_parts)}")
    else:
        n = len(result.causes)
        lines.append(f"bisect: {n} cause{'s' if n != 1 else ''} ({len(result.culprits)} of {len(result.diffs)} "
                     f"differences) in {cost}")  # fmt: skip
        lines.append(f"symptoms: {'; '.join(symptom_parts)}")
        for k, cause in enumerate(result.causes, 1):
            alone = result.record(cause)
            lines.append(f"cause {k}: {_effect_text(alone, s, temperature)}")
            for i in cause:
                lines.append(f"  {result.diffs[i].line()}")
                if len(result.culprits) > 1:
                    without = result.record(c for c in result.culprits if c != i)
                    lines.append(f"    without it: {_effect_text(without, s, temperature)}")
        harmless = [d.line() for i, d in enumerate(result.diffs) if i not in result.culprits]
        if harmless:
            lines.append(f"harmless: {'; '.join(harmless)}")
    for item in result.fixed:
        lines.append(f"not bisectable here: {item.line()}")
    unresolved = [r for r in result.records if r.verdict is not None and r.verdict.outcome == "UNRESOLVED"]
    if unresolved:
        first = unresolved[0]
        lines.append(f"unresolved: {len(unresolved)} probe{'s' if len(unresolved) != 1 else ''}, taken as not "
                     f"reproducing (first: {first.label}: {first.verdict.line if first.verdict else ''})")  # fmt: skip
    return lines


def bisect_hint(diff: Sequence[str], good_run: str, bad_run: str, test_id: str, good_test: str | None = None) -> str:
    """The line a stored-compare failure adds when its fingerprint diff has more than one entry, else ``""``:
    ``bisect the 3 differences: python -m pytest_specdec bisect --good RUN --bad RUN --test ID`` (and
    ``--good-test ID`` when the baseline was found under another test id, ``--specdec-compare-profile``)."""
    if len(diff) <= 1 or not good_run or not bad_run:
        return ""
    other = f" --good-test {shlex.quote(good_test)}" if good_test and good_test != test_id else ""
    return (f"bisect the {len(diff)} differences: python -m pytest_specdec bisect --good {good_run} --bad {bad_run} "
            f"--test {shlex.quote(test_id)}{other}")  # fmt: skip
