"""The bisect: GOOD and BAD measured, then each symptom bisected on its own with
:func:`~pytest_specdec.bisection.delta.ddmin`, the cause of the exact symptom first.

1. GOOD and BAD: two phases each (exact metrics seen to repeat), BAD's paired tok/s against GOOD until the
   sequential verdict decides (``symptoms.throughput_check``).
2. The exact symptom (accept length/rate at temperature 0): ddmin over every difference, each probe one measured
   phase judged on the exact metrics alone (``symptoms.judge_exact``). The result is cause 1; its paired tok/s
   against GOOD is measured too (a cause of both symptoms is reported once, with both effects).
3. The throughput symptom on what remains: when BAD is slower than cause 1 alone (``sequential.decide_shift`` on
   the two sets of ratios), cause 1 is held fixed on both sides: its server becomes the paired reference arm and
   every probe is GOOD + cause 1 + some of the other differences, judged on paired tok/s against the midpoint of
   what remains (``symptoms.judge_throughput``). Without an exact symptom this is the only search, against GOOD.

Launches: the reference arm stays up for every probe; probes are cached by configuration; the differences are
ordered by prior knowledge (``prior.rank``: what the engines' documentation ties to the symptom first), the likeliest
one is probed alone first, and within a ddmin step cached probes come first, then the one the running probe server
serves, then those that leave out only unlikely differences. A budget (``BudgetSpent`` from the probes), Ctrl-C or
a stop signal (``KeyboardInterrupt``) ends the search with what is known: causes found, candidates left.
Nothing here starts a server: a :class:`Probes` object (``probes.py``) measures the configurations asked for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import scipy.stats as sps

from pytest_specdec.bisection import prior
from pytest_specdec.bisection.delta import Outcome, ddmin
from pytest_specdec.bisection.diffs import Difference, NotBisectable, apply, config_key, launch_key
from pytest_specdec.bisection.symptoms import (
    MAX_PAIRS,
    ProbeVerdict,
    Symptoms,
    design,
    exact_symptoms,
    geometric_mean,
    judge_exact,
    judge_throughput,
    log_ratio_sd,
    pairs_to_split,
    throughput_check,
    throughput_line,
)
from pytest_specdec.core.errors import ServerStartError, SpecdecError
from pytest_specdec.judge import sequential

__all__ = ["BisectResult", "BudgetSpent", "Cause", "ProbeRecord", "Probes", "bisect", "estimate", "one_at_a_time"]


class BudgetSpent(Exception):  # noqa: N818 (a stop, not an error)
    """Raised by :class:`Probes` before a launch the budget does not allow (``--max-launches``): the bisect stops
    and reports what it knows. Not a ``SpecdecError``: no probe may take it for its own failure."""


class Probes(Protocol):
    """What :func:`bisect` needs measured (``probes.Prober`` launches servers; tests simulate). A configuration is a
    profile mapping (:func:`apply`). Failures raise ``SpecdecError`` (a server that does not start, a profile the
    schema rejects): the probe is then unresolved; ``BudgetSpent`` stops the bisect."""

    #: Servers started so far, and seconds they ran (startup included), summed over servers.
    launches: int
    server_s: float

    def exact(self, config: Mapping[str, Any], label: str, phases: int) -> dict[str, list[float]]:
        """Per exact field (:data:`EXACT_FIELDS`), the values of ``phases`` measured phases of the configuration."""
        ...

    def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
        """``count`` more paired tok/s ratios configuration/reference arm, phases interleaved (the reference arm is
        GOOD until :meth:`hold` names another)."""
        ...

    def hold(self, config: Mapping[str, Any], label: str) -> None:
        """Make ``config`` the reference arm of every later pair (its running server is kept, else launched; the
        previous reference arm is stopped)."""
        ...

    def running(self) -> str | None:
        """The :func:`launch_key` of the probe server running now (reused by the next probe it serves), or None."""
        ...


#: A --max-pairs suggestion over this many times the budget leads with a steadier workload instead: hundreds of paired
#: phases a probe is hours on a GPU runner.
_PRACTICAL_PAIRS = 4


@dataclass
class ProbeRecord:
    """Everything measured for one configuration in one phase of the search."""

    subset: tuple[int, ...]
    label: str
    #: "setup" (GOOD and BAD), "exact" or "throughput": the search that asked for it.
    phase: str = "setup"
    #: What its paired ratios are against: "good", or "good + cause 1" in the throughput search.
    versus: str = "good"
    exact: dict[str, list[float]] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)
    error: str | None = None
    verdict: ProbeVerdict | None = None


@dataclass(frozen=True, slots=True)
class Cause:
    """A 1-minimal set of differences that reproduces one symptom (ddmin's result in one search)."""

    #: "exact" (reproduces the exact metrics; its tok/s effect is measured too) or "throughput".
    symptom: str
    culprits: tuple[int, ...]
    #: The paired reference its tok/s effect is against: "good", or "good + cause 1".
    versus: str = "good"


@dataclass(frozen=True, slots=True)
class BisectResult:
    """:func:`bisect`'s findings; :func:`report_lines` prints them."""

    diffs: tuple[Difference, ...]
    symptoms: Symptoms
    #: Every culprit of every cause (indices into ``diffs``), ascending; empty when nothing regressed.
    culprits: tuple[int, ...]
    causes: tuple[Cause, ...]
    #: Every configuration measured, in the order measured (good, bad, then the probes).
    records: tuple[ProbeRecord, ...]
    launches: int
    server_s: float
    wall_s: float
    fixed: tuple[NotBisectable, ...] = ()
    #: BAD's workload temperature (exact metrics need 0).
    temperature: Any = 0.0
    #: Why the search ended early (``--max-launches 6 spent``, ``interrupted``), None when it finished.
    stopped: str | None = None
    #: Searches not finished when stopped: (symptom, candidates ddmin still suspected), the culprits among them.
    open_searches: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: Whether BAD is slower than cause 1 alone (the throughput search's reason), as a line; "" when not asked.
    remainder: str = ""
    #: Why the throughput search was not started (no probe could decide within the pairs budget at the measured
    #: spread), with the pairs a probe would need; its candidates are in ``open_searches``. "" when it ran.
    unsplit: str = ""

    def record(self, subset: Iterable[int], phase: str | None = None) -> ProbeRecord | None:
        """The last record of ``subset`` (of ``phase`` when given)."""
        wanted = tuple(sorted(subset))
        found = [r for r in self.records if r.subset == wanted and (phase is None or r.phase == phase)]
        return found[-1] if found else None


def _one_se_milder(level: float, decision: sequential.Decision | None) -> float:
    """``level`` moved one standard error towards no change on the log scale, the error read off ``decision``'s
    two-sided interval (half-width / its normal quantile); ``level`` itself without an interval."""
    if decision is None or decision.low is None or decision.high is None or decision.low <= 0:
        return level
    z = float(sps.norm.ppf(0.5 + decision.confidence / 2.0))
    se = (math.log(decision.high) - math.log(decision.low)) / (2.0 * z)
    return math.exp(math.log(level) + se)


class _Unsplit(Exception):
    """The throughput search ends: no probe can decide within the pairs budget (``_Search.splittable``)."""


class _Unmeasured(SpecdecError):
    """GOOD or BAD could not be measured: there is nothing to bisect."""


def _short_error(exc: SpecdecError) -> str:
    """The first line of a probe's error, its cause first when it has one (``ServerStartError.cause``), cut to
    160 characters: the report names the probe, the log keeps the rest."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    cause = exc.cause if isinstance(exc, ServerStartError) else None
    text = f"{cause}: {line}" if cause and cause != "unknown" else line
    return text if len(text) <= 160 else text[:157] + "..."


def _search_tests(count: int, culprit: int, likely_first: bool) -> int:
    """How many probes :func:`bisect`'s search takes over ``count`` prior-ordered candidates when the one at
    position ``culprit`` alone reproduces (no launch shared, no cache from an earlier search)."""
    tested: set[tuple[int, ...]] = set()

    def test(subset: tuple[int, ...]) -> Outcome:
        tested.add(subset)
        return "FAIL" if culprit in subset else "PASS"

    if count <= 1:
        return 0
    if likely_first and test((0,)) == "FAIL":
        return 1
    ddmin(count, lambda s: test(s) if s not in tested else ("FAIL" if culprit in s else "PASS"),
          order=_prior_order, subsets=False)  # fmt: skip
    return len(tested)


def estimate(count: int, *, exact: bool, throughput: bool) -> tuple[int, int]:
    """Launches a bisect over ``count`` differences takes when each symptom has one culprit, 2 for GOOD and BAD
    included: (fewest, most) over where the culprit sits in the prior order, the second search over what the first
    left. Example: 5 differences, both symptoms: (4, 12) — 4 when the likeliest difference is the culprit each time.
    """
    low = high = 2
    left = count
    for wanted in (exact, throughput):
        if wanted:
            tests = [_search_tests(left, c, True) for c in range(left)]
            low, high = low + min(tests, default=0), high + max(tests, default=0)
            left = max(left - 1, 0)
    return low, high


def _prior_order(candidates: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Candidates (positions in prior order, 0 likeliest) that leave out only unlikely ones first: by the likeliest
    position of the step's candidates each leaves out, least likely first (stable)."""
    union = {p for c in candidates for p in c}

    def likeliest_left_out(subset: tuple[int, ...]) -> int:
        return min(union.difference(subset), default=len(union))

    return sorted(candidates, key=lambda s: -likeliest_left_out(s))


class _Search:
    """One bisect's state (:func:`bisect`)."""

    def __init__(
        self,
        good: Mapping[str, Any],
        diffs: Sequence[Difference],
        probes: Probes,
        *,
        tolerance_rel: float,
        max_pairs: int,
        on_probe: Callable[[ProbeRecord], None] | None,
        on_note: Callable[[str], None] | None,
        on_estimate: Callable[[int, int, str], None] | None,
    ) -> None:
        self.good = good
        self.diffs = list(diffs)
        self.probes = probes
        self.tolerance_rel = tolerance_rel
        self.look = design(max_pairs)
        self.on_probe = on_probe
        self.on_note = on_note
        self.on_estimate = on_estimate
        self.records: dict[tuple[str, str], ProbeRecord] = {}
        self.order: list[ProbeRecord] = []
        self.exact_cache: dict[str, dict[str, list[float]]] = {}
        self.symptoms = Symptoms({}, None, throughput_line="not measured", throughput="undecided")
        self.causes: list[Cause] = []
        self.open: dict[str, tuple[int, ...]] = {}
        self.remainder = ""
        #: Cause 1 was measured to explain the tok/s symptom too (nothing is left suspected for it).
        self.explained = False
        self.unsplit = ""
        #: The tok/s level's estimate interval (the decision that set it), to judge whether probes can split it.
        self.level_decision: sequential.Decision | None = None
        bad_cfg = apply(good, diffs)
        self.temperature = (bad_cfg.get("workload") or {}).get("temperature", 0.0)

    # -- records ----------------------------------------------------------------------------------------------------

    def label_of(self, subset: tuple[int, ...], base: tuple[int, ...] = ()) -> str:
        if not subset:
            return "good"
        if len(subset) == len(self.diffs):
            return "bad"
        own = [self.diffs[i].key for i in subset if i not in base]
        if base and not own:
            return "cause 1"
        return "+".join(own) + (" on cause 1" if base else "")

    def record_of(self, subset: tuple[int, ...], phase: str, base: tuple[int, ...] = ()) -> tuple[ProbeRecord, dict]:
        subset = tuple(sorted(subset))
        config = apply(self.good, [self.diffs[i] for i in subset])
        reference = "base" if phase == "throughput" else "good"
        key = (reference, config_key(config))
        if key not in self.records:
            versus = "good + cause 1" if base else "good"
            self.records[key] = ProbeRecord(subset, self.label_of(subset, base), phase, versus)
            self.order.append(self.records[key])
        return self.records[key], config

    def measure_exact(self, rec: ProbeRecord, config: dict, phases: int) -> None:
        if rec.exact or rec.error is not None:
            return
        cached = self.exact_cache.get(config_key(config))
        if cached is not None:
            rec.exact = cached
            return
        try:
            rec.exact = self.probes.exact(config, rec.label, phases)
            self.exact_cache[config_key(config)] = rec.exact
        except SpecdecError as exc:
            rec.error = _short_error(exc)

    def more_pairs(self, rec: ProbeRecord, config: dict, count: int) -> None:
        try:
            rec.ratios += self.probes.pairs(config, rec.label, count)
        except SpecdecError as exc:
            rec.error = _short_error(exc)

    def pairs_until_decided(self, rec: ProbeRecord, config: dict, decided: Callable[[], bool]) -> None:
        """Pairs up to each look of the throughput design until ``decided()`` or the last look."""
        for point in self.look.points:
            if rec.error is not None or decided():
                return
            if len(rec.ratios) < point:
                self.more_pairs(rec, config, point - len(rec.ratios))
        return

    def note(self, line: str) -> None:
        if self.on_note is not None:
            self.on_note(line)

    def estimated(self, low: int, high: int, why: str) -> None:
        if self.on_estimate is not None:
            self.on_estimate(low, high, why)

    def told(self, rec: ProbeRecord) -> None:
        if self.on_probe is not None:
            self.on_probe(rec)

    # -- the bisect ---------------------------------------------------------------------------------------------------

    def run(self) -> None:
        everything = tuple(range(len(self.diffs)))
        good_rec, good_cfg = self.record_of((), "setup")
        self.measure_exact(good_rec, good_cfg, 2)
        if good_rec.error is not None:
            raise _Unmeasured(f"the good configuration could not be measured: {good_rec.error}")
        self.estimated(*estimate(len(self.diffs), exact=True, throughput=True),
                       "if each symptom has one cause (before the symptoms are known)")
        bad_rec, bad_cfg = self.record_of(everything, "setup")
        self.measure_exact(bad_rec, bad_cfg, 2)
        if bad_rec.error is not None:
            raise _Unmeasured(f"the bad configuration could not be measured: {bad_rec.error}")
        exact = exact_symptoms(good_rec.exact, bad_rec.exact, self.temperature)
        check = lambda: throughput_check(bad_rec.ratios, self.tolerance_rel, self.look)  # noqa: E731
        self.pairs_until_decided(bad_rec, bad_cfg, lambda: check()[0] != "undecided" and (
            not exact or self.precise_enough(*check(), bad_rec.ratios)))  # fmt: skip
        if bad_rec.error is not None:
            raise _Unmeasured(f"the bad configuration could not be measured: {bad_rec.error}")
        outcome, decision = check()
        level = geometric_mean(bad_rec.ratios)
        self.level_decision = decision
        # Undecided at the budget with the estimate beyond the tolerance: suspected, bisected all the same (a noisy
        # runner; its probes may stay unresolved). Passed, or undecided inside the tolerance: no tok/s symptom.
        if outcome == "passed" or level is None or (outcome == "undecided" and level >= 1.0 - self.tolerance_rel):
            level = None
        self.symptoms = Symptoms(exact, level, tuple(bad_rec.ratios),
                                 throughput_line(outcome, decision, self.tolerance_rel), outcome)  # fmt: skip
        shown = [f"{name} {g:.4g} -> {b:.4g} (exact)" for name, (g, b) in exact.items()]
        self.note(f"symptoms: {'; '.join([*shown, self.symptoms.throughput_line])}")
        if not self.symptoms.regressed:
            return
        good_rec.verdict = ProbeVerdict("PASS", "exact", "the good configuration")
        bad_rec.verdict = ProbeVerdict("FAIL", "exact" if exact else "paired", "the bad configuration")
        self.told(good_rec)
        self.told(bad_rec)
        both = bool(exact) and level is not None
        self.estimated(*estimate(len(self.diffs), exact=bool(exact), throughput=level is not None),
                       f"in all if {'each symptom has' if both else 'the symptom has'} one cause")
        base: tuple[int, ...] = ()
        if exact:
            cause = self.search("exact", everything, ())
            self.causes.append(Cause("exact", cause))
            if level is None:
                return
            if len(cause) == len(self.diffs):
                return  # one cause of both symptoms: BAD's own ratios are its tok/s effect
            e_rec, e_cfg = self.record_of(cause, "exact")
            self.measure_exact(e_rec, e_cfg, 1)
            remains = self.remains(e_rec, e_cfg, bad_rec)
            if remains is None:
                if self.level_decision is not None and self.level_decision.verdict == "open":
                    # Undecided clears nothing: the other differences stay suspected of the tok/s symptom.
                    self.open["throughput"] = tuple(i for i in everything if i not in cause)
                    self.unsplit = (f"tok/s not bisected: whether anything beside cause 1 slows BAD stayed undecided "
                                    f"(what remains: x{self.level_decision.estimate:.3f}, "
                                    f"{self.level_decision.interval()}); more pairs (--max-pairs "
                                    f"{2 * self.look.points[-1]}) or a steadier workload would decide it")  # fmt: skip
                    self.note(self.unsplit)
                return
            base, level = cause, remains
            self.probes.hold(e_cfg, e_rec.label)
        assert level is not None
        left = tuple(i for i in everything if i not in base)
        if not self.splittable(level, left, bad_rec, *(self.records_of_base(base))):
            return
        try:
            cause = self.search("throughput", left, base, level)
        except _Unsplit:
            return
        self.causes.append(Cause("throughput", cause, "good + cause 1" if base else "good"))

    def precise_enough(self, outcome: str, decision: sequential.Decision, ratios: Sequence[float]) -> bool:
        """With an exact symptom beside a tok/s one, what remains after the exact cause is judged against BAD's
        pairs, and BAD's server is not launched again: BAD is measured on past its own verdict until a remainder of
        half its effect (the square root of its level), moved towards no change by the standard error of a ratio of
        two such levels, could still be split within the pairs budget (:func:`pairs_to_split`), or to the budget.
        Seen on an H200 with CUDA graphs: BAD decided after 8 pairs at a spread of 0.23, and the remainder after the
        aux ids, x0.80, carried an interval of 0.47-1.37: not bisected."""
        level, sd = geometric_mean(ratios), log_ratio_sd(ratios)
        if outcome != "FAILED" or level is None or sd is None or sd == 0.0:
            return True
        se = math.log(_one_se_milder(level, decision) / level)  # one standard error of BAD's log level
        remainder = math.exp(math.log(level) / 2.0 + math.sqrt(2.0) * se)
        return self.within_budget(remainder, sd)

    def mildest(self, level: float) -> float:
        """The tok/s level one standard error milder than ``level`` (by the remainder's decision; the midpoint
        follows the estimate, and a probe must tell this one from no change too)."""
        return max(level, _one_se_milder(level, self.level_decision))

    def pairs_needed(self, level: float, sd: float) -> int | None:
        """:func:`pairs_to_split` at this search's looks; None when ``level`` is no slowdown (>= 1)."""
        return pairs_to_split(level, sd, self.look) if level < 1.0 else None

    def within_budget(self, level: float, sd: float) -> bool:
        """Could a probe tell ``level`` from no change within ``--max-pairs``?"""
        need = self.pairs_needed(level, sd)
        return need is not None and need <= self.look.points[-1]

    def records_of_base(self, base: tuple[int, ...]) -> tuple[ProbeRecord, ...]:
        """Cause 1's own record when the throughput search runs on top of it (its pairs tell the spread too)."""
        if not base:
            return ()
        rec = self.records.get(("good", config_key(apply(self.good, [self.diffs[i] for i in base]))))
        return (rec,) if rec is not None else ()

    def splittable(self, level: float, left: tuple[int, ...], *measured: ProbeRecord) -> bool:
        """Can a probe tell the throughput symptom (``level``) from no change within the pairs budget, at the spread
        the pairs so far show? When not, the search is not started: every probe would launch a server, measure to
        the budget and end unresolved. The candidates stay suspected, with the pairs a probe would need."""
        sd = log_ratio_sd(*(r.ratios for r in measured))
        if sd is None or len(left) == 0:
            return True
        # The level is an estimate, and the midpoint follows it: a probe must tell apart a level one standard error
        # milder than the estimate (a one-sided 84% bound), or a misplaced midpoint names noise as culprits.
        mildest = self.mildest(level)
        need = self.pairs_needed(mildest, sd)
        most = self.look.points[-1]
        if need is not None and need <= most:
            return True
        self.open["throughput"] = left
        steadier = "or a steadier workload (more requests a phase; CUDA graphs on a GPU)"
        if need is None:
            self.unsplit = (
                f"tok/s not bisected: what remains, x{level:.3f}, is not one standard error from no change (one "
                f"milder: x{mildest:.3f}) at this spread (sd {sd:.3f} of a pair's log ratio): no probe could be judged "
                f"against it; more pairs (--max-pairs) {steadier}"
            )
        else:
            milder = f" (one standard error milder: x{mildest:.3f})" if mildest > level else ""
            # Far over the budget (a fresh-user trial was told --max-pairs 326) more pairs is not the fix to lead with.
            fix = (
                f"--max-pairs {need} (~{need} paired phases a probe) {steadier}" if need <= _PRACTICAL_PAIRS * most
                else f"a steadier workload first (more requests a phase; CUDA graphs on a GPU): --max-pairs {need} "
                f"would measure ~{need} paired phases a probe, {need / most:.0f}x the budget"
            )  # fmt: skip
            self.unsplit = (
                f"tok/s not bisected: a probe must tell x{level:.3f}{milder} from no change; at this spread (sd "
                f"{sd:.3f} of a pair's log ratio) that takes about {need} pairs a probe, over --max-pairs {most}; to "
                f"bisect it, {fix}"
            )
        self.note(self.unsplit)
        return False

    def stop_at_open_probe(self, rec: ProbeRecord, level: float, left: tuple[int, ...]) -> None:
        """A probe stayed open at the pairs budget although the estimates said one could decide: ddmin has nothing
        to split on, and going on launches servers whose "?" end up naming harmless differences (the replay,
        ``benchmarks/bench_bisect.py --noise-table``: 3-10 of 40 runs named one before this stop, 0-1 after). The
        candidates stay suspected, with the pairs the spread measured so far asks for."""
        self.open["throughput"] = left
        most = self.look.points[-1]
        sd = log_ratio_sd(*(r.ratios for r in self.order if r.ratios))
        need = self.pairs_needed(self.mildest(level), sd) if sd else None
        more = max(need or 0, 2 * most)
        fix = (
            f"--max-pairs {more} or a steadier workload" if more <= _PRACTICAL_PAIRS * most
            else f"a steadier workload first (more requests a phase; CUDA graphs on a GPU), or --max-pairs {more}"
        )  # fmt: skip
        self.unsplit = (
            f"tok/s not bisected: probe {rec.label} stayed undecided after {len(rec.ratios)} "
            f"pair{'s' if len(rec.ratios) != 1 else ''} (--max-pairs "
            f"{most}) against x{level:.3f}; a probe needs about {need or 'more than ' + str(most)} pairs at the spread "
            f"seen (sd {sd or 0.0:.3f} of a pair's log ratio): to bisect it, {fix}"
        )
        self.note(self.unsplit)

    def remains(self, e_rec: ProbeRecord, e_cfg: dict, bad_rec: ProbeRecord) -> float | None:
        """Is BAD slower than cause 1 alone? Cause 1's paired ratios against GOOD, measured until
        ``decide_shift(cause 1's ratios, BAD's, tolerance)`` decides: ``worse`` -> the level of what remains
        (BAD's geometric mean over cause 1's); ``within`` -> None (cause 1 explains the slowdown too); open at the
        budget -> that level when it is beyond the tolerance, else None. From the 2nd look it stops early when BAD's
        own pairs (no more will come: its server is gone) keep the interval across the tolerance whatever cause 1
        measures."""

        def decision() -> sequential.Decision:
            return sequential.decide_shift(e_rec.ratios, bad_rec.ratios, self.tolerance_rel, self.look,
                                           higher_is_better=True)  # fmt: skip

        def futile() -> bool:
            # BAD's pairs are all there will be (its server is gone): when their own interval alone reaches across
            # the tolerance from today's estimate, more pairs of cause 1 cannot decide it (checked from the 2nd look).
            if len(e_rec.ratios) < self.look.points[min(1, self.look.looks - 1)] or len(bad_rec.ratios) < 2:
                return False
            bad_side = sequential.decide_floor(bad_rec.ratios, 1.0, self.look)
            if bad_side.low is None or bad_side.high is None:
                return False
            half = (math.log(bad_side.high) - math.log(bad_side.low)) / 2.0
            estimate = math.log(decision().estimate)
            return half >= abs(estimate - math.log(1.0 - self.tolerance_rel))

        def known() -> bool:
            # Decided, and (when it is a remainder to bisect) known well enough that a probe could be judged against
            # it: the midpoint follows the estimate, and a loose one misplaces it (the replay named noise).
            d = decision()
            if not d.decided or d.verdict == "within":
                return d.decided
            sd = log_ratio_sd(e_rec.ratios, bad_rec.ratios)
            milder = _one_se_milder(d.estimate, d)
            return sd is None or self.within_budget(milder, sd)

        self.pairs_until_decided(e_rec, e_cfg,
                                 lambda: len(e_rec.ratios) >= 2 and (known() or futile()))  # fmt: skip
        if e_rec.error is not None or len(e_rec.ratios) < 2:
            self.remainder = f"cause 1 alone could not be measured paired ({e_rec.error or 'no pairs'})"
            return None
        d = decision()
        self.level_decision = d
        e_mean, b_mean = geometric_mean(e_rec.ratios), geometric_mean(bad_rec.ratios)
        assert e_mean is not None and b_mean is not None
        level = b_mean / e_mean
        shown = (f"bad x{b_mean:.3f} vs cause 1 alone x{e_mean:.3f} of good: x{d.estimate:.3f} "
                 f"[{d.interval()}, {d.method}]")  # fmt: skip
        if d.verdict == "worse" or (d.verdict == "open" and level < 1.0 - self.tolerance_rel):
            word = "slower beyond" if d.verdict == "worse" else "undecided, estimate beyond"
            self.remainder = f"{shown}: {word} {self.tolerance_rel:.0%}; tok/s bisected with cause 1 on both sides"
            self.note(f"remainder: {self.remainder}")
            return level
        if d.verdict == "within":
            self.explained = True
            self.remainder = f"{shown}: within {self.tolerance_rel:.0%}; cause 1 explains the tok/s symptom too"
        else:
            self.remainder = f"{shown}: undecided, estimate within {self.tolerance_rel:.0%}"
        self.note(f"remainder: {self.remainder}")
        return None

    def search(self, symptom: str, candidates: tuple[int, ...], base: tuple[int, ...],
               level: float | None = None) -> tuple[int, ...]:  # fmt: skip
        """ddmin over ``candidates`` (indices into the differences) for ``symptom``, each probe ``base`` + a
        subset; the likeliest candidate alone first. :returns: the culprits (indices), ascending."""
        kind: prior.Symptom = "exact" if symptom == "exact" else "throughput"
        ranked = [candidates[p] for p in prior.rank([self.diffs[i] for i in candidates], kind)]

        def config_subset(positions: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(sorted((*base, *(ranked[p] for p in positions))))

        def test(positions: tuple[int, ...]) -> Outcome:
            rec, config = self.record_of(config_subset(positions), symptom, base)
            if rec.verdict is None or rec.verdict.outcome is None:
                rec.verdict = self.judge(symptom, rec, config, level)
                self.told(rec)
            assert rec.verdict.outcome is not None
            if rec.verdict.outcome == "UNRESOLVED" and level is not None and rec.error is None:
                # A probe open after the whole budget: with the spread its pairs show, can any probe decide? If
                # not, ddmin would go on launching servers to collect "?" and call harmless differences culprits.
                if not self.splittable(level, self.open.get(symptom, candidates), *(r for r in self.order if r.ratios)):
                    raise _Unsplit
                self.stop_at_open_probe(rec, level, self.open.get(symptom, candidates))
                raise _Unsplit
            return rec.verdict.outcome

        def arrange(cands: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
            running = self.probes.running()

            def rank(positions: tuple[int, ...]) -> int:
                config = apply(self.good, [self.diffs[i] for i in config_subset(positions)])
                rec = self.records.get(("base" if symptom == "throughput" else "good", config_key(config)))
                if rec is not None and rec.verdict is not None:
                    return 0
                return 1 if launch_key(config) == running else 2

            return sorted(_prior_order(cands), key=rank)

        def step(positions: tuple[int, ...]) -> None:
            self.open[symptom] = tuple(sorted(ranked[p] for p in positions))

        step(tuple(range(len(ranked))))
        if len(ranked) > 1 and prior.likely(self.diffs[ranked[0]], kind) and test((0,)) == "FAIL":
            found: tuple[int, ...] = (0,)
        else:
            found = ddmin(len(ranked), test, order=arrange, subsets=False, on_step=step)
        self.open.pop(symptom, None)
        return tuple(sorted(ranked[p] for p in found))

    def judge(self, symptom: str, rec: ProbeRecord, config: dict, level: float | None) -> ProbeVerdict:
        if symptom == "exact":
            self.measure_exact(rec, config, 1)
            if rec.error is not None:
                return ProbeVerdict("UNRESOLVED", "error", rec.error)
            return judge_exact(self.symptoms.exact, rec.exact)
        assert level is not None
        while True:
            if rec.error is not None:
                return ProbeVerdict("UNRESOLVED", "error", rec.error)
            verdict = judge_throughput(level, rec.ratios, self.look, rec.versus)
            if verdict.outcome is not None:
                return verdict
            self.more_pairs(rec, config, verdict.pairs)


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
    on_note: Callable[[str], None] | None = None,
    on_estimate: Callable[[int, int, str], None] | None = None,
) -> BisectResult:
    """Measure GOOD and BAD, find the symptoms, bisect the exact symptom, then the throughput symptom on what
    remains (module docstring).

    A stop (``BudgetSpent`` from the probes, ``KeyboardInterrupt`` from Ctrl-C or a stop signal turned into one)
    ends the search and returns what is known: ``stopped`` says why, ``causes`` what was found, ``open_searches``
    the candidates left. The caller stops the servers (``Prober.close``).

    :param good: the good profile mapping; the bad one is ``apply(good, diffs)``.
    :param max_pairs: the last look of a throughput verdict (pairs); more make fewer probes unresolved.
    :param fixed: differences no profile applies (:func:`not_bisectable`), carried into the report.
    :param on_probe: called with each probe's record once it is decided (progress lines).
    :param on_note: called with the search's progress lines (the symptoms, what remains after cause 1).
    :param on_estimate: called with (fewest, most, condition): the launches in all when the condition holds
        (:func:`estimate`), once GOOD was measured and again once the symptoms are known.
    :raises SpecdecError: GOOD or BAD could not be measured.
    """
    from pytest_specdec.core import clock as default_clock

    now = clock or default_clock.now
    started = now()
    state = _Search(good, diffs, probes, tolerance_rel=tolerance_rel, max_pairs=max_pairs, on_probe=on_probe,
                    on_note=on_note, on_estimate=on_estimate)  # fmt: skip
    stopped = None
    try:
        state.run()
    except BudgetSpent as exc:
        stopped = str(exc) or "launch budget spent"
    except KeyboardInterrupt as exc:
        stopped = str(exc) or "interrupted (Ctrl-C)"
    culprits = tuple(sorted({i for c in state.causes for i in c.culprits}))
    slow_unsearched = state.symptoms.level is not None and "throughput" not in state.open and not any(
        c.symptom == "throughput" for c in state.causes
    )
    if stopped and slow_unsearched and not state.explained:
        # Stopped before the tok/s search began (a fresh-user trial's Ctrl-C listed the exact symptom's suspects
        # only): every difference no cause took is still suspected for it.
        state.open["throughput"] = tuple(i for i in range(len(diffs)) if i not in culprits)
    return BisectResult(
        diffs=tuple(diffs), symptoms=state.symptoms, culprits=culprits, causes=tuple(state.causes),
        records=tuple(state.order), launches=probes.launches, server_s=probes.server_s, wall_s=now() - started,
        fixed=tuple(fixed), temperature=state.temperature, stopped=stopped,
        open_searches=tuple(state.open.items()) if stopped or state.unsplit else (), remainder=state.remainder,
        unsplit=state.unsplit,
    )  # fmt: skip


def one_at_a_time(
    good: Mapping[str, Any], diffs: Sequence[Difference], probes: Probes, *, tolerance_rel: float = 0.05
) -> list[tuple[int, str]]:
    """The search bisect replaces, for ``benchmarks/bench_bisect.py``: apply each difference alone to the good
    configuration and call it a culprit when that alone regresses (an exact metric differs, or paired tok/s is
    slower beyond ``tolerance_rel``: ``symptoms.throughput_check`` at 12 pairs at most). Misses culprits that act
    only together.

    :returns: (index, reason) per culprit found.
    """
    look = design()
    base = probes.exact(good, "good", 2)
    temperature = (good.get("workload") or {}).get("temperature", 0.0)
    found = []
    for i, d in enumerate(diffs):
        config = apply(good, [d])
        try:
            exact = probes.exact(config, d.key, 2)
            ratios: list[float] = []
            for point in look.points:
                ratios += probes.pairs(config, d.key, point - len(ratios))
                if throughput_check(ratios, tolerance_rel, look)[0] != "undecided":
                    break
        except SpecdecError:
            continue
        changed = exact_symptoms(base, exact, temperature)
        slow = throughput_check(ratios, tolerance_rel, look)[0] == "FAILED"
        if changed or slow:
            found.append((i, ", ".join([*changed, *(["tok/s"] if slow else [])])))
    return found

