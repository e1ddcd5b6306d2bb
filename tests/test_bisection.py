"""Tests of pytest_specdec.bisection without servers: differences, ddmin, the probe verdicts, and the whole bisect
over a simulated incident (aux id -1 through the patched capture, plus a slow forward, plus harmless differences)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_specdec import bisection
from pytest_specdec.bisection import Difference, Symptoms, apply, ddmin, differences, judge
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
        "speculative.allow_embedding_capture: false -> true",
        "speculative.aux_hidden_state_layer_ids: (absent) -> [-1, 1, 3]",
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


SYMPTOMS = Symptoms({"accept_length": (2.333, 2.032)}, 0.436)


def test_judge_decides_on_the_exact_metric_before_any_pair() -> None:
    verdict = judge(SYMPTOMS, {"accept_length": [2.333, 2.333]}, [], temperature=0.0)
    assert (verdict.outcome, verdict.basis, verdict.pairs) == ("PASS", "exact", 0)
    assert verdict.line == "accept_length 2.333 = good, not the bad 2.032"
    other = judge(SYMPTOMS, {"accept_length": [2.1, 2.1]}, [], temperature=0.0)
    assert other.outcome == "PASS" and other.line == "accept_length 2.1 (good 2.333), not the bad 2.032"
    # At the bad value, tok/s decides: MIN_PAIRS pairs are asked for first.
    ask = judge(SYMPTOMS, {"accept_length": [2.032, 2.032]}, [], temperature=0.0)
    assert (ask.outcome, ask.pairs) == (None, bisection.MIN_PAIRS)
    # Without a throughput symptom the exact metric alone decides.
    exact_only = judge(Symptoms(SYMPTOMS.exact, None), {"accept_length": [2.032, 2.032]}, [], temperature=0.0)
    assert (exact_only.outcome, exact_only.line) == ("FAIL", "accept_length 2.032 = bad")


def test_judge_paired_tok_s_against_the_midpoint() -> None:
    at_bad = {"accept_length": [2.032, 2.032]}
    slow = judge(SYMPTOMS, at_bad, [0.43, 0.44, 0.45, 0.42, 0.44, 0.43], temperature=0.0)
    assert slow.outcome == "FAIL" and slow.basis == "paired"
    assert slow.line.startswith("accept_length 2.032 = bad; tok/s x0.435 of good [median of 6 paired ratios")
    assert slow.line.endswith("vs bad x0.436, midpoint x0.660: below, p=0.0156")
    fast = judge(SYMPTOMS, at_bad, [0.86, 0.88, 0.85, 0.87, 0.9, 0.84], temperature=0.0)
    assert fast.outcome == "PASS" and fast.line.endswith(": above, p=0.0156")
    mixed = [0.5, 0.8, 0.55, 0.75, 0.6, 0.7]
    more = judge(SYMPTOMS, at_bad, mixed, temperature=0.0)
    assert (more.outcome, more.pairs) == (None, bisection.MIN_PAIRS)
    gave_up = judge(SYMPTOMS, at_bad, mixed * 2, temperature=0.0)
    assert gave_up.outcome == "UNRESOLVED" and gave_up.line.endswith("neither side significant after 12 pairs")
    # Repeats that differ (temperature > 0) leave the exact metric undecided: tok/s decides alone.
    noisy = judge(SYMPTOMS, {"accept_length": [2.0, 2.1]}, [0.43] * 6, temperature=0.7)
    assert noisy.outcome == "FAIL" and not noisy.line.startswith("accept_length")


def test_find_symptoms_needs_a_significant_slowdown_beyond_the_tolerance() -> None:
    same = {"accept_length": [2.333, 2.333]}
    noise = bisection.find_symptoms(same, same, [0.97, 1.01, 0.98, 1.02, 0.99, 0.96], temperature=0.0,
                                    tolerance_rel=0.05)  # fmt: skip
    assert not noise.regressed and noise.throughput_line.endswith(": not significantly slower")
    slow = bisection.find_symptoms(same, {"accept_length": [2.032] * 2}, [0.5] * 6, temperature=0.0,
                                   tolerance_rel=0.05)  # fmt: skip
    assert slow.exact == {"accept_length": (2.333, 2.032)} and slow.level == 0.5
    assert slow.throughput_line.endswith("floor x0.95, wilcoxon exact p=0.0156: slower")


class SimulatedProbes:
    """The reference server as a formula: aux id -1 needs ``--ref-embedding-capture patched`` (else the server dies
    at startup) and lowers the accept length 2.333 -> 2.032; the forward delay halves tok/s; the rest is harmless.
    tok/s ~ accept length, with +-3 % seeded noise per phase. A launch is counted whenever a probe needs another
    server than the one running (the good server is kept, as interleaved pairing does)."""

    def __init__(self, seed: int = 0) -> None:
        self.launches = 0
        self.server_s = 0.0
        self.current: str | None = None
        self.good_key: str | None = None
        self.rng = random.Random(seed)
        self.asked: list[str] = []

    def _serve(self, config: Mapping[str, Any]) -> None:
        key = bisection.launch_key(config)
        if self.good_key is None:
            self.good_key = key
            self.launches += 1
            self.server_s += 5.0
            return
        if key not in (self.current, self.good_key):
            self.current = key
            self.launches += 1
            self.server_s += 5.0
        spec = config["speculative"]
        if -1 in (spec.get("aux_hidden_state_layer_ids") or []) and "--ref-embedding-capture" not in config[
            "extra_args"
        ]:
            raise ServerStartError("server 'probe' exited with code 1 before it was ready (TypeError)")

    @staticmethod
    def accept(config: Mapping[str, Any]) -> float:
        return 2.032 if -1 in (config["speculative"].get("aux_hidden_state_layer_ids") or []) else 2.333

    def tok_s(self, config: Mapping[str, Any]) -> float:
        slow = 0.5 if "SPECDEC_REF_FORWARD_DELAY_MS" in config["env"] else 1.0
        return 100.0 * self.accept(config) / 2.333 * slow * self.rng.uniform(0.97, 1.03)

    def exact(self, config: Mapping[str, Any], label: str) -> dict[str, list[float]]:
        self.asked.append(f"exact {label}")
        self._serve(config)
        return {"accept_length": [self.accept(config)] * 2}

    def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
        self.asked.append(f"pairs {label} {count}")
        self._serve(config)
        return [self.tok_s(config) / self.tok_s(GOOD) for _ in range(count)]

    def running(self) -> str | None:
        return self.current


def test_bisect_names_the_two_causes_of_the_simulated_incident() -> None:
    diffs = differences(GOOD, BAD)
    probes = SimulatedProbes()
    ticks = iter(range(0, 10_000, 60))
    result = bisection.bisect(GOOD, diffs, probes, clock=lambda: float(next(ticks)))
    keys = [d.key for d in diffs]
    assert [keys[i] for i in result.culprits] == [
        "env SPECDEC_REF_FORWARD_DELAY_MS",
        "extra_args --ref-embedding-capture",
        "speculative.aux_hidden_state_layer_ids",
    ]
    assert [[keys[i] for i in cause] for cause in result.causes] == [
        ["extra_args --ref-embedding-capture", "speculative.aux_hidden_state_layer_ids"],
        ["env SPECDEC_REF_FORWARD_DELAY_MS"],
    ]
    assert result.launches == probes.launches and result.server_s == 5.0 * probes.launches
    lines = bisection.report_lines(result)
    assert lines[0] == f"bisect: 2 causes (3 of 7 differences) in {result.launches} launches, " \
        f"{result.server_s:.0f} server-s, 1.0 min"  # fmt: skip
    assert lines[1].startswith("symptoms: accept_length 2.333 -> 2.032 (exact); tok/s x0.4")
    assert lines[2].startswith("cause 1: accept_length 2.333 -> 2.032 (exact); tok/s x0.8")
    assert lines[3:5] == [
        "  extra_args --ref-embedding-capture: (absent) -> patched",
        "    without it: does not run alone (server 'probe' exited with code 1 before it was ready (TypeError))",
    ]
    assert "  env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 20" in lines
    cause2 = next(line for line in lines if line.startswith("cause 2: "))
    assert cause2.startswith("cause 2: accept_length = good; tok/s x0.5")
    harmless = next(line for line in lines if line.startswith("harmless: "))
    assert harmless == (
        "harmless: env HF_HUB_OFFLINE: (unset) -> 1; extra_args --log-level: (absent) -> warning; "
        "extra_args --served-model-name: (absent) -> demo; speculative.allow_embedding_capture: false -> true"
    )
    # Each configuration was measured once (cached); a probe the exact metric decided got no tok/s pair, unless it
    # is a cause measured alone for its effect.
    labels = [r.label for r in result.records]
    assert len(labels) == len(set(labels))
    decided_exactly = [r for r in result.records[2:] if r.verdict is not None and r.verdict.basis == "exact"]
    assert decided_exactly and all(r.ratios == [] or r.subset in result.causes for r in decided_exactly)
    assert result.launches == 18  # good, bad, 15 probes, and cause 2 alone


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
    from pytest_specdec.judge.tolerances import layered_tolerances
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
