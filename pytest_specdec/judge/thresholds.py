"""Thresholds from a profile and a ``@pytest.mark.specdec(...)`` marker -> a verdict, one readable line per metric."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import ValidationError

from pytest_specdec.core.records import RunMetrics
from pytest_specdec.judge.tails import tail_checks
from pytest_specdec.profiles.loader import expected_value
from pytest_specdec.profiles.schema import MinSpeedup, Thresholds

__all__ = [
    "FLOOR_RULES",
    "Check",
    "FloorRule",
    "ThresholdChecks",
    "evaluate",
    "merge_marker",
    "overrides",
    "shown_against",
    "sweep_not_applicable",
    "tail_verdicts",
]

def shown_against(measured: float, threshold: float) -> tuple[str, str]:
    """``(measured, margin)`` as a threshold line prints them, ``("2.2857", "margin -0.0002857, -0.012%")``: the
    figure in 4 significant digits, more when those would read as the threshold itself (``accept_length 2.286 < min
    2.286`` for 2.2857 against 2.286 read as equal figures failing); the margin (measured - threshold, in the
    threshold's unit) in 4 significant digits, whole numbers from 10^4 on (``-99939``, not ``-9.994e+04``, for
    61.2 tok/s against ``min_tok_s: 100000``), and relative to the threshold."""
    digits = 4
    while digits < 12 and measured != threshold and float(f"{measured:.{digits}g}") == float(f"{threshold:g}"):
        digits += 1
    diff = measured - threshold
    margin = f"margin {diff:+.0f}" if 1e4 <= abs(diff) < 1e15 else f"margin {diff:+.4g}"
    rel = diff / threshold * 100 if threshold else None
    pct = "" if rel is None else f", {rel:+.1f}%" if abs(rel) >= 0.1 or rel == 0 else f", {rel:+.2g}%"
    return f"{measured:.{digits}g}", margin + pct


class FloorRule(NamedTuple):
    """How one scalar floor or ceiling reads its figure: ``RunMetrics`` field (or ``by_category`` entry key),
    comparison, check label, unit, and whether only a speculative profile has it."""

    field: str
    op: str
    label: str
    unit: str
    spec_only: bool


#: threshold key -> its rule; the keys ``Thresholds`` and ``CategoryThresholds`` share, decided on per-repeat
#: values by ``verdict.sequential_checks`` and on the median here where those judged nothing.
FLOOR_RULES: dict[str, FloorRule] = {
    "min_accept_length": FloorRule("accept_length", ">=", "accept_length", "tok/verify", True),
    "min_accept_rate": FloorRule("accept_rate", ">=", "accept_rate", "", True),
    "min_tok_s": FloorRule("output_tok_s", ">=", "output_tok_s", "tok/s", False),
    "max_ttft_ms": FloorRule("ttft_ms_p50", "<=", "ttft_ms p50", "ms", False),
    "max_itl_ms": FloorRule("itl_ms_p50", "<=", "itl_ms p50", "ms", False),
    "max_tpot_ms": FloorRule("tpot_ms_p50", "<=", "tpot_ms p50", "ms", False),
}


#: Why a speculative profile's accept floor fails when the run has no accept figure at all: SGLang sends
#: ``meta_info.spec_verify_ct`` only with speculative decoding on, so its absence is a server that did not speculate.
NOT_SPECULATING = (
    "no request reported a verify step (meta_info.spec_verify_ct) and no accept counter was read: the server ran "
    "without speculative decoding (check the --speculative-* flags in its log) or does not report it"
)

def merge_marker(profile_thresholds: Thresholds, marker_kwargs: dict[str, Any]) -> Thresholds:
    """Overlay marker keyword arguments on the profile's thresholds, key by key (the marker wins).

    :raises ValueError: an unknown key or an invalid value, with a message naming the key, the value and the valid keys.
    """
    valid = sorted(Thresholds.model_fields)
    unknown = sorted(set(marker_kwargs) - set(valid))
    if unknown:
        close = difflib.get_close_matches(unknown[0], valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        given = ", ".join(f"{k}={marker_kwargs[k]!r}" for k in unknown)
        raise ValueError(
            f"unknown threshold {', '.join(map(repr, unknown))} ({hint}valid: {', '.join(valid)}, tolerances); "
            f"got {given}"
        )
    positions = marker_kwargs.get("min_accept_rate_at")
    if positions is not None and not isinstance(positions, dict):
        raise ValueError(
            f"min_accept_rate_at={positions!r}: expected a mapping of draft position to rate like "
            "min_accept_rate_at={1: 0.7, 2: 0.5}"
        )
    categories = marker_kwargs.get("categories")
    if categories is not None and not (
        isinstance(categories, dict) and all(isinstance(v, dict) for v in categories.values())
    ):
        raise ValueError(
            f"categories={categories!r}: expected a mapping of category to thresholds like "
            "categories={'code': {'min_accept_length': 2.5}}"
        )
    speedup = marker_kwargs.get("min_speedup")
    if speedup is not None and not isinstance(speedup, dict | MinSpeedup):
        raise ValueError(
            f"min_speedup={speedup!r}: expected a mapping like min_speedup={{'vs': 'baseline', 'ratio': 1.1}}"
        )
    data = profile_thresholds.model_dump(exclude_none=True)
    data.update({k: v for k, v in marker_kwargs.items() if k != "categories"})
    if categories:
        # Category by category: the marker's categories replace the profile's of the same name only.
        data["categories"] = {**data.get("categories", {}), **categories}
    try:
        return Thresholds.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        field = Thresholds.model_fields.get(str(err["loc"][0])) if len(err["loc"]) == 1 else None
        kind = str(err["type"])
        typed = kind.endswith(("_type", "_parsing", "_from_float", "than", "equal")) and kind != "bool_type"
        if field is not None and typed:
            # The words the profile loader uses ("expected a number >= 1"), not pydantic's ("Input should be ...").
            msg = f"expected {expected_value(field)}"
        raise ValueError(f"{key}={err.get('input')!r}: {msg}") from None


def _shown(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, MinSpeedup):
        return f"{value.ratio:g}x vs {value.vs}"
    return f"{value:g}" if isinstance(value, float | int) else str(value)


def overrides(profile_thresholds: Thresholds, merged: Thresholds) -> list[str]:
    """What a marker changed, one item per key whose value differs from the profile's:
    ``min_accept_length 2.4 (profile: 2.6)``, ``max_ttft_ms 500 (profile: not set)``.

    :param merged: :func:`merge_marker`'s result for the same profile thresholds.
    """
    return [
        f"{key} {_shown(getattr(merged, key))} (profile: {_shown(getattr(profile_thresholds, key))})"
        for key in Thresholds.model_fields
        if getattr(merged, key) != getattr(profile_thresholds, key)
    ]


@dataclass(frozen=True, slots=True)
class Check:
    """One threshold against one measured value. ``passed`` is None when not applicable (e.g. no speculation)."""

    key: str
    label: str
    op: str
    threshold: float
    measured: float | None
    unit: str
    passed: bool | None
    note: str = ""
    #: The whole line, when the check words it itself (a paired speedup: ``speedup.Speedup.line``).
    text: str = ""
    #: A sequential verdict that spent its budget without deciding (``sequential.py``): passes, reported as
    #: ``undecided``.
    undecided: bool = False
    #: Why measuring stopped before this check was decided (the test had already failed decisively,
    #: ``verdict.judge_item``): passes, reported as ``not measured``, and is not counted as undecided.
    stopped: str = ""

    def line(self) -> str:
        """``accept_length 1.94 < min 2.20 (margin -0.26, -11.8%)`` style, one line."""
        if self.text:
            return self.text
        kind = "min" if self.op == ">=" else "max"
        if self.passed is None:
            return f"{self.label}: {kind} {self.threshold:g} not applicable ({self.note})"
        if self.measured is None:
            return f"{self.label}: {kind} {self.threshold:g} cannot be checked: {self.note}"
        shown, margin = shown_against(self.measured, self.threshold)
        sym = ("<" if self.op == ">=" else ">") if not self.passed else self.op
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.label} {shown}{unit} {sym} {kind} {self.threshold:g} ({margin})"


@dataclass(frozen=True, slots=True)
class ThresholdChecks:
    """All checks of one test; ``failed`` lists the ones that missed."""

    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.passed is False)

    def outcomes(self) -> dict[str, str]:
        """Threshold key -> ``"passed"``, ``"FAILED: <line>"``, ``"undecided: <line>"``, ``"not measured: <line>"``
        or ``"n/a: <why>"``, for the result record (``ResultRecord.checks``) and the sweep table/plot."""
        out = {}
        for c in self.checks:
            # One entry per position / category: "min_accept_rate_at[2]", "min_accept_length[code]".
            key = f"{c.key.split('_', 1)[0]}_{c.label}" if "[" in c.label else c.key
            if c.passed is None:
                out[key] = f"n/a: {c.note}"
            elif c.undecided:
                out[key] = f"undecided: {c.line()}"
            elif c.stopped:
                out[key] = f"not measured: {c.line()}"
            else:
                out[key] = "passed" if c.passed else f"FAILED: {c.line()}"
        return out

    def message(self, context: str) -> str:
        """The failure text: one line per missed threshold, then the context (profile, requests)."""
        lines = [c.line() for c in self.failed]
        return "\n".join(f"{line} [{context}]" for line in lines)


def evaluate(
    thresholds: Thresholds,
    metrics: RunMetrics,
    *,
    speculative: bool,
    speedup: float | None = None,
    speedup_check: Check | None = None,
    sweep_steps: int | None = None,
    configured_steps: int | None = None,
    judged: Mapping[str, Check] | None = None,
) -> ThresholdChecks:
    """Compare ``metrics`` with every set threshold.

    Accept-length/-rate thresholds on a profile without speculation are reported as not applicable, not failed.
    ``min_accept_rate_at`` checks ``metrics.accept_rate_at`` position by position (label ``accept_rate_at[k]``); a
    position the server does not draft fails, saying how many it drafts. ``categories`` checks each category's
    figures in ``metrics.by_category`` (label ``accept_length[code]``); a category the run has no request of fails.
    At a sweep point (``sweep_steps`` = the point's ``num_steps``), ``min_accept_length`` above ``num_steps + 1`` is
    not applicable either: one verify step emits at most ``num_steps`` accepted drafts plus the bonus token, so the
    point would fail by construction (min 2.4 at num_steps 1, where accept length <= 2). A profile of its own with
    such a threshold still fails: there it is a configuration mistake, not a sweep's range. Nor is it applicable at a
    point with fewer steps than the profile's own (``configured_steps``): the floor was set for that many steps, and
    accept length grows with steps (measured on real SGLang 0.5.17: 2.47 at 2 steps, the sweep's fastest point, vs a
    2.5 floor set at 3 steps, where 2.80 was measured); at as many steps or more the floor is a conservative one.
    ``speedup_check`` is the ``min_speedup`` check already judged on paired arms (``speedup.Speedup.check``; the
    plugin always gives it); else ``speedup`` is this profile's output tok/s over the ``min_speedup.vs`` profile's,
    or None when that profile was not measured. ``judged`` holds checks already decided by a sequential verdict
    (``verdict.sequential_checks``), keyed by threshold key (``min_tok_s``) or, for per-position and per-category
    floors, by label (``accept_rate_at[1]``, ``accept_length[code]``); they replace the median rule there. The
    percentile ceilings and ``min_goodput`` are judged on their evidence (:func:`tail_verdicts`): passed, FAILED or
    undecided (``judged`` holds them too, keyed by threshold key, where a verdict judged them already). A
    speculative profile whose run has no accept length at all (``silent``: no verify step reported, no accept counter
    read) fails every accept floor it sets (:data:`NOT_SPECULATING`), overall, per position and per category: a
    server that stopped speculating must not pass them as "not reported". The sweep-point exemptions hold for the
    per-category floors too.
    """
    silent = speculative and metrics.accept_length is None
    checks: list[Check] = []
    for key, (field, op, label, unit, spec_only) in FLOOR_RULES.items():
        threshold = getattr(thresholds, key)
        if threshold is None:
            continue
        measured = getattr(metrics, field)
        if spec_only and not speculative:
            checks.append(Check(key, label, op, threshold, None, unit, None, "profile runs no speculative decoding"))
            continue
        note = sweep_not_applicable(key, threshold, sweep_steps, configured_steps)
        if note:
            checks.append(Check(key, label, op, threshold, measured, unit, None, note))
            continue
        if judged and key in judged:
            checks.append(judged[key])
            continue
        if measured is None and spec_only and silent:
            checks.append(Check(key, label, op, threshold, None, unit, False, NOT_SPECULATING))
            continue
        if measured is None:
            checks.append(Check(key, label, op, threshold, None, unit, None, "not reported by the server"))
            continue
        passed = measured >= threshold if op == ">=" else measured <= threshold
        checks.append(Check(key, label, op, threshold, float(measured), unit, passed))
    judged = judged or {}
    checks.extend(_position_checks(thresholds.min_accept_rate_at, metrics.accept_rate_at, speculative,
                                   sweep_steps=sweep_steps, judged=judged, silent=silent))  # fmt: skip
    checks.extend(_category_checks(thresholds, metrics, speculative, judged, silent=silent, sweep_steps=sweep_steps,
                                   configured_steps=configured_steps))  # fmt: skip
    checks.extend(judged.get(key, check) for key, check in tail_verdicts(thresholds, metrics).items())
    if thresholds.min_speedup is not None and speedup_check is not None:
        checks.append(speedup_check)
    elif thresholds.min_speedup is not None:
        ms = thresholds.min_speedup
        label = f"speedup vs {ms.vs}"
        if speedup is None:
            note = f"profile {ms.vs!r} was not measured in this session (add it to --server-profile, before this one)"
            checks.append(Check("min_speedup", label, ">=", ms.ratio, None, "x", None, note))
        else:
            checks.append(Check("min_speedup", label, ">=", ms.ratio, speedup, "x", speedup >= ms.ratio))
    return ThresholdChecks(tuple(checks))


def tail_verdicts(thresholds: Thresholds, metrics: RunMetrics) -> dict[str, Check]:
    """The percentile ceilings and ``min_goodput`` as checks, keyed by threshold key (``max_ttft_ms_p99``), judged
    on ``metrics.tails`` (``tails.tail_checks``); ``verdict`` judges them once per profile through ``judged``."""
    return {t.key: Check(t.key, t.label, t.op, t.threshold, t.measured, t.unit, t.passed, t.note, t.text, t.undecided)
            for t in tail_checks(thresholds, metrics)}  # fmt: skip


def sweep_not_applicable(key: str, threshold: float, sweep_steps: int | None, configured_steps: int | None) -> str:
    """Why ``key`` does not apply at a sweep point of ``sweep_steps`` (``""`` when it does): a ``min_accept_length``
    above num_steps + 1, or set for more steps than the point's (see :func:`evaluate`)."""
    if key != "min_accept_length" or sweep_steps is None:
        return ""
    if threshold > sweep_steps + 1:
        return f"at num_steps {sweep_steps} accept length is at most {sweep_steps + 1}"
    if configured_steps is not None and sweep_steps < configured_steps:
        return f"the floor is set for num_steps {configured_steps}; accept length grows with steps"
    return ""


def _position_checks(
    floors: dict[int, float] | None,
    rates: Any,
    speculative: bool,
    suffix: str = "",
    *,
    sweep_steps: int | None = None,
    judged: Mapping[str, Check] | None = None,
    silent: bool = False,
) -> list[Check]:
    """One check per ``min_accept_rate_at`` entry against the unconditional per-position rate; at a sweep point a
    position beyond its ``num_steps`` is not applicable (never drafted there)."""
    checks: list[Check] = []
    rates = tuple(rates or ())
    for position, floor in sorted((floors or {}).items()):
        label = f"accept_rate_at[{position}]{suffix}"
        key = "min_accept_rate_at"
        if not speculative:
            checks.append(Check(key, label, ">=", floor, None, "", None, "profile runs no speculative decoding"))
        elif sweep_steps is not None and position > sweep_steps:
            note = f"at num_steps {sweep_steps} only {sweep_steps} position(s) are drafted"
            checks.append(Check(key, label, ">=", floor, None, "", None, note))
        elif not rates and silent:
            checks.append(Check(key, label, ">=", floor, None, "", False, NOT_SPECULATING))
        elif not rates:
            note = "per-position acceptance not reported by the server"
            checks.append(Check(key, label, ">=", floor, None, "", None, note))
        elif position > len(rates):
            note = (
                f"the server drafts {len(rates)} position(s) per verify step; lower the position or raise "
                "speculative num_steps/num_draft_tokens"
            )
            checks.append(Check(key, label, ">=", floor, None, "", False, note))
        elif judged and label in judged:
            checks.append(judged[label])
        else:
            measured = float(rates[position - 1])
            checks.append(Check(key, label, ">=", floor, measured, "", measured >= floor))
    return checks


def _category_checks(
    thresholds: Thresholds,
    metrics: RunMetrics,
    speculative: bool,
    judged: Mapping[str, Check],
    *,
    silent: bool = False,
    sweep_steps: int | None = None,
    configured_steps: int | None = None,
) -> list[Check]:
    """The ``categories:`` thresholds against ``metrics.by_category``; labels carry the category
    (``accept_length[code]``). A category with no request in the run fails, naming the categories it has."""
    checks: list[Check] = []
    by = metrics.by_category or {}
    for category, limits in sorted((thresholds.categories or {}).items()):
        entry = by.get(category)
        set_keys = {k: v for k, v in limits.model_dump(exclude_none=True).items() if k != "min_accept_rate_at"}
        if entry is None:
            have = ", ".join(sorted(by)) or "none: no prompt of the workload has a category"
            note = f"no request of category {category!r} in this run (categories: {have})"
            for key, threshold in set_keys.items():
                _, op, label, unit, _ = FLOOR_RULES[key]
                checks.append(Check(key, f"{label}[{category}]", op, threshold, None, unit, False, note))
            if limits.min_accept_rate_at:
                checks.append(Check("min_accept_rate_at", f"accept_rate_at[{category}]", ">=",
                                    min(limits.min_accept_rate_at.values()), None, "", False, note))  # fmt: skip
            continue
        for key, threshold in set_keys.items():
            field, op, label, unit, spec_only = FLOOR_RULES[key]
            name = f"{label}[{category}]"
            measured = entry.get(field)
            not_here = sweep_not_applicable(key, threshold, sweep_steps, configured_steps)
            if spec_only and not speculative:
                checks.append(Check(key, name, op, threshold, None, unit, None, "profile runs no speculative decoding"))
            elif not_here:
                checks.append(Check(key, name, op, threshold, measured, unit, None, not_here))
            elif measured is None and spec_only and silent:
                checks.append(Check(key, name, op, threshold, None, unit, False, NOT_SPECULATING))
            elif measured is None:
                checks.append(Check(key, name, op, threshold, None, unit, None, "not reported by the server"))
            elif name in judged:
                checks.append(judged[name])
            else:
                passed = measured >= threshold if op == ">=" else measured <= threshold
                checks.append(Check(key, name, op, threshold, float(measured), unit, passed))
        checks.extend(_position_checks(limits.min_accept_rate_at, entry.get("accept_rate_at"), speculative,
                                       f"[{category}]", sweep_steps=sweep_steps, judged=judged,
                                       silent=silent))  # fmt: skip
    return checks
