"""Why a server died: its log and exit status -> a cause, the exception it raised, and the evidence.

Learned from real SGLang 0.5.17 logs (``tests/data/sglang/0.5.17/``): when a scheduler or JIT build raises, SGLang
prints the traceback ("Scheduler hit an exception: Traceback ..."), its launcher gets SIGQUIT ("It usually means one
child failed") and calls ``kill_process_tree`` on itself, so the main process dies by SIGKILL. A SIGKILL is therefore
no sign of the kernel OOM killer unless there is evidence for it: the exception is named first, and the OOM killer is
blamed only on a ``dmesg`` line for one of the server's pids, or, without dmesg, only as a possibility when the log
holds no error at all.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["ExitDiagnosis", "diagnose_exit", "last_exception", "last_line", "last_lines", "oom_killer_lines"]

# Order matters: the first matching cause wins ("CUDA error: out of memory" is an OOM, not a CUDA error).
_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # The bundled reference server's scripted death (refserver.app.exit_later, a --ref-fault-* knob): it says why.
    # "exits with status": a node rank's --ref-fault-node-exit (refserver.nodes).
    ("reference server fault", re.compile(r"ref fault: --ref-fault-\S+ .*(?:exiting|exits) with status \d+")),
    ("out of memory", re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.IGNORECASE)),
    ("port in use", re.compile(r"Address already in use|\bport\b.{0,60}\bis (?:already )?in use", re.IGNORECASE)),
    ("CUDA/NCCL error", re.compile(r"NCCL error|CUDA error", re.IGNORECASE)),
    # flashinfer / tvm-ffi / torch cpp_extension JIT builds (seen on SGLang 0.5.17 when CUDA_HOME had no nvcc).
    ("kernel build failed", re.compile(r"Ninja build failed|Error building extension|nvcc: not found|nvcc fatal")),
    (
        "missing model path",
        re.compile(
            r"No such file or directory|Repo id must be|does not appear to have a file named config\.json"
            r"|is not a local folder and is not a valid model identifier"
        ),
    ),
    # "unsupported flag": the bundled reference server's argparse wrapper (refserver.args.parse_args).
    ("bad flag", re.compile(r"unrecognized arguments|error: argument|invalid choice|error: unsupported flag")),
)

#: SGLang's scheduler subprocess reporting its own death (``managers/scheduler.py::run_scheduler_process``).
_SCHEDULER_EXCEPTION = re.compile(r"Scheduler hit an exception")
#: SGLang's launcher tearing down its own tree after a child failed (``srt/utils/common.py::kill_process_tree``,
#: after "SIGQUIT received ... It usually means one child failed").
_SELF_KILL = re.compile(r"kill_process_tree called|It usually means one child failed")
#: SGLang's launcher watching its children (``srt/entrypoints/engine.py``, the subprocess watchdog): "Subprocess
#: scheduler_0 (pid=4184) crashed with exit code -9. Triggering SIGQUIT for cleanup..." (a negative code: that signal).
_SUBPROCESS_CRASH = re.compile(r"Subprocess (?P<name>\S+) \(pid=(?P<pid>\d+)\) crashed with exit code (?P<code>-?\d+)")
#: The logger prefix of SGLang and the reference server, ``[2026-12-01 12:25:47]`` or ``[2026-12-01 12:25:47 TP0]``:
#: dropped from a line quoted in a message (the time is in the log, which the message names).
_LOG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
# A traceback's last line: "TypeError: ...", "torch.OutOfMemoryError: ...", "RuntimeError" alone.
_EXC_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|KeyError|StopIteration)"
    r"(?::\s?(?P<msg>.*))?$"
)
#: The longest log line quoted in a message (the tail under it shows the whole line).
_QUOTE_CHARS = 200
#: How many of the log's last meaningful lines a message quotes when no cause was found.
_QUOTE_LINES = 3
#: Lines that say nothing about why a server ended: progress bars (tqdm's "45%|####"), rules and other lines without
#: a letter or digit, the ``warnings.warn(`` echo under a Python warning, and the supervisor's own teardown line.
_NOISE = re.compile(r"\d+%\||^[^A-Za-z0-9]*$|^warnings\.warn\(|^\[pytest-specdec supervisor\]")
#: What a SIGKILL with no error logged means (no dmesg line either).
_KILLED_FROM_OUTSIDE = (
    "something outside killed it (the kernel OOM killer would say so in dmesg, which could not be read or had no "
    "line for this server)"
)
#: The kernel's OOM-killer report (mm/oom_kill.c): "Out of memory: Killed process 1234 (python) ...".
_OOM_KILL = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+)")


@dataclass(frozen=True, slots=True)
class ExitDiagnosis:
    """What a dead server's log says.

    :ivar cause: ``"scheduler exception"``, ``"out of memory"``, ``"port in use"``, ``"CUDA/NCCL error"``,
        ``"missing model path"``, ``"bad flag"``, ``"kernel build failed"``, ``"exception"`` (a traceback of another
        kind), ``"subprocess crashed"`` (SGLang's watchdog saw a child such as ``scheduler_0`` die without a
        traceback, e.g. SIGKILLed from outside), ``"killed by the OOM killer"`` (dmesg says so), ``"reference server
        fault"`` (the bundled reference server ended on a ``--ref-fault-*`` knob, e.g.
        ``--ref-fault-die-after-requests``) or ``"unknown"``.
    :ivar exception: the last traceback's final line, e.g. ``"TypeError: unsupported operand type(s) for +: 'Tensor'
        and 'NoneType'"``; None when the log holds no traceback.
    :ivar location: where it was raised, the innermost frame, shortened to the package path, e.g.
        ``"sglang/srt/models/llama.py:437"``; None without a traceback.
    :ivar self_killed: the engine stopped its own process tree after a child failed (SGLang's ``kill_process_tree``),
        which explains a SIGKILL exit.
    :ivar evidence: a dmesg line naming one of the server's pids, when one was found.
    :ivar last_lines: the log's last meaningful lines (at most 3, oldest first) as a terminal shows them, logger
        prefix dropped (:func:`last_lines`): what a death's message quotes, with or without a cause found; empty for
        a log without one.
    """

    cause: str
    exception: str | None = None
    location: str | None = None
    self_killed: bool = False
    evidence: str | None = None
    last_lines: tuple[str, ...] = ()

    def detail(self, returncode: int | None) -> str:
        """What follows the cause in a message, e.g. ``"TypeError: unsupported operand ... at
        sglang/srt/models/llama.py:437; the server then stopped its own process tree (signal 9)"``; may be empty."""
        parts = []
        if self.exception:
            parts.append(self.exception + (f" at {self.location}" if self.location else ""))
        if returncode is not None and returncode < 0:
            sig = -returncode
            if self.self_killed:
                parts.append(f"the server then stopped its own process tree (signal {sig})")
            elif self.evidence:
                parts.append(f"kernel log: {self.evidence}")
            elif sig == signal.SIGKILL and self.cause == "unknown":
                parts.append("no error in the log: " + _KILLED_FROM_OUTSIDE)
        return "; ".join(parts)

    def quoted(self) -> str:
        """The log's last meaningful lines as a message quotes them, each cut to 200 characters: ``its last line:
        "..."``, ``its last 3 lines: "...", "...", "..."``, or ``its log is empty``. A line that is the exception (or
        the line standing in for it, which the message says before) is not quoted again: then ``its last lines
        besides that one: "...", "..."``, or ``""`` when no other is left (the reference server's argparse error: its
        usage lines are no meaningful lines, :func:`last_lines`)."""
        lines = [line for line in self.last_lines if line != self.exception]
        if len(lines) < len(self.last_lines):
            if not lines:
                return ""
            shown = ", ".join(f'"{_cut(line)}"' for line in lines)
            return (
                f"its last line besides that one: {shown}"
                if len(lines) == 1
                else f"its last lines besides that one: {shown}"
            )
        quoted = [f'"{_cut(line)}"' for line in self.last_lines]
        if not quoted:
            return "its log is empty"
        if len(quoted) == 1:
            return f"its last line: {quoted[0]}"
        return f"its last {len(quoted)} lines: " + ", ".join(quoted)

    def explain(self, returncode: int | None, *, quote: bool = False) -> str:
        """The cause and its detail as a message puts them after the exit status, e.g. ``"(cause: scheduler
        exception): TypeError: ... at sglang/srt/models/llama.py:437; the server then stopped its own process tree
        (signal 9)"``. With no cause found, what is known instead of "unknown": ``(no cause found in its log; its
        last line: "Decode batch, ...")`` or ``(no cause found in its log; its last 3 lines: "...", "...", "...")``
        (:meth:`quoted`), and for a SIGKILL that something outside killed it.

        :param returncode: ``Popen.returncode`` (negative: killed by that signal), None when unknown.
        :param quote: with a cause found, append the log's last lines too (``; its last 3 lines: ...``): for a
            message that shows them instead of the log's tail.
        """
        if self.cause != "unknown":
            detail = self.detail(returncode)
            said = f"(cause: {self.cause})" + (f": {detail}" if detail else "")
            quoted = self.quoted() if quote else ""
            return said + (f"; {quoted}" if quoted else "")
        if not self.last_lines:
            known = "no cause found in its log, which is empty"
        else:
            known = f"no cause found in its log; {self.quoted()}"
        # The SIGKILL note's own "no error in the log" would repeat what precedes it.
        detail = self.detail(returncode).removeprefix("no error in the log: ")
        return f"({known})" + (f": {detail}" if detail else "")


def last_line(log_text: str) -> str | None:
    """The last non-empty line of ``log_text`` as a terminal shows it (after a tqdm line's last carriage return),
    without the logger's ``[date time]`` prefix; None when there is none."""
    for raw in reversed(log_text.split("\n")):
        line = _LOG_PREFIX.sub("", raw.rstrip("\r").rsplit("\r", 1)[-1].strip())
        if line:
            return line
    return None


def last_lines(log_text: str, n: int = _QUOTE_LINES) -> tuple[str, ...]:
    """The last ``n`` meaningful lines of ``log_text`` (oldest first) as :func:`last_line` shows one; progress bars,
    lines without a letter or digit, ``warnings.warn(`` echoes, the supervisor's own line and argparse's usage
    block (``usage: prog [-h] ...`` and its indented continuation lines, printed above its ``error:`` line) are
    skipped. A log of such lines only gives its last line; an empty log, nothing."""
    found: list[str] = []
    raws = log_text.split("\n")
    usage = _usage_lines(raws)
    for i in range(len(raws) - 1, -1, -1):
        raw = raws[i]
        line = _LOG_PREFIX.sub("", raw.rstrip("\r").rsplit("\r", 1)[-1].strip())
        if line and not _NOISE.search(line) and i not in usage:
            found.append(line)
            if len(found) == n:
                break
    if not found:
        last = last_line(log_text)
        return (last,) if last else ()
    return tuple(reversed(found))


def _usage_lines(raws: list[str]) -> set[int]:
    """Indexes of argparse's usage blocks in ``raws``: a line starting ``usage:`` and the lines after it that start
    with a space (argparse wraps the usage there, indented under the program name)."""
    found: set[int] = set()
    inside = False
    for i, raw in enumerate(raws):
        if raw.startswith("usage: "):
            inside = True
        elif not (inside and raw.startswith(" ")):
            inside = False
            continue
        found.add(i)
    return found


def _cut(line: str) -> str:
    return line if len(line) <= _QUOTE_CHARS else line[: _QUOTE_CHARS - 3] + "..."


def last_exception(log_text: str) -> tuple[str, str | None] | None:
    """The last Python traceback in ``log_text``: (its final line, the innermost frame as ``pkg/path.py:line``).

    The innermost frame is the last ``File "...", line N`` before the exception line; its path is cut to start at
    the top-level package (after ``site-packages/`` or a ``pip install --target`` root).

    :returns: None when there is no ``Traceback (most recent call last)`` with an exception line after it and the
        log's last line is no exception line either (then the location is None).
    """
    lines = log_text.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    for start in reversed(starts):
        frame: str | None = None
        for line in lines[start + 1 :]:
            m = _FRAME.match(line)
            if m:
                frame = f"{_short_path(m['path'])}:{m['line']}"
                continue
            if line.startswith((" ", "\t")) or not line.strip():
                continue
            e = _EXC_LINE.match(line.strip())
            if e:
                return line.strip(), frame
            break
    # No traceback header (a log cut short, or a process that prints only the error): the last line may still be one.
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if _EXC_LINE.match(last):
        return last, None
    return None


def diagnose_exit(
    log_text: str, returncode: int | None = None, *, pids: Collection[int] = (), kernel_log: str | None = None
) -> ExitDiagnosis:
    """Diagnose a dead server from its log (pass the tail; 64 KiB holds SGLang's longest traceback).

    Order: a pattern cause found in the log (the reference server's fault knob, OOM, port, CUDA/NCCL, model path,
    flag, kernel build); else a scheduler exception (SGLang's "Scheduler hit an exception"); else any other
    traceback ("exception"); else the kernel's OOM-killer line naming one of ``pids`` or the crashed subprocess's pid
    (for a SIGKILL: "killed by the OOM killer"); else SGLang's "Subprocess NAME (pid=N) crashed with exit code C"
    ("subprocess crashed", that line as the exception, the signal named); else "unknown" (then
    :meth:`ExitDiagnosis.explain` quotes the log's last meaningful lines). The exception line and its location are
    attached whenever the log has a traceback, whatever the cause; a line that stands in for it (no traceback) is
    quoted without its ``[date time]`` prefix.

    :param returncode: ``Popen.returncode`` (negative: killed by that signal); only used to decide whether to look
        for OOM-killer evidence.
    :param pids: the server's process ids (main and descendants) that dmesg may name.
    :param kernel_log: dmesg text; None reads it (``dmesg``, 2 s budget; unreadable in most containers: then no
        evidence, never a guess).
    """
    exc = last_exception(log_text)
    exception, location = exc if exc else (None, None)
    self_killed = bool(_SELF_KILL.search(log_text))
    cause = None
    for name, pattern in _CAUSES:
        match = pattern.search(log_text)
        if match:
            cause = name
            if exception is None:  # no traceback: the line that named the cause stands in for it
                start = log_text.rfind("\n", 0, match.start()) + 1
                end = log_text.find("\n", match.end())
                exception = _LOG_PREFIX.sub("", log_text[start : end if end >= 0 else None].strip())
            break
    if cause is None and exc is not None:
        cause = "scheduler exception" if _SCHEDULER_EXCEPTION.search(log_text) else "exception"
    evidence = None
    crashes = list(_SUBPROCESS_CRASH.finditer(log_text)) if cause is None else []
    crash = crashes[-1] if crashes else None
    suspects = [*pids, *([int(crash["pid"])] if crash and int(crash["code"]) == -signal.SIGKILL else [])]
    if cause is None and (returncode == -signal.SIGKILL or crash is not None) and suspects:
        found = oom_killer_lines(suspects, kernel_log)
        if found:
            cause, evidence = "killed by the OOM killer", found[-1]
    if crash is not None and cause in (None, "killed by the OOM killer"):
        code = int(crash["code"])
        how = f"exit code {code}"
        if code < 0:
            try:
                how = f"killed by signal {-code} ({signal.Signals(-code).name})"
            except ValueError:
                how = f"killed by signal {-code}"
        cause = cause or "subprocess crashed"
        exception = f"SGLang subprocess {crash['name']} (pid {crash['pid']}) {how}"
    return ExitDiagnosis(
        cause=cause or "unknown",
        exception=exception,
        location=location,
        self_killed=self_killed,
        evidence=evidence,
        last_lines=last_lines(log_text),
    )


def oom_killer_lines(pids: Collection[int], kernel_log: str | None = None) -> list[str]:
    """The kernel's "Out of memory: Killed process <pid>" lines for any of ``pids``.

    :param kernel_log: dmesg text; None runs ``dmesg`` (empty list when it cannot be read).
    """
    if kernel_log is None:
        try:
            kernel_log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=2).stdout
        except (OSError, subprocess.SubprocessError):
            return []
    wanted = {int(p) for p in pids}
    return [
        line.strip() for line in kernel_log.splitlines() if (m := _OOM_KILL.search(line)) and int(m["pid"]) in wanted
    ]


def _short_path(path: str) -> str:
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    # A --target install (<root>/sglang/...) or a source checkout (.../python/sglang/...): from the package on.
    m = re.search(r".*/((?:sglang|vllm|flashinfer|torch|pytest_specdec|transformers)/.*)$", path)
    return m[1] if m else path
