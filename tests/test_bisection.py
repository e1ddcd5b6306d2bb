"""Tests of pytest_specdec.bisection without servers: differences, ddmin, the probe verdicts, and the whole bisect
on hand-made probe outcomes (a formula of the reference server: aux ids that lower the accept length, aux id -1 that
needs the patched capture, a slow forward, harmless differences), stopped or not."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_specdec import bisection
from pytest_specdec.bisection import Difference, apply, ddmin, differences, judge_exact, judge_throughput
from pytest_specdec.core.errors import ServerStartError

GOOD: dict[str, Any] = {
    "server": "reference",
    "random_seed": 0,
    "env": {},
    "extra_args": [],
    "speculative": {"algorithm": "EAGLE3", "num_steps": 3, "aux_hidden_state_layer_ids": None,
                    "allow_embedding_capture": False},
    "workload": {"temperature": 0.0, "max_new_tokens": 32, "num_requests": 4},
    "thresholds": {"min_tok_s": 10},
}  # fmt: skip
BAD: dict[str, Any] = {
    **GOOD,
    "env": {"HF_HUB_OFFLINE": "1", "SPECDEC_REF_FORWARD_DELAY_MS": "20"},
    "extra_args": ["--ref-embedding-capture", "patched", "--log-level", "warning", "--served-model-name", "demo"],
    "speculative": {**GOOD["speculative"], "aux_hidden_state_layer_ids": [-1, 1, 3], "allow_embedding_capture": True},
    "thresholds": {"min_tok_s": 20},  # measures nothing: never a difference
}


def test_differences_name_each_key_and_apply_rebuilds_the_bad_profile() -> None:
    diffs = differences(GOOD, BAD)
    assert [d.line() for d in diffs] == [
        "env HF_HUB_OFFLINE: (unset) -> 1",
        "env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 20",
        "extra_args --ref-embedding-capture: (absent) -> patched",
        "extra_args --log-level: (absent) -> warning",
        "extra_args --served-model-name: (absent) -> demo",
        "speculative.aux_hidden_state_layer_ids: (absent) -> [-1, 1, 3] (with speculative.allow_embedding_capture: "
        "false -> true)",
    ]
    assert apply(GOOD, diffs) == {**BAD, "thresholds": GOOD["thresholds"]}
    assert apply(GOOD, []) == GOOD and GOOD["env"] == {}  # a copy: good is never changed
    one = apply(GOOD, [diffs[3]])
    assert one["extra_args"] == ["--log-level", "warning"] and one["env"] == {}


def test_differences_of_flags_workload_and_blocks() -> None:
    good = {"extra_args": ["--a", "1", "--b", "--c=x"], "workload": {"max_new_tokens": 32}, "speculative": None}
    bad = {"extra_args": ["--c=y", "--a", "1", "--d", "2", "3"], "workload": {"max_new_tokens": 64},
           "speculative": {"algorithm": "EAGLE3"}}  # fmt: skip
    diffs = differences(good, bad)
    assert [d.line() for d in diffs] == [
        "extra_args --b: (set) -> (absent)",
        "extra_args --c: x -> y",
        "extra_args --d: (absent) -> 2 3",
        'speculative: (absent) -> {"algorithm": "EAGLE3"}',
        "workload.max_new_tokens: 32 -> 64",
    ]
    assert apply(good, diffs)["extra_args"] == ["--a", "1", "--c=y", "--d", "2", "3"]
    assert bisection.launch_key(apply(good, diffs[-1:])) == bisection.launch_key(good)


def test_ddmin_finds_two_differences_that_only_fail_together() -> None:
    tested: list[tuple[int, ...]] = []

    def test(subset: tuple[int, ...]) -> bisection.Outcome:
        tested.append(subset)
        return "FAIL" if {2, 6} <= set(subset) else "PASS"

    assert ddmin(8, test) == (2, 6)
    assert len(tested) == len(set(tested))  # each subset once
    assert (2,) in tested and (6,) in tested  # 1-minimal: each alone was seen to pass


def test_ddmin_treats_unresolved_as_not_failing_and_stays_one_minimal() -> None:
    # 5 needs 1 to run at all (a server that crashes without it); the regression needs 1, 3 and 5.
    def test(subset: tuple[int, ...]) -> bisection.Outcome:
        s = set(subset)
        if 5 in s and 1 not in s:
            return "UNRESOLVED"
        return "FAIL" if {1, 3, 5} <= s else "PASS"

    found = ddmin(7, test)
    assert found == (1, 3, 5)
    for i in found:
        assert test(tuple(x for x in found if x != i)) != "FAIL"


def test_ddmin_order_hook_sees_each_step_and_keeps_the_result() -> None:
    seen: list[list[tuple[int, ...]]] = []

    def order(candidates: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        seen.append(candidates)
        return list(reversed(candidates))

    assert ddmin(6, lambda s: "FAIL" if {0, 4} <= set(s) else "PASS", order=order) == (0, 4)
    assert seen[0] == [(0, 1, 2), (3, 4, 5)]


EXACT = {"accept_length": (2.333, 2.032)}
LOOK = bisection.symptoms.design()


def test_judge_exact_one_phase_decides_without_tok_s() -> None:
    assert judge_exact(EXACT, {"accept_length": [2.333]}) == bisection.ProbeVerdict(
        "PASS", "exact", "accept_length 2.333 = good, not the bad 2.032")
    assert judge_exact(EXACT, {"accept_length": [2.1]}).line == "accept_length 2.1 (good 2.333), not the bad 2.032"
    assert judge_exact(EXACT, {"accept_length": [2.032]}) == bisection.ProbeVerdict(
        "FAIL", "exact", "accept_length 2.032 = bad")
    assert judge_exact(EXACT, {}).outcome == "UNRESOLVED"
    assert judge_exact(EXACT, {"accept_length": [2.0, 2.1]}).outcome == "UNRESOLVED"  # repeats that differ


def test_judge_throughput_three_outcomes_against_the_midpoint() -> None:
    # BAD at x0.5 of the reference: the midpoint is x0.707; decide_floor's looks at 3, 5, 8, 12, 18, 24 pairs.
    assert judge_throughput(0.5, [], LOOK).pairs == 3
    slow = judge_throughput(0.5, [0.49, 0.51, 0.50], LOOK)
    assert slow.outcome == "FAIL" and slow.basis == "paired"
    assert slow.line.startswith("tok/s x0.500 of good [geometric mean of 3 paired ratios, CI 0.4")
    assert slow.line.endswith("vs bad x0.500, midpoint x0.707: below")
    assert judge_throughput(0.5, [0.99, 1.01, 1.0], LOOK).outcome == "PASS"
    noisy = [0.6, 0.85, 0.7]
    more = judge_throughput(0.5, noisy, LOOK)
    assert (more.outcome, more.pairs) == (None, 2)  # to the next look, 5 pairs
    gave_up = judge_throughput(0.5, noisy * 8, LOOK)
    assert gave_up.outcome == "UNRESOLVED" and gave_up.line.endswith("undecided after 24 pairs")


def test_throughput_check_fails_only_significantly_slower_beyond_the_tolerance() -> None:
    assert bisection.throughput_check([0.5, 0.52, 0.49], 0.05, LOOK)[0] == "FAILED"
    assert bisection.throughput_check([1.0, 0.99, 1.01], 0.05, LOOK)[0] == "passed"
    # Significantly slower than no change, the estimate inside the tolerance, the worse end beyond it: undecided.
    spread = [0.965 + 0.03 * (-1) ** i for i in range(12)]
    assert bisection.throughput_check(spread, 0.05, LOOK)[0] == "undecided"
    outcome, decision = bisection.throughput_check([0.6, 1.1, 0.8], 0.05, LOOK)
    assert outcome == "undecided" and decision.n == 3


class SimulatedProbes:
    """The reference server as a formula. Aux ids [0, 1, 2] lower the accept length 2.333 -> 2.032; id -1 does too
    but needs ``--ref-embedding-capture patched`` (else the server dies at startup); the forward delay multiplies
    tok/s by ``slow``; tok/s ~ accept length, +-3 % seeded noise per phase; the rest is harmless. A launch is counted
    whenever a probe needs a server other than the probe's and the reference arm's (kept up, as interleaved pairing
    does); :meth:`hold` makes a configuration the reference arm."""

    def __init__(self, seed: int = 0, slow: float = 0.5, budget: int | None = None, spread: float = 0.03) -> None:
        self.launches = 0
        self.server_s = 0.0
        self.current: str | None = None
        self.reference: Mapping[str, Any] = GOOD
        self.reference_key: str | None = None
        self.rng = random.Random(seed)
        self.slow = slow
        self.spread = spread
        self.budget = budget
        self.asked: list[str] = []

    def _launch(self) -> None:
        if self.budget is not None and self.launches >= self.budget:
            raise bisection.BudgetSpent(f"--max-launches {self.budget} spent")
        self.launches += 1
        self.server_s += 5.0

    def _serve(self, config: Mapping[str, Any]) -> None:
        key = bisection.launch_key(config)
        if self.reference_key is None:
            self._launch()
            self.reference_key = key
        if key not in (self.current, self.reference_key):
            self._launch()
            self.current = key
        spec = config["speculative"]
        if -1 in (spec.get("aux_hidden_state_layer_ids") or []) and "--ref-embedding-capture" not in config[
            "extra_args"
        ]:
            raise ServerStartError("server 'probe' exited with code 1 before it was ready (TypeError)")

    @staticmethod
    def accept(config: Mapping[str, Any]) -> float:
        return 2.333 if config["speculative"].get("aux_hidden_state_layer_ids") is None else 2.032

    def tok_s(self, config: Mapping[str, Any]) -> float:
        slow = self.slow if "SPECDEC_REF_FORWARD_DELAY_MS" in config["env"] else 1.0
        return 100.0 * self.accept(config) / 2.333 * slow * self.rng.uniform(1.0 - self.spread, 1.0 + self.spread)

    def exact(self, config: Mapping[str, Any], label: str, phases: int) -> dict[str, list[float]]:
        self.asked.append(f"exact {label} {phases}")
        self._serve(config)
        return {"accept_length": [self.accept(config)] * phases}

    def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
        self.asked.append(f"pairs {label} {count}")
        self._serve(config)
        return [self.tok_s(config) / self.tok_s(self.reference) for _ in range(count)]

    def hold(self, config: Mapping[str, Any], label: str) -> None:
        self.asked.append(f"hold {label}")
        key = bisection.launch_key(config)
        if key == self.current:
            self.current = None
        else:
            self._launch()
        self.reference, self.reference_key = config, key

    def running(self) -> str | None:
        return self.current


#: The reference incident: aux ids [0, 1, 2] (exact and slower) + a forward delay (slower) among three harmless
#: differences.
INCIDENT = {**GOOD, "env": {"HF_HUB_OFFLINE": "1", "SPECDEC_REF_FORWARD_DELAY_MS": "3.5"},
            "extra_args": ["--log-level", "warning", "--served-model-name", "demo"],
            "speculative": {**GOOD["speculative"], "aux_hidden_state_layer_ids": [0, 1, 2]}}  # fmt: skip


def test_bisect_takes_the_exact_symptom_first_then_tok_s_with_the_exact_cause_on_both_sides() -> None:
    diffs = differences(GOOD, INCIDENT)
    probes = SimulatedProbes(slow=0.7)
    notes: list[str] = []
    estimates: list[tuple[int, int, str]] = []
    result = bisection.bisect(GOOD, diffs, probes, on_note=notes.append,
                              on_estimate=lambda low, high, why: estimates.append((low, high, why)))  # fmt: skip
    keys = [d.key for d in diffs]
    assert [(c.symptom, [keys[i] for i in c.culprits], c.versus) for c in result.causes] == [
        ("exact", ["speculative.aux_hidden_state_layer_ids"], "good"),
        ("throughput", ["env SPECDEC_REF_FORWARD_DELAY_MS"], "good + cause 1"),
    ]
    # good, bad, the aux ids alone (the likeliest for the exact symptom, probed first; its server then becomes the
    # reference arm), the delay on top of it (the likeliest for speed): 4 launches.
    assert probes.launches == result.launches == 4
    assert probes.asked == [
        "exact good 2", "exact bad 2", "pairs bad 3",
        "exact speculative.aux_hidden_state_layer_ids 1",
        "pairs speculative.aux_hidden_state_layer_ids 3",
        "hold speculative.aux_hidden_state_layer_ids",
        "pairs env SPECDEC_REF_FORWARD_DELAY_MS on cause 1 3",
    ]  # fmt: skip
    assert estimates == [(4, 12, "if each symptom has one cause (before the symptoms are known)"),
                         (4, 12, "in all if each symptom has one cause")]  # fmt: skip
    assert notes[0].startswith("symptoms: accept_length 2.333 -> 2.032 (exact); tok/s x0.6")
    assert notes[1].startswith("remainder: bad x0.6") and notes[1].endswith("tok/s bisected with cause 1 on both sides")
    lines = bisection.report_lines(result)
    assert lines[0].startswith("bisect: 2 causes (2 of 5 differences) in 4 launches, 20 server-s")
    assert lines[2].startswith("cause 1 (exact symptom): accept_length 2.333 -> 2.032 (exact); tok/s x0.8")
    assert lines[3] == "  speculative.aux_hidden_state_layer_ids: (absent) -> [0, 1, 2]"
    assert lines[4].startswith("remainder: ")
    assert lines[5].startswith("cause 2 (tok/s symptom, cause 1 on both sides): tok/s x0.6")
    assert " of good + cause 1 [geometric mean of 3 paired ratios" in lines[5]
    assert lines[6] == "  env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 3.5"
    assert lines[7] == ("harmless: env HF_HUB_OFFLINE: (unset) -> 1; extra_args --log-level: (absent) -> warning; "
                        "extra_args --served-model-name: (absent) -> demo")  # fmt: skip
    assert len(lines) == 8


def test_bisect_finds_culprits_that_only_act_together_and_groups_the_permission_under_the_aux_ids() -> None:
    # Aux id -1 runs only with the patched capture (an interaction ddmin finds); allow_embedding_capture, the
    # permission the ids need, is listed and applied with them.
    diffs = differences(GOOD, BAD)
    keys = [d.key for d in diffs]
    assert "speculative.allow_embedding_capture" not in keys and len(diffs) == 6
    probes = SimulatedProbes()
    result = bisection.bisect(GOOD, diffs, probes)
    assert [(c.symptom, [keys[i] for i in c.culprits]) for c in result.causes] == [
        ("exact", ["extra_args --ref-embedding-capture", "speculative.aux_hidden_state_layer_ids"]),
        ("throughput", ["env SPECDEC_REF_FORWARD_DELAY_MS"]),
    ]
    assert probes.launches <= 10
    lines = bisection.report_lines(result)
    ids = "  speculative.aux_hidden_state_layer_ids: (absent) -> [-1, 1, 3]"
    assert f"{ids} (with speculative.allow_embedding_capture: false -> true)" in lines
    without = lines[lines.index("  extra_args --ref-embedding-capture: (absent) -> patched") + 1]
    assert without == "    without it: does not run alone (server 'probe' exited with code 1 before it was ready " \
        "(TypeError))"  # fmt: skip
    # Probes on the exact symptom measured one phase and no tok/s, except cause 1 alone (its effect).
    exact_probes = [r for r in result.records if r.phase == "exact"]
    assert exact_probes and all(r.ratios == [] or r.subset == result.causes[0].culprits for r in exact_probes)
    assert all(r.exact == {} for r in result.records if r.phase == "throughput")


def test_a_cause_of_both_symptoms_is_reported_once_with_both_effects() -> None:
    only_ids = {**GOOD, "env": {"HF_HUB_OFFLINE": "1"},
                "speculative": {**GOOD["speculative"], "aux_hidden_state_layer_ids": [0, 1, 2]}}  # fmt: skip
    probes = SimulatedProbes()

    class Slower(SimulatedProbes):
        @staticmethod
        def accept(config: Mapping[str, Any]) -> float:
            return SimulatedProbes.accept(config)

        def tok_s(self, config: Mapping[str, Any]) -> float:
            return super().tok_s(config) * (0.6 if config["speculative"].get("aux_hidden_state_layer_ids") else 1.0)

    probes = Slower()
    result = bisection.bisect(GOOD, differences(GOOD, only_ids), probes)
    assert [(c.symptom, c.culprits) for c in result.causes] == [("exact", (1,))]
    assert result.remainder.endswith("cause 1 explains the tok/s symptom too")
    lines = bisection.report_lines(result)
    assert lines[2].startswith("cause 1 (exact symptom): accept_length 2.333 -> 2.032 (exact); tok/s x0.5")
    assert probes.launches == 3 and not any(a.startswith("hold") for a in probes.asked)


def test_throughput_only_regression_is_bisected_against_good() -> None:
    slow_only = {**GOOD, "env": {"HF_HUB_OFFLINE": "1", "NCCL_DEBUG": "INFO", "CUDA_LAUNCH_BLOCKING": "1"}}

    class Blocking(SimulatedProbes):
        def tok_s(self, config: Mapping[str, Any]) -> float:
            return super().tok_s(config) * (0.6 if "CUDA_LAUNCH_BLOCKING" in config["env"] else 1.0)

    probes = Blocking()
    result = bisection.bisect(GOOD, differences(GOOD, slow_only), probes)
    assert [(c.symptom, [result.diffs[i].key for i in c.culprits], c.versus) for c in result.causes] == [
        ("throughput", ["env CUDA_LAUNCH_BLOCKING"], "good")]
    assert probes.launches == 3  # good, bad, CUDA_LAUNCH_BLOCKING alone (named by CUDA's docs: probed first)


def test_a_tok_s_remainder_too_small_for_the_spread_is_not_bisected_and_stays_suspected() -> None:
    # The H200 case without CUDA graphs: the aux ids cause the exact symptom, a 10% slowdown sits on top of them,
    # and one pair's log ratio spreads ~0.2. BAD is measured to the budget (a remainder could be split only if BAD
    # were known that well), cause 1 until BAD's own interval makes more pairs futile (8, not 24); what remains,
    # x0.960, stays undecided: the other differences stay suspected, none is called harmless.
    diffs = differences(GOOD, INCIDENT)
    probes = SimulatedProbes(seed=0, slow=0.9, spread=0.3)
    result = bisection.bisect(GOOD, diffs, probes)
    keys = [d.key for d in diffs]
    assert [(c.symptom, [keys[i] for i in c.culprits]) for c in result.causes] == [
        ("exact", ["speculative.aux_hidden_state_layer_ids"])]
    assert result.launches == 3  # good, bad, the aux ids alone
    measured = [int(a.split()[-1]) for a in probes.asked if a.startswith("pairs speculative")]
    assert sum(measured) == 8, measured
    lines = bisection.report_lines(result)
    (unsplit,) = [line for line in lines if line.startswith("tok/s not bisected: ")]
    assert unsplit.startswith("tok/s not bisected: whether anything beside cause 1 slows BAD stayed undecided"), \
        unsplit
    assert any(line.startswith("still suspected for the tok/s symptom: 4 differences") for line in lines), lines
    assert not any(line.startswith("harmless") for line in lines), lines


def test_a_tok_s_search_whose_probe_cannot_decide_stops_instead_of_naming_noise() -> None:
    # Here the estimates said a probe could decide, then the first probe stayed open after 24 pairs: the search
    # stops there, with the pairs the spread so far asks for. Without the stop ddmin went on launching and named
    # harmless differences as culprits (benchmarks/bench_bisect.py --noise-table: 3-10 of 40 runs a cell, now 0).
    diffs = differences(GOOD, INCIDENT)
    probes = SimulatedProbes(seed=2, slow=0.9, spread=0.15)
    result = bisection.bisect(GOOD, diffs, probes)
    assert [c.symptom for c in result.causes] == ["exact"]
    assert result.launches == 4  # good, bad, cause 1, the one open probe
    assert result.unsplit.startswith("tok/s not bisected: probe env SPECDEC_REF_FORWARD_DELAY_MS on cause 1 stayed "
                                     "undecided after 24 pairs (--max-pairs 24)"), result.unsplit
    assert "--max-pairs 48" in result.unsplit, result.unsplit
    lines = bisection.report_lines(result)
    assert any(line.startswith("still suspected for the tok/s symptom: 4 differences") for line in lines)
    assert any(line.startswith("unresolved: 1 probe") for line in lines)


def test_a_remainder_far_beyond_the_pairs_budget_asks_for_a_steadier_workload_first() -> None:
    # A fresh-user trial was told "--max-pairs 326": past 4x the budget, more pairs is not the fix to lead with.
    far = bisection.bisect(GOOD, differences(GOOD, INCIDENT), SimulatedProbes(seed=0, slow=0.8, spread=0.3))
    assert far.unsplit.endswith("that takes about 258 pairs a probe, over --max-pairs 24; to bisect it, a steadier "
                                "workload first (more requests a phase; CUDA graphs on a GPU): --max-pairs 258 would "
                                "measure ~258 paired phases a probe, 11x the budget"), far.unsplit
    near = bisection.bisect(GOOD, differences(GOOD, INCIDENT), SimulatedProbes(seed=1, slow=0.6, spread=0.5))
    assert near.unsplit.endswith("to bisect it, --max-pairs 37 (~37 paired phases a probe) or a steadier workload "
                                 "(more requests a phase; CUDA graphs on a GPU)"), near.unsplit


class _NoSlowdown(SimulatedProbes):
    """Every configuration serves the same tok/s, give or take the spread: no tok/s cause anywhere."""

    def tok_s(self, config: Mapping[str, Any]) -> float:
        return 100.0 * self.rng.uniform(1.0 - self.spread, 1.0 + self.spread)


@pytest.mark.parametrize(("seed", "throughput", "label"), [
    (0, "undecided", "not the exact symptom's cause (tok/s undecided, not bisected): "),
    (2, "passed", "harmless: "),
])  # fmt: skip
def test_differences_are_called_harmless_only_when_the_tok_s_verdict_passed(seed: int, throughput: str,
                                                                            label: str) -> None:  # fmt: skip
    # A live run on a busy machine (load 4.6): the 0.4 ms forward delay's tok/s symptom ended undecided (x0.990,
    # CI 0.90-1.09), and the report called the delay harmless. Undecided clears nothing of tok/s.
    diffs = differences(GOOD, INCIDENT)
    result = bisection.bisect(GOOD, diffs, _NoSlowdown(seed=seed, spread=0.3))
    assert result.symptoms.throughput == throughput
    lines = bisection.report_lines(result)
    assert lines[-1].startswith(label) and "env SPECDEC_REF_FORWARD_DELAY_MS" in lines[-1], lines


def test_bisect_stopped_at_the_launch_budget_reports_what_is_known() -> None:
    diffs = differences(GOOD, BAD)
    probes = SimulatedProbes(budget=4)
    result = bisection.bisect(GOOD, diffs, probes)
    assert result.stopped == "--max-launches 4 spent" and probes.launches == 4
    # Stopped in the exact search: the tok/s symptom, not searched yet, keeps every difference suspected too.
    assert result.causes == () and [s for s, _ in result.open_searches] == ["exact", "throughput"]
    lines = bisection.report_lines(result)
    assert lines[0].startswith("bisect stopped (--max-launches 4 spent) after 4 launches, 20 server-s")
    assert lines[0].endswith("known so far: no cause yet")
    assert lines[1].startswith("symptoms: accept_length 2.333 -> 2.032 (exact); tok/s x0.")
    assert lines[2].startswith("still suspected for the exact symptom: ")
    assert lines[3].startswith("still suspected for the tok/s symptom: ")
    assert "harmless" not in "\n".join(lines)


def test_bisect_interrupted_after_the_first_cause_keeps_it_and_the_candidates_left() -> None:
    diffs = differences(GOOD, INCIDENT)

    class Interrupted(SimulatedProbes):
        def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
            if label.endswith("on cause 1"):
                raise KeyboardInterrupt("SIGTERM")
            return super().pairs(config, label, count)

    result = bisection.bisect(GOOD, diffs, Interrupted(slow=0.7))
    assert result.stopped == "SIGTERM"
    assert [c.symptom for c in result.causes] == ["exact"]
    lines = bisection.report_lines(result)
    assert lines[0].endswith("known so far: 1 cause (1 of 5 differences)")
    assert lines[-1].startswith("still suspected for the tok/s symptom: 4 differences (any culprit is among them; "
                                "none is proven): ")


def test_an_undecided_probe_is_unresolved_after_the_last_look() -> None:
    diffs = differences(GOOD, INCIDENT)

    class Noisy(SimulatedProbes):
        def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
            if label.endswith("on cause 1"):  # between the midpoint and both levels, and spread
                return [self.rng.choice([0.7, 0.95]) for _ in range(count)]
            return super().pairs(config, label, count)

    probes = Noisy(slow=0.5)
    result = bisection.bisect(GOOD, diffs, probes, max_pairs=8)
    unresolved = [r for r in result.records if r.verdict is not None and r.verdict.outcome == "UNRESOLVED"]
    assert unresolved and all(len(r.ratios) == 8 for r in unresolved)
    assert bisection.report_lines(result)[-1].startswith("unresolved: ")


def test_prior_ranks_what_the_docs_tie_to_the_symptom_first() -> None:
    # The reference server's slowdown knobs are speed knobs, the relative one too (tests/test_probes.py's incident).
    env = {**INCIDENT["env"], "CUDA_LAUNCH_BLOCKING": "1", "SPECDEC_REF_FORWARD_SLOWDOWN": "3"}
    diffs = differences(GOOD, {**INCIDENT, "env": env})
    keys = [d.key for d in diffs]
    assert [keys[i] for i in bisection.prior.rank(diffs, "exact")][:1] == ["speculative.aux_hidden_state_layer_ids"]
    assert [keys[i] for i in bisection.prior.rank(diffs, "throughput")] == [
        "env CUDA_LAUNCH_BLOCKING", "env SPECDEC_REF_FORWARD_DELAY_MS", "env SPECDEC_REF_FORWARD_SLOWDOWN",
        "speculative.aux_hidden_state_layer_ids",
        "env HF_HUB_OFFLINE", "extra_args --log-level", "extra_args --served-model-name",
    ]  # fmt: skip
    assert [bisection.prior.kind(d) for d in diffs if "SPECDEC_REF" in d.key] == ["speed", "speed"]


@pytest.mark.parametrize(("count", "exact", "expected"), [(1, True, (2, 2)), (2, True, (3, 4)), (5, True, (4, 12)),
                                                          (5, False, (3, 7)), (8, True, (4, 15))])  # fmt: skip
def test_estimate_spans_where_the_single_culprit_of_each_symptom_sits(
    count: int, exact: bool, expected: tuple[int, int]
) -> None:
    assert bisection.estimate(count, exact=exact, throughput=True) == expected


def test_report_counts_one_in_the_singular() -> None:
    """A fresh-user trial read "1 differences": one of anything is singular (launch, difference, paired ratio)."""
    diffs = differences(GOOD, {**GOOD, "env": {"SPECDEC_REF_FORWARD_DELAY_MS": "20"}})
    result = bisection.bisect(GOOD, diffs, SimulatedProbes())
    assert bisection.report_lines(result)[0].startswith("bisect: 1 cause (1 of 1 difference) in 2 launches, ")
    stopped = bisection.bisect(GOOD, diffs, SimulatedProbes(budget=1))
    assert bisection.report_lines(stopped)[0].startswith("bisect stopped (--max-launches 1 spent) after 1 launch, ")
    assert "[geometric mean of 1 paired ratio, " in bisection.ratio_text([0.9])


def test_bisect_beats_one_at_a_time_which_misses_the_joint_cause() -> None:
    diffs = differences(GOOD, BAD)
    single = bisection.one_at_a_time(GOOD, diffs, SimulatedProbes())
    assert [(diffs[i].key, why) for i, why in single] == [("env SPECDEC_REF_FORWARD_DELAY_MS", "tok/s")]


def test_bisect_without_a_regression_measures_only_good_and_bad() -> None:
    harmless = {**GOOD, "env": {"HF_HUB_OFFLINE": "1"}, "extra_args": ["--log-level", "warning"]}
    probes = SimulatedProbes()
    result = bisection.bisect(GOOD, differences(GOOD, harmless), probes)
    assert result.culprits == () and probes.launches == 2
    assert bisection.report_lines(result)[0].startswith("bisect: no regression reproduced here (2 launches")


def test_workload_only_probes_reuse_the_running_server() -> None:
    # The slowdown is the workload itself (more tokens per request): no probe needs a launch of its own for it.
    good = {**GOOD, "workload": {**GOOD["workload"], "max_new_tokens": 32}}
    bad = {**good, "env": {"HF_HUB_OFFLINE": "1"}, "workload": {**good["workload"], "max_new_tokens": 128}}

    class Longer(SimulatedProbes):
        def tok_s(self, config: Mapping[str, Any]) -> float:
            return super().tok_s(config) * (0.5 if config["workload"]["max_new_tokens"] == 128 else 1.0)

    probes = Longer()
    result = bisection.bisect(good, differences(good, bad), probes)
    assert [result.diffs[i].key for i in result.culprits] == ["workload.max_new_tokens"]
    assert probes.launches == 2  # good (serves the workload probe too) and bad


def test_not_bisectable_lists_versions_gpu_and_the_callers_env() -> None:
    good = {"packages": {"torch": "2.13.0", "sglang": "0.5.23"}, "gpus": [{"name": "H200", "driver": "570",
            "cuda": "12.8"}], "env": {"CUDA_VISIBLE_DEVICES": "0", "NCCL_PROTO": "LL"},
            "profile_def": {"env": {"NCCL_PROTO": "LL"}}, "host": "a"}  # fmt: skip
    bad = {"packages": {"torch": "2.14.1", "sglang": "0.5.23"}, "gpus": [{"name": "H200", "driver": "575",
           "cuda": "12.9"}], "env": {"CUDA_VISIBLE_DEVICES": "1"}, "profile_def": {"env": {}}, "host": "a"}  # fmt: skip
    assert [x.line() for x in bisection.not_bisectable(good, bad)] == [
        "package torch: 2.13.0 -> 2.14.1",
        "gpu: H200 (driver 570, CUDA 12.8) -> H200 (driver 575, CUDA 12.9)",
        "env CUDA_VISIBLE_DEVICES (from the caller's shell, not the profile): 0 -> 1",
    ]


def test_bisect_hint_only_for_more_than_one_difference() -> None:
    assert bisection.bisect_hint(["env X: 1 -> 2"], "r1", "r2", "t.py::test[eagle3]") == ""
    assert bisection.bisect_hint(["a", "b"], "r1", "r2", "t.py::test[eagle3]") == (
        "bisect the 2 differences: python -m pytest_specdec bisect --good r1 --bad r2 --test 't.py::test[eagle3]'"
    )


@pytest.mark.parametrize("bad_value", [None, ("--gone", "x")])
def test_apply_removes_or_sets_a_flag(bad_value: tuple[str, ...] | None) -> None:
    good = {"extra_args": ["--keep", "--gone", "1"]}
    d = Difference(("extra_args", "--gone"), ("--gone", "1"), bad_value)
    expected = ["--keep"] if bad_value is None else ["--keep", "--gone", "x"]
    assert apply(good, [d])["extra_args"] == expected


def test_a_stored_compare_failure_with_several_differences_prints_the_bisect_command() -> None:
    from pytest_specdec.core.tolerances import layered_tolerances
    from pytest_specdec.judge.verdict import judge_compare
    from tests.helpers import fingerprint, rec

    base = rec(accept_length=[2.63] * 3, output_tok_s=[100.0, 101.0, 99.0])
    changed = fingerprint(env={"CUDA_VISIBLE_DEVICES": "0"}, draft={"path": "/d", "config_hash": "aaaa",
                          "aux_ids": [-1, 1, 3]})  # fmt: skip
    worse = rec(fp=changed, accept_length=[2.22] * 3, output_tok_s=[70.0, 71.0, 69.0])

    def judged(current: Any, current_run: str) -> list[str]:
        verdict = judge_compare(base, current, run_id="R1", test_id=current.test_id,
                                tolerances=layered_tolerances(), noise={}, force=False,
                                current_run=current_run, bisect_hint=bisection.bisect_hint)  # fmt: skip
        assert verdict.failure is not None
        return verdict.failure.splitlines()

    lines = judged(worse, "R2")
    assert lines[:3] == [
        "regression against run R1 (t.py::test_x[eagle3]):",
        "bisect the 2 differences: python -m pytest_specdec bisect --good R1 --bad R2 --test 't.py::test_x[eagle3]'",
        "fingerprint: 2 differences from baseline",
    ]
    one = rec(fp=fingerprint(env={"CUDA_VISIBLE_DEVICES": "0"}), accept_length=[2.22] * 3)
    assert judged(one, "R2")[1] == "fingerprint: 1 difference from baseline"


def test_the_pair_spread_pools_probes_measured_against_different_reference_arms() -> None:
    # After an unresolved probe, the split check pools every record's pairs: some measured against GOOD (ratios near
    # 0.80), some against GOOD + cause 1 (near 1.0). Each sample is centred on its own mean, so the offset between
    # the arms is not read as spread: the pooled sd is the within-sample one, and so are the pairs it asks for.
    import math

    from pytest_specdec.bisection.symptoms import log_ratio_sd, pairs_to_split
    from pytest_specdec.judge.sequential import Design

    wiggle = [math.exp(0.1 * z) for z in (-1.0, 0.0, 1.0, 0.5, -0.5)]
    against_good = [0.80 * w for w in wiggle]
    against_cause = [1.00 * w for w in wiggle]
    alone = log_ratio_sd(against_good)
    pooled = log_ratio_sd(against_good, against_cause)
    assert alone is not None and pooled is not None and math.isclose(pooled, alone)
    lumped = log_ratio_sd(against_good + against_cause)  # one sample: the arms' offset would count as spread
    assert lumped is not None and lumped > 1.5 * pooled
    look = Design(3, 24)
    assert pairs_to_split(0.9, pooled, look) < pairs_to_split(0.9, lumped, look)
    assert log_ratio_sd([0.9], [1.1]) is None  # one ratio a sample: no spread to pool


def test_bisect_interrupted_during_the_exact_search_lists_the_tok_s_suspects_too() -> None:
    # A fresh-user trial's Ctrl-C while the aux ids were launched listed the exact symptom's suspects only.
    diffs = differences(GOOD, INCIDENT)

    class Interrupted(SimulatedProbes):
        def exact(self, config: Mapping[str, Any], label: str, phases: int) -> dict[str, list[float]]:
            if label not in ("good", "bad"):
                raise KeyboardInterrupt("SIGTERM")
            return super().exact(config, label, phases)

    result = bisection.bisect(GOOD, diffs, Interrupted(slow=0.7))
    assert result.stopped == "SIGTERM" and result.causes == ()
    lines = bisection.report_lines(result)
    assert any(line.startswith("still suspected for the exact symptom: 5 differences") for line in lines), lines
    assert any(line.startswith("still suspected for the tok/s symptom: 5 differences") for line in lines), lines
