"""Measuring a profile's workload on a running server: ``measure`` = warmup -> counters -> measured phase -> counters ->
metrics; repeats, the traced phase, and the client's load kept per server (so ``client_workers: auto`` learns from
the last phase). Starting the server is ``serve.startup``'s (``start_server``, ``attach`` and ``RunningServer`` are
re-exported here for the callers that measure what they start). The plugin wires these to pytest; nothing here knows
about pytest.
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from pytest_specdec.core import clock
from pytest_specdec.core.auth import tls_context
from pytest_specdec.core.errors import ClientOverloadError
from pytest_specdec.core.records import RequestRecord, RunMetrics, median_metrics
from pytest_specdec.engines.base import SpecCounters
from pytest_specdec.measure import client, metrics, trace_split, workload
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.serve.startup import (
    ProgressCallback,
    RunningServer,
    attach,
    read_back,
    running_server,
    start_server,
)

__all__ = [
    "Measurement",
    "ProgressCallback",
    "RunResult",
    "TracePhase",
    "RunningServer",
    "attach",
    "client_load_of",
    "measure",
    "measure_repeats",
    "phase_recorder",
    "phase_watcher",
    "pooled_metrics",
    "profile_prompts",
    "read_back",
    "run_result",
    "running_server",
    "start_server",
    "trace_phase",
]

#: The measuring client's load in the last phase on each server (``client.ClientLoad``), for ``client_workers:
#: auto``; kept here, beside the measuring, and forgotten with the server object.
_client_loads: weakref.WeakKeyDictionary[RunningServer, client.ClientLoad] = weakref.WeakKeyDictionary()


def client_load_of(server: RunningServer) -> client.ClientLoad | None:
    """The client's load in the last measured (or warmup) phase on ``server``; None before its first phase."""
    return _client_loads.get(server)


#: Server process (``RunningServer.process``, new on a restart) -> (measured phases it completed, their requests that
#: succeeded): what a death's message says ran before the phase it died in (:func:`_progress`).
_served: weakref.WeakKeyDictionary[object, tuple[int, int]] = weakref.WeakKeyDictionary()


def _keep_load(server: RunningServer, load: client.ClientLoad | None) -> None:
    if load is not None:
        _client_loads[server] = load


@dataclass(frozen=True)
class Measurement:
    """One measured phase of a profile's workload (repeats are separate measurements)."""

    profile: str
    metrics: RunMetrics
    records: tuple[RequestRecord, ...]
    prompt_hash: str
    counters_before: SpecCounters | None
    counters_after: SpecCounters | None
    cross_check: str | None
    wall_time: float = field(default_factory=time.time)
    #: ``metrics.client_check``'s line when the measuring client was overloaded, else None.
    client_check: str | None = None
    #: Seconds the phase held the server, warmup included (``clock.now()``): what a sequential verdict spends.
    server_s: float = 0.0
    #: Each record's prompt category (``RequestSpec.category``), aligned with ``records``; empty when not kept.
    categories: tuple[str | None, ...] = ()


#: Set around a measurement by whoever displays progress (the plugin): called as ``watch(profile, total_requests)``
#: before each measured phase (not warmup), it returns the callback the client calls with each finished request
#: (``client.run_requests(on_request_done=...)``), or None. A context variable so that every caller of
#: :func:`measure` (repeats, paired arms) reports without passing it through.
phase_watcher: contextvars.ContextVar[Callable[[str, int], Callable[[RequestRecord], None] | None] | None] = (
    contextvars.ContextVar("specdec_phase_watcher", default=None)
)

#: What the phases measured now are for, for the progress line (``measure.store.MeasurementStore`` sets it around a
#: measurement): ``"eagle3 vs baseline: first 3 pairs"``, ``"eagle3 vs baseline, min_speedup: pair 9 of at most 24"``;
#: empty when not said.
phase_purpose: contextvars.ContextVar[str] = contextvars.ContextVar("specdec_phase_purpose", default="")


#: Set around a measurement by whoever exports the requests (``--specdec-requests-out``): called with every measured
#: phase (repeats, sequential repeats, paired arms; not warmups or a traced phase) as it ends.
phase_recorder: contextvars.ContextVar[Callable[[Measurement], None] | None] = contextvars.ContextVar(
    "specdec_phase_recorder", default=None
)


def profile_prompts(profile: Profile, *, base_dir: Path | None = None) -> list[workload.Prompt]:
    """The profile's prompt set: ``workload.prompts`` read against ``base_dir`` (default: the profile file's
    directory), or drawn for ``prompts: random`` (``workload.workload_prompts``). Load it once and pass it to
    :func:`measure` and :func:`trace_phase`.

    :raises ProfileError: the prompt file is missing or malformed (``workload.load_prompts``), or the random
        prompts' vocabulary size cannot be found.
    """
    return workload.workload_prompts(
        profile.workload, base_dir or Path(profile.source or ".").parent, profile.model_path
    )


def measure(
    server: RunningServer, *, base_dir: Path | None = None, prompts: Sequence[workload.Prompt] | None = None
) -> Measurement:
    """Run the profile's workload once: warmup (not measured), counters, measured phase, counters, metrics.

    :param prompts: the profile's prompt set (:func:`profile_prompts`; loaded here when None).
    :raises ServerError: the server stalled, died, or failed more requests than the workload allows.
    """
    started = clock.now()
    profile = server.profile
    wl = profile.workload
    if prompts is None:
        prompts = profile_prompts(profile, base_dir=base_dir)
    arrivals = workload.workload_arrivals(wl, profile.model_path)
    warmup, measured = workload.build_requests(wl, prompts, arrivals)
    options = _phase_options(server)
    if warmup:
        warm = client.run_phase(server.base_url, warmup, options, workers=_client_workers(server))
        _keep_load(server, warm.load)
    # Warmup request i and measured request i share a prompt, and repeats resend the list: without a reset, TTFT
    # would be measured on prefix-cache hits. The reset also zeroes SGLang's scheduler totals (the cross-check).
    cache_reset = _reset_cache(server)
    before = _counters(server)
    watch = phase_watcher.get()
    on_done = watch(profile.name, len(measured)) if watch is not None else None
    phase = client.run_phase(
        server.base_url, measured, options, workers=_client_workers(server), on_request_done=on_done
    )
    after = _counters(server)
    _keep_load(server, phase.load)
    _check_alive(server, phase.records)
    if server.process is not None:
        phases, succeeded = _served.get(server.process, (0, 0))
        _served[server.process] = (phases + 1, succeeded + sum(1 for r in phase.records if r.ok))
    spec = profile.speculative
    num_steps = None
    scheduler_length = None
    if spec is not None:
        eff = server.effective
        num_steps = (eff.num_steps if eff else None) or spec.num_steps
        if cache_reset.startswith("reset") and _scheduler_covers(server, phase.records):
            scheduler_length = _scheduler_accept_length(server)
    run = metrics.phase_metrics(
        list(phase.records),
        phase.end_s - phase.start_s,
        num_steps=num_steps,
        speculative=spec is not None,
        counters_before=before,
        counters_after=after,
        max_error_rate=wl.max_error_rate,
        scheduler_accept_length=scheduler_length,
        cache_reset=cache_reset,
        categories=[spec.category for spec in measured],
        slo_ms=wl.slo.as_ms() if wl.slo is not None else None,
    )
    if phase.load is not None:
        run = dataclasses.replace(
            run,
            client_lag_ms_p99=phase.load.lag_ms_p99,
            client_cpu_cores=phase.load.cpu_cores,
            client_workers=phase.load.workers,
        )
    measurement = Measurement(
        profile=profile.name,
        metrics=run,
        records=tuple(phase.records),
        prompt_hash=workload.prompt_set_hash(prompts),
        counters_before=before,
        counters_after=after,
        cross_check=metrics.cross_check(run),
        client_check=client_verdict(profile, run),
        server_s=clock.now() - started,
        categories=tuple(spec.category for spec in measured),
    )
    record = phase_recorder.get()
    if record is not None:
        record(measurement)
    return measurement


#: Seconds a server whose last measured request failed is given to be seen exited before ``check_alive``: a dying
#: process closes its sockets before the kernel marks it exited, so its requests fail a moment before ``alive()``
#: turns False, and the error named the failed requests ("2 of 4 requests failed ... Server disconnected") instead
#: of the death and its cause (seen with the fake SGLang's mid-run crash).
DEATH_GRACE_S = 2.0


def _check_alive(server: RunningServer, records: Sequence[RequestRecord]) -> None:
    """``check_alive`` on a server we launched, after a measured phase; see :data:`DEATH_GRACE_S`. The wait is only
    for a phase whose last request (in request order) failed: after a death, every later request fails."""
    process = server.process
    if process is None:
        return
    if records and not records[-1].ok:
        deadline = clock.now() + DEATH_GRACE_S
        while process.alive() and clock.now() < deadline:
            time.sleep(0.02)
    process.check_alive(_progress(records, *_served.get(process, (0, 0))))


def _progress(records: Sequence[RequestRecord], phases_done: int = 0, succeeded_before: int = 0) -> str:
    """How far the server got, for the error of one that died in a measured phase (its requests after the death
    fail at once, so the successes count the requests it served). The phase's own count alone read "before any of 8
    measured requests succeeded" after a whole repeat had run (a fresh-user trial), so once a phase of this server
    completed, the message counts the run's requests and says which repeat it died in.

    :param phases_done: measured phases (repeats, paired arms) this server process completed before this one.
    :param succeeded_before: their requests that succeeded.

    Example: 8 requests a repeat, dead after 20: ``"while running, after 20 measured requests to this server
    succeeded (2 repeats done), during repeat 3 (4 of its 8 succeeded)"``.
    """
    done = sum(1 for r in records if r.ok)
    if phases_done:
        repeats = f"{phases_done} repeat{'s' if phases_done != 1 else ''} done"
        return (f"while running, after {succeeded_before + done} measured requests to this server succeeded "
                f"({repeats}), during repeat {phases_done + 1} ({done} of its {len(records)} succeeded)")  # fmt: skip
    if done == 0:
        return f"while running, before any of {len(records)} measured requests succeeded"
    return f"while running, after {done} of {len(records)} measured requests succeeded"


def _phase_options(server: RunningServer) -> client.PhaseOptions:
    """How ``server``'s phases are sent: the profile's ``workload`` (API, concurrency, timeouts) and the server's
    API key; the model of OpenAI APIs is asked of the server (``GET /v1/models``)."""
    wl = server.profile.workload
    return client.PhaseOptions(
        api=wl.api,
        concurrency=wl.concurrency,
        api_key=server.api_key,
        stall_timeout_s=wl.stall_timeout_s,
        request_timeout_s=wl.request_timeout_s,
    )


def _client_workers(server: RunningServer) -> int:
    """``workload.client_workers``, or for "auto" ``client.auto_workers`` from the concurrency and the client's
    load in this server's previous phase."""
    wl = server.profile.workload
    if wl.client_workers != "auto":
        return wl.client_workers
    return client.auto_workers(wl.concurrency, client_load_of(server))


def client_verdict(profile: Profile, run: RunMetrics) -> str | None:
    """``metrics.client_check`` of a phase, applied as the profile says (``workload.client_overload``).

    :returns: the warning line ("client overloaded: ..." or "machine busy: ..."), or None when the client kept up.
    :raises ClientOverloadError: the client itself was overloaded (``metrics.client_overloaded``) and the profile
        sets ``client_overload: fail``. A busy machine (the client mostly idle, the CPU taken by the server or other
        processes) stays a warning: more client workers would not help, and the key is about the client.
    """
    message = metrics.client_check(run)
    if message is not None and profile.workload.client_overload == "fail" and metrics.client_overloaded(run):
        raise ClientOverloadError(
            f"profile {profile.name}: {message} (workload.client_overload: fail)", profile=profile.name
        )
    return message


def _reset_cache(server: RunningServer) -> str:
    """``Engine.reset_prefix_cache`` on a fresh client; its note goes into the results (``RunMetrics.cache_reset``)."""
    with httpx.Client(base_url=server.base_url, timeout=30.0, verify=tls_context()) as http:
        return server.engine.reset_prefix_cache(http, server.profile)


#: The scheduler check runs only when its figure misses at most 1/N of the phase's decode iterations.
SCHEDULER_MIN_WINDOWS = 20
#: How long :func:`trace_phase` waits for the engine to write its trace after ``/stop_profile`` (s).
TRACE_WRITE_WAIT_S = 60.0


def _scheduler_covers(server: RunningServer, records: tuple[RequestRecord, ...] | list[RequestRecord]) -> bool:
    """True when the scheduler's windowed figure covers nearly all of the phase: SGLang folds its totals every
    ``decode_log_interval`` (``/server_info``; default 40) decode iterations, so the phase needs at least
    ``SCHEDULER_MIN_WINDOWS`` windows (estimated iterations = Σspec_verify_ct / concurrency)."""
    raw = server.effective.raw if server.effective is not None else {}
    value = raw.get("decode_log_interval")
    interval = value if isinstance(value, int) else 40
    steps = sum(r.spec_verify_ct or 0 for r in records if r.ok)
    return steps / max(server.profile.workload.concurrency, 1) >= SCHEDULER_MIN_WINDOWS * max(interval, 1)


def _scheduler_accept_length(server: RunningServer) -> float | None:
    with httpx.Client(base_url=server.base_url, timeout=30.0, verify=tls_context()) as http:
        return server.engine.scheduler_accept_length(http, server.profile)


def _counters(server: RunningServer) -> SpecCounters | None:
    if not server.profile.enable_metrics:
        return None
    try:
        text = client.fetch_text(server.base_url, "/metrics", server.api_key, timeout=10.0)
    except Exception:  # noqa: BLE001 - counters are a cross-check; their absence is reported, not fatal
        return None
    return server.engine.counters(text)


@dataclass(frozen=True)
class RunResult:
    """``repeats`` measured phases of one profile's workload on one server.

    ``metrics`` holds, per field, ``records.median_metrics`` over the repeats (counts: the lower median, an integer
    some repeat had; None when no repeat reported the field), so a single slow phase does not decide a verdict.
    """

    profile: str
    measurements: tuple[Measurement, ...]
    metrics: RunMetrics
    prompt_hash: str
    #: Warnings read from the server log (e.g. decode without CUDA graphs on SGLang).
    log_warnings: tuple[str, ...] = ()
    #: With ``trace:``, what the traced phase left: ``"trace: <dir> (<n> files)"`` or ``"not traced: <why>"``.
    trace: str | None = None
    #: With ``trace:`` on a speculative server, where the cycle's time went by the engine's own spans.
    cycle_split: trace_split.CycleSplit | None = None

    @property
    def cross_checks(self) -> tuple[str, ...]:
        return tuple(m.cross_check for m in self.measurements if m.cross_check)

    @property
    def client_checks(self) -> tuple[str, ...]:
        """The client-overload lines of the repeats (``metrics.client_check``)."""
        return tuple(m.client_check for m in self.measurements if m.client_check)


def measure_repeats(
    server: RunningServer,
    repeats: int,
    *,
    base_dir: Path | None = None,
    prompts: Sequence[workload.Prompt] | None = None,
) -> RunResult:
    """``measure`` ``repeats`` times on the same server (warmup before each phase) and take medians. The prompt set
    is loaded once (or given); a ``trace:`` phase is not run here (:func:`trace_phase`)."""
    if prompts is None:
        prompts = profile_prompts(server.profile, base_dir=base_dir)
    return run_result(server, [measure(server, prompts=prompts) for _ in range(repeats)])


def run_result(server: RunningServer, measured: Sequence[Measurement]) -> RunResult:
    """A ``RunResult`` of phases already measured on ``server`` (per-field medians, the server log's warnings).
    Only summarises: no request is sent (``trace`` stays None; the caller sets it from :func:`trace_phase`)."""
    measurements = tuple(measured)
    warnings: list[str] = []
    if server.log_path is not None and server.log_path.is_file():
        warnings = server.engine.log_warnings(server.profile, server.log_path.read_text(errors="replace"))
    for note in dict.fromkeys(m.metrics.cache_reset or "" for m in measurements):
        if note.startswith("not reset"):
            warnings.append(f"prefix cache {note}; TTFT may be measured on cache hits (warmup and repeats resend the "
                            "same prompts)")  # fmt: skip
    return RunResult(
        profile=server.profile.name,
        measurements=measurements,
        metrics=pooled_metrics(measurements),
        prompt_hash=measurements[0].prompt_hash,
        log_warnings=tuple(warnings),
    )


def pooled_metrics(measurements: Sequence[Measurement]) -> RunMetrics:
    """``records.median_metrics`` of the repeats, with ``tails`` taken over every repeat's requests pooled
    (``metrics.pooled_tails``): a tail verdict weighs all the requests of the run, not the median repeat's.

    :raises ValueError: no measurement.
    """
    merged = median_metrics([m.metrics for m in measurements])
    if not any(m.records for m in measurements):
        return merged
    return dataclasses.replace(merged, tails=metrics.pooled_tails([(m.records, m.metrics.tails) for m in measurements]))


def trace_dir(profile: Profile) -> Path:
    """Where ``profile.trace`` puts its files: ``trace.dir`` against the profile file's directory, else
    ``.specdec/traces/<profile>`` under the working directory; absolute (the server's cwd is not ours)."""
    assert profile.trace is not None
    if profile.trace.dir is None:
        return (Path(".specdec") / "traces" / profile.name).resolve()
    return (Path(profile.source or ".").parent / profile.trace.dir).resolve()


@dataclass(frozen=True, slots=True)
class TracePhase:
    """What :func:`trace_phase` left: ``line`` (``"trace: <dir> (<n> new files)"`` or ``"not traced: <why>"``) and,
    on a speculative server, the cycle's split read from the new files (``trace_split.cycle_split``)."""

    line: str
    split: trace_split.CycleSplit | None = None


def trace_phase(
    server: RunningServer, *, base_dir: Path | None = None, prompts: Sequence[workload.Prompt] | None = None
) -> TracePhase:
    """One unmeasured phase of ``trace.requests`` requests under the engine's profiler (``Engine.start_trace`` /
    ``stop_trace``), after the measured repeats (the plugin runs it for a profile with ``trace:``, and keeps the
    line in ``RunResult.trace``, the split in ``RunResult.cycle_split``); a failure to trace is recorded, never
    fatal.

    :param prompts: the prompt set the repeats used (:func:`profile_prompts`; loaded here when None).
    :raises ServerError: the server died or stalled during the traced phase (as in :func:`measure`).
    """
    profile = server.profile
    assert profile.trace is not None
    out_dir = trace_dir(profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.rglob("*"))
    wl = profile.workload
    if prompts is None:
        prompts = profile_prompts(profile, base_dir=base_dir)
    _, measured = workload.build_requests(wl, prompts)
    requests = measured[: profile.trace.requests]
    with httpx.Client(base_url=server.base_url, timeout=60.0, verify=tls_context()) as http:
        why = server.engine.start_trace(http, profile, out_dir)
        if why is not None:
            return TracePhase(f"not traced: {why}")
        try:
            client.run_phase(server.base_url, requests, _phase_options(server))
        finally:
            why = server.engine.stop_trace(http, profile)
    if why is not None:
        return TracePhase(f"not traced: {why}")
    # SGLang writes its trace after /stop_profile returns ("This will take some time"): wait for it briefly.
    deadline = time.monotonic() + TRACE_WRITE_WAIT_S
    new: list[Path] = []
    while time.monotonic() < deadline:
        new = [p for p in out_dir.rglob("*") if p.is_file() and p not in before]
        if new:
            break
        time.sleep(0.5)
    if not new:
        return TracePhase(f"not traced: no file appeared in {out_dir} in {TRACE_WRITE_WAIT_S:.0f} s")
    # A file that just appeared may still be being written (a GPU trace is exported, then gzipped): read it once its
    # size held for a second.
    sizes: dict[Path, int] = {}
    while time.monotonic() < deadline:
        now = {p: p.stat().st_size for p in new if p.exists()}
        if now == sizes:
            break
        sizes = now
        time.sleep(1.0)
    files = f"{len(new)} new file{'s' if len(new) != 1 else ''}"
    return TracePhase(f"trace: {out_dir} ({files})", trace_split.cycle_split(new))
