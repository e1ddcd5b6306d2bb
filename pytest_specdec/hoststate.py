"""The runner's state around a measurement: load average, CPU steal, and on GPUs other processes and clocks.

A throughput measured while a neighbour compiles, or on a VM whose host steals CPU, or on a GPU shared with another
job or clocked down, is not the same experiment as one on an idle runner. ``snapshot()`` before and after the
measured phases, ``summarize(before, after)`` into the fingerprint (``fingerprint["runner"]``), and
``state_changes(base, current)`` words the differences that a verdict prints first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import psutil

__all__ = ["LOAD_CHANGE", "STEAL_CHANGE_PCT", "CLOCK_CHANGE", "snapshot", "state_changes", "summarize"]

#: A change of the 1-minute load average per CPU by more than this is a changed runner state (e.g. 2 CPUs, 1 -> 3).
LOAD_CHANGE = 0.5
#: A change of the CPU steal share by more than this many percentage points is a changed state.
STEAL_CHANGE_PCT = 5.0
#: A relative change of a GPU's SM clock by more than this is a changed state (power or thermal throttling).
CLOCK_CHANGE = 0.10
_NVIDIA_TIMEOUT_S = 10.0


def _nvidia(args: list[str]) -> list[list[str]] | None:
    """Rows of ``nvidia-smi ARGS --format=csv,noheader,nounits``; None without nvidia-smi or on failure."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=_NVIDIA_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return [[c.strip() for c in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def _gpu_state(own_pids: set[int]) -> dict[str, Any] | None:
    """``{"clocks_sm_mhz": [...], "clocks_mem_mhz": [...], "temperature_c": [...], "other_processes": [...]}`` from
    ``nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu`` and ``--query-compute-apps=pid,process_name,
    used_memory`` (processes of ours, ``own_pids``, left out); None without nvidia-smi."""
    gpus = _nvidia(["--query-gpu=clocks.sm,clocks.mem,temperature.gpu"])
    if gpus is None:
        return None
    apps = _nvidia(["--query-compute-apps=pid,process_name,used_memory"]) or []

    def num(text: str) -> float | None:
        try:
            return float(text)
        except ValueError:
            return None

    others = []
    for row in apps:
        if len(row) >= 3 and row[0].isdigit() and int(row[0]) not in own_pids:
            others.append(f"{row[0]} {row[1]} {row[2]} MiB")
    return {
        "clocks_sm_mhz": [num(r[0]) for r in gpus if r],
        "clocks_mem_mhz": [num(r[1]) for r in gpus if len(r) > 1],
        "temperature_c": [num(r[2]) for r in gpus if len(r) > 2],
        "other_processes": sorted(others),
    }


def _own_pids() -> set[int]:
    """This process and its descendants (the servers we launched): not "other" GPU processes."""
    me = psutil.Process()
    try:
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


def snapshot() -> dict[str, Any]:
    """The runner's state now: ``load1`` (1-minute load average, ``os.getloadavg``), ``cpus`` (logical CPUs),
    ``cpu_times`` (``psutil.cpu_times()``: user, system, idle, steal... seconds since boot, for the steal share
    between two snapshots), ``gpu`` (:func:`_gpu_state`, None without nvidia-smi)."""
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    times = psutil.cpu_times()._asdict()
    return {"load1": load1, "cpus": os.cpu_count(), "cpu_times": times, "gpu": _gpu_state(_own_pids())}


def summarize(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint's ``runner`` entry: ``load1_before``, ``load1_after``, ``cpus``, ``steal_pct`` (CPU time
    stolen by the hypervisor between the snapshots, % of all CPU time; 0 on bare metal; None when the kernel does not
    report steal), ``gpu_before``, ``gpu_after``."""
    tb, ta = before.get("cpu_times") or {}, after.get("cpu_times") or {}
    total = sum(float(ta[k]) - float(tb.get(k, 0.0)) for k in ta if k not in ("guest", "guest_nice"))
    steal = None
    if "steal" in ta and total > 0:
        steal = round(100.0 * (float(ta["steal"]) - float(tb.get("steal", 0.0))) / total, 2)
    return {
        "load1_before": before.get("load1"),
        "load1_after": after.get("load1"),
        "cpus": after.get("cpus"),
        "steal_pct": steal,
        "gpu_before": before.get("gpu"),
        "gpu_after": after.get("gpu"),
    }


def _load_per_cpu(state: Mapping[str, Any]) -> float | None:
    loads = [v for v in (state.get("load1_before"), state.get("load1_after")) if isinstance(v, int | float)]
    cpus = state.get("cpus") or 1
    return max(loads) / cpus if loads else None


def state_changes(base: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> list[str]:
    """What changed in the runner's state between two measurements (``fingerprint["runner"]``), one line each:
    ``load average per CPU 0.4 -> 2.3 (2 CPUs)``, ``CPU steal 0% -> 12%``, ``other GPU processes: none -> 4242
    python 20000 MiB``, ``GPU SM clock 1980 -> 1410 MHz``. Empty when either side has no record (older runs) or
    nothing moved beyond :data:`LOAD_CHANGE`, :data:`STEAL_CHANGE_PCT`, :data:`CLOCK_CHANGE`."""
    if not base or not current:
        return []
    lines = []
    lb, lc = _load_per_cpu(base), _load_per_cpu(current)
    if lb is not None and lc is not None and abs(lc - lb) > LOAD_CHANGE:
        lines.append(f"load average per CPU {lb:.2g} -> {lc:.2g} ({current.get('cpus')} CPUs)")
    sb, sc = base.get("steal_pct"), current.get("steal_pct")
    if isinstance(sb, int | float) and isinstance(sc, int | float) and abs(sc - sb) > STEAL_CHANGE_PCT:
        lines.append(f"CPU steal {sb:g}% -> {sc:g}%")
    gb, gc = base.get("gpu_after") or {}, current.get("gpu_after") or {}
    ob, oc = gb.get("other_processes"), gc.get("other_processes")
    if ob is not None and oc is not None and ob != oc:
        lines.append(f"other GPU processes: {', '.join(ob) or 'none'} -> {', '.join(oc) or 'none'}")
    for i, (cb, cc) in enumerate(zip(gb.get("clocks_sm_mhz") or [], gc.get("clocks_sm_mhz") or [], strict=False)):
        if cb and cc and abs(cc - cb) / cb > CLOCK_CHANGE:
            lines.append(f"GPU {i} SM clock {cb:g} -> {cc:g} MHz")
    return lines
