"""Baseline-compare tolerances: how much a metric may worsen, parsed from strings and layered over the defaults.

Tolerance strings (``parse_tolerances``)::

    output_tok_s:5%       relative: 5 % of the baseline median (above 100 % allowed: 150%)
    output_tok_s:5tok/s   absolute, with the field's unit (tok/s, req/s, ms): 5 tok/s
    accept_length:0.02    absolute, in the metric's unit: a bare number, on accept length/rate and SLO attainment only
    ttft_ms:10%+5         both: 10 % of the baseline plus 5 ms (``10%+5ms`` too)

A bare number on a rate or time field (``output_tok_s:5``) is refused where a user writes it for pytest (``strict``:
ini ``specdec_tolerances``, a profile's ``tolerances:``, the marker): it was read as 5 tok/s where 5% was meant
(fresh-user trial). Stored specs (``format_tolerances`` of a record) and the ``compare`` command's ``-t`` (which
prints each absolute part with its unit) read it as absolute, as pytest-benchmark's grammar does.
    ttft_ms_p99:20%       one statistic field; a metric name (ttft_ms) covers all its fields (mean, p50, p90, p99)
    tpot_ms_p50[code]:30% the compare's row of one prompt category (CATEGORY_FIELDS); without one it takes the field's
    output_tok_s/baseline:15%  the ratio row of a paired field (``output_tok_s / baseline``: the profile's min_speedup
                          arm); without one it takes the field's, which then holds the raw row alone

A profile's ``tolerances:`` and the marker's ``tolerances=`` may be a mapping (``{output_tok_s: 5%}``) as well as a
string or a list of strings, read by one reader (:func:`tolerance_strings`) with the same errors. A layer parsed
with its ``origin`` (``ini specdec_tolerances``, ``profile eagle3``, ``marker``, ``compare -t``) keeps it through
:func:`merge_tolerances` per row: :meth:`Tolerances.origin`, :meth:`Tolerances.describe`.

Refused from a user (``strict``): a negative tolerance and 0 on a rate or time field (no unchanged run can pass it).
100% or more on a higher-is-better field reports the row without gating it (tok/s cannot fall by all of itself), and
the compare says so.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pytest_specdec.core.metric_table import METRICS, PAIRED_FIELDS, MetricSpec

__all__ = [
    "CATEGORY_FIELDS",
    "DEFAULT_TOLERANCES",
    "Tolerance",
    "ToleranceError",
    "Tolerances",
    "field_specs",
    "foreign_ratio_tolerances",
    "format_tolerances",
    "layered_tolerances",
    "merge_tolerances",
    "misnamed_arms",
    "parse_tolerances",
    "tolerance_key",
    "tolerance_strings",
    "tolerance_tokens",
]
# Stored records and their readers' tests quote it; the refusal of a bare number on a rate or time field (strict)
# names the unit forms itself.
_FORMAT_HELP = ("expected METRIC:TOL with TOL as 5% (relative), 5tok/s or 0.05 (absolute) or 10%+5ms (both), e.g. "
                "output_tok_s:5%")
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
#: Units an absolute tolerance may be written with (``5tok/s``, ``10%+5ms``): those of the rate and time metrics, on
#: which a bare number is refused from a user (``parse_tolerances(strict=True)``).
_UNITS = ("tok/s", "req/s", "ms")
_UNIT = "|".join(re.escape(u) for u in _UNITS)
#: A token: ``NAME:TOL`` or ``NAME[CATEGORY]:TOL``; a category may hold spaces and commas (the bracket keeps them).
_TOKEN_RE = re.compile(r"(?:\[[^\]]*\]?|[^\s,\[])+")
_CATEGORY_RE = re.compile(r"^(?P<name>[^\[\]]+)\[(?P<category>[^\[\]]*)\]$")
#: A paired arm's name in ``FIELD/VS`` (a profile name, as ``min_speedup: {vs: ...}`` names it).
_ARM_RE = re.compile(r"^[\w.-]+$")
_TOL_RE = re.compile(
    rf"^(?:(?P<rel>{_NUMBER})%(?:\+(?P<both_abs>{_NUMBER})(?P<both_unit>{_UNIT})?)?|(?P<abs>{_NUMBER})(?P<unit>{_UNIT})?)$"
)


class ToleranceError(ValueError):
    """A tolerance spec refused (:func:`parse_tolerances`, a ratio row naming another arm): the ``ValueError`` that
    names the token and the fix, with :attr:`keys`, the tolerance keys it is about as written (``output_tok_s``,
    ``tpot_ms_p50[code]``, ``output_tok_s/basline``; the whole token when it has no ``:``), so that a profile file's
    reader can tell which profile of an ``extends:`` chain wrote them (``profiles.loader``)."""

    def __init__(self, message: str, keys: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.keys: tuple[str, ...] = tuple(keys)


def tolerance_key(token: str) -> str:
    """The key a tolerance token is written for: ``output_tok_s/baseline:15%`` -> ``output_tok_s/baseline``; a token
    without ``:`` is its own key."""
    name, sep, _ = token.rpartition(":")
    return name.strip() if sep else token


def tolerance_strings(value: object) -> list[str]:
    """The one reader of a user's tolerances as written, for a profile's ``tolerances:`` and the marker's
    ``tolerances=``: a string (``"output_tok_s:5% ttft_ms:10%"``, as the ini writes it), a mapping of key to
    tolerance (``{output_tok_s: 5%}``, as YAML is written; a number value reads as written: ``{accept_length:
    0.05}``), or a list or tuple of strings and such mappings (``- output_tok_s: 5%``) -> ``METRIC:TOL`` strings for
    :func:`parse_tolerances`, in the order written.

    :raises ValueError: any other shape: ``expected a string, a list of strings or a mapping of metric to tolerance,
        got 5; e.g. ['output_tok_s:5%', 'ttft_ms:10%'] or {'output_tok_s': '5%'}``.
    """
    if isinstance(value, str):
        return [value]
    items = [value] if isinstance(value, Mapping) else value
    if isinstance(items, list | tuple) and all(isinstance(v, str | Mapping) for v in items):
        return [t for v in items for t in ([v] if isinstance(v, str) else [f"{k}:{t}" for k, t in v.items()])]
    raise ValueError(f"expected a string, a list of strings or a mapping of metric to tolerance, got {value!r}; e.g. "
                     "['output_tok_s:5%', 'ttft_ms:10%'] or {'output_tok_s': '5%'}")  # fmt: skip


def tolerance_tokens(spec: str | Sequence[str]) -> list[str]:
    """The tokens :func:`parse_tolerances` reads from ``spec``, one per tolerance: ``"output_tok_s: 5%,
    tpot_ms_p50[code, chat]:30%"`` -> ``["output_tok_s:5%", "tpot_ms_p50[code, chat]:30%"]``."""
    parts = [spec] if isinstance(spec, str) else list(spec)
    return _joined([t for part in parts for t in _TOKEN_RE.findall(part.strip())])


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


#: Fields the compare also judges per prompt category (``accept_length[code]``, ``judge.compare``): the only ones a
#: ``FIELD[CATEGORY]`` tolerance may name.
CATEGORY_FIELDS = ("accept_length", "accept_rate", "ttft_ms_p50", "itl_ms_p50", "tpot_ms_p50")


class Tolerances(dict[str, Tolerance]):
    """Tolerances of one layer (:func:`parse_tolerances`: keys as written, metric names or fields) or of a test
    (:func:`merge_tolerances`: every compared field): key -> :class:`Tolerance`, plus :attr:`categories`, ``(key,
    category)`` -> the tolerance of that key's row for one prompt category (``tpot_ms_p50[code]:30%``), and
    :attr:`ratios`, ``(key, vs)`` -> the tolerance of a paired field's ratio row ``key / vs``
    (``output_tok_s/baseline:15%``).

    A dict of the top rows, so that every reader of a field's tolerance reads it as before; a category row asks
    :meth:`row`, a ratio row :meth:`ratio`, each falling back to its field's.

    >>> t = parse_tolerances("tpot_ms_p50:10% tpot_ms_p50[code]:30% output_tok_s:40% output_tok_s/baseline:15%")
    >>> t.row("tpot_ms_p50", "code"), t.row("tpot_ms_p50", "chat")
    (Tolerance(rel=0.3, abs=0.0), Tolerance(rel=0.1, abs=0.0))
    >>> t.ratio("output_tok_s", "baseline"), t.ratio("output_tok_s", "base")
    (Tolerance(rel=0.15, abs=0.0), Tolerance(rel=0.4, abs=0.0))
    """

    def __init__(
        self,
        fields: Mapping[str, Tolerance] | None = None,
        categories: Mapping[tuple[str, str], Tolerance] | None = None,
        ratios: Mapping[tuple[str, str], Tolerance] | None = None,
        *,
        layer: str | None = None,
        origins: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(fields or {})
        self.categories: dict[tuple[str, str], Tolerance] = dict(categories or {})
        self.ratios: dict[tuple[str, str], Tolerance] = dict(ratios or {})
        #: The layer every entry was written in, unless :attr:`origins` says otherwise: ``ini specdec_tolerances``,
        #: ``profile eagle3``, ``marker``, ``compare -t`` (:func:`parse_tolerances`'s ``origin``); None: not said.
        self.layer = layer
        #: Row key as written (``output_tok_s``, ``tpot_ms_p50[code]``, ``output_tok_s/baseline``) -> the layer it
        #: came from, ``default`` for :data:`DEFAULT_TOLERANCES` (:func:`merge_tolerances` fills it). Not compared by
        #: ``==``: the same tolerances from another layer are equal.
        self.origins: dict[str, str] = dict(origins or {})

    def row(self, field: str, category: str) -> Tolerance | None:
        """The tolerance of ``field``'s row for ``category``: its own when given, else the field's (None: none)."""
        return self.categories.get((field, category), self.get(field))

    def ratio(self, field: str, vs: str) -> Tolerance | None:
        """The tolerance of ``field``'s ratio row to the paired arm ``vs``: its own when given, else the field's."""
        return self.ratios.get((field, vs), self.get(field))

    def origin(self, field: str, category: str | None = None, vs: str | None = None) -> str | None:
        """The layer the tolerance of a row came from (``default``, ``ini specdec_tolerances``, ``profile eagle3``,
        ``marker``, ``compare -t``): ``field``'s row, its row for one prompt ``category``, or its ratio row to ``vs``,
        each taking its field's origin where it has no tolerance of its own (as :meth:`row` and :meth:`ratio`).

        :returns: None when the row has no tolerance here, or its layer was not named.
        """
        if category is not None and (field, category) in self.categories:
            return self.origins.get(f"{field}[{category}]", self.layer)
        if vs is not None and (field, vs) in self.ratios:
            return self.origins.get(f"{field}/{vs}", self.layer)
        return self.origins.get(field, self.layer) if field in self else None

    def describe(self, field: str, category: str | None = None, vs: str | None = None) -> str:
        """A row's tolerance with where it came from, as written in a layer: ``output_tok_s/baseline:15% (marker)``,
        ``tpot_ms_p50[code]:10% (default)`` (the field's, as :meth:`row`); no parenthesis when the layer was not
        named, ``FIELD: no tolerance`` when the row has none.
        """
        if category is not None:
            key, tol = f"{field}[{category}]", self.row(field, category)
        elif vs is not None:
            key, tol = f"{field}/{vs}", self.ratio(field, vs)
        else:
            key, tol = field, self.get(field)
        if tol is None:
            return f"{key}: no tolerance"
        origin = self.origin(field, category, vs)
        return f"{key}:{tol}" + (f" ({origin})" if origin else "")

    def origins_note(self, fields: Collection[str] | None = None) -> str | None:
        """One line naming each row whose tolerance a layer set (not ``default``) with its layer, for the notes under
        a compare table: ``tolerances from: output_tok_s:3% (marker), ttft_ms_p50:20% (profile eagle3), the rest
        default``.

        :param fields: only these fields' rows (those of the table); None: every row.
        :returns: None when every row is at its default or no layer was named.
        """
        keys: list[tuple[str, str | None, str | None]] = [(f, None, None) for f in self]
        keys += [(f, c, None) for f, c in self.categories] + [(f, None, vs) for f, vs in self.ratios]
        origins = [(key, self.origin(*key)) for key in keys if fields is None or key[0] in fields]
        named = [self.describe(*key) for key, origin in origins if origin not in (None, _DEFAULT)]
        if not named:
            return None
        # "the rest default" only where it is true: no row of an unnamed layer.
        others = {o for _, o in origins if o is None or o == _DEFAULT}
        rest = ", the rest default" if others == {_DEFAULT} else ""
        return f"tolerances from: {', '.join(named)}{rest}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Tolerances) and (self.categories, self.ratios) != (other.categories, other.ratios):
            return False
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:  # dict's own would ignore the categories
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __repr__(self) -> str:
        return f"Tolerances({dict.__repr__(self)}, categories={self.categories!r}, ratios={self.ratios!r})"


#: The origin of a :data:`DEFAULT_TOLERANCES` entry (:meth:`Tolerances.origin`).
_DEFAULT = "default"


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


def parse_tolerances(spec: str | Sequence[str], *, strict: bool = False, origin: str | None = None) -> Tolerances:
    """Parse ``"output_tok_s:5%, accept_length:0.02"`` (or a list of such strings; comma or whitespace separated).
    ``FIELD[CATEGORY]:TOL`` (``tpot_ms_p50[code]:30%``) is the tolerance of that field's compare row for one prompt
    category: any category name (the prompts' ``category``, spaces and commas included), a field of
    :data:`CATEGORY_FIELDS` or a metric with one (``tpot_ms[code]`` is ``tpot_ms_p50[code]``).

    An absolute part may carry its field's unit (``output_tok_s:5tok/s``, ``ttft_ms:10%+5ms``); another unit is
    refused.

    :param strict: the spec is a user's for pytest (ini, profile, marker): a bare number on a rate or time field
        (unit tok/s, req/s or ms: ``output_tok_s:5``) is refused, since it reads as 5 tok/s where 5% is almost always
        meant; exact fields (``accept_length:0.05``, ``accept_rate:0.02``) keep bare numbers. False: a stored spec or
        ``compare -t``, read as written (a bare number is absolute).
    :param origin: the layer the spec was written in (``ini specdec_tolerances``, ``profile eagle3``, ``marker``,
        ``compare -t``), kept as :attr:`Tolerances.layer` for :meth:`Tolerances.origin` after a merge.
    :returns: metric name or field -> Tolerance, in input order (a later token for the same key wins), with the
        category ones in :attr:`Tolerances.categories`.
    :raises ToleranceError: a ``ValueError`` (its :attr:`~ToleranceError.keys`: the token's): ``bad tolerance
        'TOKEN': expected METRIC:TOL with TOL as 5% (relative), ...``, ``bad
        tolerance 'TOKEN': unknown metric 'NAME' (known: ...)``, ``bad tolerance 'TOKEN': output_tok_s has no rows
        per category (...)``, ``bad tolerance 'output_tok_s:5ms': output_tok_s is in tok/s, not ms ...``, or (strict)
        ``bad tolerance 'output_tok_s:5': a bare number on output_tok_s (tok/s) is ambiguous: write output_tok_s:5%
        for 5 percent of the baseline, or output_tok_s:5tok/s for 5 tok/s absolute``.
    """
    tokens = tolerance_tokens(spec)
    known = set(METRICS) | set(field_specs())
    out = Tolerances(layer=origin)
    for token in tokens:
        try:
            name, category, vs, tol = _read_token(token, known, strict=strict)
        except ValueError as exc:
            raise ToleranceError(str(exc), [tolerance_key(token)]) from None
        if category is not None:
            out.categories[(name, category)] = tol
        elif vs is not None:
            out.ratios[(name, vs)] = tol
        else:
            out[name] = tol
    return out


def _read_token(token: str, known: set[str], *, strict: bool) -> tuple[str, str | None, str | None, Tolerance]:
    """One token of :func:`parse_tolerances` -> (key, category or None, ratio arm or None, its tolerance).

    :raises ValueError: as :func:`parse_tolerances` says.
    """
    name, sep, value = token.rpartition(":")
    match = _TOL_RE.match(value.strip()) if sep else None
    if name and sep and value.strip().startswith("-") and _TOL_RE.match(value.strip()[1:]):
        raise ValueError(f"bad tolerance {token!r}: a tolerance is how much worse {name} may get, a positive "
                         f"amount: write {name}:{value.strip()[1:]} (the metric's direction is its own: lower "
                         "tok/s and higher latency are worse)")  # fmt: skip
    if not name or match is None:
        raise ValueError(f"bad tolerance {token!r}: {_FORMAT_HELP}")
    category = vs = None
    if "[" in name or "]" in name:
        found = _CATEGORY_RE.match(name)
        if found is None or not found.group("category").strip():
            raise ValueError(f"bad tolerance {token!r}: expected FIELD[CATEGORY]:TOL for one prompt category's "
                             "row, e.g. tpot_ms_p50[code]:30%")  # fmt: skip
        name, category = found.group("name"), found.group("category").strip()
    elif "/" in name:
        name, _, vs = name.partition("/")
        if not _ARM_RE.match(vs):
            raise ValueError(f"bad tolerance {token!r}: expected FIELD/ARM:TOL for a paired field's ratio row, "
                             "ARM the profile min_speedup names, e.g. output_tok_s/baseline:15%")  # fmt: skip
    if name not in known:
        listed = ", ".join(sorted(METRICS))
        raise ValueError(
            f"bad tolerance {token!r}: unknown metric {name!r} (known: {listed}, or a field like ttft_ms_p99)"
        )
    if category is not None and not _fields_among(name, CATEGORY_FIELDS):
        raise ValueError(f"bad tolerance {token!r}: {name} has no rows per category (the compare judges "
                         f"{', '.join(CATEGORY_FIELDS)} per prompt category), e.g. "
                         f"tpot_ms_p50[{category}]:30%")  # fmt: skip
    if vs is not None and not _fields_among(name, PAIRED_FIELDS):
        raise ValueError(f"bad tolerance {token!r}: {name} has no ratio row (the compare judges "
                         f"{', '.join(PAIRED_FIELDS)} on their ratio to a paired arm), e.g. "
                         f"output_tok_s/{vs}:15%")  # fmt: skip
    unit = _field_unit(name)
    written = match.group("unit") or match.group("both_unit")
    if written is not None and written != unit:
        said = f"is in {unit}" if unit in _UNITS else "takes a bare number (no unit)"
        raise ValueError(f"bad tolerance {token!r}: {name} {said}, not {written}; e.g. {_example(name)}")
    if strict and match.group("abs") is not None and written is None and unit in _UNITS:
        number = match.group("abs")
        raise ValueError(f"bad tolerance {token!r}: a bare number on {name} ({unit}) is ambiguous: write "
                         f"{token.rpartition(':')[0]}:{number}% for {number} percent of the baseline, or "
                         f"{token.rpartition(':')[0]}:{number}{unit} for {number} {unit} absolute")  # fmt: skip
    if match.group("abs") is not None:
        tol = Tolerance(abs=float(match.group("abs")))
    else:
        tol = Tolerance(rel=float(match.group("rel")) / 100.0, abs=float(match.group("both_abs") or 0.0))
    if strict:
        _refuse_useless(token, name, tol, unit)
    return name, category, vs, tol


def foreign_ratio_tolerances(tolerances: Tolerances, vs: str | None) -> dict[tuple[str, str], Tolerance]:
    """The ratio-row tolerances (``FIELD/ARM``, :attr:`Tolerances.ratios`) that name an arm other than ``vs``, the
    arm the runs are paired with (None: not paired, so every one): no ratio row takes them. In the order written.

    >>> foreign_ratio_tolerances(parse_tolerances("output_tok_s/basline:10% output_tok_s/baseline:15%"), "baseline")
    {('output_tok_s', 'basline'): Tolerance(rel=0.1, abs=0.0)}
    """
    return {key: tol for key, tol in tolerances.ratios.items() if key[1] != vs}


def misnamed_arms(tolerances: Tolerances, vs: str) -> str | None:
    """The error for ratio-row tolerances (``FIELD/ARM``) of a layer whose test is paired with ``vs`` but that name
    another arm (:func:`foreign_ratio_tolerances`): no row would take them, and the ratio row would run at its field's
    tolerance (a fresh-user trial's ``output_tok_s/basline:10%`` left a -26% ratio row ``ok`` at the raw row's 500%).
    None when every one names ``vs``. Used where the arm is known: a profile with ``min_speedup``
    (``profiles.schema``), a marker (``run.marker``)."""
    wrong = [f"{name}/{arm}:{tol}" for (name, arm), tol in foreign_ratio_tolerances(tolerances, vs).items()]
    if not wrong:
        return None
    fixed = ", ".join(f"{t.partition('/')[0]}/{vs}:{t.rpartition(':')[2]}" for t in wrong)
    return (f"bad tolerance {', '.join(wrong)}: this test's ratio rows are to {vs!r} (min_speedup vs), so no row "
            f"would take it and the ratio row would run at its field's tolerance; write {fixed}")


def _joined(tokens: list[str]) -> list[str]:
    """``["output_tok_s:", "5%"]`` -> ``["output_tok_s:5%"]``: a space after the colon (``output_tok_s: 5%``, as YAML
    is written) splits a token; a name ending in a colon takes the next token as its value."""
    out: list[str] = []
    for token in tokens:
        if out and out[-1].endswith(":") and ":" not in token:
            out[-1] += token
        else:
            out.append(token)
    return out


def _refuse_useless(token: str, name: str, tol: Tolerance, unit: str) -> None:
    """Refuse a user's tolerance no unchanged run can pass: 0 on a rate or time field (its interval always reaches
    the worse side of no change). 100 % or more of a higher-is-better field is allowed, as the way to report a row
    without gating it (tok/s cannot fall by all of itself); the compare says so under its table
    (``judge.compare``).

    :raises ValueError: naming the token and a usable form.
    """
    if unit in _UNITS and tol.rel == 0.0 and tol.abs == 0.0:
        raise ValueError(f"bad tolerance {token!r}: 0 on {name} leaves no room for noise: an unchanged run can never "
                         "pass it (its interval always reaches the worse side of no change); write the regression to "
                         f"catch, e.g. {name}:5%, or ask `python -m pytest_specdec calibrate` what this runner can "
                         "tell")  # fmt: skip


def _field_unit(name: str) -> str:
    """The unit of a tolerance key (a metric or one of its fields): ``output_tok_s`` and ``ttft_ms_p99`` -> ``tok/s``,
    ``ms``; ``accept_length`` -> its spec's (``tokens/verify step``)."""
    spec = METRICS.get(name) or field_specs()[name]
    return spec.unit


def _example(name: str) -> str:
    """A tolerance of ``name`` as written: ``output_tok_s:5%`` or ``output_tok_s:5tok/s``; ``accept_rate:0.02``."""
    unit = _field_unit(name)
    return f"{name}:5% or {name}:5{unit}" if unit in _UNITS else f"{name}:5% or {name}:0.02"


def _fields_among(name: str, among: Sequence[str]) -> list[str]:
    """The fields of ``among`` (:data:`CATEGORY_FIELDS`, ``PAIRED_FIELDS``) a tolerance key (a field or a metric)
    names: ``tpot_ms`` among the category fields -> ``["tpot_ms_p50"]``."""
    spec = METRICS.get(name)
    fields = spec.fields if spec is not None else (name,)
    return [f for f in fields if f in among]


def format_tolerances(tolerances: Mapping[str, Tolerance]) -> str:
    """The inverse of :func:`parse_tolerances`: ``"output_tok_s:5% accept_length:2% tpot_ms_p50[code]:30%
    output_tok_s/baseline:15%"``."""
    rows = getattr(tolerances, "categories", {}).items()
    ratios = getattr(tolerances, "ratios", {}).items()
    return " ".join([f"{name}:{tol}" for name, tol in tolerances.items()]
                    + [f"{name}[{category}]:{tol}" for (name, category), tol in rows]
                    + [f"{name}/{vs}:{tol}" for (name, vs), tol in ratios])  # fmt: skip


def _resolve(tolerances: Mapping[str, Tolerance], layer: str | None = None) -> Tolerances:
    """Field -> tolerance in METRICS order; a field key beats its metric's key, for the category rows too. Each row's
    origin is its key's in ``tolerances`` (:attr:`Tolerances.origins`, else its :attr:`Tolerances.layer`, else
    ``layer``), under the row's field key."""
    by_field = field_specs()
    given_origins: dict[str, str] = getattr(tolerances, "origins", {})
    fallback = getattr(tolerances, "layer", None) or layer
    out = Tolerances()

    def take(row: str, key: str) -> None:
        origin = given_origins.get(key, fallback)
        if origin is not None:
            out.origins[row] = origin

    for fname, spec in by_field.items():
        for key in (fname, spec.name):
            if key in tolerances:
                out[fname] = tolerances[key]
                take(fname, key)
                break
    given: dict[tuple[str, str], Tolerance] = getattr(tolerances, "categories", {})
    for (name, category), tol in sorted(given.items(), key=lambda kv: kv[0][0] in by_field):  # metric keys first
        for fname in _fields_among(name, CATEGORY_FIELDS):
            out.categories[(fname, category)] = tol
            take(f"{fname}[{category}]", f"{name}[{category}]")
    ratios: dict[tuple[str, str], Tolerance] = getattr(tolerances, "ratios", {})
    for (name, vs), tol in sorted(ratios.items(), key=lambda kv: kv[0][0] in by_field):
        for fname in _fields_among(name, PAIRED_FIELDS):
            out.ratios[(fname, vs)] = tol
            take(f"{fname}/{vs}", f"{name}/{vs}")
    return out


def merge_tolerances(*layers: Mapping[str, Tolerance] | None) -> Tolerances:
    """The tolerance of every compared field: :data:`DEFAULT_TOLERANCES`, then each layer over it, key by key.

    A layer never switches the other checks off: ``output_tok_s:3%`` changes the tok/s tolerance and leaves accept
    length, accept rate and the latency p50s at their defaults. Within one layer a field key beats its metric's key
    (``ttft_ms:20% ttft_ms_p99:50%``); across layers the later one wins for every field it names, so a marker's
    ``ttft_ms:20%`` overrides a profile's ``ttft_ms_p50:5%``. The plugin's layers, in order: ini
    ``specdec_tolerances``, the profile's ``tolerances:``, the marker's ``tolerances=``.

    A category row (``tpot_ms_p50[code]``) takes its own tolerance where a layer gives one, else its field's; a later
    layer that names the field (or its metric) sets the field's category rows too, unless it gives them their own:
    a marker's ``tpot_ms_p50:5%`` holds ``tpot_ms_p50[code]`` to 5% whatever the ini said of it. A ratio row
    (``output_tok_s/baseline``) follows the same rule.

    Example: ``merge_tolerances({"output_tok_s": Tolerance(rel=0.03)})`` -> output_tok_s 3 %, accept_length 2 %,
    accept_rate 0.02, ttft/itl/tpot p50 10 %.

    :returns: field (``RunMetrics`` attribute) -> Tolerance, in ``METRICS`` order, with the category rows given their
        own in :attr:`Tolerances.categories` (field, category) and the ratio rows in :attr:`Tolerances.ratios`
        (field, vs), in field order.
    """
    merged = _resolve(DEFAULT_TOLERANCES, _DEFAULT)
    for layer in layers:
        # Category or ratio rows alone leave the dict itself empty.
        if layer is not None and (layer or getattr(layer, "categories", None) or getattr(layer, "ratios", None)):
            resolved = _resolve(layer)
            merged.update(resolved)
            merged.categories = {key: tol for key, tol in merged.categories.items() if key[0] not in resolved}
            merged.categories.update(resolved.categories)
            merged.ratios = {key: tol for key, tol in merged.ratios.items() if key[0] not in resolved}
            merged.ratios.update(resolved.ratios)
            # A field the layer names takes its origin; so do its rows it gives their own. Unnamed: origin unknown.
            merged.origins = {row: o for row, o in merged.origins.items() if _row_field(row) not in resolved}
            merged.origins.update(resolved.origins)
    order = list(field_specs())
    rows = sorted(merged.categories.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1]))
    ratios = sorted(merged.ratios.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1]))
    return Tolerances({fname: merged[fname] for fname in order if fname in merged}, dict(rows), dict(ratios),
                      origins=merged.origins)  # fmt: skip


def _row_field(row: str) -> str:
    """The field of a row key of :attr:`Tolerances.origins`: ``tpot_ms_p50[code]``, ``output_tok_s/baseline`` ->
    ``tpot_ms_p50``, ``output_tok_s``."""
    return row.partition("[")[0].partition("/")[0]


def layered_tolerances(*specs: str | Sequence[str]) -> Tolerances:
    """The tolerances of a test from its layers, lowest first (ini ``specdec_tolerances``, then the profile's
    ``tolerances``, then the marker's): each layer changes the fields it names; the defaults stay checked
    (``merge_tolerances``).

    :raises ValueError: a layer that does not parse (``parse_tolerances``).
    """
    return merge_tolerances(*(parse_tolerances(spec) for spec in specs))
