"""Baseline compare: per-metric direction and tolerance, significance over repeats, and the fingerprint diff.

A row regresses when the median moved in the metric's worse direction (``metrics.METRICS[...].higher_is_better``)
by more than its tolerance *and* ``stats.worse_test`` finds the shift significant over the per-repeat values
(the asv rule: ``asv compare`` flags a change beyond ``--factor`` only when it is also statistically significant,
``asv/commands/compare.py``). Unlike pytest-benchmark's ``--benchmark-compare-fail`` (seconds only, larger = worse,
session-wide failure) each metric has its own direction and tolerance, and each test fails on its own.

Tolerance strings (``parse_tolerances``)::

    output_tok_s:5%       relative: 5 % of the baseline median (above 100 % allowed: 150%)
    accept_length:0.02    absolute, in the metric's unit
    ttft_ms:10%+5         both: 10 % of the baseline plus 5 ms
    ttft_ms_p99:20%       one statistic field; a metric name (ttft_ms) covers all its fields (mean, p50, p90, p99)
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pytest_specdec.core import hoststate, stats
from pytest_specdec.core.errors import CompareError
from pytest_specdec.core.metric_table import METRICS, MetricSpec
from pytest_specdec.core.table import Column, text_table
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile

__all__ = [
    "CompareRow",
    "Comparison",
    "DEFAULT_TOLERANCES",
    "RunComparison",
    "Tolerance",
    "WORKLOAD_KEYS",
    "calibrate_noise",
    "calibrate_proposal",
    "compare_command",
    "compare_results",
    "compare_runs",
    "fingerprint_diff",
    "format_tolerances",
    "layered_tolerances",
    "load_pair",
    "merge_tolerances",
    "paired_ratios",
    "parse_tolerances",
    "profile_mapper",
    "read_noise",
    "speedup_by_concurrency",
    "speedup_failures",
    "swap_profile_id",
    "workload_differences",
]

_FORMAT_HELP = "expected METRIC:TOL with TOL as 5% (relative), 0.02 (absolute) or 10%+5 (both), e.g. output_tok_s:5%"
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_TOL_RE = re.compile(rf"^(?:(?P<rel>{_NUMBER})%(?:\+(?P<both_abs>{_NUMBER}))?|(?P<abs>{_NUMBER}))$")
#: Workload keys whose difference makes two results incomparable (``fingerprint["workload"]``) — refused
#: unless forced. ``prompt_hash`` is checked too.
WORKLOAD_KEYS = ("max_new_tokens", "concurrency", "num_requests", "temperature", "api")


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


def _field_specs() -> dict[str, MetricSpec]:
    """``RunMetrics`` field -> its metric (``ttft_ms_p50`` -> the ``ttft_ms`` spec)."""
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
    known = set(METRICS) | set(_field_specs())
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
    by_field = _field_specs()
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
    return {fname: merged[fname] for fname in _field_specs() if fname in merged}


# -- fingerprint diff ---------------------------------------------------------------------------------------------


def layered_tolerances(*specs: str | Sequence[str]) -> dict[str, Tolerance]:
    """The tolerances of a test from its layers, lowest first (ini ``specdec_tolerances``, then the profile's
    ``tolerances``, then the marker's): each layer changes the fields it names; the defaults stay checked
    (``merge_tolerances``).

    :raises ValueError: a layer that does not parse (``parse_tolerances``).
    """
    return merge_tolerances(*(parse_tolerances(spec) for spec in specs))


def _show(value: Any, missing: str = "(absent)") -> str:
    if value is None:
        return missing
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


def _dict_lines(prefix: str, a: Any, b: Any, missing: str = "(absent)", skip: Iterable[str] = ()) -> list[str]:
    a = a if isinstance(a, dict) else {}
    b = b if isinstance(b, dict) else {}
    lines = []
    for key in sorted(set(a) | set(b)):
        if key in skip or a.get(key) == b.get(key):
            continue
        lines.append(f"{prefix}{key}: {_show(a.get(key), missing)} -> {_show(b.get(key), missing)}")
    return lines


def _argv_flags(argv: Any) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` -> {flag: value}; the command before the first flag is
    ``(command)``. ``--port`` is dropped: a free port is picked per run."""
    if not isinstance(argv, list):
        return {}
    flags: dict[str, str] = {}
    head: list[str] = []
    i = 0
    while i < len(argv):
        arg = str(argv[i])
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if not eq and i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
                value = str(argv[i + 1])
                i += 1
            flags[name] = value
        elif not flags:
            head.append(arg)
        i += 1
    flags.pop("--port", None)
    if head:
        flags["(command)"] = " ".join(head)
    return flags


def _gpus(value: Any) -> str | None:
    if not isinstance(value, list) or not value:
        return None
    shown = [
        f"{g.get('name')} (driver {g.get('driver')}, CUDA {g.get('cuda') or '?'})" for g in value if isinstance(g, dict)
    ]
    return ", ".join(shown) or None


def fingerprint_diff(base: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """One line per fingerprint difference, ``what: baseline -> current``, in a fixed order: versions, engine
    config, draft, env, argv, workload, hardware. Examples: ``torch: 2.13.0 -> 2.14.1``,
    ``env NCCL_PROTO: LL -> (unset)``, ``draft aux ids: [1, 3, 5] -> [2, 4, 6]``.

    :param base: ``ResultRecord.fingerprint`` of the baseline (``results.build_fingerprint``).
    :param current: the current one.
    """
    lines: list[str] = []
    if base.get("plugin_version") != current.get("plugin_version"):
        lines.append(f"pytest-specdec: {_show(base.get('plugin_version'))} -> {_show(current.get('plugin_version'))}")
    if base.get("engine") != current.get("engine"):
        lines.append(f"engine: {_show(base.get('engine'))} -> {_show(current.get('engine'))}")
    lines += _dict_lines("", base.get("packages"), current.get("packages"), skip=("error",))
    lines += _dict_lines("effective ", base.get("effective"), current.get("effective"))
    lines += _dict_lines(
        "speculative ",
        base.get("speculative"),
        current.get("speculative"),
        skip=("aux_hidden_state_layer_ids", "draft_model_path"),
    )
    bd, cd = base.get("draft") or {}, current.get("draft") or {}
    if bd.get("aux_ids") != cd.get("aux_ids"):
        lines.append(f"draft aux ids: {_show(bd.get('aux_ids'))} -> {_show(cd.get('aux_ids'))}")
    if bd.get("config_hash") != cd.get("config_hash"):
        lines.append(f"draft config hash: {_show(bd.get('config_hash'))} -> {_show(cd.get('config_hash'))}")
    if bd.get("path") != cd.get("path"):
        lines.append(f"draft path: {_show(bd.get('path'))} -> {_show(cd.get('path'))}")
    lines += _dict_lines("env ", base.get("env"), current.get("env"), missing="(unset)")
    lines += _dict_lines("argv ", _argv_flags(base.get("argv")), _argv_flags(current.get("argv")))
    if base.get("prompt_hash") != current.get("prompt_hash"):
        lines.append(
            f"prompt set hash: {_show(_short(base.get('prompt_hash')))} -> {_show(_short(current.get('prompt_hash')))}"
        )
    lines += _dict_lines("workload ", base.get("workload"), current.get("workload"))
    if _gpus(base.get("gpus")) != _gpus(current.get("gpus")):
        lines.append(
            f"gpu: {_show(_gpus(base.get('gpus')), '(none)')} -> {_show(_gpus(current.get('gpus')), '(none)')}"
        )
    if base.get("host") != current.get("host"):
        lines.append(f"host: {_show(base.get('host'))} -> {_show(current.get('host'))}")
    if base.get("url") != current.get("url"):
        lines.append(f"url: {_show(base.get('url'))} -> {_show(current.get('url'))}")
    return lines


def _short(digest: Any) -> Any:
    return digest[:12] if isinstance(digest, str) else digest


def workload_differences(base: ResultRecord, current: ResultRecord) -> list[str]:
    """What makes two records incomparable: ``prompt set hash A -> B`` and ``KEY A -> B`` for
    :data:`WORKLOAD_KEYS`; a key absent on either side (an old file) is not checked."""
    out = []
    bh, ch = base.fingerprint.get("prompt_hash"), current.fingerprint.get("prompt_hash")
    if bh is not None and ch is not None and bh != ch:
        out.append(f"prompt set hash {_short(bh)} -> {_short(ch)}")
    bw, cw = base.workload, current.workload
    for key in WORKLOAD_KEYS:
        if key in bw and key in cw and bw[key] != cw[key]:
            out.append(f"{key} {_show(bw[key])} -> {_show(cw[key])}")
    return out


# -- rows and the comparison --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One metric field: baseline and current medians over repeats, the change, and the verdict.

    ``verdict``: ``REGRESSED`` (worse beyond the limit and significant), ``noise`` (worse beyond the limit, not
    significant), ``improved`` (better beyond the limit), ``ok``, ``changed`` (an exact metric moved within its
    tolerance), ``paired`` (a raw throughput/latency value shown but judged on its ``metric / vs`` ratio row), or
    ``n/a`` (missing on a side). The limit is ``max(tolerance, NOISE_K x noise)`` (``noise``: sigma in the metric's
    unit, the larger of the baseline's repeat spread and the calibrated one; None for exact rows).
    ``basis``: ``exact`` when the row was judged equal-or-not (temperature 0, identical repeats: no statistics).
    """

    metric: str
    higher_is_better: bool
    baseline: float | None
    current: float | None
    delta: float | None
    delta_pct: float | None
    tolerance: Tolerance
    verdict: str
    test: stats.WorseTest | None = None
    noise: float | None = None
    basis: str = ""
    #: Why a row has no verdict (``n/a``), shown beside it: ``3 requests < 8 per repeat``.
    note: str = ""

    @property
    def regressed(self) -> bool:
        return self.verdict == "REGRESSED"

    @property
    def needs_confirmation(self) -> bool:
        """A regressed row that pytest measures again before failing (``verdict.judge_compare``): every one but an
        exact metric's (temperature 0, identical repeats: a deterministic difference, nothing to re-measure). A stored
        run cannot be re-measured, so the ``compare`` command reports these as suspected, not confirmed."""
        return self.regressed and self.basis != "exact"

    def limit_text(self) -> str:
        """The tolerance, with the noise limit when it is the larger: ``5%`` or ``5% < 3σ 7.2%``."""
        text = str(self.tolerance)
        if self.noise and self.baseline:
            allowed = self.tolerance.allowed(self.baseline)
            if NOISE_K * self.noise > allowed:
                text += f" < {NOISE_K:g}σ {NOISE_K * self.noise / abs(self.baseline) * 100:.1f}%"
        return text


def _num(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}"


@dataclass(frozen=True, slots=True)
class Comparison:
    """Result of :func:`compare_results`. :meth:`lines` prints the fingerprint diff first, then the table."""

    test_id: str
    profile: str
    rows: tuple[CompareRow, ...]
    diff: tuple[str, ...]
    notes: tuple[str, ...] = ()
    #: Runner-state changes between the two measurements (``hoststate.state_changes``), printed first.
    runner: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """True when at least one row regressed."""
        return any(r.regressed for r in self.rows)

    @property
    def regressions(self) -> tuple[CompareRow, ...]:
        return tuple(r for r in self.rows if r.regressed)

    @property
    def confirmed_regressions(self) -> tuple[CompareRow, ...]:
        """The regressions that need no confirming measurement (:attr:`CompareRow.needs_confirmation`)."""
        return tuple(r for r in self.rows if r.regressed and not r.needs_confirmation)

    @property
    def suspected(self) -> tuple[CompareRow, ...]:
        """The regressions pytest would measure again before failing."""
        return tuple(r for r in self.rows if r.needs_confirmation)

    def lines(self, *, unconfirmed: bool = False) -> list[str]:
        """Fixed-width text: the fingerprint diff (``fingerprint: N differences from baseline`` then one indented
        line each, or ``fingerprint: same as baseline``), notes, then one table row per metric.

        :param unconfirmed: the rows cannot be measured again (the ``compare`` command on stored runs): a regression
            that pytest would confirm first reads ``suspected, not confirmed (p=...)`` instead of ``REGRESSED``.
        """
        out = []
        if self.runner:
            out.append(f"runner state changed since the baseline: {'; '.join(self.runner)}")
        if self.diff:
            out.append(f"fingerprint: {len(self.diff)} difference{'s' if len(self.diff) != 1 else ''} from baseline")
            out += [f"  {line}" for line in self.diff]
        else:
            out.append("fingerprint: same as baseline")
        out += list(self.notes)
        columns = [
            Column("metric"),
            Column("better"),
            *(Column(header, "right") for header in ("baseline", "current", "delta", "delta %")),
            Column("tolerance"),
            Column("verdict"),
        ]
        table = []
        for r in self.rows:
            pct = "n/a" if r.delta_pct is None else f"{r.delta_pct:+.1f}%"
            delta = "n/a" if r.delta is None else ("+" if r.delta >= 0 else "") + _num(r.delta)
            verdict = r.verdict
            if unconfirmed and r.needs_confirmation:
                verdict = "suspected, not confirmed"
            if r.basis == "exact" and r.verdict in ("REGRESSED", "changed", "improved"):
                verdict = f"{verdict} (exact)"
            elif r.test is not None and r.verdict in ("REGRESSED", "noise"):
                verdict = f"{verdict} ({r.test.describe()})"
            if r.note:
                verdict = f"{verdict} ({r.note})"
            table.append(
                [
                    r.metric,
                    "higher" if r.higher_is_better else "lower",
                    _num(r.baseline),
                    _num(r.current),
                    delta,
                    pct,
                    r.limit_text(),
                    verdict,
                ]
            )
        return out + text_table(columns, table)


def _worse_by(delta: float, higher_is_better: bool) -> float:
    return -delta if higher_is_better else delta


def compare_results(
    base: ResultRecord,
    current: ResultRecord,
    tolerances: Mapping[str, Tolerance] | None = None,
    *,
    force: bool = False,
    noise: Mapping[str, float] | None = None,
) -> Comparison:
    """Compare one test's current result with its baseline.

    Noise (issue 15): a row regresses only when the shift exceeds ``max(tolerance, NOISE_K x sigma)`` *and* is
    significant (:func:`_judge`); ``noise`` maps a field (or ``field/vs`` for a paired ratio) to a calibrated
    relative sigma (``calibrate``). When both records carry the same paired reference arm, throughput and latency
    are judged on their ratio to it (:func:`_paired_rows`). Accept length/rate at temperature 0 with identical
    repeats are compared equal-or-not (``EXACT_FIELDS``). Runner-state changes are listed first. Prompt categories
    both records have get rows of their own (``accept_length[code]``, ``CATEGORY_COMPARE_FIELDS``).

    For each metric field with a tolerance (``tolerances`` keys are metric names or fields, merged over
    :data:`DEFAULT_TOLERANCES` by :func:`merge_tolerances`, so naming one metric never drops the others): medians
    over repeats (``stats.summarize``), delta = current - baseline,
    delta % = delta / |baseline| * 100; worse by more than ``tolerance.allowed(baseline)`` and
    ``stats.worse_test`` significant -> ``REGRESSED``.

    :param force: compare even when the workload differs (the differences stay in the fingerprint diff and a
        note says the comparison was forced).
    :raises CompareError: the workloads differ (prompt set hash, max_new_tokens, concurrency, num_requests,
        temperature, api) and ``force`` is False; the message lists each difference.
    """
    mismatch = workload_differences(base, current)
    notes: list[str] = []
    if mismatch:
        if not force:
            raise CompareError(
                f"{current.test_id}: workload differs from the baseline, results are not comparable: "
                f"{'; '.join(mismatch)}; re-record the baseline with this workload or compare anyway with --force"
            )
        notes.append(f"workload differs ({'; '.join(mismatch)}); compared anyway (--force)")
    specs = _field_specs()
    rows = []
    ratio_rows, vs = _paired_rows(base, current, merge_tolerances(tolerances), noise or {})
    exact = _temperature_zero(base) and _temperature_zero(current)
    for fname, tol in merge_tolerances(tolerances).items():
        higher = specs[fname].higher_is_better
        b_vals, c_vals = base.values(fname), current.values(fname)
        if not b_vals and not c_vals:
            continue
        if fname in ratio_rows:
            b_sum, c_sum = stats.summarize(b_vals), stats.summarize(c_vals)
            b_med = None if b_sum is None else b_sum.median
            c_med = None if c_sum is None else c_sum.median
            delta = None if b_med is None or c_med is None else c_med - b_med
            pct = None if delta is None or not b_med else delta / abs(b_med) * 100.0
            rows.append(CompareRow(fname, higher, b_med, c_med, delta, pct, tol, "paired"))
            rows.append(ratio_rows[fname])
            continue
        is_exact = exact and fname in EXACT_FIELDS and _constant(b_vals) and _constant(c_vals)
        rows.append(_judge(fname, higher, tol, b_vals, c_vals, noise_rel=(noise or {}).get(fname), exact=is_exact))
    rows.extend(_category_rows(base, current, merge_tolerances(tolerances), exact, paired=vs if ratio_rows else None))
    if ratio_rows:
        notes.append(
            f"throughput and latency judged on their ratio to the paired {vs!r} arm measured with them "
            "(raw values shown, marked 'paired'; pytest_specdec/measure/pairing.py)"
        )
    if any(r.basis == "exact" for r in rows):
        notes.append(
            "exact: accept length/rate at temperature 0 with identical repeats are compared equal-or-not, "
            "without statistics"
        )
    return Comparison(
        test_id=current.test_id,
        profile=current.profile,
        rows=tuple(rows),
        diff=tuple(fingerprint_diff(base.fingerprint, current.fingerprint)),
        notes=tuple(notes),
        runner=tuple(hoststate.state_changes(base.fingerprint.get("runner"), current.fingerprint.get("runner"))),
    )


#: Fields compared per prompt category (``RunMetrics.by_category``), with the tolerance of the field itself.
CATEGORY_COMPARE_FIELDS = ("accept_length", "accept_rate", "ttft_ms_p50", "itl_ms_p50", "tpot_ms_p50")
#: A category row gets a verdict only when the category has at least this many successful requests in every repeat
#: of both runs (exact rows excepted): a p50 of fewer requests moves with one request (issue 24: a 1-request
#: ``tpot_ms_p50[structured]`` was called REGRESSED at +20%).
MIN_CATEGORY_REQUESTS = 8


def _category_rows(
    base: ResultRecord,
    current: ResultRecord,
    tolerances: Mapping[str, Tolerance],
    exact: bool,
    *,
    paired: str | None = None,
) -> list[CompareRow]:
    """Rows ``accept_length[code]`` ... for every category both records have, judged by the rule of the field's own
    row (issue 24.4):

    - the field's top row judged on its ratio to the paired arm ``paired`` (:func:`_paired_rows`): the category's
      row on the per-pair ratio of the category's values (``itl_ms_p50[code] / baseline``), or ``n/a`` with the
      reason when the records carry no per-category paired values (runs stored before they were recorded);
    - exact (temperature 0, identical repeats): equal-or-not, whatever the number of requests;
    - otherwise a verdict only with :data:`MIN_CATEGORY_REQUESTS` successful requests of the category per repeat on
      both sides (``num_ok[CATEGORY]``), else ``n/a (3 requests < 8 per repeat)``.
    """
    from pytest_specdec.measure.pairing import PAIRED_FIELDS

    specs = _field_specs()
    rows = []
    for category in sorted(set(base.categories) & set(current.categories)):
        counts = base.values(f"num_ok[{category}]") + current.values(f"num_ok[{category}]")
        fewest = int(min(counts)) if counts else None
        for fname in CATEGORY_COMPARE_FIELDS:
            tol = tolerances.get(fname)
            if tol is None:
                continue
            name = f"{fname}[{category}]"
            higher = specs[fname].higher_is_better
            b_vals, c_vals = base.values(name), current.values(name)
            if not b_vals and not c_vals:
                continue
            is_exact = exact and fname in EXACT_FIELDS and _constant(b_vals) and _constant(c_vals)
            few = not is_exact and fewest is not None and fewest < MIN_CATEGORY_REQUESTS
            if paired is not None and fname in PAIRED_FIELDS:
                b_ratios, c_ratios = paired_ratios(base, name), paired_ratios(current, name)
                if b_ratios and c_ratios and not few:
                    row = _judge(name, higher, _relative(tol, b_vals), b_ratios, c_ratios)
                    rows.append(dataclasses.replace(row, metric=f"{name} / {paired}"))
                    continue
                why = "no paired values per category" if not (b_ratios and c_ratios) else ""
                rows.append(_no_verdict(name, higher, tol, b_vals, c_vals, why or _few(fewest), paired=True))
                continue
            if few:
                rows.append(_no_verdict(name, higher, tol, b_vals, c_vals, _few(fewest)))
                continue
            rows.append(_judge(name, higher, tol, b_vals, c_vals, exact=is_exact))
    return rows


def _few(fewest: int | None) -> str:
    n = fewest or 0
    return f"{n} request{'s' if n != 1 else ''} < {MIN_CATEGORY_REQUESTS} per repeat"


def _relative(tol: Tolerance, raw: Sequence[float]) -> Tolerance:
    """``tol`` as a relative tolerance for a ratio row: an absolute part turned relative at the raw median."""
    summary = stats.summarize(raw)
    rel = tol.rel
    if tol.abs and summary is not None and summary.median:
        rel = tol.allowed(summary.median) / abs(summary.median)
    return Tolerance(rel=rel)


def _no_verdict(
    name: str, higher: bool, tol: Tolerance, b_vals: Sequence[float], c_vals: Sequence[float], why: str, *,
    paired: bool = False,
) -> CompareRow:
    """A row shown with its medians and change but no verdict (``n/a``), saying why."""
    b_sum, c_sum = stats.summarize(b_vals), stats.summarize(c_vals)
    b_med = None if b_sum is None else b_sum.median
    c_med = None if c_sum is None else c_sum.median
    delta = None if b_med is None or c_med is None else c_med - b_med
    pct = None if delta is None or not b_med else delta / abs(b_med) * 100.0
    note = f"top row paired; {why}" if paired else why
    return CompareRow(name, higher, b_med, c_med, delta, pct, tol, "n/a", note=note)


#: A shift must exceed ``NOISE_K`` times the measured noise (sigma), as well as the tolerance, to regress.
NOISE_K = 3.0
#: Fields compared equal-or-not at temperature 0 when every repeat of both runs agrees (greedy decoding on a fixed
#: prompt set is deterministic there: any difference is real, no statistics needed).
EXACT_FIELDS = ("accept_length", "accept_rate")


def _temperature_zero(record: ResultRecord) -> bool:
    return record.workload.get("temperature") in (0, 0.0)


def _constant(values: Sequence[float]) -> bool:
    return bool(values) and max(values) == min(values)


def _judge(
    fname: str,
    higher: bool,
    tol: Tolerance,
    b_vals: Sequence[float],
    c_vals: Sequence[float],
    *,
    noise_rel: float | None = None,
    exact: bool = False,
) -> CompareRow:
    """One row: medians, delta, and the verdict.

    Exact rows: worse beyond the tolerance -> ``REGRESSED``, any other difference ``changed``/``improved``, no test.
    Other rows: limit = max(tolerance, NOISE_K x sigma) with sigma the larger of the repeat spread of both runs, each
    around its own median (``stats.pooled_sigma``), and ``noise_rel`` x |baseline median| (``calibrate``, the
    spread between separate runs); worse beyond the limit and
    ``stats.worse_test`` significant -> ``REGRESSED``, not significant -> ``noise``.
    """
    b_sum, c_sum = stats.summarize(b_vals), stats.summarize(c_vals)
    if b_sum is None or c_sum is None:
        b_med = None if b_sum is None else b_sum.median
        c_med = None if c_sum is None else c_sum.median
        return CompareRow(fname, higher, b_med, c_med, None, None, tol, "n/a")
    delta = c_sum.median - b_sum.median
    pct = delta / abs(b_sum.median) * 100.0 if b_sum.median != 0 else None
    worse = _worse_by(delta, higher)
    # A relative margin so that "10% shift at a 10% tolerance" is not decided by float rounding.
    margin = 1e-9 * max(abs(b_sum.median), 1.0)
    allowed = tol.allowed(b_sum.median)
    if exact:
        if worse > allowed + margin:
            verdict = "REGRESSED"
        elif delta == 0:
            verdict = "ok"
        else:
            verdict = "improved" if worse < 0 else "changed"
        return CompareRow(fname, higher, b_sum.median, c_sum.median, delta, pct, tol, verdict, basis="exact")
    sigma = max(stats.pooled_sigma(b_vals, c_vals), (noise_rel or 0.0) * abs(b_sum.median))
    allowed = max(allowed, NOISE_K * sigma)
    test = None
    if worse > allowed + margin:
        test = stats.worse_test(b_vals, c_vals, higher_is_better=higher)
        verdict = "REGRESSED" if test.significant else "noise"
    elif -worse > allowed + margin:
        verdict = "improved"
    else:
        verdict = "ok"
    return CompareRow(fname, higher, b_sum.median, c_sum.median, delta, pct, tol, verdict, test, noise=sigma or None)


def paired_ratios(record: ResultRecord, fname: str) -> list[float]:
    """Per pair, the target's value of ``fname`` over the paired reference arm's (``record.paired``, written by
    ``pairing.PairedArms.to_dict``); empty without a paired arm."""
    paired = record.paired or {}
    t = (paired.get("target") or {}).get(fname) or []
    r = (paired.get("reference") or {}).get(fname) or []
    return [
        float(a) / float(b)
        for a, b in zip(t, r, strict=False)
        if isinstance(a, int | float) and isinstance(b, int | float) and b != 0
    ]


def _paired_rows(
    base: ResultRecord, current: ResultRecord, tolerances: Mapping[str, Tolerance], noise: Mapping[str, float]
) -> tuple[dict[str, CompareRow], str | None]:
    """``metric / vs`` ratio rows for the paired fields, when both records carry the same paired reference arm.

    On a shared runner the raw throughput of two runs differs by the runner's load (-28 % measured on 2 busy
    cores); the ratio to an arm measured in the same minutes does not. A relative tolerance applies to the ratio as
    it is; an absolute one is turned relative at the baseline's raw median. Noise key: ``output_tok_s/baseline``.
    """
    from pytest_specdec.measure.pairing import PAIRED_FIELDS

    vs = (base.paired or {}).get("vs")
    if not vs or vs != (current.paired or {}).get("vs"):
        return {}, None
    specs = _field_specs()
    rows: dict[str, CompareRow] = {}
    for fname in PAIRED_FIELDS:
        tol = tolerances.get(fname)
        b_ratios, c_ratios = paired_ratios(base, fname), paired_ratios(current, fname)
        if tol is None or not b_ratios or not c_ratios:
            continue
        rows[fname] = dataclasses.replace(
            _judge(
                fname, specs[fname].higher_is_better, _relative(tol, base.values(fname)), b_ratios, c_ratios,
                noise_rel=noise.get(f"{fname}/{vs}"),
            ),  # fmt: skip
            metric=f"{fname} / {vs}",
        )
    return rows, vs


@dataclass(frozen=True, slots=True)
class RunComparison:
    """:func:`compare_runs` result: one :class:`Comparison` per test found in both runs, plus what was skipped."""

    comparisons: tuple[Comparison, ...]
    missing: tuple[str, ...] = field(default=())
    refused: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.comparisons)


def compare_runs(
    base: RunFile,
    current: RunFile,
    tolerances: Mapping[str, Tolerance] | None = None,
    *,
    force: bool = False,
    baseline_id: Callable[[ResultRecord], str] | None = None,
    noise: Mapping[str, float] | None = None,
) -> RunComparison:
    """Compare every test of ``current`` with the same test id in ``base``.

    Tests without a baseline go to ``missing``; workload mismatches (when not forced) go to ``refused`` with the
    :class:`CompareError` message instead of raising, so one changed test does not hide the others.

    :param baseline_id: the test id to look up in ``base`` for a current record (default: its own), e.g. from
        :func:`profile_mapper` to compare one profile with another.
    """
    comparisons, missing, refused = [], [], []
    for record in current.results:
        wanted = baseline_id(record) if baseline_id is not None else record.test_id
        old = base.find(wanted)
        if old is None:
            missing.append(record.test_id if wanted == record.test_id else f"{record.test_id} (as {wanted})")
            continue
        try:
            comparisons.append(compare_results(old, record, tolerances, force=force, noise=noise))
        except CompareError as exc:
            refused.append(str(exc))
    return RunComparison(tuple(comparisons), tuple(missing), tuple(refused))


def load_pair(store: ResultStore, base_ref: str, current_ref: str) -> tuple[RunFile, RunFile]:
    """The two runs of a compare, ``(base, current)``, each a path, run id, unique prefix or ``latest``
    (``ResultStore.load``); ``latest`` for BASE is the newest run other than CURRENT (``store.current`` is set).

    :raises CompareError: both refs are ``latest``; or a run cannot be loaded: the message names every one that
        cannot, e.g. ``BASE: no run 'v1': not a file and no run id in .specdec/results (3 runs stored); CURRENT: no
        run 'v2': ...`` (one alone keeps ``ResultStore.load``'s message).
    """
    if base_ref == "latest" and current_ref == "latest":
        raise CompareError("BASE and CURRENT are both 'latest'; name at least one run")
    problems: dict[str, str] = {}
    current = base = None
    try:
        current = store.load(current_ref)
        store.current = current.run_id
    except CompareError as exc:
        problems["CURRENT"] = str(exc)
    try:
        base = store.load(base_ref)
    except CompareError as exc:
        problems["BASE"] = str(exc)
    if base is None or current is None:
        if len(problems) == 1:
            raise CompareError(next(iter(problems.values())))
        raise CompareError(f"BASE: {problems['BASE']}; CURRENT: {problems['CURRENT']}")
    return base, current


def swap_profile_id(test_id: str, profile: str, other: str) -> str:
    """``test_id`` with the profile part of its parametrization id replaced, and nothing else:
    ``t.py::test_x[eagle3-shifted-layers-1]`` with (eagle3-shifted-layers, eagle3) -> ``t.py::test_x[eagle3-1]``.
    The same test id is returned when ``profile`` is not a whole part of the brackets."""
    return re.sub(rf"(?<=[\[-]){re.escape(profile)}(?=[\]-])", other, test_id, count=1)


def profile_mapper(spec: str, base: RunFile, current: RunFile) -> Callable[[ResultRecord], str]:
    """The ``baseline_id`` of :func:`compare_runs` for a profile mapping, as the plugin's
    ``--specdec-compare-profile``: ``NAME`` compares every test of a speculative profile (``fingerprint
    ["speculative"]`` set) with the same test of profile NAME, and tests without speculation with their own;
    ``CUR=BASE[,CUR=BASE...]`` maps exactly the profiles named.

    :raises CompareError: an empty or malformed spec, a BASE profile absent from ``base`` or a CUR profile absent
        from ``current`` (the message lists the profiles each run has).
    """
    def profiles(run: RunFile) -> list[str]:
        return sorted({r.profile for r in run.results})

    pairs = [p.strip() for p in spec.split(",") if p.strip()]
    if not pairs or any(p.count("=") > 1 or p.startswith("=") or p.endswith("=") for p in pairs):
        raise CompareError(f"--compare-profile={spec}: expected NAME or CUR=BASE[,CUR=BASE...], e.g. eagle3")
    explicit = dict(p.split("=", 1) for p in pairs if "=" in p)
    single = [p for p in pairs if "=" not in p]
    if single and (explicit or len(single) > 1):
        raise CompareError(f"--compare-profile={spec}: give one NAME, or only CUR=BASE pairs")
    for name in [*explicit.values(), *single]:
        if name not in profiles(base):
            have = ", ".join(profiles(base)) or "none"
            raise CompareError(f"--compare-profile={spec}: no results of profile {name!r} in baseline run "
                               f"{base.run_id} (profiles there: {have})")  # fmt: skip
    for name in explicit:
        if name not in profiles(current):
            have = ", ".join(profiles(current)) or "none"
            raise CompareError(f"--compare-profile={spec}: no results of profile {name!r} in current run "
                               f"{current.run_id} (profiles there: {have})")  # fmt: skip

    def baseline_id(record: ResultRecord) -> str:
        if single:
            target = single[0] if record.fingerprint.get("speculative") else None
        else:
            target = explicit.get(record.profile)
        return swap_profile_id(record.test_id, record.profile, target) if target else record.test_id

    return baseline_id


# -- calibration and paired arms ----------------------------------------------------------------------------------


def calibrate_proposal(
    records: Sequence[ResultRecord], fields: Sequence[str] | None = None, *, k: float = 3.0, floor: float = 0.01
) -> dict[str, Tolerance]:
    """Propose relative tolerances from the spread of repeated runs of one test on one machine.

    Per field: pool the per-repeat values of all ``records``; sigma = 1.4826 * MAD (``stats.mad_sigma``);
    proposal = ``max(k * sigma / |median|, floor)``, rounded up to 0.1 %. With k = 3 a normal run-to-run spread
    passes 99.7 % of the time before the significance test is even applied. Give records of separate runs
    (separate server starts): within-run repeats underestimate the spread between nights.

    Example: tok/s 98, 100, 101, 103, 100 -> median 100, MAD 1, sigma 1.48 -> 3 * 1.48 % = 4.5 %.

    :param fields: metric fields to propose for (default: the keys of :data:`DEFAULT_TOLERANCES`).
    :returns: field -> Tolerance(rel=...), only for fields with at least 2 values and a non-zero median.
    """
    out: dict[str, Tolerance] = {}
    for fname in fields or list(DEFAULT_TOLERANCES):
        values = [v for r in records for v in r.values(fname)]
        if len(values) < 2:
            continue
        summary = stats.summarize(values)
        if summary is None or summary.median == 0:
            continue
        rel = max(k * summary.sigma / abs(summary.median), floor)
        out[fname] = Tolerance(rel=math.ceil(round(rel * 1000, 6)) / 1000)
    return out


def calibrate_noise(records: Sequence[ResultRecord], fields: Sequence[str] | None = None) -> dict[str, float]:
    """Relative noise (sigma / |median|) per field from repeated runs, for :func:`compare_results`'s ``noise``.

    Per field: the per-repeat values of all ``records`` pooled (so the spread between separate runs counts, not
    only the repeats within one), sigma = 1.4826 x MAD (``stats.mad_sigma``). Records with a paired reference arm
    add ``field/vs`` keys from their per-pair ratios (:func:`paired_ratios`).

    Example: tok/s 98, 100, 101, 103, 100 -> median 100, sigma 1.48 -> 0.0148.

    :returns: key -> relative sigma, for keys with at least 2 values and a non-zero median.
    """
    pools: dict[str, list[float]] = {}
    for r in records:
        for fname in fields or list(DEFAULT_TOLERANCES):
            pools.setdefault(fname, []).extend(r.values(fname))
        vs = (r.paired or {}).get("vs")
        if vs:
            from pytest_specdec.measure.pairing import PAIRED_FIELDS

            for fname in PAIRED_FIELDS:
                pools.setdefault(f"{fname}/{vs}", []).extend(paired_ratios(r, fname))
    out: dict[str, float] = {}
    for key, values in pools.items():
        summary = stats.summarize(values) if len(values) >= 2 else None
        if summary is not None and summary.median != 0:
            out[key] = round(summary.sigma / abs(summary.median), 5)
    return out


def read_noise(path: Path) -> dict[str, float]:
    """The ``sigma_rel`` mapping of a noise file written by ``calibrate`` (``{"profile": ..., "runs": N,
    "sigma_rel": {field: x}}``); empty when the file is absent or unreadable."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    sigma = data.get("sigma_rel") if isinstance(data, dict) else None
    if not isinstance(sigma, dict):
        return {}
    return {str(k): float(v) for k, v in sigma.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def speedup_by_concurrency(
    spec_runs: Sequence[ResultRecord], base_runs: Sequence[ResultRecord], metric: str = "output_tok_s"
) -> dict[int, float]:
    """Speculative / non-speculative throughput ratio per concurrency level (``fingerprint["workload"]``).

    Per level: median of the pooled per-repeat ``metric`` values of the spec arm divided by that of the baseline
    arm; levels present in only one arm, or with a zero baseline, are left out.

    :returns: concurrency -> ratio, ascending by concurrency. Example: {1: 2.0, 8: 0.8}.
    """

    def by_level(runs: Sequence[ResultRecord]) -> dict[int, list[float]]:
        levels: dict[int, list[float]] = {}
        for r in runs:
            conc = r.workload.get("concurrency")
            if isinstance(conc, int):
                levels.setdefault(conc, []).extend(r.values(metric))
        return levels

    spec, base = by_level(spec_runs), by_level(base_runs)
    out: dict[int, float] = {}
    for level in sorted(set(spec) & set(base)):
        s, b = stats.summarize(spec[level]), stats.summarize(base[level])
        if s is not None and b is not None and b.median != 0:
            out[level] = s.median / b.median
    return out


def speedup_failures(speedups: Mapping[int, float], min_ratio: float, *, vs: str = "baseline") -> list[str]:
    """One line per concurrency level below ``min_ratio``:
    ``speedup 0.80x < min 1.05x vs baseline at concurrency 8``."""
    return [
        f"speedup {ratio:.2f}x < min {min_ratio:.2f}x vs {vs} at concurrency {level}"
        for level, ratio in sorted(speedups.items())
        if ratio < min_ratio
    ]


# -- the compare command -------------------------------------------------------------------------------------------


def compare_command(
    base_ref: str,
    current_ref: str,
    *,
    tolerances: Sequence[str] = (),
    force: bool = False,
    compare_profile: str | None = None,
    noise_path: str | Path | None = None,
    results_dir: str | Path = ".specdec/results",
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """``python -m pytest_specdec compare`` (its options are defined in ``__main__``): load both runs, compare them
    (:func:`compare_runs`) and print the fingerprint diff and one table per test to ``stdout``, errors to ``stderr``.

    :param base_ref: the baseline: a run file, a run id (or unique prefix) in ``results_dir``, or ``latest``.
    :param current_ref: the current run, the same way.
    :param tolerances: ``METRIC:TOL`` specs (:func:`parse_tolerances`), each replacing that metric's default.
    :param force: compare even when the workloads differ.
    :param compare_profile: ``NAME`` or ``CUR=BASE[,...]`` (:func:`profile_mapper`); None: each test with itself.
    :param noise_path: a noise file written by ``calibrate`` (:func:`read_noise`).
    :returns: 1 when a test regressed as pytest would fail it without measuring again (an exact metric: accept
        length/rate at temperature 0 with identical repeats); a throughput/latency regression, which pytest confirms
        by measuring again first, is printed as ``suspected, not confirmed`` and not counted; 2 on unusable input
        (bad tolerance, unreadable file, no matching run, no test in common, a refused workload mismatch); else 0.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        parsed = parse_tolerances(tolerances) if tolerances else None
        store = ResultStore(Path(results_dir))
        base, current = load_pair(store, base_ref, current_ref)
        mapper = profile_mapper(compare_profile, base, current) if compare_profile else None
    except (ValueError, CompareError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    noise = None
    if noise_path:
        noise = read_noise(Path(noise_path))
        if not noise:
            print(f"error: --noise={noise_path}: not a noise file written by calibrate", file=err)
            return 2
    result = compare_runs(base, current, parsed, force=force, baseline_id=mapper, noise=noise)
    print(f"specdec compare: baseline {base.run_id} -> current {current.run_id}", file=out)
    for comp in result.comparisons:
        print("", file=out)
        record = current.find(comp.test_id)
        wanted = mapper(record) if mapper is not None and record is not None else comp.test_id
        against = f", against {wanted.split('::', 1)[-1]}" if wanted != comp.test_id else ""
        print(f"== {comp.test_id} (profile {comp.profile}{against})", file=out)
        for line in comp.lines(unconfirmed=True):
            print(line, file=out)
        if comp.suspected:
            names = ", ".join(r.metric for r in comp.suspected)
            print(
                f"suspected, not confirmed: {names}: pytest --specdec-compare measures again before it fails a test; "
                "a stored run cannot be measured again, so this is not counted as regressed",
                file=out,
            )
    for test_id in result.missing:
        print(f"no baseline for {test_id}", file=out)
    for message in result.refused:
        print(f"error: {message}", file=err)
    # Decided as pytest decides (verdict.judge_compare): only what needs no confirming measurement fails here.
    regressed = [c.test_id for c in result.comparisons if c.confirmed_regressions]
    suspected = [c.test_id for c in result.comparisons if c.suspected and not c.confirmed_regressions]
    print("", file=out)
    print(
        f"specdec compare: {len(result.comparisons)} compared, {len(regressed)} regressed, "
        f"{len(suspected)} suspected (not confirmed), {len(result.missing)} without baseline, "
        f"{len(result.refused)} refused",
        file=out,
    )
    if regressed:
        return 1
    if result.refused or not result.comparisons:
        return 2
    return 0
