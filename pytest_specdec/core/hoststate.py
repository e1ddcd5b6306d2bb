"""The runner's state around a measurement: load average, CPU steal, and on GPUs other processes and clocks.

A throughput measured while a neighbour compiles, or on a VM whose host steals CPU, or on a GPU shared with another
job or clocked down, is not the same experiment as one on an idle runner. ``snapshot()`` before and after the
measured phases, ``runner_entry(before, after)`` into the fingerprint (``fingerprint["runner"]``), and
``state_changes(base, current)`` words the differences that a verdict prints first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import psutil

__all__ = ["LOAD_CHANGE", "SHARE_CHANGE", "STEAL_CHANGE_PCT", "CLOCK_CHANGE", "snapshot", "state_changes",
           "runner_entry", "oversubscribed"]

#: A change of the 1-minute load average per CPU by more than this is a changed runner state (e.g. 2 CPUs, 1 -> 3).
LOAD_CHANGE = 0.5
#: On an oversubscribed runner (load per CPU above 1) a process gets about 1 / (load per CPU) of a CPU: a change of
#: that share by more than this fraction is a changed state too (2 CPUs, load 4.9 -> 5.8: share 41% -> 34%, -16%;
#: seen beside a raw tok/s x0.635 that no runner line explained).
SHARE_CHANGE = 0.15
#: A change of the CPU steal share by more than this many percentage points is a changed state.
STEAL_CHANGE_PCT = 5.0
#: A relative change of a GPU's application clock or power limit by more than this is a changed state. (The current
#: SM clock is recorded but not compared: it drops to ~345 MHz within a second of idling on an H200.)
CLOCK_CHANGE = 0.10
#: ``clocks_throttle_reasons.active`` bits that slow a busy GPU (nvidia-smi ``--help-query-gpu``): SW power cap
#: 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80 (0x1 is "idle", 0x2 "app clocks").
_SLOWDOWN_BITS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "power brake"}
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
    """Per GPU lists ``clocks_sm_mhz``, ``app_clocks_mhz``, ``power_limit_w``, ``temperature_c``,
    ``throttle_reasons`` (bit mask), and ``other_processes`` ("pid name MiB"), from ``nvidia-smi
    --query-gpu=clocks.sm,clocks.applications.graphics,power.limit,temperature.gpu,clocks_throttle_reasons.active``
    and ``--query-compute-apps=pid,process_name,used_memory`` (processes of ours, ``own_pids``, left out); None
    without nvidia-smi. Checked on an H200: ``345, 1980, 700.00, 35, 0x0000000000000001`` when idle."""
    query = "clocks.sm,clocks.applications.graphics,power.limit,temperature.gpu,clocks_throttle_reasons.active"
    gpus = _nvidia([f"--query-gpu={query}"])
    if gpus is None:
        return None
    apps = _nvidia(["--query-compute-apps=pid,process_name,used_memory"]) or []

    def num(text: str) -> float | None:
        try:
            return float(int(text, 16)) if text.startswith("0x") else float(text)
        except ValueError:
            return None

    def col(i: int) -> list[float | None]:
        return [num(r[i]) if len(r) > i else None for r in gpus]

    others = []
    for row in apps:
        if len(row) >= 3 and row[0].isdigit() and int(row[0]) not in own_pids:
            others.append(f"{row[0]} {row[1]} {row[2]} MiB")
    return {
        "clocks_sm_mhz": col(0),
        "app_clocks_mhz": col(1),
        "power_limit_w": col(2),
        "temperature_c": col(3),
        "throttle_reasons": col(4),
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


def runner_entry(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
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


def oversubscribed(*states: Mapping[str, Any] | None) -> tuple[float, ...] | None:
    """The 1-minute load average per CPU of each measurement (``fingerprint["runner"]``, the larger of before and
    after) when any exceeds 1: more runnable threads than CPUs, so the servers' processes share them. None when none
    does, or a measurement has no record (older runs)."""
    loads = [_load_per_cpu(state) if state else None for state in states]
    if not loads or any(load is None for load in loads):
        return None
    known = [float(load) for load in loads if load is not None]
    return tuple(known) if max(known) > 1.0 else None


def state_changes(base: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> list[str]:
    """What changed in the runner's state between two measurements (``fingerprint["runner"]``), one line each:
    ``load average per CPU 0.4 -> 2.3 (2 CPUs)``, ``CPU steal 0% -> 12%``, ``other GPU processes: none -> 4242
    python 20000 MiB``, ``GPU 0 power limit 700 -> 500 W``, ``GPU 0 throttled: HW thermal``. Empty when either side
    has no record (older runs) or nothing moved beyond :data:`LOAD_CHANGE` (or :data:`SHARE_CHANGE` on an
    oversubscribed runner), :data:`STEAL_CHANGE_PCT`, :data:`CLOCK_CHANGE`."""
    if not base or not current:
        return []
    lines = []
    lb, lc = _load_per_cpu(base), _load_per_cpu(current)
    if lb is not None and lc is not None:
        share_b, share_c = 1 / max(lb, 1.0), 1 / max(lc, 1.0)
        moved = abs(share_c - share_b) / max(share_b, share_c) > SHARE_CHANGE
        if abs(lc - lb) > LOAD_CHANGE or moved:
            line = f"load average per CPU {lb:.2g} -> {lc:.2g} ({current.get('cpus')} CPUs)"
            if moved:
                line += f": a process's CPU share ~{share_b:.0%} -> ~{share_c:.0%}"
            lines.append(line)
    sb, sc = base.get("steal_pct"), current.get("steal_pct")
    if isinstance(sb, int | float) and isinstance(sc, int | float) and abs(sc - sb) > STEAL_CHANGE_PCT:
        lines.append(f"CPU steal {sb:g}% -> {sc:g}%")
    gb, gc = base.get("gpu_after") or {}, current.get("gpu_after") or {}
    ob, oc = gb.get("other_processes"), gc.get("other_processes")
    if ob is not None and oc is not None and ob != oc:
        lines.append(f"other GPU processes: {', '.join(ob) or 'none'} -> {', '.join(oc) or 'none'}")
    for key, label, unit in (("app_clocks_mhz", "application clock", "MHz"), ("power_limit_w", "power limit", "W")):
        for i, (vb, vc) in enumerate(zip(gb.get(key) or [], gc.get(key) or [], strict=False)):
            if vb and vc and abs(vc - vb) / vb > CLOCK_CHANGE:
                lines.append(f"GPU {i} {label} {vb:g} -> {vc:g} {unit}")
    for i, (tb, tc) in enumerate(zip(gb.get("throttle_reasons") or [], gc.get("throttle_reasons") or [], strict=False)):
        new = [name for bit, name in _SLOWDOWN_BITS.items() if int(tc or 0) & bit and not int(tb or 0) & bit]
        if new:
            lines.append(f"GPU {i} throttled: {', '.join(new)}")
    return lines
