"""A server spread over several nodes: one launch per rank through the profile's launcher template, readiness of the
whole group, logs from every rank, teardown of every rank.

Built on ``server.ServerProcess`` (public API only): each rank is the launcher process (``ssh``, ``srun``, or the
server itself for ``launcher: "{cmd}"``) started in its own session with its own log file, whose output is the rank's
server output. Typical use (``startup.start_server`` for a profile with ``nodes:``)::

    group = NodeGroup.start(profile, engine, port=30000, log_dir=Path(".specdec/logs"), draft_path=None)
    group.wait_ready(lambda: engine.probe_ready(client, profile), timeout_s=900)  # stops every rank on failure
    try:
        ...                  # measured phase; group.check_alive() after it
    finally:
        group.stop()         # every rank, even when one died; then the profile's nodes.stop template per rank

Ready means: every rank other than 0 logged the engine's "joined" line (SGLang: its dummy health server started,
after torch.distributed init and weight loading) *and* rank 0 answers the engine's readiness probe (a real generate).
A harness that trusts rank 0 alone can start measuring while other ranks still load.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import psutil

from pytest_specdec.core.errors import ServerError, ServerStartError
from pytest_specdec.core.redaction import redact
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.engines.common import BASE_ENV_KEYS
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.serve import logfiles
from pytest_specdec.serve.diagnosis import ExitDiagnosis, diagnose_exit
from pytest_specdec.serve.ports import find_free_port
from pytest_specdec.serve.process_exit import describe_exit, read_tail, tail_lines
from pytest_specdec.serve.server import ProgressCallback, ServerProcess, StopReport

__all__ = ["FOLLOWER_WINDOW_S", "NodeEngine", "NodeGroup", "Rank", "blame_order", "death_times", "render_launcher"]

_POLL_S = 0.1
_PROGRESS_S = 0.5
#: Seconds for each run of the profile's ``nodes.stop`` template.
STOP_COMMAND_TIMEOUT_S = 30.0

#: Ranks reaped within this many seconds of the first are ordered by their cause before their time: under load the
#: supervisors reap out of order (seen: rank 0, exiting on its lost peer, reaped before the peer that died first).
FOLLOWER_WINDOW_S = 2.0
#: A collective that failed: what a rank logs when a peer went away (the lost peer is the cause, not this rank).
_FOLLOWER_CAUSE = "CUDA/NCCL error"


def blame_order(dead: Sequence[Rank], times: Mapping[int, float | None], causes: Mapping[int, str]) -> list[Rank]:
    """``dead`` ranks, the one to blame first: by the time each was reaped (unknown times last), except that within
    :data:`FOLLOWER_WINDOW_S` of the first a rank whose cause is a failed collective (``CUDA/NCCL error``: it exits
    because a peer is gone) follows one with another cause; ties: non-leaders before rank 0, then by rank.

    :param times: rank -> ``ServerProcess.exited_at`` (monotonic s) or None; :param causes: rank -> diagnosed cause.
    """
    known = [at for at in (times[r.rank] for r in dead) if at is not None]
    first = min(known, default=0.0)

    def key(r: Rank) -> tuple[int, bool, float, bool, int]:
        at = times[r.rank]
        if at is None:
            return (2, False, 0.0, r.rank == 0, r.rank)
        if at - first <= FOLLOWER_WINDOW_S:
            return (0, causes.get(r.rank) == _FOLLOWER_CAUSE, at, r.rank == 0, r.rank)
        return (1, False, at, r.rank == 0, r.rank)

    return sorted(dead, key=key)


def death_times(dead: Sequence[Rank], seen_at: float) -> dict[int, float]:
    """rank -> when it died, for :func:`blame_order`: its supervisor's reap time (``ServerProcess.exited_at``), or,
    when the supervisor had not said (starved on a loaded runner, then stopped), ``seen_at``, when the group saw it
    dead, an upper bound. Unknown, the rank that died first sorted last: a flake hunt at load 4.6 blamed the rank
    that had exited on the broken collective ("lost node rank 1") for the fault of the rank it lost."""
    return {rank.rank: at if (at := rank.process.exited_at()) is not None else seen_at for rank in dead}


@runtime_checkable
class NodeEngine(Protocol):
    """What a group needs from an engine (``engines.sglang.SglangEngine`` and the reference engine; vLLM has no
    multi-node launch here). Runtime-checkable: ``runner`` tests an ``engines.base.Engine`` against it."""

    def node_launch_spec(
        self, profile: Profile, *, rank: int, host: str, port: int, dist_init_addr: str, draft_path: Path | None
    ) -> LaunchSpec: ...

    def node_joined(self, log_text: str) -> bool: ...

    def node_at_rendezvous(self, log_text: str) -> bool: ...


def _is_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def render_launcher(template: str, spec: LaunchSpec, *, host: str, rank: int, nnodes: int) -> tuple[str, ...]:
    """The launcher argv of one rank.

    The server command is ``env K=V ... <argv>`` with the variables of ``spec.env`` that are not inherited from the
    caller's shell (``BASE_ENV_KEYS``): the profile's ``env:`` and what the engine adds, which a remote shell would
    not otherwise have. The template is split like a shell line; a word ``{cmd}`` becomes the command's words,
    ``{shell_cmd}`` the command as one shell-quoted string; ``{host}``, ``{rank}``, ``{nnodes}`` are substituted.

    Example: ``ssh -tt {host} {shell_cmd}`` -> ``("ssh", "-tt", "node-b", "env NCCL_PROTO=LL sglang serve ...")``.
    """
    extra = [f"{k}={v}" for k, v in spec.env.items() if k not in BASE_ENV_KEYS]
    cmd = [*(["env", *extra] if extra else []), *spec.argv]
    fields = {"host": host, "rank": str(rank), "nnodes": str(nnodes), "shell_cmd": shlex.join(cmd)}
    out: list[str] = []
    for word in shlex.split(template):
        if word == "{cmd}":
            out.extend(cmd)
        else:
            out.append(word.format(**fields))
    return tuple(out)


@dataclass
class Rank:
    """One node of the group: its rank, host, the server command (``spec``), the launcher process and its log."""

    rank: int
    host: str
    spec: LaunchSpec
    process: ServerProcess
    joined: bool = False
    at_rendezvous: bool = False
    _offset: int = 0
    _text: str = ""

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    @property
    def label(self) -> str:
        """``node rank 2 on 127.0.0.3``."""
        return f"node rank {self.rank} on {self.host}"

    def read_new(self) -> str:
        """The text appended to the log since the last call (plus the previous 8 KB, so a line cut between two reads
        is seen whole)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(1 << 20)
        except OSError:
            return self._text
        self._offset += len(data)
        self._text = (self._text + data.decode("utf-8", "replace"))[-8192:]
        return self._text


class NodeGroup:
    """The ranks of one multi-node server. A ``server.ServerHandle``, as ``ServerProcess`` is (``pid``, ``name``,
    ``spec``, ``base_url``, ``log_path``, ``alive``, ``check_alive``, ``processes``, ``stop``, ``stop_report``,
    ``disown``); ``pid``/``spec``/``log_path`` are rank 0's."""

    def __init__(self, name: str, ranks: Sequence[Rank], *, stop_template: str | None) -> None:
        self.name = name
        self.ranks = list(ranks)
        self._stop_template = stop_template
        self._started = time.monotonic()
        self._stop_lock = threading.Lock()
        self._stop_report: StopReport | None = None
        leader = self.ranks[0]
        self.pid = leader.process.pid
        self.spec = leader.spec
        self.base_url = leader.spec.base_url
        self.log_path = leader.log_path

    # -- launch -----------------------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        profile: Profile,
        engine: NodeEngine,
        *,
        port: int,
        log_dir: Path,
        draft_path: Path | None,
        on_launch: Callable[[NodeGroup], None] | None = None,
        record_dir: Path | None = None,
    ) -> NodeGroup:
        """Launch every rank of ``profile.nodes`` (rank 0 first) through its launcher template.

        Logs: rank 0 writes ``<log_dir>/<profile>.<stamp>.log`` (as single-node runs do), rank R
        ``<log_dir>/<profile>.rank<R>.<stamp>.log``, one stamp per launch, with ``<profile>.log`` and
        ``<profile>.rank<R>.log`` linking the newest (``logfiles.new_log_path``). Port checks
        (``ServerProcess.start``) apply to ranks on a loopback host (the HTTP port, and rank 0's dist-init port); a
        remote host's ports are the remote's business. Each rank's launcher runs under its own supervisor and is
        recorded in ``record_dir`` (``ServerProcess.start``), so a killed pytest leaves no rank behind on this
        machine. ``on_launch(group)`` is called once every rank is launched, before any wait (``sharing`` records
        the group then); if it raises, every rank is stopped.

        :raises ServerStartError: a rank could not be launched (the ranks already launched are stopped).
        :raises ProfileError: the engine cannot build the command.
        """
        nodes = profile.nodes
        assert nodes is not None
        leader = nodes.hosts[0]
        dist_port = nodes.dist_init_port or find_free_port("127.0.0.1" if not _is_local(leader) else leader)
        dist_init_addr = f"[{leader}]:{dist_port}" if ":" in leader else f"{leader}:{dist_port}"
        ranks: list[Rank] = []
        stamp = logfiles.launch_stamp()
        try:
            for rank, host in enumerate(nodes.hosts):
                spec = engine.node_launch_spec(
                    profile, rank=rank, host=host, port=port, dist_init_addr=dist_init_addr, draft_path=draft_path
                )
                argv = render_launcher(nodes.launcher, spec, host=host, rank=rank, nnodes=len(nodes.hosts))
                local = _is_local(host)
                launch = LaunchSpec(
                    argv=argv,
                    env=spec.env,
                    host=host if local else "127.0.0.1",
                    port=port if local else 0,  # port 0: always bindable, so no check for a remote host
                    derived_ports=(dist_port,) if rank == 0 and local else (),
                )
                suffix = "" if rank == 0 else f".rank{rank}"
                proc = ServerProcess.start(
                    launch, name=f"{profile.name} node rank {rank} on {host}",
                    log_path=logfiles.new_log_path(log_dir, f"{profile.name}{suffix}", stamp=stamp),
                    record_dir=record_dir,
                )  # fmt: skip
                ranks.append(Rank(rank, host, spec, proc, joined=rank == 0))
        except BaseException:
            for done in ranks:
                done.process.stop()
            raise
        group = cls(profile.name, ranks, stop_template=nodes.stop)
        if on_launch is not None:
            try:
                on_launch(group)
            except BaseException:
                group.stop()
                raise
        return group

    # -- readiness --------------------------------------------------------------------------------------------

    def wait_ready(
        self,
        probe: Callable[[], bool],
        *,
        engine: NodeEngine,
        timeout_s: float,
        on_progress: ProgressCallback | None = None,
    ) -> float:
        """Wait until every rank other than 0 has logged that it joined (``engine.node_joined``) and ``probe()``
        (rank 0's readiness: health and a real generate) returns True; stop every rank and raise otherwise.

        ``probe`` runs in a helper thread, one call at a time, every 0.1 s; an exception means "not yet". Every
        rank's process is checked every 0.1 s, so a rank that dies is reported within about that.

        :returns: seconds from launch to ready.
        :raises ServerStartError: a rank's launcher process exited (names its rank, host, exit status, diagnosed
            cause with the exception and file:line when its log has a traceback, and log, then the log tail); the
            budget ran out with ranks that never joined (names each with its host and log; cause "timeout"), or with
            rank 0 not answering (cause "timeout").
        """
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"specdec-probe-{self.name}")
        future: Future[bool] | None = None
        leader_ok = False
        last_report = -1.0
        try:
            while True:
                dead = [r for r in self.ranks if not r.process.alive()]
                if dead:
                    raise self._died(dead, when="before the group was ready", error=ServerStartError)
                for rank in self.ranks[1:]:
                    if not rank.joined:
                        text = rank.read_new()
                        rank.at_rendezvous = rank.at_rendezvous or engine.node_at_rendezvous(text)
                        rank.joined = engine.node_joined(text)
                elapsed = time.monotonic() - self._started
                waiting = [r for r in self.ranks[1:] if not r.joined]
                if leader_ok and not waiting:
                    return elapsed
                if elapsed > timeout_s:
                    raise self._timeout(waiting, timeout_s)
                now = time.monotonic()
                if on_progress is not None and now - last_report >= _PROGRESS_S:
                    last_report = now
                    joined_n = len(self.ranks) - 1 - len(waiting)
                    last = redact(tail_lines(self.log_path, 1), self.ranks[0].process.secrets)[:200]
                    on_progress(elapsed, timeout_s, f"{joined_n}/{len(self.ranks) - 1} node ranks joined; rank 0: "
                                f"{last}")  # fmt: skip
                if not leader_ok:
                    if future is None:
                        future = executor.submit(_safe, probe)
                    if future.done():
                        leader_ok = future.result()
                        future = None
                time.sleep(_POLL_S)
        except BaseException:
            self.stop()
            raise
        finally:
            executor.shutdown(wait=False, cancel_futures=True)

    def _died(self, dead: list[Rank], *, when: str, error: type[Exception]) -> Exception:
        """Stop every rank; the error blames the rank that died first and lists the others as followers.

        "First" is the time each rank's supervisor reaped it (``ServerProcess.exited_at``, one monotonic clock for
        every local process): a lost rank makes its peers exit on the broken collective a moment later (rank 0
        logs "lost node rank 2; exiting with status 1", then rank 1 fails its NCCL call), so rank order would send
        the user to a follower. Ranks whose time is unknown come after, non-leaders first (a lost rank usually takes
        rank 0 down with it). Each rank is named with its exit status, diagnosed cause and detail, or where its log
        names no cause its last lines (``diagnosis.diagnose_exit``, ``ExitDiagnosis.explain``, as
        ``ServerProcess.check_alive`` for one server); the first one's log tail is shown (secrets redacted).
        """
        seen_at = time.monotonic()  # every rank of ``dead`` was seen dead by now
        pids = {rank.rank: rank.process.known_pids() for rank in dead}
        self.stop()
        times = death_times(dead, seen_at)
        codes = {r.rank: r.process.stop_report.returncode if r.process.stop_report is not None else None for r in dead}
        diagnoses = {r.rank: diagnose_exit(read_tail(r.log_path), codes[r.rank], pids=pids[r.rank]) for r in dead}
        dead = blame_order(dead, times, {rank: d.cause for rank, d in diagnoses.items()})
        parts = []
        found: list[ExitDiagnosis] = []
        first_time = times[dead[0].rank]
        for i, rank in enumerate(dead):
            code = codes[rank.rank]
            diagnosis = diagnoses[rank.rank]
            explained = redact(diagnosis.explain(code), rank.process.secrets)
            found.append(diagnosis)
            later, died_at = "", times[rank.rank]
            if i and first_time is not None and died_at is not None:
                gap = died_at - first_time
                later = f" {gap:.2f} s later" if gap >= 0.005 else " at about the same time"
            parts.append(f"{rank.label} {describe_exit(code)}{later} {when} {explained}; log: {rank.log_path}")
        first = dead[0]
        tail = _redacted_tail(first)
        blamed = parts[0]
        if len(parts) > 1:
            blamed += "; then, as followers of the first to die: " + "; ".join(parts[1:])
        message = f"server '{self.name}': " + blamed + f"\n{tail}"
        if error is ServerStartError:
            return ServerStartError(message, profile=self.name, log_path=first.log_path, cause=found[0].cause,
                                    log_tail=tail)  # fmt: skip
        return ServerError(message, profile=self.name, log_path=first.log_path)

    def _timeout(self, waiting: list[Rank], timeout_s: float) -> ServerStartError:
        """Ranks that never reached the rendezvous come first: the rendezvous is collective, so one missing rank
        keeps every other rank waiting, and the one that never got there is the one to look at."""
        self.stop()
        if waiting:
            waiting = sorted(waiting, key=lambda r: (r.at_rendezvous, r.rank))
            parts = [
                f"{r.label} waits at the rendezvous (log: {r.log_path})" if r.at_rendezvous else
                f"{r.label} never reached the rendezvous (no 'Init torch distributed begin' in its log; log: "
                f"{r.log_path})"
                for r in waiting
            ]  # fmt: skip
            first = waiting[0]
            hint = (
                "a rank that never reaches it holds up all the others: check its host, launcher and environment"
                if not first.at_rendezvous
                else "check that --dist-init-addr (rank 0's host and nodes.dist_init_port) is reachable from every node"
            )
            message = (
                f"server '{self.name}': after {timeout_s:g} s (startup_timeout_s) not every node rank joined: " +
                "; ".join(parts) + f"; {hint}\n" + _redacted_tail(first)
            )  # fmt: skip
            return ServerStartError(message, profile=self.name, log_path=first.log_path, cause="timeout",
                                    log_tail=_redacted_tail(first))  # fmt: skip
        leader = self.ranks[0]
        message = (
            f"server '{self.name}': every node rank joined, but {leader.label} did not answer a generate within "
            f"{timeout_s:g} s (startup_timeout_s); log: {leader.log_path}\n{_redacted_tail(leader)}"
        )
        return ServerStartError(message, profile=self.name, log_path=leader.log_path, cause="timeout",
                                log_tail=_redacted_tail(leader))  # fmt: skip

    # -- liveness ---------------------------------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether every rank's launcher process is still running."""
        return all(r.process.alive() for r in self.ranks)

    def check_alive(self, when: str = "while running") -> None:
        """Raise if any rank died during the run (then every rank is stopped); ``when`` as in
        ``ServerProcess.check_alive``.

        :raises ServerError: ``server 'p': node rank 2 on 127.0.0.3 exited with code 1 while running (cause: ...):
            DETAIL; log: ...`` for each dead rank (``ExitDiagnosis.explain``: DETAIL is e.g. the exception and its
            file:line; with no cause found, its log's last lines), then the first one's log tail.
        """
        dead = [r for r in self.ranks if not r.process.alive()]
        if dead:
            raise self._died(dead, when=when, error=ServerError)

    def processes(self) -> list[psutil.Process]:
        """The live processes of every rank (launchers and what they started on this machine)."""
        return [proc for r in self.ranks for proc in r.process.processes()]

    # -- teardown ---------------------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 30.0) -> StopReport:
        """Stop every rank: rank 0, then the others all at once (one thread per rank, so one slow rank does not
        delay the others' SIGKILL), then run the profile's ``nodes.stop`` template once per rank (output appended to
        that rank's log; bounded by ``STOP_COMMAND_TIMEOUT_S``). Idempotent; never raises for a rank already gone.

        :returns: one report for the group: rank 0's pid and exit status, the union of every rank's pids, the
            slowest rank's duration, ``port_free`` only if every rank's port is free.
        """
        with self._stop_lock:
            if self._stop_report is not None:
                return self._stop_report
            started = time.monotonic()
            # Rank 0 first: stopping another rank first makes rank 0 exit 1 on the lost peer, an exit status that
            # would read like a failure in the report.
            self.ranks[0].process.stop(timeout_s)
            threads = [threading.Thread(target=r.process.stop, args=(timeout_s,), daemon=True) for r in self.ranks[1:]]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if self._stop_template:
                for rank in self.ranks:
                    self._run_stop_command(rank)
            reports = [r.process.stop() for r in self.ranks]
            self._stop_report = StopReport(
                name=self.name,
                pid=self.pid,
                returncode=reports[0].returncode,
                terminated_pids=tuple(sorted({p for rep in reports for p in rep.terminated_pids})),
                killed_pids=tuple(sorted({p for rep in reports for p in rep.killed_pids})),
                survivors=tuple(sorted({p for rep in reports for p in rep.survivors})),
                port_free=all(rep.port_free for rep in reports),
                duration_s=time.monotonic() - started,
                zombies=tuple(sorted({p for rep in reports for p in rep.zombies})),
            )
            return self._stop_report

    def _run_stop_command(self, rank: Rank) -> None:
        import subprocess

        assert self._stop_template is not None
        argv = render_launcher(self._stop_template.replace("{cmd}", "{shell_cmd}"), rank.spec, host=rank.host,
                               rank=rank.rank, nnodes=len(self.ranks))  # fmt: skip
        with contextlib.suppress(OSError), open(rank.log_path, "ab") as log:
            log.write(f"\n[pytest-specdec] nodes.stop: {shlex.join(argv)}\n".encode())
            log.flush()
            try:
                subprocess.run(argv, env=rank.spec.env, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, timeout=STOP_COMMAND_TIMEOUT_S, check=False)  # fmt: skip
            except (OSError, subprocess.SubprocessError) as exc:
                log.write(f"[pytest-specdec] nodes.stop failed: {exc}\n".encode())

    @property
    def stop_report(self) -> StopReport | None:
        """The report of the first ``stop``, or None while running."""
        return self._stop_report

    def disown(self) -> None:
        """Hand every rank over to another process (``sharing``, under xdist): see ``ServerProcess.disown``."""
        for rank in self.ranks:
            rank.process.disown()

    def __repr__(self) -> str:
        return f"<NodeGroup {self.name!r} {len(self.ranks)} ranks {self.base_url}>"


def _safe(probe: Callable[[], Any]) -> bool:
    try:
        return bool(probe())
    except Exception:  # connection refused, 503, read timeout: "not yet"
        return False


def _redacted_tail(rank: Rank) -> str:
    """The last lines of the rank's log, as shown in an error (the launch's secrets redacted)."""
    return redact(tail_lines(rank.log_path), rank.process.secrets)
