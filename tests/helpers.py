"""Helpers shared by the plugin's own test modules (builders of synthetic records, scripted SSE streams).

Test modules import from here, never from each other: a test module is collected on its own, and an import
between two of them ties their collection (and their fixtures) together.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import importlib.metadata
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_specdec.core.records import RunMetrics, median_metrics
from pytest_specdec.judge.sweep import split_name
from pytest_specdec.measure import runner
from pytest_specdec.measure.results import (
    ResultRecord,
)
from pytest_specdec.measure.workload import RequestSpec

if TYPE_CHECKING:
    import pytest

BASE = "http://testserver"


Script = list[tuple[float, Any]]  # (fake time at delivery, payload dict | "[DONE]" | raw str | ("sleep", s))


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


def sse(fake: FakeClock, script: Script) -> Callable[[], AsyncIterator[bytes]]:
    async def body() -> AsyncIterator[bytes]:
        for t, payload in script:
            if isinstance(payload, tuple):  # ("sleep", seconds): real wait, for watchdog/timeout tests
                await asyncio.sleep(payload[1])
                continue
            fake.t = t
            text = payload if isinstance(payload, str) else json.dumps(payload)
            yield f"data: {text}\n\n".encode()

    return body


def req(prompt: str = "hi", n: int = 8) -> RequestSpec:
    return RequestSpec(prompt=prompt, max_new_tokens=n, temperature=0.0, ignore_eos=True)


def gen_event(text: str, completion_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "text": text,
        "output_ids": list(range(completion_tokens)),
        "meta_info": {"prompt_tokens": 5, "completion_tokens": completion_tokens, **extra},
    }


# A speculative /generate stream: 1-token first event, then 3- and 4-token events, plus one event without
# new tokens (must record nothing). The final meta_info carries SGLang 0.5.23's spec fields.
GENERATE_SCRIPT: Script = [
    (0.100, gen_event("a", 1)),
    (0.130, gen_event("abcd", 4)),
    (0.140, gen_event("abcd", 4)),
    (
        0.190,
        gen_event(
            "abcdefgh",
            8,
            spec_verify_ct=3,
            spec_accept_length=8 / 3,
            spec_accept_rate=0.5,
            spec_num_correct_drafts=5,
            spec_num_proposed_drafts=9,
        ),
    ),
    (0.200, "[DONE]"),
]


def run_metrics(**changes: Any) -> RunMetrics:
    fields = {f.name: None for f in dataclasses.fields(RunMetrics) if f.default is dataclasses.MISSING}
    fields.update(num_requests=1, num_ok=1, num_errors=0, duration_s=1.0, output_tokens=100, output_tok_s=100.0)
    fields.update(changes)
    return RunMetrics(**fields)


WORKLOAD = {
    "prompts": "builtin",
    "api": "generate",
    "max_new_tokens": 64,
    "num_requests": 16,
    "concurrency": 1,
    "temperature": 0.0,
}


GPUS = [{"name": "NVIDIA H100", "driver": "550.54", "cuda": "12.4"}]


def fingerprint(**changes: Any) -> dict[str, Any]:
    fp: dict[str, Any] = {
        "plugin_version": "0.1.0",
        "engine": "sglang",
        "packages": {"sglang": "0.5.23", "torch": "2.13.0"},
        "argv": ["python", "-m", "sglang.launch_server", "--port", "30000", "--speculative-num-steps", "3"],
        "env": {"NCCL_PROTO": "LL", "CUDA_VISIBLE_DEVICES": "0"},
        "draft": {"path": "/d", "config_hash": "aaaa", "aux_ids": [1, 3, 5]},
        "effective": {"num_steps": 3},
        "prompt_hash": "0123456789abcdef" * 4,
        "workload": dict(WORKLOAD),
        # A host without a GPU (as the reference server's): a GPU host's raw rows assume a larger instance spread
        # (judge.compare.assumed_instance_sd); tests of it pass gpus=GPUS.
        "gpus": [],
        "host": "node1",
    }
    fp.update(changes)
    return fp


def rec(
    test_id: str = "t.py::test_x[eagle3]", fp: dict[str, Any] | None = None, **repeats: list[float]
) -> ResultRecord:
    metrics = {k: float(np.median(v)) for k, v in repeats.items()}
    return ResultRecord(test_id, "eagle3", metrics, {k: list(v) for k, v in repeats.items()}, fp or fingerprint())


def record(profile: str, tok_s: float, accept: float | None, *, outcome: str = "passed", conc: int = 1) -> ResultRecord:
    """A synthetic record: accept rate as with 4 draft tokens, ITL = 1000 / tok/s, TTFT 40 ms."""
    metrics = {
        "output_tok_s": tok_s,
        "accept_length": accept,
        "accept_rate": (accept - 1) / 3 if accept is not None else None,
        "ttft_ms_p50": 40.0,
        "itl_ms_p50": 1000.0 / tok_s,
    }
    fingerprint = {
        "speculative": None if accept is None else {"algorithm": "EAGLE3"},
        "workload": {"concurrency": conc},
    }
    return ResultRecord(
        test_id=f"tests/test_x.py::test_run[{profile}]",
        profile=profile,
        metrics=metrics,
        repeats={},
        fingerprint=fingerprint,
        outcome=outcome,
    )


SEED = [(1, 90.1, 1.80), (2, 94.0, 2.40), (3, 92.5, 2.70), (4, 89.0, 2.90)]


def seed_records(failed: tuple[int, ...] = ()) -> list[ResultRecord]:
    """The seed's sweep: optimum at 2 steps, 94.0 tok/s vs 88.8 without speculation; two tests per profile."""
    out = [record("baseline", 88.8, None)]
    for steps, tok_s, accept in SEED:
        name = f"eagle3@num_steps={steps}"
        out.append(record(name, tok_s, accept))
        out.append(record(name, tok_s, accept, outcome="failed" if steps in failed else "passed"))
    return out


def with_repeats(rec: ResultRecord, tok_s: list[float], **checks: str) -> ResultRecord:
    """``rec`` with per-repeat output tok/s ``tok_s`` and threshold ``checks``."""
    return dataclasses.replace(rec, repeats={"output_tok_s": tok_s}, checks=dict(checks))


#: Per-repeat tok/s of the seed's points, medians as in SEED: 2 steps clearly fastest at this spread.
REPEATS = {1: [89.5, 90.1, 90.6], 2: [93.6, 94.0, 94.5], 3: [92.0, 92.5, 93.1], 4: [88.6, 89.0, 89.3]}


def repeated_records(failed: tuple[int, ...] = (), repeats: dict[int, list[float]] = REPEATS) -> list[ResultRecord]:
    """:func:`seed_records` with 3 repeats per point (and the baseline's 88.0, 88.8, 89.5)."""
    out = []
    for r in seed_records(failed):
        point = split_name(r.profile)[1]
        out.append(with_repeats(r, repeats[point["num_steps"]] if point else [88.0, 88.8, 89.5]))
    return out


#: The ini of pytester projects that turn warnings into errors: the plugin's load warnings (machine busy, client
#: overloaded) stay warnings, since they are the plugin working as designed on a loaded runner; a test that asserts
#: on one says so itself.
STRICT_INI = "[pytest]\nfilterwarnings =\n    error\n    default::pytest_specdec.LoadWarning\n"

#: ``STRICT_INI`` for a project run in process (``pytester.runpytest_inprocess``): the outer session has imported
#: the plugin (an entry point, or an editable install's finder) before the inner run can mark it for rewriting, so
#: pytest warns that it cannot rewrite its asserts; a config-time warning, which ``error`` would make the inner
#: run's internal error. Not this project's concern: ignored.
IN_PROCESS_INI = (
    STRICT_INI + "    ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning\n"
)

#: ``IN_PROCESS_INI`` with every ``SpecdecWarning`` shown, not raised: for in-process runs whose verdicts may warn
#: (an undecided compare row or floor on a busy runner, a fingerprint that differs), which no test there asserts on
#: as an error.
IN_PROCESS_SHOWN_INI = IN_PROCESS_INI + "    default::pytest_specdec.SpecdecWarning\n"


def run_in_process(
    pytester: pytest.Pytester, *args: str, benchmark: bool = False, ctrl_c_ends_run: bool = False
) -> pytest.RunResult:
    """One inner pytest run in this process (``pytester.runpytest_inprocess``; no second interpreter and plugin import,
    about 0.4 s quiet and 2-3 s on a busy runner; the servers it launches are subprocesses either way), with the cache
    plugin and pytest-randomly off (a project's runs do not share ``.pytest_cache``; the order the test expects is the
    file's) and pytest-benchmark off unless ``benchmark``. Run the inner project under ``IN_PROCESS_INI``.

    :param ctrl_c_ends_run: a ``KeyboardInterrupt`` inside the inner run (a test's SIGINT) ends that run only
        (``no_reraise_ctrlc``), not the outer test.
    :returns: the ``pytest.RunResult``.
    """
    plugins = ["-p", "no:cacheprovider", "-p", "no:randomly"] + ([] if benchmark else ["-p", "no:benchmark"])
    return pytester.runpytest_inprocess(*plugins, *args, no_reraise_ctrlc=ctrl_c_ends_run)


#: The ``speculative:`` block of the shared reference server most URL profiles of the tests point at
#: (``conftest.reference_url(SHARED_EAGLE3)``): the bundled EAGLE3 draft, 3 steps, top-k 1, 4 draft tokens.
SHARED_EAGLE3 = "{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}"


def with_url(text: str, profile: str, url: str) -> str:
    """``text`` (a profile file's YAML) with ``url: <url>`` added to the profile ``profile``: it then measures that
    server (``conftest.reference_url(...)``) and is never launched; ``url="null"`` keeps a profile that extends one
    given by URL launched. The line goes right under the profile's ``  <profile>:`` line (a 2-space indent under
    ``profiles:``, the keys 4 spaces in).

    :raises ValueError: ``text`` has no such profile line, or more than one: a profile text that changed would
        otherwise silently launch its own server again.
    """
    head = f"  {profile}:\n"
    found = len(re.findall(rf"^{re.escape(head)}", text, re.M))
    if found != 1:
        raise ValueError(f"profile {profile!r}: {found} lines {head!r} in the profile text, expected 1:\n{text}")
    return re.sub(rf"^{re.escape(head)}", lambda _: f"{head}    url: {url}\n", text, count=1, flags=re.M)


_HELD_PORTS: list[object] = []


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a server a test launches itself, held against the plugin's own picks until
    this test process ends (``serve.ports.reserve_free_port``): the server binds it only after loading its model,
    and a launch by another xdist worker picked the very same port meanwhile once (issue 45)."""
    from pytest_specdec.serve.ports import reserve_free_port

    reservation = reserve_free_port("127.0.0.1")
    _HELD_PORTS.append(reservation)
    return reservation.port


#: The test module of a pytester project that measures whatever ``--server-profile`` names (tests/gpu/).
PROFILE_TEST = """
import pytest

@pytest.mark.specdec
def test_profile(specdec_run):
    assert specdec_run.metrics.num_errors == 0
"""


def plugin_args() -> list[str]:
    """``-p pytest_specdec.plugin`` where the plugin is not installed (an interpreter that only has it on its
    path), else nothing: the entry point loads it."""
    try:
        importlib.metadata.distribution("pytest-specdec")
        return []
    except importlib.metadata.PackageNotFoundError:
        return ["-p", "pytest_specdec.plugin"]


def assert_tok_s_regressed_or_left_open(out: str) -> None:
    """A failed compare's ``output_tok_s`` row (tolerance 5%) is REGRESSED on its interval, or left open with its
    interval under the ``not measured further`` line: the compare stops at the look at which a row regressed, and a
    latency row may regress first (flake hunt seeds 241, 250); or, where more repeats would not decide it (a busy
    runner's spread between instances: seed 178, x0.186 open beside a regressed ITL at 12 repeats), with its own
    reason under the ``beside the regression`` line."""
    tok_s = re.search(r"^output_tok_s +higher .* -\d+\.\d% +5% .*(REGRESSED|undecided) \(x0\.\d+, CI .*, n=\d+\)$", out,
                      re.M)  # fmt: skip
    assert tok_s, out
    if tok_s.group(1) == "undecided":
        stopped = r"^\d+ undecided rows? not measured further: the compare had regressed at \d+ repeats$"
        beside = r"^\d+ undecided rows? beside the regression after \d+ repeats:\n(  .*\n)*  output_tok_s x0\.\d+, CI "
        assert re.search(stopped, out, re.M) or re.search(beside, out, re.M), out


class ScriptedHandle:
    """A ``MeasureHandle`` (``judge.handle``) over scripted repeats of one profile: ``metrics`` (one ``RunMetrics``
    per repeat, in order), the first ``first`` measured; ``more()`` appends the next (1 s of server each) until the
    script ends. ``asked`` counts the ``more()`` calls, ``whys`` keeps what each was for. No server, no pairing."""

    def __init__(self, metrics: Sequence[RunMetrics], first: int) -> None:
        self.script = list(metrics)
        self.measured = [self._measure(m) for m in self.script[:first]]
        self.asked = 0
        self.whys: list[str] = []

    @staticmethod
    def _measure(metrics: RunMetrics) -> runner.Measurement:
        return runner.Measurement("eagle3", metrics, (), "h", None, None, None, server_s=1.0)

    def run(self, profile: str) -> runner.RunResult:
        return runner.RunResult(profile, tuple(self.measured), median_metrics([m.metrics for m in self.measured]), "h")

    def arms(self, profile: str, vs: str) -> None:
        return None

    def pair_error(self, profile: str, vs: str) -> None:
        return None

    def more_error(self, profile: str) -> None:
        return None

    def can_measure(self, profile: str) -> bool:
        return len(self.measured) < len(self.script)

    def more(self, profile: str, vs: str | None, pairs: int | None = None, *, why: str = "") -> bool:
        self.asked += 1
        self.whys.append(why)
        self.measured.append(self._measure(self.script[len(self.measured)]))
        return True

    def spent_s(self, profile: str, vs: str | None) -> float:
        return float(len(self.measured))


def dies_with_this_process() -> Callable[[], None]:
    """A ``preexec_fn`` for a server or CLI a test starts with ``subprocess.Popen``: the child gets SIGTERM when this
    process dies (Linux ``prctl(PR_SET_PDEATHSIG)``; nothing elsewhere). A pytest-xdist worker that its controller
    ends on Ctrl-C runs no ``finally``: a contributor trial saw the bisect of tests/test_probes.py go on as an
    orphan and start a reference server after pytest had exited. libc is loaded here, not in the forked child. The
    signal comes when the *thread* that started the child ends: start it from the test's own thread, not a pool's."""
    if not sys.platform.startswith("linux"):
        return lambda: None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (linux/prctl.h)
        if os.getppid() != parent:  # the test process died before the line above: no signal would come
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def sigint_default() -> None:
    """``preexec_fn`` for a child process a test interrupts with SIGINT: the signal's default action back. A run
    started with '&' by a non-interactive shell (a CI step, a flake hunt in the background) ignores SIGINT, and a
    child inherits that: ``sleep`` would not die, Python would install no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: The fake SGLang server (tests/fakesglang): a process that speaks SGLang's HTTP API from a script.
FAKE_SGLANG = Path(__file__).resolve().parent / "fakesglang"


def fake_sglang_profiles(script: dict[str, object], *, thresholds: str = "", workload: str = "repeats: 1") -> str:
    """A profile file's text with one profile, ``eagle3``, on the fake SGLang running ``script`` (2 requests a
    repeat, 15 tokens); ``thresholds``: a flow mapping for its ``thresholds:`` (none when empty); ``workload``: more
    ``workload`` keys (``repeats: 1``)."""
    from pytest_specdec.engines.rules import BUNDLED_TARGET

    env = json.dumps({"PYTHONPATH": str(FAKE_SGLANG), "SPECDEC_FAKE_SGLANG": json.dumps(script)})
    lines = ["profiles:", "  eagle3:", "    server: sglang", f"    model_path: {BUNDLED_TARGET}", f"    env: {env}",
             "    startup_timeout_s: 60", *([f"    thresholds: {thresholds}"] if thresholds else []),
             f"    workload: {{max_new_tokens: 15, num_requests: 2, warmup_requests: 0, {workload}}}"]  # fmt: skip
    return "\n" + "\n".join(lines) + "\n"
