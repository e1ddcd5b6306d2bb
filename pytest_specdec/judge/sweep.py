"""Parameter sweeps: parse ``--specdec-sweep``, derive one profile per point, and tabulate the measured points.

A sweep runs the selected profile once per point, one server per point, as if each derived profile had been named
with ``--server-profile``. Derived profiles are named ``<profile>@<key>=<value>[,<key>=<value>...]``, e.g.
``eagle3@num_steps=2`` or ``eagle3@num_steps=2,concurrency=8``; :func:`split_name` reads the point back from a
stored record's ``profile``. Usage::

    points = parse_sweep("num_steps=1..4")                       # [{"num_steps": 1}, ..., {"num_steps": 4}]
    profiles, names = expand_profiles(profile_set.profiles, ["baseline", "eagle3"], points)
    ...                                                          # run every name in ``names``
    table = sweep_table(sweep_records(records), baselines=baseline_records(records, None),
                        thresholds_ok=thresholds_ok(records))

The points of one concurrency are ranked with their evidence (``ranking.py``): on the paired speedup when every point
was measured with its own baseline arm, else on per-repeat tok/s; a point not separated from the best is tied with
it, and with 1 repeat per point nothing is ranked (the table says how many repeats would decide). The configured
point fails the run only when shown to be more than ``--specdec-sweep-max-gap`` below the best.
"""

from __future__ import annotations

import difflib
import itertools
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specdec.core import stats
from pytest_specdec.core.table import Column, format_value, text_table
from pytest_specdec.judge import ranking
from pytest_specdec.judge.paired import paired_ratios
from pytest_specdec.measure.results import ResultRecord
from pytest_specdec.profiles.schema import Profile

__all__ = [
    "RankedGroup",
    "SPECULATIVE_KEYS",
    "SWEEP_KEYS",
    "SweepSummary",
    "WORKLOAD_KEYS",
    "baseline_records",
    "best_points",
    "check_cell",
    "configured_point_lines",
    "crossover_lines",
    "expand_profiles",
    "parse_sweep",
    "point_label",
    "rank_points",
    "sample_of",
    "speedup",
    "split_name",
    "summarize",
    "sweep_records",
    "sweep_table",
    "thresholds_ok",
    "tok_s_range",
]

#: Sweepable keys of the ``speculative:`` block (SGLang ``--speculative-num-steps`` etc.).
SPECULATIVE_KEYS = ("num_steps", "num_draft_tokens", "eagle_topk")
#: Sweepable keys of the ``workload:`` block.
WORKLOAD_KEYS = ("concurrency",)
SWEEP_KEYS = SPECULATIVE_KEYS + WORKLOAD_KEYS

_FORMAT = (
    "expected PARAM=VALUES joined by ';', with PARAM one of " + ", ".join(SWEEP_KEYS) + " and VALUES a range "
    '1..6 or a list 1,2,4 (integers >= 1), e.g. "num_steps=1..6" or "num_steps=1,2,4;concurrency=1,8"'
)
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")
_LIST = re.compile(r"^\d+(,\d+)*$")
#: Separates a profile name from its point in a derived profile's name.
_AT = "@"


def parse_sweep(spec: str) -> list[dict[str, int]]:
    """Parse a sweep specification into its points: the cartesian product of the axes, first axis outermost.

    ``"num_steps=1..3"`` -> ``[{"num_steps": 1}, {"num_steps": 2}, {"num_steps": 3}]`` (ranges are inclusive);
    ``"num_steps=1,2;concurrency=1,8"`` -> ``[{"num_steps": 1, "concurrency": 1}, {"num_steps": 1,
    "concurrency": 8}, {"num_steps": 2, "concurrency": 1}, {"num_steps": 2, "concurrency": 8}]``.

    :param spec: ``PARAM=VALUES[;PARAM=VALUES...]``; whitespace around tokens is ignored.
    :returns: one dict per point, key order as given.
    :raises ValueError: naming the bad token and the expected format, e.g. ``'num_step=1..6': unknown parameter
        'num_step' (did you mean 'num_steps'?); expected PARAM=VALUES ...``.
    """
    axes: list[tuple[str, list[int]]] = []
    tokens = [t.strip() for t in spec.split(";")]
    if not any(tokens):
        raise ValueError(f"empty sweep; {_FORMAT}")
    for token in tokens:
        if not token:
            continue
        key, sep, raw = (part.strip() for part in token.partition("="))
        if not sep or not key:
            raise ValueError(f"{token!r}: no PARAM=VALUES; {_FORMAT}")
        if key not in SWEEP_KEYS:
            close = difflib.get_close_matches(key, SWEEP_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{token!r}: unknown parameter {key!r}{hint}; {_FORMAT}")
        if any(key == k for k, _ in axes):
            raise ValueError(f"{token!r}: parameter {key!r} given twice; {_FORMAT}")
        values_text = raw.replace(" ", "")
        match = _RANGE.match(values_text)
        if match:
            low, high = int(match.group(1)), int(match.group(2))
            if low > high:
                raise ValueError(f"{token!r}: range {low}..{high} is empty (write the smaller value first); {_FORMAT}")
            values = list(range(low, high + 1))
        elif _LIST.match(values_text):
            values = [int(v) for v in values_text.split(",")]
            if len(set(values)) != len(values):
                raise ValueError(f"{token!r}: a value is listed twice; {_FORMAT}")
        else:
            raise ValueError(f"{token!r}: cannot read values {raw!r}; {_FORMAT}")
        if min(values) < 1:
            raise ValueError(f"{token!r}: values must be >= 1; {_FORMAT}")
        axes.append((key, values))
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


def point_label(point: Mapping[str, int]) -> str:
    """``{"num_steps": 2, "concurrency": 8}`` -> ``num_steps=2,concurrency=8`` (the part after ``@``)."""
    return ",".join(f"{k}={v}" for k, v in point.items())


def split_name(profile_name: str) -> tuple[str, dict[str, int]]:
    """The base profile and the point of a derived profile's name; ``(name, {})`` for any other name.

    ``"eagle3@num_steps=2,concurrency=8"`` -> ``("eagle3", {"num_steps": 2, "concurrency": 8})``.
    """
    base, sep, label = profile_name.rpartition(_AT)
    if not sep:
        return profile_name, {}
    point: dict[str, int] = {}
    for pair in label.split(","):
        key, eq, value = pair.partition("=")
        if not eq or key not in SWEEP_KEYS or not value.isdigit():
            return profile_name, {}
        point[key] = int(value)
    return base, point


def _derive(profile: Profile, point: Mapping[str, int], name: str) -> Profile:
    """``profile`` at ``point``; steps/topk/draft tokens kept as the profile's engine will run them
    (``Engine.speculative_at``: at topk 1 a chain verifies num_steps + 1 draft tokens, so that pair moves together).

    :raises ValueError: see ``Engine.speculative_at``.
    """
    update: dict[str, Any] = {"name": name}
    spec_keys = {k: v for k, v in point.items() if k in SPECULATIVE_KEYS}
    if spec_keys:
        from pytest_specdec.engines import get_engine

        update["speculative"] = get_engine(profile).speculative_at(profile, spec_keys, label=point_label(point))
    if "concurrency" in point:
        update["workload"] = profile.workload.model_copy(update={"concurrency": point["concurrency"]})
    return profile.model_copy(update=update)


def expand_profiles(
    profiles: Mapping[str, Profile], selected: Sequence[str], points: Sequence[Mapping[str, int]]
) -> tuple[dict[str, Profile], list[str]]:
    """Derive one profile per sweep point from each selected profile.

    A speculative profile gets every point (``eagle3@num_steps=2``). A profile without speculation (the baseline)
    takes only the workload keys: one profile per distinct concurrency when concurrency is swept
    (``baseline@concurrency=8``; a derived point's ``min_speedup.vs`` is pointed at the baseline of its own
    concurrency), else it runs once under its own name. Derived profiles are plain ``Profile`` objects, validated by
    pydantic (``model_copy`` skips validation, so they are re-validated here).

    :param profiles: every profile of the file by name (``ProfileSet.profiles``).
    :param selected: the names to run (``--server-profile`` plus ``--specdec-sweep-baseline``), all in ``profiles``.
    :param points: from :func:`parse_sweep`, at least one.
    :returns: ``profiles`` plus the derived ones, and the names to run: profiles without speculation first (so
        ``min_speedup`` finds its reference already measured), then each speculative profile's points in sweep order.
    :raises ValueError: no selected profile runs speculative decoding while a speculative key is swept, a profile
        leaves steps/draft tokens to its engine, or a point is contradictory (topk 1 with draft tokens != steps + 1).
    """
    if not points:
        raise ValueError("no sweep points")
    swept = {k for p in points for k in p}
    speculative = [n for n in selected if profiles[n].is_speculative]
    plain = [n for n in selected if not profiles[n].is_speculative]
    if swept & set(SPECULATIVE_KEYS) and not speculative:
        keys = ", ".join(k for k in SPECULATIVE_KEYS if k in swept)
        raise ValueError(
            f"sweeps {keys} but no selected profile runs speculative decoding "
            f"(selected: {', '.join(selected)}); select one, e.g. --server-profile=eagle3"
        )
    out = dict(profiles)
    names: list[str] = []
    plain_by_concurrency: dict[str, dict[int, str]] = {}
    for name in plain:
        workload_points = _unique([{k: v for k, v in p.items() if k in WORKLOAD_KEYS} for p in points])
        if workload_points == [{}]:
            names.append(name)
            continue
        for wp in workload_points:
            derived = f"{name}{_AT}{point_label(wp)}"
            out[derived] = _validated(_derive(profiles[name], wp, derived))
            plain_by_concurrency.setdefault(name, {})[wp["concurrency"]] = derived
            names.append(derived)
    for name in speculative:
        for point in points:
            derived = f"{name}{_AT}{point_label(point)}"
            profile = _derive(profiles[name], point, derived)
            ms = profile.thresholds.min_speedup
            if ms is not None and "concurrency" in point and ms.vs in plain_by_concurrency:
                vs = plain_by_concurrency[ms.vs][point["concurrency"]]
                thresholds = profile.thresholds.model_copy(update={"min_speedup": ms.model_copy(update={"vs": vs})})
                profile = profile.model_copy(update={"thresholds": thresholds})
            out[derived] = _validated(profile)
            names.append(derived)
    return out, names


def _unique(items: Iterable[dict[str, int]]) -> list[dict[str, int]]:
    seen: list[dict[str, int]] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _validated(profile: Profile) -> Profile:
    return Profile.model_validate(profile.model_dump())


# -- after the run ----------------------------------------------------------------------------------------------


def _one_per_profile(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """The first record of each profile, in run order (every test of a profile shares its measurement)."""
    seen: dict[str, ResultRecord] = {}
    for record in records:
        seen.setdefault(record.profile, record)
    return list(seen.values())


def sweep_records(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """One record per derived speculative profile (a sweep point), in run order."""
    return [
        r
        for r in _one_per_profile(records)
        if split_name(r.profile)[1] and r.fingerprint.get("speculative") is not None
    ]


def baseline_records(records: Iterable[ResultRecord], name: str | None) -> list[ResultRecord]:
    """The records speedups are computed against: one per profile named ``name`` or derived from it
    (``baseline@concurrency=8``); with ``name`` None, those of every profile without speculation
    (``fingerprint["speculative"]`` is None)."""
    out = []
    for record in _one_per_profile(records):
        base = split_name(record.profile)[0]
        if name is not None and base == name:
            out.append(record)
        elif name is None and record.fingerprint.get("speculative") is None:
            out.append(record)
    return out


def thresholds_ok(records: Iterable[ResultRecord]) -> dict[str, bool]:
    """Per profile: True when every specdec test of it passed (so its profile and marker thresholds, speedup and
    compare checks held), False when one failed or errored."""
    ok: dict[str, bool] = {}
    for record in records:
        ok[record.profile] = ok.get(record.profile, True) and record.outcome == "passed"
    return ok


def _concurrency(record: ResultRecord) -> int | None:
    value = record.workload.get("concurrency")
    return int(value) if isinstance(value, int) else None


def speedup(record: ResultRecord, baselines: Sequence[ResultRecord]) -> float | None:
    """``output_tok_s`` of ``record`` / that of the baseline with the same workload concurrency (the only baseline
    when there is one); None without a matching baseline or with a zero baseline throughput.

    Example: 94.0 tok/s over a baseline of 88.8 tok/s -> 1.0586.

    A point measured with a paired baseline arm (``record.paired``, ``pairing.py``) gives the median of its per-pair
    ratios instead: phases measured minutes apart on a shared runner do not make a speedup.
    """
    ratios = paired_ratios(record, "output_tok_s")
    if ratios:
        return statistics.median(ratios)
    baseline = _baseline_of(record, baselines)
    if baseline is None:
        return None
    base = baseline.metrics.get("output_tok_s")
    value = record.metrics.get("output_tok_s")
    if not isinstance(base, int | float) or not isinstance(value, int | float) or base <= 0:
        return None
    return float(value) / float(base)


def speedup_reference(record: ResultRecord, baselines: Sequence[ResultRecord]) -> str | None:
    """The profile :func:`speedup` divided by: the paired arm's (``record.paired["vs"]``, a point paired with its
    ``min_speedup.vs`` profile, which need not be among ``baselines``), else the baseline of the same concurrency (the
    only one when there is one); None when there is none."""
    vs = (record.paired or {}).get("vs")
    if vs and paired_ratios(record, "output_tok_s"):
        return str(vs)
    baseline = _baseline_of(record, baselines)
    return baseline.profile if baseline is not None else None


def _baseline_of(record: ResultRecord, baselines: Sequence[ResultRecord]) -> ResultRecord | None:
    """The baseline of ``record``'s workload concurrency, else the only baseline when there is one, else None."""
    match = [b for b in baselines if _concurrency(b) == _concurrency(record)]
    if not match and len(baselines) == 1:
        match = list(baselines)
    return match[0] if match else None


def _passing(records: Iterable[ResultRecord], thresholds_ok: Mapping[str, bool]) -> list[ResultRecord]:
    """The points whose tests passed and that have a throughput (only they can be the best)."""
    return [
        r
        for r in records
        if thresholds_ok.get(r.profile, False) and isinstance(r.metrics.get("output_tok_s"), int | float)
    ]


def sample_of(record: ResultRecord, basis: str) -> ranking.Sample:
    """The point's values on a ranking basis: ``"paired speedup"``: its per-pair speedup ratios to the paired
    no-speculation arm (``paired.paired_ratios``); ``"tok/s"``: its per-repeat output tok/s
    (``ResultRecord.values``)."""
    if basis == "paired speedup":
        return ranking.Sample(record.profile, tuple(paired_ratios(record, "output_tok_s")))
    return ranking.Sample(record.profile, tuple(record.values("output_tok_s")))


def _basis(records: Sequence[ResultRecord]) -> str:
    """``paired speedup`` when every point carries paired ratios (each measured with its own baseline arm, so the
    load of its minutes cancels), else ``tok/s`` (a baseline measured apart divides every point by the same number
    and cannot change the order)."""
    if records and all(paired_ratios(r, "output_tok_s") for r in records):
        return "paired speedup"
    return "tok/s"


@dataclass(frozen=True, slots=True)
class RankedGroup:
    """The points of one workload concurrency (tok/s at different concurrencies are not comparable: more requests
    in flight always raise throughput) and their :func:`ranking.rank` among those that passed."""

    concurrency: int | None
    #: Every point of the group, in run order.
    records: tuple[ResultRecord, ...]
    #: The passing points, ranked on ``basis``.
    ranked: tuple[ResultRecord, ...]
    basis: str
    ranking: ranking.Ranking

    def record(self, name: str | None) -> ResultRecord | None:
        return next((r for r in self.records if r.profile == name), None)

    @property
    def best(self) -> ResultRecord | None:
        """The leader when the ranking is decided (or it is the only passing point), else None."""
        if self.ranking.leader is None or not (self.ranking.decided or len(self.ranked) == 1):
            return None
        return self.record(self.ranking.leader)

    @property
    def tied(self) -> list[ResultRecord]:
        """The passing points not separated from the best (empty when there is no best)."""
        if self.best is None:
            return []
        return [r for r in self.ranked if r.profile in self.ranking.tied]


def rank_points(
    records: Sequence[ResultRecord], *, thresholds_ok: Mapping[str, bool], baselines: Sequence[ResultRecord] = ()
) -> list[RankedGroup]:
    """One :class:`RankedGroup` per workload concurrency, in order of concurrency (one group without a concurrency
    sweep); a group's passing points ranked by ``ranking.rank`` on their paired speedup when all have one, else
    their per-repeat tok/s (then the repeats of the baseline of the same concurrency inform the spread).

    :param records: :func:`sweep_records`; :param thresholds_ok: :func:`thresholds_ok` (missing counts as not ok).
    :param baselines: :func:`baseline_records`.
    """
    groups: dict[int, list[ResultRecord]] = {}
    for record in records:
        groups.setdefault(_concurrency(record) or 0, []).append(record)
    out = []
    for _, group in sorted(groups.items()):
        passing = _passing(group, thresholds_ok)
        basis = _basis(passing)
        base = _baseline_of(group[0], baselines) if basis == "tok/s" else None
        spread_from = [sample_of(base, basis)] if base is not None else []
        ranked = ranking.rank([sample_of(r, basis) for r in passing], spread_from=spread_from)
        out.append(RankedGroup(_concurrency(group[0]), tuple(group), tuple(passing), basis, ranked))
    return out


def best_points(
    records: Sequence[ResultRecord], *, thresholds_ok: Mapping[str, bool], baselines: Sequence[ResultRecord] = ()
) -> list[ResultRecord]:
    """The best point per concurrency (:attr:`RankedGroup.best`: decided rankings only), in order of concurrency."""
    groups = rank_points(records, thresholds_ok=thresholds_ok, baselines=baselines)
    return [g.best for g in groups if g.best is not None]


def tok_s_range(record: ResultRecord) -> tuple[float, float] | None:
    """(min, max) of the point's per-repeat output tok/s (``ResultRecord.values``); None when it has none."""
    values = record.values("output_tok_s")
    return (min(values), max(values)) if values else None


def check_cell(record: ResultRecord, ok: bool) -> str:
    """The thresholds cell of a point: ``ok``, ``FAILED accept_length`` (the thresholds it missed, from
    ``ResultRecord.checks``), ``FAILED`` (a failure without a threshold miss: compare, error), and
    ``ok (min_accept_length n/a)`` when a threshold could not apply at the point (``thresholds.evaluate``)."""
    failed = [key.removeprefix("min_") for key, v in record.checks.items() if v.startswith("FAILED")]
    na = [key for key, v in record.checks.items() if v.startswith("n/a")]
    if not ok:
        return "FAILED " + ", ".join(failed) if failed else "FAILED"
    return f"ok ({', '.join(na)} n/a)" if na else "ok"


def _configured(profile: Profile, keys: Iterable[str]) -> dict[str, int] | None:
    point: dict[str, int] = {}
    for key in keys:
        if key == "concurrency":
            value: int | None = profile.workload.concurrency
        else:
            value = getattr(profile.speculative, key, None) if profile.speculative is not None else None
        if value is None:
            return None
        point[key] = int(value)
    return point


def _spread(group: RankedGroup) -> str:
    """``σ 5.1% within repeats`` / ``σ 23.1% across points, an upper bound``."""
    r = group.ranking
    if r.sigma is None:
        return "no spread"
    text = f"σ {r.sigma:.1%} {r.sigma_source}"
    return text + ", an upper bound" if r.sigma_source == "across points" else text


def _would(need: int | None, what: str) -> str:
    """``7 repeats per point would separate <what> at this spread`` (or more than the cap)."""
    if need is None:
        return f"more than {ranking.MAX_REPEATS} repeats per point would be needed to separate {what}"
    return f"{need} repeats per point would separate {what} at this spread"


def _repeats(group: RankedGroup) -> str:
    n = group.ranking.min_values
    return f"{n} repeat{'s' if n != 1 else ''} per point"


def _method(group: RankedGroup, comparisons: int | None = None) -> str:
    """The test behind a decision, for the lines that state one (``comparisons``: the Bonferroni factor used)."""
    m = comparisons or max(len(group.ranked) - 1, 1)
    return f"one-sided Welch t-test on log {group.basis}, Bonferroni x{m}, {_repeats(group)}"


def configured_point_lines(
    records: Sequence[ResultRecord],
    profiles: Mapping[str, Profile],
    *,
    thresholds_ok: Mapping[str, bool],
    max_gap: float,
    baselines: Sequence[ResultRecord] = (),
) -> tuple[list[str], list[str], list[str]]:
    """Is the profile's configured point (its own num_steps/topk/draft tokens/concurrency) within ``max_gap`` of the
    sweep's best? The check the original incident needed: 2 steps beat the 5 configured, and nothing said so.

    Per concurrency group (:func:`rank_points`) with a leader: the configured point of the leader's base profile,
    judged by ``ranking.judge_gap``: the run fails (a recommendation) only when the measurements show the configured
    point more than ``max_gap`` below the leader (one-sided Welch t-test on log values, Bonferroni over the group's
    comparisons). Tied, not shown beyond the allowance, or undecided (1 repeat per point) recommends nothing and
    says how many repeats per point would decide (``ranking.repeats_needed``).

    :param profiles: the session's profiles by name (the base profiles, before sweep expansion).
    :param max_gap: the largest allowed gap as a fraction (0.05 = 5 %).
    :returns: (lines for the table, the failing ones among them, the undecided ones among them), e.g. failing:
        ``configured point eagle3@num_steps=5 (92.1 tok/s) is 12.3% below the sweep's best eagle3@num_steps=2
        (105.0 tok/s), more than the allowed 5% (--specdec-sweep-max-gap); set num_steps: 2 in profile eagle3
        [p=0.004: one-sided Welch t-test on log tok/s, Bonferroni x3, 3 repeats per point]``.
    """
    lines: list[str] = []
    failing: list[str] = []
    undecided: list[str] = []
    for group in rank_points(records, thresholds_ok=thresholds_ok, baselines=baselines):
        leader = group.record(group.ranking.leader)
        if leader is None:
            continue
        base, point = split_name(leader.profile)
        profile = profiles.get(base)
        configured = _configured(profile, point) if profile is not None else None
        if configured is None:
            continue
        if "concurrency" in point and configured["concurrency"] != point["concurrency"]:
            continue  # the configured point belongs to another concurrency's group
        name = f"{base}{_AT}{point_label(configured)}"
        conf = group.record(name)
        if conf is None:
            lines.append(f"configured point {name} was not swept; not compared with the best {leader.profile}")
            continue
        decided = group.ranking.decided or len(group.ranked) == 1
        best = "the sweep's best" if decided else "the highest"
        sample = group.ranking.sample(name) or sample_of(conf, group.basis)
        judged = ranking.judge_gap(group.ranking, sample, max_gap=max_gap)
        test = judged.test
        allowed = f"the allowed {max_gap:.0%}"
        if judged.verdict == "best":
            line = f"configured point {name} is the sweep's best" if decided else (
                f"configured point {name} has the highest {group.basis}; undecided: {_repeats(group)}"
            )
        elif judged.verdict == "within":
            line = f"configured point {name} is {judged.gap:.1%} below {best} {leader.profile} (allowed {max_gap:.0%})"
        elif judged.verdict == "recommend":
            assert test is not None
            better = ", ".join(f"{k}: {v}" for k, v in point.items() if configured.get(k) != v)
            b, c = leader.metrics.get("output_tok_s"), conf.metrics.get("output_tok_s")
            line = (
                f"configured point {name} ({format_value('{:.1f}', c)} tok/s) is {judged.gap:.1%} below the sweep's "
                f"best {leader.profile} ({format_value('{:.1f}', b)} tok/s), more than {allowed} "
                f"(--specdec-sweep-max-gap); set {better} in profile {base} "
                f"[{test.describe()}: {_method(group, test.comparisons)}]"
            )
            failing.append(line)
        else:
            beyond = f"a gap beyond {allowed}"
            if judged.verdict == "tied":
                assert test is not None
                head = (
                    f"configured point {name} is tied with the sweep's best {leader.profile} ({judged.gap:.1%} "
                    f"below, not separated: {test.describe()}, {_method(group, test.comparisons)})"
                )
            elif judged.verdict == "unproven":
                assert test is not None
                head = (
                    f"configured point {name} is {judged.gap:.1%} below the sweep's best {leader.profile}, not shown "
                    f"to be more than {allowed} ({test.describe()}, {_method(group, test.comparisons)})"
                )
            else:
                head = (
                    f"configured point {name} is {judged.gap:.1%} below the highest {leader.profile}: "
                    f"undecided: {_repeats(group)}"
                )
            line = f"{head}; {_would(judged.need, beyond)} ({_spread(group)}); not failed"
            undecided.append(line)
        lines.append(line)
    return lines, failing, undecided


#: (header, metrics key, format) of the sweep table.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("accept_len", "accept_length", "{:.2f}"),
    ("accept_rate", "accept_rate", "{:.3f}"),
    ("tok/s", "output_tok_s", "{:.1f}"),
    ("TTFT p50 ms", "ttft_ms_p50", "{:.1f}"),
    ("ITL p50 ms", "itl_ms_p50", "{:.2f}"),
)


def _closing_line(group: RankedGroup, baselines: Sequence[ResultRecord], at: str) -> str:
    """``best[ at concurrency N]: ...; tied with ...`` or ``undecided[ at ...]: ...`` of one group."""
    best = group.best
    if best is None:
        r = group.ranking
        second = min(r.separations, key=lambda s: s.gap, default=None)  # the runner-up: the gap a ranking needs
        what = (
            f"the {second.gap:.1%} gap between {r.leader} and {second.other}" if second is not None else "the points"
        )
        need = r.need(second.gap) if second is not None else None
        return f"undecided{at}: {_repeats(group)}; {_would(need, what)} ({_spread(group)}); no best point named"
    up = speedup(best, baselines)
    tok_s = format_value("{:.1f}", best.metrics.get("output_tok_s"))
    spread = tok_s_range(best)
    repeats = f", repeats {spread[0]:.1f}-{spread[1]:.1f}" if spread is not None and spread[0] != spread[1] else ""
    reference = speedup_reference(best, baselines)
    versus = f", {up:.2f}x vs {reference}" if up is not None and reference is not None else ""
    if group.basis == "paired speedup":
        summary = stats.summarize(paired_ratios(best, "output_tok_s"))
        if summary is not None and summary.n > 1:
            versus += f", CI {summary.ci_low:.2f}-{summary.ci_high:.2f} ({summary.coverage:.0%})"
    line = f"best{at}: {best.profile} ({tok_s} tok/s{repeats}{versus})"
    if len(group.ranked) == 1:
        return line + " (the only point that met the thresholds)"
    by_name = {s.other: s for s in group.ranking.separations}
    tie = [f"{r.profile} ({by_name[r.profile].describe()})" for r in group.tied]
    line += f"; tied with {', '.join(tie)} (not separated)" if tie else "; separated from every other point"
    return f"{line} [{_method(group)}]"


def sweep_table(
    records: Sequence[ResultRecord],
    *,
    baselines: Sequence[ResultRecord] = (),
    thresholds_ok: Mapping[str, bool],
) -> list[str]:
    """The sweep as fixed-width lines: a header, one row per point, then closing verdict lines.

    Columns: point (derived profile name), accept length (tokens per verify step), accept rate (fraction of drafted
    positions), output tok/s (median of repeats) and its repeat range (min-max, :func:`tok_s_range`), TTFT p50 ms,
    ITL p50 ms, speedup (``n.nnx`` vs the baseline of the same concurrency, :func:`speedup`; ``n/a`` without one),
    thresholds (:func:`check_cell`). Points are ranked per concurrency by :func:`rank_points` (paired speedup when
    every point has one, else tok/s; ``ranking.py``): when decided, the best point's row ends in ``<- best`` and those
    of the points not separated from it in ``<- tie``, and the closing line is ``best: <point> (<tok/s> tok/s, repeats
    <min>-<max>[, <speedup>x vs <baseline>[, CI <lo>-<hi> (<coverage>)]]); tied with <point> (p=<p>) (not
    separated) [<method>]``; with fewer than 2 repeats at a point nothing is ranked: ``undecided: 1 repeat per point;
    <n> repeats per point would separate the <g>% gap between <highest> and <next> at this spread (σ ...); no best
    point named``. ``... at concurrency N`` per concurrency when concurrency is swept; ``no point met the thresholds
    (<n> points)`` when none passed.

    :param records: :func:`sweep_records` (one per point).
    :param baselines: :func:`baseline_records`; empty when no profile without speculation ran.
    :param thresholds_ok: :func:`thresholds_ok`.
    """
    groups = rank_points(records, thresholds_ok=thresholds_ok, baselines=baselines)
    marks: dict[str, str] = {}
    for group in groups:
        if group.best is not None:
            marks[group.best.profile] = "<- best"
            marks.update((t.profile, "<- tie") for t in group.tied)
    columns = [
        Column("point"),
        *(Column(header, "right", fmt) for header, _, fmt in _COLUMNS),
        Column("tok/s range", "right"),
        Column("speedup", "right"),
        Column("thresholds"),
        Column(""),  # the best point's and its ties' mark
    ]
    rows: list[list[Any]] = []
    for record in records:
        up = speedup(record, baselines)
        spread = tok_s_range(record)
        if spread is None:
            shown_range = "n/a"
        else:
            shown_range = f"{spread[0]:.1f}-{spread[1]:.1f}" if spread[0] != spread[1] else f"{spread[0]:.1f}"
        rows.append([
            record.profile,
            *(record.metrics.get(key) for _, key, _ in _COLUMNS),
            shown_range,
            f"{up:.2f}x" if up is not None else "n/a",
            check_cell(record, thresholds_ok.get(record.profile, False)),
            marks.get(record.profile, ""),
        ])  # fmt: skip
    lines = text_table(columns, rows)
    if not any(g.ranked for g in groups):
        lines.append(f"no point met the thresholds ({len(records)} points)")
    for group in groups:
        if group.ranked:
            at = f" at concurrency {group.concurrency}" if len(groups) > 1 else ""
            lines.append(_closing_line(group, baselines, at))
    return lines + crossover_lines(records, baselines)


def crossover_lines(records: Sequence[ResultRecord], baselines: Sequence[ResultRecord]) -> list[str]:
    """Speedup by concurrency and where speculation stops paying (issue 18.4), one line per speculative point
    swept over concurrency (the same point at two or more concurrencies, each with a speedup, :func:`speedup`).

    ``speedup by concurrency, eagle3@num_steps=3: 1: 1.38x, 8: 1.12x, 64: 0.84x; speculation stops paying between
    concurrency 8 and 64`` (or ``pays at every measured concurrency`` / ``pays at none``). Speculation trades spare
    compute for fewer forward passes: as the batch grows, verify stops being free and the plain arm catches up (real
    SGLang 0.5.17 on an H200, tiny model, concurrency 64: 3,752 tok/s with EAGLE-3 vs 8,796 without).
    """
    groups: dict[tuple[str, tuple[tuple[str, int], ...]], list[tuple[int, float]]] = {}
    for record in records:
        base, point = split_name(record.profile)
        conc = _concurrency(record)
        up = speedup(record, baselines)
        if "concurrency" not in point or conc is None or up is None:
            continue
        rest = tuple(sorted((k, v) for k, v in point.items() if k != "concurrency"))
        groups.setdefault((base, rest), []).append((conc, up))
    lines = []
    for (base, rest), series in groups.items():
        if len({c for c, _ in series}) < 2:
            continue
        series.sort()
        name = f"{base}@{point_label(dict(rest))}" if rest else base
        cells = ", ".join(f"{c}: {u:.2f}x" for c, u in series)
        paying = [u > 1.0 for _, u in series]
        if all(paying):
            verdict = "speculation pays at every measured concurrency"
        elif not any(paying):
            verdict = "speculation pays at none"
        else:
            # The first step from paying to not paying; None when it only starts paying further up.
            i = next((i for i in range(1, len(series)) if paying[i - 1] and not paying[i]), None)
            verdict = (
                f"speculation stops paying between concurrency {series[i - 1][0]} and {series[i][0]}"
                if i is not None
                else "speculation pays only at higher concurrency"
            )
        lines.append(f"speedup by concurrency, {name}: {cells}; {verdict}")
    return lines


@dataclass
class SweepSummary:
    """The end-of-run verdict of a sweep (``summarize``): what the table and plot show and which lines fail the run."""

    points: list[ResultRecord]
    baselines: list[ResultRecord]
    thresholds_ok: dict[str, bool]
    #: The best point per concurrency (decided rankings only, :attr:`RankedGroup.best`).
    best: list[ResultRecord]
    #: The table (``sweep_table``) followed by the configured-point lines (``configured_point_lines``).
    table: list[str] = field(default_factory=list)
    #: Lines that fail the run: configured point shown to be too far below the best, or "no point ..." when none
    #: passed.
    red: list[str] = field(default_factory=list)
    #: ``min_accept_length`` per point that has one (the plot draws it over the points where it applies).
    accept_floors: dict[str, float] = field(default_factory=dict)
    #: The points tied with a best point (not separated from it), for the plot.
    tied: list[ResultRecord] = field(default_factory=list)
    #: Configured-point lines that could not decide (tied, not shown beyond the allowance, 1 repeat per point).
    undecided: list[str] = field(default_factory=list)


def summarize(
    records: Sequence[ResultRecord],
    profiles: Mapping[str, Profile],
    *,
    baseline: str | None,
    max_gap: float,
) -> SweepSummary | None:
    """The sweep's table, best points and failing lines from the run's records; None when no record is a sweep point.

    :param profiles: the session's profiles by name (sweep points included, for their thresholds).
    :param baseline: ``--specdec-sweep-baseline`` (``baseline_records``).
    :param max_gap: the largest allowed gap of the configured point below the best, a fraction
        (``configured_point_lines``).
    """
    points = sweep_records(records)
    if not points:
        return None
    baselines = baseline_records(records, baseline)
    ok = thresholds_ok(records)
    groups = rank_points(points, thresholds_ok=ok, baselines=baselines)
    best = [g.best for g in groups if g.best is not None]
    tied = [t for g in groups for t in g.tied]
    table = sweep_table(points, baselines=baselines, thresholds_ok=ok)
    gap_lines, red, undecided = configured_point_lines(
        points, profiles, thresholds_ok=ok, max_gap=max_gap, baselines=baselines
    )
    table += gap_lines
    red += [line for line in table if line.startswith("no point met the thresholds")]
    floors = {
        r.profile: float(floor)
        for r in points
        if r.profile in profiles and (floor := profiles[r.profile].thresholds.min_accept_length) is not None
    }
    return SweepSummary(points, baselines, ok, best, table, red, floors, tied, undecided)
