"""The bisect: the good and the bad configuration measured, :func:`~pytest_specdec.bisection.delta.ddmin` over their
differences with each probe judged (``symptoms.judge``), the culprits grouped into causes, each cause measured alone.
Nothing here starts a server: a :class:`Probes` object (``probes.py``) measures the configurations asked for."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_specdec.bisection.delta import Outcome, ddmin
from pytest_specdec.bisection.diffs import Difference, NotBisectable, apply, config_key, launch_key
from pytest_specdec.bisection.symptoms import MAX_PAIRS, MIN_PAIRS, ProbeVerdict, Symptoms, find_symptoms, judge
from pytest_specdec.core import stats
from pytest_specdec.core.errors import SpecdecError

__all__ = ["BisectResult", "ProbeRecord", "Probes", "bisect", "one_at_a_time"]


class Probes(Protocol):
    """What :func:`bisect` needs measured (``probes.Prober`` launches servers; tests simulate). A configuration is a
    profile mapping (:func:`apply`). Failures raise ``SpecdecError`` (a server that does not start, a profile the
    schema rejects); the probe is then unresolved."""

    #: Servers started so far, and seconds they ran (startup included), summed over servers.
    launches: int
    server_s: float

    def exact(self, config: Mapping[str, Any], label: str) -> dict[str, list[float]]:
        """Per exact field (:data:`EXACT_FIELDS`), the values of the probe's measured phases (>= 2, so that identical
        repeats can be seen)."""
        ...

    def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
        """``count`` more paired tok/s ratios probe/good, phases interleaved with the good configuration's."""
        ...

    def running(self) -> str | None:
        """The :func:`launch_key` of the probe server running now (reused by the next probe it serves), or None."""
        ...


@dataclass
class ProbeRecord:
    """Everything measured for one configuration (cached by :func:`config_key`)."""

    subset: tuple[int, ...]
    label: str
    exact: dict[str, list[float]] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)
    error: str | None = None
    verdict: ProbeVerdict | None = None


@dataclass(frozen=True, slots=True)
class BisectResult:
    """:func:`bisect`'s findings; :func:`report_lines` prints them."""

    diffs: tuple[Difference, ...]
    symptoms: Symptoms
    #: The 1-minimal set (indices into ``diffs``), empty when there was no regression to bisect.
    culprits: tuple[int, ...]
    #: The culprits grouped into causes: first the set that reproduces the exact symptoms, then the others one each.
    causes: tuple[tuple[int, ...], ...]
    #: Every configuration measured, in the order measured (good, bad, then the probes).
    records: tuple[ProbeRecord, ...]
    launches: int
    server_s: float
    wall_s: float
    fixed: tuple[NotBisectable, ...] = ()
    #: The bad configuration's workload temperature (exact metrics need 0).
    temperature: Any = 0.0

    def record(self, subset: Iterable[int]) -> ProbeRecord | None:
        wanted = tuple(sorted(subset))
        return next((r for r in self.records if r.subset == wanted), None)


def bisect(
    good: Mapping[str, Any],
    diffs: Sequence[Difference],
    probes: Probes,
    *,
    tolerance_rel: float = 0.05,
    max_pairs: int = MAX_PAIRS,
    fixed: Sequence[NotBisectable] = (),
    clock: Callable[[], float] | None = None,
    on_probe: Callable[[ProbeRecord], None] | None = None,
) -> BisectResult:
    """Measure the good and the bad configuration, find the symptoms, run :func:`ddmin` over ``diffs`` with each probe
    decided by :func:`judge`, group the culprits into causes, and measure each cause alone (its effect).

    Launch cost: probes are cached by configuration; within a ddmin step, cached probes come first, then those the
    running probe server serves (same :func:`launch_key`), so consecutive probes share a launch where ddmin allows;
    a probe is decided on exact metrics before any tok/s pair is measured.

    :param good: the good profile mapping; the bad one is ``apply(good, diffs)``.
    :param fixed: differences no profile applies (:func:`not_bisectable`), carried into the report.
    :param on_probe: called with each probe's record once it is decided (progress lines).
    :raises SpecdecError: the good or the bad configuration could not be measured.
    """
    from pytest_specdec.core import clock as default_clock

    now = clock or default_clock.now
    started = now()
    records: dict[str, ProbeRecord] = {}
    order: list[ProbeRecord] = []
    temperature_of = lambda cfg: (cfg.get("workload") or {}).get("temperature", 0.0)  # noqa: E731

    def label_of(subset: tuple[int, ...]) -> str:
        if not subset:
            return "good"
        if len(subset) == len(diffs):
            return "bad"
        return "+".join(diffs[i].key for i in subset)

    def record_of(subset: tuple[int, ...]) -> tuple[ProbeRecord, dict[str, Any]]:
        config = apply(good, [diffs[i] for i in subset])
        key = config_key(config)
        if key not in records:
            records[key] = ProbeRecord(subset, label_of(subset))
            order.append(records[key])
        return records[key], config

    def measure_exact(rec: ProbeRecord, config: dict[str, Any]) -> None:
        if not rec.exact and rec.error is None:
            try:
                rec.exact = probes.exact(config, rec.label)
            except SpecdecError as exc:
                rec.error = _short_error(exc)

    def more_pairs(rec: ProbeRecord, config: dict[str, Any], count: int) -> None:
        try:
            rec.ratios += probes.pairs(config, rec.label, count)
        except SpecdecError as exc:
            rec.error = _short_error(exc)

    everything = tuple(range(len(diffs)))
    good_rec, good_cfg = record_of(())
    measure_exact(good_rec, good_cfg)
    bad_rec, bad_cfg = record_of(everything)
    measure_exact(bad_rec, bad_cfg)
    for rec in (good_rec, bad_rec):
        if rec.error is not None:
            raise _Unmeasured(f"the {rec.label} configuration could not be measured: {rec.error}")
    more_pairs(bad_rec, bad_cfg, MIN_PAIRS)
    symptoms = find_symptoms(good_rec.exact, bad_rec.exact, bad_rec.ratios, temperature=temperature_of(bad_cfg),
                             tolerance_rel=tolerance_rel)  # fmt: skip
    if not symptoms.regressed and len(bad_rec.ratios) < max_pairs and bad_rec.error is None:
        # Below the floor but not significant after MIN_PAIRS: as many pairs again before calling it no regression.
        s = stats.summarize(bad_rec.ratios)
        if s is not None and s.median < 1.0 - tolerance_rel:
            more_pairs(bad_rec, bad_cfg, MIN_PAIRS)
            symptoms = find_symptoms(good_rec.exact, bad_rec.exact, bad_rec.ratios,
                                     temperature=temperature_of(bad_cfg), tolerance_rel=tolerance_rel)  # fmt: skip
    if bad_rec.error is not None:
        raise _Unmeasured(f"the bad configuration could not be measured: {bad_rec.error}")

    def decide(subset: tuple[int, ...], *, exact_only: bool = False) -> Outcome:
        rec, config = record_of(subset)
        wanted = Symptoms(symptoms.exact, None) if exact_only else symptoms
        measure_exact(rec, config)
        verdict, outcome = decided(rec, config, wanted)
        if not exact_only or rec.verdict is None:
            rec.verdict = verdict
        if on_probe is not None:
            on_probe(rec)
        return outcome

    def decided(rec: ProbeRecord, config: dict[str, Any], wanted: Symptoms) -> tuple[ProbeVerdict, Outcome]:
        """Judge the probe, measuring more pairs while the verdict asks for them."""
        while True:
            if rec.error is not None:
                return ProbeVerdict("UNRESOLVED", "error", rec.error), "UNRESOLVED"
            verdict = judge(wanted, rec.exact, rec.ratios, temperature=temperature_of(config), max_pairs=max_pairs)
            if verdict.outcome is not None:
                return verdict, verdict.outcome
            more_pairs(rec, config, verdict.pairs)

    def arrange(candidates: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        running = probes.running()

        def rank(subset: tuple[int, ...]) -> int:
            config = apply(good, [diffs[i] for i in subset])
            if config_key(config) in records and records[config_key(config)].verdict is not None:
                return 0
            return 1 if launch_key(config) == running else 2

        return sorted(candidates, key=rank)

    culprits: tuple[int, ...] = ()
    causes: list[tuple[int, ...]] = []
    if symptoms.regressed:
        good_rec.verdict = ProbeVerdict("PASS", "exact", "the good configuration")
        bad_rec.verdict = ProbeVerdict("FAIL", "paired" if symptoms.level else "exact", "the bad configuration")
        if on_probe is not None:
            on_probe(good_rec)
            on_probe(bad_rec)
        culprits = ddmin(len(diffs), decide, order=arrange, subsets=False)
        causes = _causes(culprits, symptoms, lambda s: decide(s, exact_only=True), arrange)
        for cause in causes:
            _effect(cause, record_of, measure_exact, more_pairs, symptoms)
    return BisectResult(
        diffs=tuple(diffs), symptoms=symptoms, culprits=culprits, causes=tuple(causes), records=tuple(order),
        launches=probes.launches, server_s=probes.server_s, wall_s=now() - started, fixed=tuple(fixed),
        temperature=temperature_of(bad_cfg),
    )  # fmt: skip


def _short_error(exc: SpecdecError) -> str:
    """The first line of a probe's error, its cause first when it has one (``ServerStartError.cause``), cut to
    160 characters: the report names the probe, the log keeps the rest."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    cause = getattr(exc, "cause", None)
    text = f"{cause}: {line}" if isinstance(cause, str) and cause and cause != "unknown" else line
    return text if len(text) <= 160 else text[:157] + "..."


class _Unmeasured(SpecdecError):
    """The good or the bad configuration could not be measured: there is nothing to bisect."""


def _causes(
    culprits: tuple[int, ...],
    symptoms: Symptoms,
    exact_test: Callable[[tuple[int, ...]], Outcome],
    arrange: Callable[[list[tuple[int, ...]]], list[tuple[int, ...]]],
) -> list[tuple[int, ...]]:
    """The culprits as causes: ddmin over the culprits on the exact symptoms alone gives the differences that make
    the exact metrics bad together (one cause, e.g. aux ids with -1 *and* the flag that lets the server run them);
    every other culprit is a cause of its own (it is needed for the full slowdown)."""
    if len(culprits) < 2:
        return [culprits] if culprits else []
    if not symptoms.exact:
        return [(c,) for c in culprits]

    def on_culprits(sub: tuple[int, ...]) -> Outcome:
        return exact_test(tuple(culprits[i] for i in sub))

    def arranged(cands: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        mapped = {tuple(culprits[i] for i in c): c for c in cands}
        return [mapped[m] for m in arrange(list(mapped))]

    first = tuple(culprits[i] for i in ddmin(len(culprits), on_culprits, order=arranged, subsets=False))
    return [first, *((c,) for c in culprits if c not in first)]


def _effect(
    cause: tuple[int, ...],
    record_of: Callable[[tuple[int, ...]], tuple[ProbeRecord, dict[str, Any]]],
    measure_exact: Callable[[ProbeRecord, dict[str, Any]], None],
    more_pairs: Callable[[ProbeRecord, dict[str, Any], int], None],
    symptoms: Symptoms,
) -> None:
    """Measure ``cause`` applied alone to the good configuration: exact metrics, and paired tok/s when the
    regression has a throughput symptom (its measured effect, for the report)."""
    rec, config = record_of(tuple(sorted(cause)))
    measure_exact(rec, config)
    if symptoms.level is not None and rec.error is None and len(rec.ratios) < MIN_PAIRS:
        more_pairs(rec, config, MIN_PAIRS - len(rec.ratios))


def one_at_a_time(
    good: Mapping[str, Any], diffs: Sequence[Difference], probes: Probes, *, tolerance_rel: float = 0.05
) -> list[tuple[int, str]]:
    """The search bisect replaces, for ``benchmarks/bench_bisect.py``: apply each difference alone to the good
    configuration and call it a culprit when that alone regresses (an exact metric differs, or paired tok/s is
    significantly below ``1 - tolerance_rel``). Misses culprits that act only together.

    :returns: (index, reason) per culprit found.
    """
    base = probes.exact(good, "good")
    found = []
    for i, d in enumerate(diffs):
        config = apply(good, [d])
        try:
            exact = probes.exact(config, d.key)
            ratios = probes.pairs(config, d.key, MIN_PAIRS)
        except SpecdecError:
            continue
        temperature = (config.get("workload") or {}).get("temperature", 0.0)
        symptoms = find_symptoms(base, exact, ratios, temperature=temperature, tolerance_rel=tolerance_rel)
        if symptoms.regressed:
            found.append((i, ", ".join([*symptoms.exact, *(["tok/s"] if symptoms.level else [])])))
    return found
