"""The bisect report (fixed-width lines), and the hint a stored-compare failure gives to run a bisect."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from pytest_specdec.bisection.search import BisectResult, Cause, ProbeRecord
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
        parts.append(f"tok/s {ratio_text(rec.ratios, rec.versus)}")
    return "; ".join(parts) or "no change measured"


def _cause_record(result: BisectResult, cause: Cause, subset: tuple[int, ...]) -> ProbeRecord | None:
    """The record of ``subset`` measured in ``cause``'s search (GOOD/BAD's when it is all or nothing)."""
    if len(subset) in (0, len(result.diffs)):
        return result.record(subset, "setup")
    return result.record(subset, cause.symptom) or result.record(subset)


def _cause_lines(result: BisectResult, k: int, cause: Cause) -> list[str]:
    s = result.symptoms
    base = result.causes[0].culprits if cause.symptom == "throughput" and cause.versus != "good" else ()
    whole = tuple(sorted((*base, *cause.culprits)))
    alone = _cause_record(result, cause, whole)
    if cause.symptom == "exact":
        head = f"cause {k} (exact symptom): {_effect_text(alone, s, result.temperature)}"
    else:
        effect = alone.ratios if alone is not None and alone.phase == "throughput" else []
        shown = f"tok/s {ratio_text(effect, cause.versus)}" if effect else "tok/s: the rest of bad (not measured alone)"
        head = f"cause {k} (tok/s symptom{', cause 1 on both sides' if base else ''}): {shown}"
    lines = [head]
    for i in cause.culprits:
        lines.append(f"  {result.diffs[i].line()}")
        if len(cause.culprits) > 1:
            without = _cause_record(result, cause, tuple(c for c in whole if c != i))
            lines.append(f"    without it: {_effect_text(without, s, result.temperature)}")
    return lines


def report_lines(result: BisectResult) -> list[str]:
    """The bisect report, fixed-width lines: the symptoms, each cause with its culprits and its effect (the exact
    cause's on both symptoms against GOOD, the throughput cause's against GOOD + cause 1), what was harmless, what
    no profile can apply, the probes left unresolved; when stopped, what is known and the candidates left.

    Example (the incident on the reference server)::

        bisect: 2 causes (2 of 5 differences) in 5 launches, 160 server-s, 2.9 min
        symptoms: accept_length 2.333 -> 2.032 (exact); tok/s x0.402 of good [...]: slower beyond 8% (FAILED)
        cause 1 (exact symptom): accept_length 2.333 -> 2.032 (exact); tok/s x0.84 of good [...]
          speculative.aux_hidden_state_layer_ids: (absent) -> [0, 1, 2]
        remainder: bad x0.402 vs cause 1 alone x0.84 of good: ...: slower beyond 8%; tok/s bisected with ...
        cause 2 (tok/s symptom, cause 1 on both sides): tok/s x0.48 of good + cause 1 [...]
          env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 3.5
        harmless: env HF_HUB_OFFLINE: (unset) -> 1; ...
    """
    s = result.symptoms
    symptom_parts = [f"{name} {g:.4g} -> {b:.4g} (exact)" for name, (g, b) in s.exact.items()]
    symptom_parts.append(s.throughput_line)
    cost = (f"{result.launches} launch{'es' if result.launches != 1 else ''}, {result.server_s:.0f} server-s, "
            f"{result.wall_s / 60:.1f} min")  # fmt: skip
    lines = []
    n = len(result.causes)
    total = len(result.diffs)
    of = f"{len(result.culprits)} of {total} difference{'s' if total != 1 else ''}"
    found = f"{n} cause{'s' if n != 1 else ''} ({of})"
    known = found if n else "no cause yet"
    if result.stopped:
        lines.append(f"bisect stopped ({result.stopped}) after {cost}; known so far: {known}")
        lines.append(f"symptoms: {'; '.join(symptom_parts)}")
    elif not s.regressed:
        lines.append(f"bisect: no regression reproduced here ({cost})")
        lines.append(f"symptoms: none: {'; '.join(symptom_parts)}")
    else:
        lines.append(f"bisect: {found} in {cost}")
        lines.append(f"symptoms: {'; '.join(symptom_parts)}")
    for k, cause in enumerate(result.causes, 1):
        if cause.symptom == "throughput" and result.remainder:
            lines.append(f"remainder: {result.remainder}")
        lines += _cause_lines(result, k, cause)
    if result.remainder and all(c.symptom != "throughput" for c in result.causes) and not result.stopped:
        lines.append(f"remainder: {result.remainder}")
    if result.unsplit:
        lines.append(result.unsplit)
    for symptom, left in result.open_searches:
        what = "exact symptom" if symptom == "exact" else "tok/s symptom"
        listed = "; ".join(result.diffs[i].line() for i in left)
        lines.append(f"still suspected for the {what}: {len(left)} difference{'s' if len(left) != 1 else ''} (any "
                     f"culprit is among them; none is proven): {listed}")  # fmt: skip
    if s.regressed and not result.stopped:
        suspected = {i for _, left in result.open_searches for i in left}
        harmless = [d.line() for i, d in enumerate(result.diffs) if i not in result.culprits and i not in suspected]
        if harmless and s.level is None and s.throughput == "undecided":
            # No tok/s verdict, so no tok/s search: these are cleared of the exact symptom only.
            lines.append(f"not the exact symptom's cause (tok/s undecided, not bisected): {'; '.join(harmless)}")
        elif harmless:
            lines.append(f"harmless: {'; '.join(harmless)}")
    if result.stopped and not s.regressed and not result.causes:
        lines.append(f"not bisected: {'; '.join(d.line() for d in result.diffs)}")
    for item in result.fixed:
        lines.append(f"not bisectable here: {item.line()}")
    unresolved = [r for r in result.records if r.verdict is not None and r.verdict.outcome == "UNRESOLVED"]
    if unresolved:
        first = unresolved[0]
        # ddmin took the unresolved probes as not reproducing, unless the search stopped at one (``unsplit``).
        taken = "" if result.unsplit else ", taken as not reproducing"
        lines.append(f"unresolved: {len(unresolved)} probe{'s' if len(unresolved) != 1 else ''}{taken} "
                     f"(first: {first.label}: {first.verdict.line if first.verdict else ''})")  # fmt: skip
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
