"""Baseline-compare tolerances: how much a metric may worsen, parsed from strings and layered over the defaults.

Tolerance strings (``parse_tolerances``)::

    output_tok_s:5%       relative: 5 % of the baseline median (above 100 % allowed: 150%)
    accept_length:0.02    absolute, in the metric's unit
    ttft_ms:10%+5         both: 10 % of the baseline plus 5 ms
    ttft_ms_p99:20%       one statistic field; a metric name (ttft_ms) covers all its fields (mean, p50, p90, p99)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_specdec.core.metric_table import METRICS, MetricSpec

__all__ = [
    "DEFAULT_TOLERANCES",
    "Tolerance",
    "field_specs",
    "format_tolerances",
    "layered_tolerances",
    "merge_tolerances",
    "parse_tolerances",
]
_FORMAT_HELP = "expected METRIC:TOL with TOL as 5% (relative), 0.02 (absolute) or 10%+5 (both), e.g. output_tok_s:5%"
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_TOL_RE = re.compile(rf"^(?:(?P<rel>{_NUMBER})%(?:\+(?P<both_abs>{_NUMBER}))?|(?P<abs>{_NUMBER}))$")


@dataclass(frozen=True, slots=True)
class Tolerance:
    """Allowed worsening of one metric: ``rel * |baseline median| + abs`` (either may be 0).

    >>> Tolerance(rel=0.10, abs=5.0).allowed(50.0)
    10.0
    """

    rel: float = 0.0
    abs: float = 0.0

    def allowed(self, baseline: float) -> float:
        """The largest worsening (in the metric's unit) that still passes."""
        return self.rel * abs(baseline) + self.abs

    def __str__(self) -> str:
        rel = f"{self.rel * 100:g}%" if self.rel else ""
        if rel and self.abs:
            return f"{rel}+{self.abs:g}"
        return rel or f"{self.abs:g}"


def field_specs() -> dict[str, MetricSpec]:
    """``RunMetrics`` field -> its metric (``ttft_ms_p50`` -> the ``ttft_ms`` spec): the keys a tolerance may name,
    and each compared field's direction."""
    return {f: spec for spec in METRICS.values() for f in spec.fields}


#: Every compare checks these fields; ini ``specdec_tolerances``, the profile and the marker change a field's
#: tolerance, never remove it (:func:`merge_tolerances`).
DEFAULT_TOLERANCES: Mapping[str, Tolerance] = {
    "output_tok_s": Tolerance(rel=0.05),
    "accept_length": Tolerance(rel=0.02),
    "accept_rate": Tolerance(abs=0.02),
    "ttft_ms_p50": Tolerance(rel=0.10),
    "itl_ms_p50": Tolerance(rel=0.10),
    "tpot_ms_p50": Tolerance(rel=0.10),
}


def parse_tolerances(spec: str | Sequence[str]) -> dict[str, Tolerance]:
    """Parse ``"output_tok_s:5%, accept_length:0.02"`` (or a list of such strings; comma or whitespace separated).

    :returns: metric name or field -> Tolerance, in input order (a later token for the same key wins).
    :raises ValueError: ``bad tolerance 'TOKEN': expected METRIC:TOL with TOL as 5% (relative), 0.02 (absolute)
        or 10%+5 (both), e.g. output_tok_s:5%``, or ``bad tolerance 'TOKEN': unknown metric 'NAME' (known: ...)``.
    """
    parts = [spec] if isinstance(spec, str) else list(spec)
    tokens = [t for part in parts for t in re.split(r"[,\s]+", part.strip()) if t]
    known = set(METRICS) | set(field_specs())
    out: dict[str, Tolerance] = {}
    for token in tokens:
        name, sep, value = token.partition(":")
        match = _TOL_RE.match(value.strip()) if sep else None
        if not name or match is None:
            raise ValueError(f"bad tolerance {token!r}: {_FORMAT_HELP}")
        if name not in known:
            listed = ", ".join(sorted(METRICS))
            raise ValueError(
                f"bad tolerance {token!r}: unknown metric {name!r} (known: {listed}, or a field like ttft_ms_p99)"
            )
        if match.group("abs") is not None:
            tol = Tolerance(abs=float(match.group("abs")))
        else:
            tol = Tolerance(rel=float(match.group("rel")) / 100.0, abs=float(match.group("both_abs") or 0.0))
        out[name] = tol
    return out


def format_tolerances(tolerances: Mapping[str, Tolerance]) -> str:
    """The inverse of :func:`parse_tolerances`: ``"output_tok_s:5% accept_length:2%"``."""
    return " ".join(f"{name}:{tol}" for name, tol in tolerances.items())


def _resolve(tolerances: Mapping[str, Tolerance]) -> dict[str, Tolerance]:
    """Field -> tolerance in METRICS order; a field key beats its metric's key."""
    by_field = field_specs()
    out: dict[str, Tolerance] = {}
    for fname, spec in by_field.items():
        if fname in tolerances:
            out[fname] = tolerances[fname]
        elif spec.name in tolerances:
            out[fname] = tolerances[spec.name]
    return out


def merge_tolerances(*layers: Mapping[str, Tolerance] | None) -> dict[str, Tolerance]:
    """The tolerance of every compared field: :data:`DEFAULT_TOLERANCES`, then each layer over it, key by key.

    A layer never switches the other checks off: ``output_tok_s:3%`` changes the tok/s tolerance and leaves accept
    length, accept rate and the latency p50s at their defaults. Within one layer a field key beats its metric's key
    (``ttft_ms:20% ttft_ms_p99:50%``); across layers the later one wins for every field it names, so a marker's
    ``ttft_ms:20%`` overrides a profile's ``ttft_ms_p50:5%``. The plugin's layers, in order: ini
    ``specdec_tolerances``, the profile's ``tolerances:``, the marker's ``tolerances=``.

    Example: ``merge_tolerances({"output_tok_s": Tolerance(rel=0.03)})`` -> output_tok_s 3 %, accept_length 2 %,
    accept_rate 0.02, ttft/itl/tpot p50 10 %.

    :returns: field (``RunMetrics`` attribute) -> Tolerance, in ``METRICS`` order.
    """
    merged = _resolve(DEFAULT_TOLERANCES)
    for layer in layers:
        if layer:
            merged.update(_resolve(layer))
    return {fname: merged[fname] for fname in field_specs() if fname in merged}


def layered_tolerances(*specs: str | Sequence[str]) -> dict[str, Tolerance]:
    """The tolerances of a test from its layers, lowest first (ini ``specdec_tolerances``, then the profile's
    ``tolerances``, then the marker's): each layer changes the fields it names; the defaults stay checked
    (``merge_tolerances``).

    :raises ValueError: a layer that does not parse (``parse_tolerances``).
    """
    return merge_tolerances(*(parse_tolerances(spec) for spec in specs))
