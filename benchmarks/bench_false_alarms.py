"""False alarms and misses of the compare and speedup checks on a runner whose load comes and goes (issue 15.6).

    python benchmarks/bench_false_alarms.py --runs 20            # the full benchmark (hours on 2 busy cores)
    python benchmarks/bench_false_alarms.py --runs 5 --quick     # 4 requests x 32 tokens a phase (16 x 64)

In a scratch project with ``examples/specdec.yaml`` (its ``min_tok_s`` floor lowered to 1, see ``_profiles``; plus
``eagle3-slow``: eagle3 with ``SPECDEC_REF_FORWARD_DELAY_MS`` in the reference server) and
``examples/test_specdec.py``:

1. calibrate the delay: eagle3-slow against eagle3, both servers alive, interleaved phases, for a paired tok/s
   ratio of about 0.90 (-10 %). The pairing cancels the load both arms share, but a sleep costs a starved process
   less than an idle one (measured here at load 12: 11.55 ms -> 0.937), so calibrate at the load you run at, or
   give ``--delay-ms``;
2. store a baseline: ``pytest -m specdec --server-profile=eagle3`` with no extra load;
3. ``--runs`` times each, with a background CPU load (``--load-procs`` busy processes) switched on for odd runs and
   off for even ones:
   a. unchanged: ``--server-profile=eagle3 --specdec-compare`` -> every failed check is a false alarm;
   b. injected: ``--server-profile=eagle3-slow --specdec-compare --specdec-compare-profile=eagle3`` -> caught when
      the compare fails on throughput;
   c. the README's ``--server-profile=baseline,eagle3`` -> must pass.

Prints one table row per run and the totals. Targets (issue 15): at most 1 false alarm over all compare and speedup
checks in 20 unchanged runs, the injection caught in at least 19 of 20, the README example passing in all 20.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from busy import Load  # benchmarks/busy.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
def _profiles(delay_ms: float, quick: bool) -> str:
    text = (ROOT / "examples/specdec.yaml").read_text()
    # The example's absolute floor (min_tok_s: 20) is not a compare or speedup check, and a runner at load 12 on
    # 2 cores misses it (eagle3 made 17 tok/s there): it would fail every run and leave no passing baseline.
    text = text.replace("min_tok_s: 20", "min_tok_s: 1")
    if quick:
        # Accept length over 4 prompts x 32 tokens is 2.33, rate 0.44 (exactly, at temperature 0): below the example's
        # 2.4 and 0.47, which are for its 16 x 64.
        text = text.replace("num_requests: 16", "num_requests: 4").replace("max_new_tokens: 64", "max_new_tokens: 32")
        text = text.replace("min_accept_length: 2.4", "min_accept_length: 2.0")
        text = text.replace("min_accept_rate: 0.47", "min_accept_rate: 0.35")
    # The rest of examples/specdec.yaml stays; vLLM profiles are never selected here.
    return text + (
        "\n  eagle3-slow:\n    extends: eagle3\n"
        f"    env: {{SPECDEC_REF_FORWARD_DELAY_MS: '{delay_ms:.2f}'}}\n"
    )


@dataclass
class Outcome:
    passed: int
    failed: int
    compare_failures: int
    speedup_failures: int
    other_failures: int
    seconds: float
    note: str


def _pytest(project: Path, args: list[str], timeout_s: float) -> Outcome:
    xml = project / "junit.xml"
    xml.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-m", "specdec", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}",
         "-W", "default", *args],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A background job's shell ignores SIGINT and children inherit it: restore it so Ctrl-C/SIGINT stops pytest.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        _stdout, stderr = proc.communicate(timeout=timeout_s)
    except BaseException:
        # Ctrl-C / SIGTERM / timeout: let pytest tear its servers down (SIGINT), as a user's Ctrl-C would.
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        raise
    took = time.perf_counter() - started
    passed = failed = compare = speedup = other = 0
    note = ""
    if xml.is_file():
        for case in ET.parse(xml).getroot().iter("testcase"):
            failure = case.find("failure")
            error = case.find("error")
            if failure is None and error is None and case.find("skipped") is None:
                passed += 1
                continue
            if failure is None and error is None:
                continue
            failed += 1
            text = (failure if failure is not None else error).get("message", "")  # type: ignore[union-attr]
            text += (failure if failure is not None else error).text or ""  # type: ignore[union-attr]
            kinds = []
            if "regression against run" in text:
                compare += 1
                rows = re.findall(r"^(\S+(?: / \S+)?)\s+(?:higher|lower)\s.*REGRESSED", text, re.M)
                kinds.append("compare: " + ",".join(dict.fromkeys(rows)))
            if re.search(r"speedup vs \S+ .*< min", text):
                speedup += 1
                kinds.append("speedup")
            if not kinds:
                other += 1
                kinds.append(text.strip().splitlines()[0][:80] if text.strip() else "failed")
            note = note or "; ".join(kinds)
    else:
        note = f"no junit xml (exit {proc.returncode}): {stderr.strip()[-200:]}"
        failed = 1
        other = 1
    return Outcome(passed, failed, compare, speedup, other, took, note)


def _calibrate_delay(project: Path, target_ratio: float) -> tuple[float, float]:
    """Delay (ms per target forward) giving about ``target_ratio`` of eagle3's tok/s, from paired measurements."""
    sys.path.insert(0, str(ROOT))
    from pytest_specdec.engines.rules import load_profiles
    from pytest_specdec.measure import pairing, runner

    def ratio(delay_ms: float) -> float:
        (project / "specdec.yaml").write_text(_profiles(delay_ms, quick=True))
        profiles = load_profiles(project / "specdec.yaml")
        logs = project / ".specdec/calibrate-delay"
        with runner.running_server(profiles.get("eagle3-slow"), log_dir=logs) as slow, runner.running_server(
            profiles.get("eagle3"), log_dir=logs
        ) as fast:
            arms = pairing.measure_interleaved(slow, fast, 3)
        ratios = sorted(arms.ratios())
        return ratios[len(ratios) // 2]

    probe = 2.0
    r0 = ratio(probe)
    # Time per token grows linearly with the delay: T(d) = T0 + k d, so ratio(d) = 1 / (1 + d (1/r0 - 1) / probe).
    delay = probe * (1 / target_ratio - 1) / max(1 / r0 - 1, 1e-6)
    return delay, ratio(delay)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each kind (default: 20)")
    parser.add_argument("--load-procs", type=int, default=2, help="busy processes when the load is on (default 2)")
    parser.add_argument("--delay-ms", type=float, default=None, help="skip the delay calibration")
    parser.add_argument("--quick", action="store_true", help="4 requests x 32 tokens a phase instead of 16 x 64")
    parser.add_argument("--keep", action="store_true", help="keep the scratch project")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per pytest run (default 1200)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop like Ctrl-C: servers and load torn down

    project = Path(tempfile.mkdtemp(prefix="specdec-false-alarms-"))
    tests = (ROOT / "examples/test_specdec.py").read_text()
    if args.quick:
        tests = tests.replace("min_accept_length=2.4", "min_accept_length=2.0")
    (project / "test_specdec.py").write_text(tests)
    (project / "pytest.ini").write_text("[pytest]\nspecdec_profiles = specdec.yaml\n")
    load = Load(args.load_procs)
    try:
        if args.delay_ms is None:
            delay, measured = _calibrate_delay(project, 0.90)
            print(f"delay: {delay:.2f} ms per forward -> eagle3-slow/eagle3 paired tok/s ratio {measured:.3f}")
        else:
            delay = args.delay_ms
            print(f"delay: {delay:.2f} ms per forward (given)")
        (project / "specdec.yaml").write_text(_profiles(delay, args.quick))
        base = _pytest(project, ["--server-profile=eagle3"], args.timeout)
        print(f"baseline run: {base.passed} passed, {base.failed} failed ({base.seconds:.0f} s) {base.note}")
        kinds = {
            "unchanged": ["--server-profile=eagle3", "--specdec-compare"],
            "injected": ["--server-profile=eagle3-slow", "--specdec-compare", "--specdec-compare-profile=eagle3"],
            "baseline,eagle3": ["--server-profile=baseline,eagle3"],
        }
        totals = {k: [] for k in kinds}  # type: dict[str, list[Outcome]]
        print(f"{'run':>3}  {'load':4}  {'kind':15}  {'pass':>4}  {'fail':>4}  {'cmp':>3}  {'spd':>3}  {'s':>4}  note")
        for i in range(args.runs):
            loaded = i % 2 == 1
            for kind, extra in kinds.items():
                if loaded:
                    load.on()
                try:
                    out = _pytest(project, extra, args.timeout)
                finally:
                    load.off()
                totals[kind].append(out)
                print(f"{i + 1:>3}  {'on' if loaded else 'off':4}  {kind:15}  {out.passed:>4}  {out.failed:>4}  "
                      f"{out.compare_failures:>3}  {out.speedup_failures:>3}  {out.seconds:>4.0f}  {out.note}",
                      flush=True)  # fmt: skip
        unchanged, injected, example = totals["unchanged"], totals["injected"], totals["baseline,eagle3"]
        alarms = sum(1 for o in unchanged if o.compare_failures or o.speedup_failures)
        checks = sum(o.passed + o.failed for o in unchanged)
        caught = sum(1 for o in injected if o.compare_failures)
        passing = sum(1 for o in example if o.failed == 0)
        print()
        print(f"unchanged eagle3: {alarms}/{len(unchanged)} runs with a false alarm ({checks} test verdicts; "
              f"target <= 1 in 20)")  # fmt: skip
        print(f"injected -10% (delay {delay:.2f} ms): caught {caught}/{len(injected)} (target >= 19/20)")
        print(f"README baseline,eagle3: passed {passing}/{len(example)} (target 20/20)")
    finally:
        load.off()
        if not args.keep:
            shutil.rmtree(project, ignore_errors=True)
        else:
            print(f"kept {project}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
