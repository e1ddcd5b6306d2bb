"""Find what caused a regression between a good and a bad configuration: their differences, delta debugging over
them, and how each probe is decided. Nothing here starts a server: a :class:`Probes` object (``probes.py``) measures
the configurations asked for, so every rule here is unit-tested with a simulated one.

Delta debugging is Zeller's ddmin (A. Zeller and R. Hildebrandt, "Simplifying and Isolating Failure-Inducing Input",
IEEE Transactions on Software Engineering 28(2), 2002, Fig. 5): split the differences into n parts; if one part
applied alone to the good configuration reproduces the regression, continue on it (n = 2); else if one complement
does, continue on it (n - 1); else split finer (2n) until the parts are single differences (bisect tests the
complements only, see :func:`ddmin`'s ``subsets``). The result is
*1-minimal*: it reproduces the regression and removing any one of its differences does not. Unlike one difference
at a time, it finds two culprits that only reproduce the regression together (the incident: aux id -1 lowered the
accept length *and* lost NCCL tuning slowed every forward). A probe that cannot be measured (its server does not
start, or the profile is invalid) is *unresolved* (ddmin's "?"), which ddmin treats as not reproducing.

A probe *reproduces* the regression when it is as bad as the bad configuration on every symptom of the regression
(:func:`find_symptoms`), decided with the project's verdict rules (:func:`judge`):

- exact metrics first: accept length and acceptance rate at temperature 0 with identical repeats are compared
  equal-or-not (``compare.EXACT_FIELDS``); a probe whose value is not the bad value does not reproduce, and no
  throughput needs measuring;
- then paired throughput (``pairing.py``): output tok/s of the probe over the good configuration's, phases
  interleaved, judged against the midpoint between the good level (1) and the bad one with the one-sided Wilcoxon
  signed-rank test of ``stats.below_test``, in both directions; more pairs while neither side is significant, up to
  a cap, then unresolved.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pytest_specdec.core import stats
from pytest_specdec.core.errors import SpecdecError

__all__ = [
    "BisectResult",
    "Difference",
    "EXACT_FIELDS",
    "MAX_PAIRS",
    "MIN_PAIRS",
    "NotBisectable",
    "Outcome",
    "ProbeRecord",
    "Probes",
    "Symptoms",
    "Verdict",
    "apply",
    "bisect",
    "bisect_hint",
    "config_key",
    "ddmin",
    "differences",
    "find_symptoms",
    "judge",
    "launch_key",
    "not_bisectable",
    "one_at_a_time",
    "report_lines",
]

#: ddmin's three test outcomes: the probe reproduces the regression (Zeller's ✗), does not (✓), or could not be
#: measured (?).
Outcome = Literal["FAIL", "PASS", "UNRESOLVED"]

#: Fields compared equal-or-not at temperature 0 (as ``compare.EXACT_FIELDS``; not imported: compare needs numpy
#: through more modules than this one).
EXACT_FIELDS = ("accept_length", "accept_rate")
#: Pairs measured before a throughput verdict: below 6 even "every pair on one side" is not significant at 5 %
#: one-sided (``speedup.CONFIRM_TOTAL_PAIRS``).
MIN_PAIRS = 6
#: Pairs after which an undecided throughput verdict makes the probe unresolved.
MAX_PAIRS = 12

#: Profile keys that change nothing measured (verdicts, scheduling, timeouts, auth): never a difference.
_IGNORED_KEYS = frozenset(
    {"thresholds", "tolerances", "exclusive", "pairing", "startup_timeout_s", "startup_stall_s", "trace",
     "required_env", "port", "api_key", "api_key_env", "name", "source"}
)  # fmt: skip


# -- differences ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Difference:
    """One difference between the good and the bad profile that a profile can apply.

    ``path`` locates it in the profile mapping: ``("env", NAME)``, ``("extra_args", FLAG)`` (the flag's words as
    written, ``("--log-level", "warning")``), ``("speculative", KEY)``, ``("speculative",)`` (the whole block,
    present on one side only), ``("workload", KEY)``, or ``(KEY,)``. ``None`` is "absent". ``relaunch`` is False
    for workload keys: the client sends another workload to the same server.
    """

    path: tuple[str, ...]
    good: Any
    bad: Any

    @property
    def relaunch(self) -> bool:
        return self.path[0] != "workload"

    @property
    def key(self) -> str:
        """``env SPECDEC_REF_FORWARD_DELAY_MS``, ``extra_args --log-level``, ``speculative.num_steps``."""
        if self.path[0] in ("env", "extra_args"):
            return f"{self.path[0]} {self.path[1]}"
        return ".".join(self.path)

    def line(self) -> str:
        """``env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 20``."""
        missing = "(unset)" if self.path[0] == "env" else "(absent)"
        return f"{self.key}: {_show(self.good, missing, self.path)} -> {_show(self.bad, missing, self.path)}"


@dataclass(frozen=True, slots=True)
class NotBisectable:
    """A difference no profile can apply (package versions, driver, GPU, host, the caller's environment)."""

    what: str
    good: str
    bad: str

    def line(self) -> str:
        return f"{self.what}: {self.good} -> {self.bad}"


def _show(value: Any, missing: str, path: tuple[str, ...] = ()) -> str:
    if value is None:
        return missing
    if path[:1] == ("extra_args",):
        return _flag_value(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _flags(args: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``extra_args`` words -> {flag: its words as written}: ``--flag v``, ``--flag v1 v2``, ``--flag=v``, bare
    ``--flag``; words before the first flag under ``(positional)``. A repeated flag keeps its last words, as argparse
    keeps its last value."""
    out: dict[str, tuple[str, ...]] = {}
    current = "(positional)"
    for word in args:
        if word.startswith("--"):
            current = word.partition("=")[0]
            out.pop(current, None)
            out[current] = (word,)
        else:
            out[current] = (*out.get(current, ()), word)
    return out


def _flag_value(words: Sequence[str]) -> str:
    """The value part of a flag's words: ``("--a", "1")`` and ``("--a=1",)`` -> ``1``, ``("--a",)`` -> ``(set)``."""
    if not words:
        return "(set)"
    head, eq, value = words[0].partition("=")
    rest = [value] if eq else []
    rest += list(words[1:]) if head.startswith("--") else list(words)
    return " ".join(rest) or "(set)"


def _unflag(flags: Mapping[str, tuple[str, ...]]) -> list[str]:
    words: list[str] = list(flags.get("(positional)", ()))
    for name, written in flags.items():
        if name != "(positional)":
            words += written
    return words


def differences(good: Mapping[str, Any], bad: Mapping[str, Any]) -> list[Difference]:
    """Every difference between two profile mappings (``Profile.model_dump(mode="json")``, or a stored run's
    ``fingerprint["profile_def"]``) that a profile can apply, in this order: env variables, extra flags, speculative
    keys, other profile keys, workload keys. Keys in ``_IGNORED_KEYS`` (thresholds, tolerances, timeouts, ...)
    measure nothing and are skipped.

    Example: ``{"env": {}}`` and ``{"env": {"X": "1"}}`` -> ``[Difference(("env", "X"), None, "1")]``.
    """
    out: list[Difference] = []
    ge, be = good.get("env") or {}, bad.get("env") or {}
    out += [Difference(("env", k), ge.get(k), be.get(k)) for k in sorted(set(ge) | set(be)) if ge.get(k) != be.get(k)]
    gf, bf = _flags(good.get("extra_args") or []), _flags(bad.get("extra_args") or [])
    out += [Difference(("extra_args", k), gf.get(k), bf.get(k)) for k in [*gf, *(k for k in bf if k not in gf)]
            if gf.get(k) != bf.get(k)]  # fmt: skip
    gs, bs = good.get("speculative"), bad.get("speculative")
    if isinstance(gs, dict) and isinstance(bs, dict):
        out += [Difference(("speculative", k), gs.get(k), bs.get(k)) for k in sorted(set(gs) | set(bs))
                if gs.get(k) != bs.get(k)]  # fmt: skip
    elif gs != bs:
        out.append(Difference(("speculative",), gs, bs))
    skip = _IGNORED_KEYS | {"env", "extra_args", "speculative", "workload"}
    out += [Difference((k,), good.get(k), bad.get(k)) for k in sorted((set(good) | set(bad)) - skip)
            if good.get(k) != bad.get(k)]  # fmt: skip
    gw, bw = good.get("workload") or {}, bad.get("workload") or {}
    out += [Difference(("workload", k), gw.get(k), bw.get(k)) for k in sorted(set(gw) | set(bw))
            if gw.get(k) != bw.get(k)]  # fmt: skip
    return out


def apply(good: Mapping[str, Any], diffs: Iterable[Difference]) -> dict[str, Any]:
    """The good profile mapping with the bad side of each of ``diffs`` applied (a new dict; ``good`` unchanged).

    Extra flags keep the good profile's order, flags it lacks follow in the order given.
    """
    out = copy.deepcopy(dict(good))
    flags = _flags(out.get("extra_args") or [])
    changed = False
    for d in diffs:
        head = d.path[0]
        if head == "extra_args":
            changed = True
            if d.bad is None:
                flags.pop(d.path[1], None)
            else:
                flags[d.path[1]] = tuple(d.bad)
            continue
        if len(d.path) == 1:
            target, key = out, head
        else:
            sub = out.get(head)
            if not isinstance(sub, dict):
                sub = out[head] = {}
            target, key = sub, d.path[1]
        if d.bad is None:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(d.bad)
    if changed:
        out["extra_args"] = _unflag(flags)
    return out


def config_key(config: Mapping[str, Any]) -> str:
    """A probe's cache key: its profile mapping as canonical JSON."""
    return json.dumps(config, sort_keys=True, default=str)


def launch_key(config: Mapping[str, Any]) -> str:
    """What one server launch serves: the mapping without its workload (the client changes that, not the server)."""
    return config_key({k: v for k, v in config.items() if k != "workload"})


def not_bisectable(good_fp: Mapping[str, Any], bad_fp: Mapping[str, Any]) -> list[NotBisectable]:
    """Differences between two stored runs' fingerprints (``results.build_fingerprint``) that no profile applies:
    package versions, GPUs (name, driver, CUDA), host, plugin version, launch-env variables the profile did not set
    (inherited from the caller: ``CUDA_VISIBLE_DEVICES``), a draft config.json edited in place (same path, another
    hash) and a prompt file edited in place (same ``prompts``, another prompt set hash). Values as recorded."""
    out: list[NotBisectable] = []

    def add(what: str, a: Any, b: Any, missing: str = "(absent)") -> None:
        if a != b:
            out.append(NotBisectable(what, missing if a is None else str(a), missing if b is None else str(b)))

    add("pytest-specdec", good_fp.get("plugin_version"), bad_fp.get("plugin_version"))
    gp, bp = good_fp.get("packages") or {}, bad_fp.get("packages") or {}
    for name in sorted((set(gp) | set(bp)) - {"error"}):
        add(f"package {name}", gp.get(name), bp.get(name), "(not installed)")

    def gpus(fp: Mapping[str, Any]) -> str | None:
        found = [g for g in fp.get("gpus") or [] if isinstance(g, dict)]
        return ", ".join(f"{g.get('name')} (driver {g.get('driver')}, CUDA {g.get('cuda') or '?'})"
                         for g in found) or None  # fmt: skip

    add("gpu", gpus(good_fp), gpus(bad_fp), "(none)")
    add("host", good_fp.get("host"), bad_fp.get("host"))
    gdef, bdef = good_fp.get("profile_def") or {}, bad_fp.get("profile_def") or {}
    genv, benv = good_fp.get("env") or {}, bad_fp.get("env") or {}
    for name in sorted(set(genv) | set(benv)):
        if name not in (gdef.get("env") or {}) and name not in (bdef.get("env") or {}):
            add(f"env {name} (from the caller's shell, not the profile)", genv.get(name), benv.get(name), "(unset)")
    gd, bd = good_fp.get("draft") or {}, bad_fp.get("draft") or {}
    if gd.get("path") == bd.get("path") and gd.get("config_hash") != bd.get("config_hash"):
        add(f"draft config.json at {gd.get('path')} (edited in place; hash)", gd.get("config_hash"),
            bd.get("config_hash"))  # fmt: skip
    same_prompts = (gdef.get("workload") or {}).get("prompts") == (bdef.get("workload") or {}).get("prompts")
    if same_prompts and good_fp.get("prompt_hash") != bad_fp.get("prompt_hash"):
        add("prompt file (edited in place; prompt set hash)", good_fp.get("prompt_hash"), bad_fp.get("prompt_hash"))
    return out


# -- ddmin ---------------------------------------------------------------------------------------------------------


def _split(items: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """``items`` in ``n`` contiguous parts whose sizes differ by at most one."""
    size, extra = divmod(len(items), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(tuple(items[start:end]))
        start = end
    return parts


def ddmin(
    count: int,
    test: Callable[[tuple[int, ...]], Outcome],
    *,
    order: Callable[[list[tuple[int, ...]]], list[tuple[int, ...]]] | None = None,
    subsets: bool = True,
) -> tuple[int, ...]:
    """Zeller's ddmin over the differences ``0 .. count - 1`` (module docstring). ``test(subset)`` says whether
    ``subset`` applied to the good configuration reproduces the regression; the full set is assumed to (the caller
    measured it) and is never tested. Each distinct subset is tested at most once.

    :param order: reorders the subsets (then the complements) of one step before they are tested, e.g. those whose
        server is already running first; any order keeps the result 1-minimal.
    :param subsets: False skips "reduce to subset" and tests complements only. The result is still 1-minimal (the
        last step, at one difference per part, tests every complement), and with several culprits fewer tests are
        needed: a part holding one culprit of three never reproduces alone, so its test is wasted (simulated over
        random culprit sets, 7 differences with 3 culprits: 19.3 tests with subsets, 12.4 without; 1 culprit: 4.2
        and 4.3).
    :returns: a 1-minimal failing subset, ascending. Example: with ``test = lambda s: "FAIL" if {1, 3} <= set(s)
        else "PASS"`` and ``count = 4``, ``(1, 3)``.
    """
    seen: dict[tuple[int, ...], Outcome] = {tuple(range(count)): "FAIL"}

    def run(subset: tuple[int, ...]) -> Outcome:
        if subset not in seen:
            seen[subset] = test(subset)
        return seen[subset]

    def arranged(candidates: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return order(candidates) if order is not None else candidates

    current, n = tuple(range(count)), 2
    while len(current) >= 2:
        parts = _split(current, n)
        hit = next((p for p in arranged(parts) if run(p) == "FAIL"), None) if subsets else None
        if hit is not None:
            current, n = hit, 2
            continue
        complements = [tuple(x for x in current if x not in p) for p in parts]
        # At n = 2 the complements are the subsets: Zeller skips them there, unless subsets were not tested.
        if n > 2 or not subsets:
            hit = next((c for c in arranged(complements) if run(c) == "FAIL"), None)
        if hit is not None:
            current, n = hit, max(n - 1, 2)
            continue
        if n >= len(current):
            break
        n = min(2 * n, len(current))
    return current


# -- deciding a probe ------------------------------------------------------------------------------------------------


def _exact(values: Sequence[float] | None, temperature: Any) -> float | None:
    """The exact value of a field: every phase the same at temperature 0; else None (statistics would be needed)."""
    if not values or temperature not in (0, 0.0) or max(values) != min(values):
        return None
    return float(values[0])


@dataclass(frozen=True, slots=True)
class Symptoms:
    """How the bad configuration differs from the good one, measured here (:func:`find_symptoms`).

    ``exact``: field -> (good value, bad value) of each exact metric that differs. ``level``: the median paired
    tok/s ratio bad/good when the bad configuration is significantly slower beyond the tolerance, else None.
    """

    exact: dict[str, tuple[float, float]]
    level: float | None
    #: The bad/good paired ratios behind ``level`` (also when no throughput symptom was found).
    ratios: tuple[float, ...] = ()
    #: Why there is no throughput symptom, or the verdict line that found it.
    throughput_line: str = ""

    @property
    def regressed(self) -> bool:
        return bool(self.exact) or self.level is not None

    @property
    def midpoint(self) -> float | None:
        """The paired ratio halfway (geometrically) between the good level 1 and the bad level: ``sqrt(level)``."""
        return math.sqrt(self.level) if self.level is not None else None


def find_symptoms(
    good_exact: Mapping[str, Sequence[float]],
    bad_exact: Mapping[str, Sequence[float]],
    bad_ratios: Sequence[float],
    *,
    temperature: Any,
    tolerance_rel: float,
) -> Symptoms:
    """The symptoms of the regression from the good and bad configurations measured here.

    :param good_exact: per exact field, the per-phase values of the good configuration (``bad_exact``: the bad one).
    :param bad_ratios: paired tok/s ratios bad/good (phases interleaved).
    :param temperature: the workload temperature (exact fields need 0 on both sides).
    :param tolerance_rel: the tok/s tolerance (``tolerances.DEFAULT_TOLERANCES["output_tok_s"].rel``, 5 %): the bad
        configuration is slower when its median ratio is below ``1 - tolerance_rel`` and the one-sided Wilcoxon test
        (``stats.below_test``) finds that significant.
    """
    exact = {}
    for name in EXACT_FIELDS:
        g, b = _exact(good_exact.get(name), temperature), _exact(bad_exact.get(name), temperature)
        if g is not None and b is not None and g != b:
            exact[name] = (g, b)
    floor = 1.0 - tolerance_rel
    summary = stats.summarize(list(bad_ratios))
    level = None
    if summary is None:
        line = "tok/s not measured"
    else:
        test = stats.below_test(bad_ratios, floor)
        shown = f"{_ratio_text(bad_ratios)}; floor x{floor:g}"
        if summary.median < floor and test.significant and test.p_value is not None:
            level = summary.median
            line = f"tok/s {shown}, {test.method} p={test.p_value:.3g}: slower"
        else:
            line = f"tok/s {shown}: not significantly slower"
    return Symptoms(exact, level, tuple(bad_ratios), line)


def _ratio_text(ratios: Sequence[float]) -> str:
    s = stats.summarize(list(ratios))
    if s is None:
        return "not measured"
    ci = f"CI {s.ci_low:.3f}-{s.ci_high:.3f} ({s.coverage:.0%})"
    return f"x{s.median:.3f} of good [median of {s.n} paired ratios, {ci}]"


@dataclass(frozen=True, slots=True)
class Verdict:
    """:func:`judge`'s answer for one probe: an outcome, or ``pairs`` > 0 more paired phases to measure first."""

    outcome: Outcome | None
    #: "exact", "paired" or "error": what decided.
    basis: str
    line: str
    pairs: int = 0


def judge(
    symptoms: Symptoms,
    exact: Mapping[str, Sequence[float]],
    ratios: Sequence[float],
    *,
    temperature: Any,
    max_pairs: int = MAX_PAIRS,
    min_pairs: int = MIN_PAIRS,
) -> Verdict:
    """Does one probe reproduce the regression? (module docstring)

    Exact first: a field of ``symptoms.exact`` whose probe value is exact and not the bad value -> PASS (no tok/s
    needed). All exact fields at their bad value and no throughput symptom -> FAIL. Then paired tok/s against
    ``symptoms.midpoint``: fewer than ``min_pairs`` -> ask for them; significantly below the midpoint
    (``stats.below_test``) -> FAIL; significantly above (the same test on 1/ratio) -> PASS; neither -> ask for
    ``min_pairs`` more, up to ``max_pairs``, then UNRESOLVED.

    :param exact: per exact field, the probe's per-phase values; :param ratios: its paired tok/s ratios probe/good.
    :param temperature: the probe's workload temperature.
    """
    undecided = []
    for name, (good, bad) in symptoms.exact.items():
        value = _exact(exact.get(name), temperature)
        if value is None:
            undecided.append(name)
        elif value != bad:
            where = "= good" if value == good else f"(good {good:.4g})"
            return Verdict("PASS", "exact", f"{name} {value:.4g} {where}, not the bad {bad:.4g}")
    at_bad = ", ".join(f"{name} {bad:.4g} = bad" for name, (_, bad) in symptoms.exact.items() if name not in undecided)
    if symptoms.level is None:
        if undecided:
            return Verdict("UNRESOLVED", "exact", f"{', '.join(undecided)} not exact (repeats differ or temperature > "
                           "0) and no tok/s symptom to decide by")  # fmt: skip
        return Verdict("FAIL", "exact", at_bad)
    midpoint = symptoms.midpoint
    assert midpoint is not None
    if len(ratios) < min_pairs:
        return Verdict(None, "paired", "", pairs=min_pairs - len(ratios))
    s = stats.summarize(list(ratios))
    assert s is not None
    head = f"{at_bad}; " if at_bad else ""
    text = f"{head}tok/s {_ratio_text(ratios)} vs bad x{symptoms.level:.3f}, midpoint x{midpoint:.3f}"
    below = stats.below_test(ratios, midpoint)
    if s.median < midpoint and below.significant and below.p_value is not None:
        return Verdict("FAIL", "paired", f"{text}: below, p={below.p_value:.3g}")
    above = stats.below_test([1.0 / r for r in ratios if r > 0], 1.0 / midpoint)
    if s.median > midpoint and above.significant and above.p_value is not None:
        return Verdict("PASS", "paired", f"{text}: above, p={above.p_value:.3g}")
    if len(ratios) < max_pairs:
        return Verdict(None, "paired", "", pairs=min(min_pairs, max_pairs - len(ratios)))
    return Verdict("UNRESOLVED", "paired", f"{text}: neither side significant after {len(ratios)} pairs")


# -- the bisect ------------------------------------------------------------------------------------------------------


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
    verdict: Verdict | None = None


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
        while True:
            if rec.error is not None:
                verdict = Verdict("UNRESOLVED", "error", rec.error)
                break
            verdict = judge(wanted, rec.exact, rec.ratios, temperature=temperature_of(config), max_pairs=max_pairs)
            if verdict.outcome is not None:
                break
            more_pairs(rec, config, verdict.pairs)
        if not exact_only or rec.verdict is None:
            rec.verdict = verdict
        if on_probe is not None:
            on_probe(rec)
        return verdict.outcome  # type: ignore[return-value]

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
        good_rec.verdict = Verdict("PASS", "exact", "the good configuration")
        bad_rec.verdict = Verdict("FAIL", "paired" if symptoms.level else "exact", "the bad configuration")
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


# -- report ----------------------------------------------------------------------------------------------------------


def _effect_text(rec: ProbeRecord | None, symptoms: Symptoms, temperature: Any) -> str:
    if rec is None:
        return "not measured alone"
    if rec.error is not None:
        return f"does not run alone ({rec.error})"
    parts = []
    for name, (good, _) in symptoms.exact.items():
        value = _exact(rec.exact.get(name), temperature)
        if value is not None:
            parts.append(f"{name} {good:.4g} -> {value:.4g} (exact)" if value != good else f"{name} = good")
    if rec.ratios:
        parts.append(f"tok/s {_ratio_text(rec.ratios)}")
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
