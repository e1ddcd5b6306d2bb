"""Paired arms: a profile's throughput judged against another profile's, both measured close in time.

Two runs minutes apart on a shared runner see different load (measured on 2 busy cores: EAGLE-3 at 0.81x of the
baseline when the arms ran apart, 1.3-1.44x when interleaved). So whenever a throughput is judged against another
arm (``min_speedup``, a sweep's baseline), the two arms are measured as pairs of phases:

- ``interleaved`` (both servers alive; the default for ``server: reference`` and ``url:`` profiles): phases in the
  order R T, T R, R T, ... (each pair counterbalanced, so a linear drift in load cancels over two pairs); the ratio
  of pair i is T_i / R_i.
- ``bracketed`` (one server at a time; the default for ``sglang`` and ``vllm``, whose servers may not fit on the
  GPUs together; set ``pairing: interleaved`` in the profile when they do): T phases, then the reference server
  replaces the target for its R phases, then the target is restarted for T' phases; the ratio of pair i is
  mean(T_i, T'_i) / R_i, so a drift during the bracket cancels to first order.

The ratios are judged in ``judge.speedup`` (median against the floor, confirmed by as many pairs again).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_specdec.core.metric_table import PAIRED_FIELDS
from pytest_specdec.measure import runner
from pytest_specdec.profiles.schema import Profile

if TYPE_CHECKING:
    from pytest_specdec.serve.server import ServerHandle

__all__ = [
    "PAIRED_FIELDS",
    "PairedArms",
    "ReferenceServers",
    "measure_bracketed",
    "measure_interleaved",
    "pairing_mode",
]

Measure = Callable[[runner.RunningServer], runner.Measurement]


def pairing_mode(profile: Profile) -> str:
    """``profile.pairing`` when set; else ``interleaved`` for servers given by URL (nothing of ours runs) and the
    engine's ``Engine.default_pairing`` for launched ones (reference: interleaved, a CPU process of ~430 MiB;
    SGLang/vLLM: bracketed)."""
    if profile.pairing is not None:
        return profile.pairing
    if profile.url is not None:
        return "interleaved"
    from pytest_specdec.engines import get_engine

    return get_engine(profile).default_pairing


@dataclass(frozen=True, slots=True)
class PairedArms:
    """Phases of a target and a reference profile measured as pairs.

    ``target[i]`` holds the target phases of pair i (one when interleaved, two when bracketed), ``reference[i]`` the
    reference phase. Pairs ``[0, first)`` are the first measurement, the rest confirm it (:meth:`extend`).
    ``brackets`` counts the bracketed blocks and ``restart_s`` the seconds their server switches took (stopping
    the target, starting the reference, stopping it, restarting the target; wall clock, s): on a GPU a switch
    costs minutes, so the budget and the size of the next block count them (``judge.verdict``).
    """

    target_profile: str
    reference_profile: str
    mode: str
    target: tuple[tuple[runner.Measurement, ...], ...]
    reference: tuple[runner.Measurement, ...]
    first: int
    brackets: int = 0
    restart_s: float = 0.0

    @property
    def pairs(self) -> int:
        return len(self.reference)

    def target_measurements(self) -> tuple[runner.Measurement, ...]:
        """Every target phase, in time order within each block."""
        return tuple(m for group in self.target for m in group)

    def values(self, field_name: str, arm: str) -> list[float | None]:
        """Per pair, the value of ``field_name`` for ``arm`` ("target": mean over the pair's target phases, or
        "reference"); ``FIELD[CATEGORY]`` reads one prompt category's value (``RunMetrics.by_category``)."""
        out: list[float | None] = []
        for group, ref in zip(self.target, self.reference, strict=True):
            if arm == "reference":
                out.append(_field(ref, field_name))
                continue
            vals = [_field(m, field_name) for m in group]
            nums = [v for v in vals if v is not None]
            out.append(statistics.fmean(nums) if len(nums) == len(vals) and nums else None)
        return out

    def ratios(self, field_name: str = "output_tok_s") -> list[float]:
        """target / reference per pair (pairs where either is missing or the reference is 0 are left out)."""
        return [
            t / r
            for t, r in zip(self.values(field_name, "target"), self.values(field_name, "reference"), strict=True)
            if t is not None and r is not None and r != 0
        ]

    def extend(self, more: PairedArms) -> PairedArms:
        """These pairs followed by ``more`` (a confirming measurement of the same arms); ``first`` is kept."""
        return dataclasses.replace(self, target=self.target + more.target, reference=self.reference + more.reference,
                                   brackets=self.brackets + more.brackets, restart_s=self.restart_s + more.restart_s)

    def measuring_s(self) -> float:
        """Seconds the pairs' phases held servers (target and reference phases, switches left out)."""
        return sum(m.server_s for m in (*self.target_measurements(), *self.reference))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe record (``ResultRecord.paired``): profiles, mode, first, and per-pair values of
        :data:`PAIRED_FIELDS` for both arms, also per prompt category (``itl_ms_p50[code]``: a compare judges a
        category's row on its ratio too when the field's top row is paired)."""
        from pytest_specdec.measure.metrics import CATEGORY_FIELDS

        every = [*self.target_measurements(), *self.reference]
        categories = sorted({c for m in every for c in (m.metrics.by_category or {})})
        names = [*PAIRED_FIELDS, *(f"{f}[{c}]" for c in categories for f in PAIRED_FIELDS if f in CATEGORY_FIELDS)]
        return {
            "vs": self.reference_profile,
            "mode": self.mode,
            "pairs": self.pairs,
            "first": self.first,
            "target": {f: self.values(f, "target") for f in names},
            "reference": {f: self.values(f, "reference") for f in names},
        }


def _field(measurement: runner.Measurement, name: str) -> float | None:
    """``name`` of one phase's metrics; ``FIELD[CATEGORY]`` from ``by_category`` (None when absent)."""
    if name.endswith("]") and "[" in name:
        fname, category = name[:-1].split("[", 1)
        return _number(((measurement.metrics.by_category or {}).get(category) or {}).get(fname))
    return _number(getattr(measurement.metrics, name))


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def measure_interleaved(
    target: runner.RunningServer,
    reference: runner.RunningServer,
    pairs: int,
    *,
    measure: Measure | None = None,
    offset: int = 0,
) -> PairedArms:
    """Measure ``pairs`` pairs with both servers alive, in the order R T, T R, R T, ...

    :param measure: one measured phase on a server (default ``runner.measure``: warmup, counters, phase).
    :param offset: pairs measured before these (a sequential verdict adds one at a time): the order continues
        theirs, so pair ``offset`` is R T when ``offset`` is even.
    :raises ServerError: from ``measure`` (a server stalled or died).
    """
    run = measure or runner.measure
    targets: list[tuple[runner.Measurement, ...]] = []
    refs: list[runner.Measurement] = []
    for i in range(offset, offset + pairs):
        if i % 2 == 0:
            refs.append(run(reference))
            targets.append((run(target),))
        else:
            targets.append((run(target),))
            refs.append(run(reference))
    return PairedArms(target.profile.name, reference.profile.name, "interleaved", tuple(targets), tuple(refs), pairs)


def measure_bracketed(
    target: runner.RunningServer,
    pairs: int,
    *,
    start_reference: Callable[[], runner.RunningServer],
    restart_target: Callable[[], None],
    measure: Measure | None = None,
) -> PairedArms:
    """Measure with one server alive at a time: T x pairs, stop the target, R x pairs on a reference server started
    by ``start_reference`` (stopped after), ``restart_target()``, T' x pairs. The two switches' wall-clock seconds
    are the arms' ``restart_s`` (one bracket).

    :raises ServerStartError: a server did not start (the target is restarted first when the reference failed).
    :raises ServerError: from ``measure``.
    """
    run = measure or runner.measure
    before = [run(target) for _ in range(pairs)]
    switch = time.perf_counter()
    target.stop()
    try:
        ref_server = start_reference()
        switched_s = time.perf_counter() - switch
        try:
            refs = [run(ref_server) for _ in range(pairs)]
        finally:
            switch = time.perf_counter()
            ref_server.stop()
    finally:
        restart_target()
    switched_s += time.perf_counter() - switch
    after = [run(target) for _ in range(pairs)]
    groups = tuple((b, a) for b, a in zip(before, after, strict=True))
    return PairedArms(target.profile.name, ref_server.profile.name, "bracketed", groups, tuple(refs), pairs,
                      brackets=1, restart_s=switched_s)  # fmt: skip


class ReferenceServers:
    """Servers of reference arms started for paired measurements (not the fixtures' servers), one per profile,
    kept until :meth:`stop` so a confirming measurement does not wait for another start.

    Logs go to ``<log_dir>/<profile>.paired.log`` (the profile's own server may be alive under xdist).
    """

    def __init__(self, log_dir: Path, *, startup_timeout_s: float | None = None) -> None:
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.servers: dict[str, runner.RunningServer] = {}

    def get(self, profile: Profile, *, on_launch: Callable[[ServerHandle], None] | None = None) -> runner.RunningServer:
        """The running reference server of ``profile``, started when absent or dead.

        :param on_launch: given to ``start_server`` when it starts one (``MeasurementStore.launching``).
        :raises ServerStartError: it did not start.
        """
        server = self.servers.get(profile.name)
        if server is not None and server.process is not None and not server.process.alive():
            self.stop(profile.name)
            server = None
        if server is None:
            server = runner.start_server(
                profile,
                log_dir=self.log_dir,
                startup_timeout_s=self.startup_timeout_s,
                log_name=f"{profile.name}.paired",
                on_launch=on_launch,
            )
            self.servers[profile.name] = server
        return server

    def start_once(
        self, profile: Profile, *, on_launch: Callable[[ServerHandle], None] | None = None
    ) -> runner.RunningServer:
        """A fresh server of ``profile`` that is not kept (bracketed pairing stops it after its phases);
        ``on_launch`` as :meth:`get`'s."""
        return runner.start_server(profile, log_dir=self.log_dir, startup_timeout_s=self.startup_timeout_s,
                                   log_name=f"{profile.name}.paired", on_launch=on_launch)  # fmt: skip

    def stop(self, name: str | None = None) -> None:
        """Stop the server of ``name`` (all when None)."""
        for key in [name] if name is not None else list(self.servers):
            server = self.servers.pop(key, None)
            if server is not None:
                server.stop()
