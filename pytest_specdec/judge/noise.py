"""Measured noise: the spread of repeated runs (separate server starts), as what ``calibrate`` sizes its proposed
tolerances for (``cli.calibrate``: :func:`proposal_sds`, :class:`GateSizing`) and as what a compare knows of a
profile's spread before its stored runs can measure it: the within-run sd of one repeat and the run-to-run sd of a
server instance (:func:`calibrate_noise`, :func:`read_noise`, read by ``compare._Judging``)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_specdec.core import stats
from pytest_specdec.core.errors import NoiseFileError
from pytest_specdec.core.tolerances import DEFAULT_TOLERANCES
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.judge.sequential import Design, RunEffect
from pytest_specdec.measure.results import ResultRecord

__all__ = [
    "MAX_NOISE_SD",
    "PASS_PROBABILITY",
    "TOLERANCE_CAP",
    "CalibratedNoise",
    "OUTLIER_Z",
    "FieldNoise",
    "GateSizing",
    "OutlyingRun",
    "calibrate_noise",
    "measurements",
    "outlying_runs",
    "paired_arm",
    "proposal_sds",
    "read_noise",
]


def measurements(records: Sequence[tuple[str, ResultRecord]]) -> list[ResultRecord]:
    """One record per measurement: every test of a profile in one run reads the same measurement, so records of
    one (run id, profile) are one measurement, kept as the record with the most repeats (a later test of the profile
    may show repeats that a sequential verdict added). Order: first appearance.

    :param records: (run id, record) pairs, e.g. every record of every run file given to ``calibrate --from``.
    """
    kept: dict[tuple[str, str], ResultRecord] = {}
    for run_id, record in records:
        key = (run_id, record.profile)
        if key not in kept or len(record.values("output_tok_s")) > len(kept[key].values("output_tok_s")):
            kept[key] = record
    return list(kept.values())


def paired_arm(records: Sequence[ResultRecord]) -> str | None:
    """The paired reference arm every record was measured with (``paired["vs"]``), or None when one has none or
    they differ: then the compare judges throughput and latency on their ratio to it (``compare._paired_rows``)."""
    arms = {(r.paired or {}).get("vs") for r in records}
    if len(arms) != 1:
        return None
    (vs,) = arms
    return str(vs) if vs else None


@dataclass(frozen=True, slots=True)
class FieldNoise:
    """The noise one compare row's proposed tolerance is sized for (:func:`proposal_sds` for a top row,
    ``cli.calibrate._category_noise`` for a category row; ``calibrate`` draws its unchanged nights from it): the
    relative sd of one repeat within a run (``within``), of a server instance's mean beyond its repeats
    (``run_to_run``), and the repeats a stored run has (``repeats``, the median over the calibration's runs; shown,
    not sized with: a night's baseline is sized at the design's first look, ``workload.repeats``). ``key`` is the
    noise file's key (``field`` or ``field/vs``), ``row`` the compare row it sizes (``field``, or ``field / `` for
    the ratio to a paired arm)."""

    key: str
    row: str
    within: float
    run_to_run: float
    repeats: int


#: The chance with which an unchanged night ends passed (not undecided) at ``calibrate``'s proposed tolerances: every
#: row it judges statistically together (each row at ``1 - 0.1 / R``: ``cli.calibrate.night_row_probability``), or
#: each row alone with ``--per-row``. 0.9, not 0.8: an unchanged night left undecided reads as a warning
#: (``--specdec-undecided=warn``) or a failure (``=fail``), and one in five nights is too many to read.
PASS_PROBABILITY = 0.9


@dataclass(frozen=True, slots=True)
class GateSizing:
    """What ``calibrate``'s proposal assumes of the gate that will judge with it (``cli.calibrate._Row`` sizes each
    row at it): a baseline of ``design.start`` repeats (the profile's ``workload.repeats``), today's run measured
    by ``design`` (its budget, ``design.max_repeats``: a run still open there ends undecided), against
    ``stored_runs`` stored runs of the baseline's fingerprint (1: the first nights, with the noise file ``calibrate``
    writes; up to ``history.MAX_HISTORY_RUNS``, what a compare pools at most), and the chance with which an
    unchanged run must end the row passed (:data:`PASS_PROBABILITY`, or a night's share of it). ``gpu``: the runs
    were measured on a GPU host, whose raw rows a compare judges at a larger assumed instance spread
    (``compare.assumed_instance_sd``)."""

    design: Design
    stored_runs: int
    probability: float = PASS_PROBABILITY
    gpu: bool = False


#: The largest tolerance ``calibrate`` proposes (``cli.calibrate._Row.least``): a row that needs more is said to have
#: none below it.
TOLERANCE_CAP = 0.999


def proposal_sds(records: Sequence[ResultRecord], fields: Sequence[str] | None = None) -> dict[str, FieldNoise]:
    """The noise each of ``calibrate``'s proposed field tolerances is sized for (``cli.calibrate``: each field's
    top row, its ratio row where paired; category rows: ``cli.calibrate._category_noise``): per field, the
    within-run and run-to-run sds of :func:`calibrate_noise` (the two sds ``calibrate`` prints and writes), with the
    repeats per run. Where the compare judges a field on its ratio to a paired arm (every record paired with the
    same arm, :func:`paired_arm`, and the field paired), the sds of the per-pair ratios (key ``field/vs``), which is
    what that tolerance bounds. Records of one repeat each show no within-run sd: the sd of all their values (of the
    log, ``expm1``), which is the two together, is taken as within a run, with no run-to-run part.

    Example: tok/s runs [98, 100, 102] and [108, 110, 112] -> within 1.93 %, run to run 6.88 %, 3 repeats.

    :param fields: metric fields (default: the keys of :data:`DEFAULT_TOLERANCES`).
    :returns: field -> :class:`FieldNoise`, for fields with at least 2 values, every value > 0.
    """
    from pytest_specdec.core.metric_table import PAIRED_FIELDS

    noise = calibrate_noise(records, fields)
    vs = paired_arm(records)
    out: dict[str, FieldNoise] = {}
    for fname in fields or list(DEFAULT_TOLERANCES):
        paired = vs is not None and fname in PAIRED_FIELDS
        key, row = (f"{fname}/{vs}", f"{fname} / ") if paired else (fname, fname)
        per_run = [paired_ratios(r, fname) if paired else r.values(fname) for r in records]
        counts = [len(v) for v in per_run if v]
        repeats = int(statistics.median_low(counts)) if counts else 1
        if key in noise:
            out[fname] = FieldNoise(key, row, noise[key], noise.run_to_run.get(key, 0.0), repeats)
            continue
        values = [v for run in per_run for v in run]
        if len(values) >= 2 and all(v > 0 for v in values):
            sd = math.expm1(statistics.stdev(math.log(v) for v in values))
            out[fname] = FieldNoise(key, row, sd, 0.0, repeats)
    return out


#: The cut-off of :func:`outlying_runs`: Iglewicz and Hoaglin's for a modified z-score (a distance from the median in
#: MAD-based sds), "How to Detect and Handle Outliers" (ASQC, 1993), also NIST/SEMATECH e-Handbook 1.3.5.17.
OUTLIER_Z = 3.5
#: 1 / Phi^-1(0.75): a MAD times this estimates the sd of normal values.
_MAD_SD = 1.4826


@dataclass(frozen=True, slots=True)
class OutlyingRun:
    """A run whose level is an outlier against the other runs (:func:`outlying_runs`): ``index`` in the records,
    its level (``level``: the geometric mean of its values, in the field's unit), the other runs' median level
    (``others``) and their range (``low``, ``high``), and ``z``: how many robust sds (``sd``, relative, ``expm1`` of
    the log scale) its log level is from the others' median (signed: below is negative)."""

    index: int
    level: float
    others: float
    low: float
    high: float
    z: float
    sd: float


def outlying_runs(
    records: Sequence[ResultRecord], field: str = "output_tok_s", *, instance_sd: float
) -> list[OutlyingRun]:
    """The runs (each record one server start) whose level of ``field`` is an outlier against the others': a run's
    level is the mean of its log values; it is an outlier when it is more than :data:`OUTLIER_Z` robust sds from the
    median of the *other* runs' levels (Iglewicz and Hoaglin's modified z-score, taken leave-one-out). Leave-one-out,
    because with 3 runs the whole set's MAD is the smaller of the two other runs' distances from the middle one, so
    the outlier masks itself (58 tok/s beside 111 and 129 reads 2.9 MADs on the log scale; against the other two,
    6.5). The robust sd is the larger of the other runs' (``1.4826 x`` the MAD of their levels, which 2-3 runs size
    poorly: two runs 1% apart would call a third 5% off an outlier) and the sd a run's level spreads by as noise
    expects (``sqrt(instance_sd^2 + within^2 / repeats)``, ``within`` the other runs' pooled within-run sd of one
    repeat, ``instance_sd`` the run-to-run sd a compare assumes, ``compare.assumed_instance_sd``): at 7% a run is
    called an outlier from about x0.78 or x1.28 of the others. Not a studentized leave-one-out test: with 2 other
    runs its t has 1 degree of freedom, and no run is ever beyond its quantile. Only a minority of the runs can be
    outliers: where half or more would be, the runs split in groups, and none is called one. Only a run *below* the
    others is one (``field`` is a rate, higher is better): load slows a server and never speeds one up, so a run
    faster than the rest is the quiet one. Needs 3 runs or more, every one with a value of ``field`` above 0.

    Example: tok/s levels 58, 111, 115, 122, 129 (3 repeats each, 1% apart): 58 is x0.49 of the others' median
    118.4, 10.2 robust sds (7.3%, their MAD's) below it; the others are not outliers. Levels 100, 101, 112: none (112
    is 15 MADs of the other two from their median, but 1.6 sds of 7%).

    :returns: the outlying runs in the order of ``records`` (none: an empty list).
    """
    per_run = [[v for v in r.values(field)] for r in records]
    if len(per_run) < 3 or not all(per_run) or any(v <= 0 for run in per_run for v in run):
        return []
    levels = [statistics.fmean(math.log(v) for v in run) for run in per_run]
    found = []
    for i, level in enumerate(levels):
        rest = levels[:i] + levels[i + 1 :]
        middle = statistics.median(rest)
        mad = _MAD_SD * statistics.median(abs(x - middle) for x in rest)
        within = stats.pooled_sd(*(per_run[:i] + per_run[i + 1 :]), log=True)
        repeats = statistics.median(len(run) for run in per_run)
        noise = math.sqrt(math.log1p(instance_sd) ** 2 + within**2 / repeats)
        sd = max(mad, noise)
        z = (level - middle) / sd if sd > 0 else 0.0
        # Only a slower run: load and a busy neighbour slow a server, nothing they do speeds one up; a run faster than
        # the rest is the quiet one (a trial on a loaded runner saw its two quiet nights left out, the busy one kept).
        if z < -OUTLIER_Z:
            found.append(OutlyingRun(i, math.exp(level), math.exp(middle), math.exp(min(rest)), math.exp(max(rest)),
                                     z, math.expm1(sd)))  # fmt: skip
    return found if 2 * len(found) < len(records) else []


class CalibratedNoise(dict[str, float]):
    """What ``calibrate`` measured for one profile, as every compare reads it: key (``field``, or ``field/vs`` for
    the per-pair ratio to a paired arm ``vs``) -> the relative sd of one repeat within a run (a dict of those), plus
    :attr:`run_to_run` (key -> the relative sd of a server instance's mean beyond its repeats) and :attr:`runs` (the
    server starts they come from). A noise file written before the run-to-run part was measured reads with
    ``run_to_run`` empty: the compare then assumes one (``sequential.ASSUMED_INSTANCE_SD``).
    """

    def __init__(self, sigma: Mapping[str, float] | None = None, run_to_run: Mapping[str, float] | None = None,
                 runs: int = 0) -> None:  # fmt: skip
        super().__init__(sigma or {})
        self.run_to_run: dict[str, float] = dict(run_to_run or {})
        self.runs = runs

    @classmethod
    def stored(cls, noise: Mapping[str, float]) -> dict[str, object]:
        """``noise`` as a stored record keeps the noise its compare was judged with (``cost["verdicts"]["compare"]
        ["noise"]``): ``{"sigma_rel": {...}, "run_to_run_rel": {...}, "runs": N}``, empty objects for none."""
        return {"sigma_rel": dict(noise), "run_to_run_rel": dict(getattr(noise, "run_to_run", {})),
                "runs": int(getattr(noise, "runs", 0))}  # fmt: skip

    @classmethod
    def judged(cls, record: ResultRecord) -> CalibratedNoise | None:
        """The noise ``record``'s compare was judged with in pytest (:meth:`stored`), so that the ``compare``
        command decides as pytest did even after a later ``calibrate`` (a fresh-user trial saw a row pytest had left
        undecided read ok); None for a record stored without it (the profile's noise file is read then). Entries
        that are not finite numbers in 0..:data:`MAX_NOISE_SD` are left out."""
        compare = ((record.cost or {}).get("verdicts") or {}).get("compare")
        found = compare.get("noise") if isinstance(compare, Mapping) else None
        if not isinstance(found, Mapping):
            return None

        def sds(key: str) -> dict[str, float]:
            value = found.get(key)
            return {str(k): float(v) for k, v in value.items() if _is_sd(v)} if isinstance(value, Mapping) else {}

        runs = found.get("runs")
        return cls(sds("sigma_rel"), sds("run_to_run_rel"), runs if isinstance(runs, int) and runs > 0 else 0)


def calibrate_noise(records: Sequence[ResultRecord], fields: Sequence[str] | None = None) -> CalibratedNoise:
    """The noise of repeated runs (each record one server start), for ``compare.compare_results``'s ``noise``.

    Per key (each field; ``field/vs`` from the per-pair ratios of records with a paired arm ``vs``): the one-way
    random-effects ANOVA of the log values (``sequential.RunEffect``): the within-run sd of one repeat
    (``expm1`` of the pooled sd of the log) and the run-to-run sd (``expm1`` of the run effect's sd, 0 when the
    runs' means spread no more than their repeats explain). Each run is one server instance: a compare against one
    stored run adds the run-to-run part for the baseline's instance and today's.

    Example: tok/s runs [98, 100, 102] and [108, 110, 112] -> within 1.9 %, run-to-run 6.9 %.

    :returns: the sds with the number of runs; keys with at least 2 values in one run and every value > 0.
    """
    pools: dict[str, list[list[float]]] = {}
    for r in records:
        for fname in fields or list(DEFAULT_TOLERANCES):
            pools.setdefault(fname, []).append(r.values(fname))
        vs = (r.paired or {}).get("vs")
        if vs:
            from pytest_specdec.measure.pairing import PAIRED_FIELDS

            for fname in PAIRED_FIELDS:
                pools.setdefault(f"{fname}/{vs}", []).append(paired_ratios(r, fname))
    sigma: dict[str, float] = {}
    run_to_run: dict[str, float] = {}
    for key, runs in pools.items():
        anova = RunEffect.of(runs)
        if anova is None:
            continue
        sigma[key] = round(math.expm1(math.sqrt(anova.var)), 5)
        if anova.runs >= 2:
            run_to_run[key] = round(math.expm1(math.sqrt(anova.between)), 5)
    return CalibratedNoise(sigma, run_to_run, len(records))


#: The largest relative sd a noise file may hold (1.0 = 100 %): ``calibrate`` refuses to write more, and a file
#: holding more was edited or corrupted (a trial's ``sigma_rel 50`` read as "σ 393%").
MAX_NOISE_SD = 1.0


def read_noise(path: Path, *, named: bool = False) -> CalibratedNoise:
    """A noise file written by ``calibrate`` (``{"profile": ..., "runs": N, "sigma_rel": {key: x},
    "run_to_run_rel": {key: x}}``, each ``x`` a relative sd, 0.05 = 5 %); empty when the file does not exist (a
    profile never calibrated). A file written before ``run_to_run_rel`` was measured reads with it empty, one
    written before ``runs`` with ``runs`` 0; unknown keys are ignored.

    :param named: the file was named on purpose (``compare --noise FILE``: one file for every test, whatever its
        name), so its ``profile`` is not checked against the file name. Otherwise the file is a profile's own,
        ``noise/<profile>.json`` (where ``calibrate`` writes it and pytest reads it), and a ``profile`` key naming
        another profile is refused: a file copied from another profile was used silently (fresh-user trial).
    :raises NoiseFileError: the file exists but cannot be read, is not JSON, is not an object with a ``sigma_rel``
        object, holds an sd that is not a finite number in 0..:data:`MAX_NOISE_SD`, a ``runs`` that is not a
        positive integer, or (unless ``named``) a ``profile`` other than its file name's. The message names the
        file, the key and the value, and the fix, e.g. ``.specdec/noise/eagle3.json: sigma_rel.output_tok_s:
        expected a relative sd from 0 to 1.0 (100%), got -0.05; rerun calibrate (python -m pytest_specdec calibrate
        PROFILE_FILE --profile eagle3 --runs K) or delete the file``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return CalibratedNoise()
    except (OSError, UnicodeDecodeError) as exc:
        raise NoiseFileError(f"{path}: cannot read the noise file ({getattr(exc, 'strerror', None) or exc}); "
                             f"{_noise_fix(path.stem)}", path=path) from None  # fmt: skip
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NoiseFileError(f"{path}: not JSON ({exc}); {_noise_fix(path.stem)}", path=path) from None
    if not named and isinstance(data, dict) and "profile" in data and data["profile"] != path.stem:
        raise NoiseFileError(f"{path}: profile: expected {path.stem!r} (the profile of the file name), got "
                             f"{_shown(data['profile'])}: the noise of another profile (a copied file?); "
                             f"{_noise_fix(path.stem)}", path=path, key="profile")  # fmt: skip
    if not isinstance(data, dict) or not isinstance(data.get("sigma_rel"), dict):
        got = data.get("sigma_rel") if isinstance(data, dict) else data
        raise NoiseFileError(f"{path}: sigma_rel: expected an object of relative sds (key -> sd), got "
                             f"{_shown(got)}; {_noise_fix(path.stem)}", path=path, key="sigma_rel")  # fmt: skip
    name = data["profile"] if isinstance(data.get("profile"), str) and data["profile"] else path.stem

    def sds(key: str) -> dict[str, float]:
        value = data.get(key)
        if value is None and key == "run_to_run_rel":
            return {}  # written before the run-to-run part was measured
        if not isinstance(value, dict):
            raise NoiseFileError(f"{path}: {key}: expected an object of relative sds (key -> sd), got "
                                 f"{_shown(value)}; {_noise_fix(name)}", path=path, key=key)  # fmt: skip
        out: dict[str, float] = {}
        for k, v in value.items():
            if not _is_sd(v):
                raise NoiseFileError(f"{path}: {key}.{k}: expected a relative sd from 0 to {MAX_NOISE_SD} "
                                     f"({MAX_NOISE_SD:.0%}), got {_shown(v)}; {_noise_fix(name)}", path=path,
                                     key=f"{key}.{k}")  # fmt: skip
            out[str(k)] = float(v)
        return out

    runs = data.get("runs", 0)  # absent in files written before it was recorded
    if "runs" in data and (not isinstance(runs, int) or isinstance(runs, bool) or runs < 1):
        raise NoiseFileError(f"{path}: runs: expected the number of server starts measured (an integer >= 1), got "
                             f"{_shown(runs)}; {_noise_fix(name)}", path=path, key="runs")  # fmt: skip
    return CalibratedNoise(sds("sigma_rel"), sds("run_to_run_rel"), runs)


def _is_sd(value: object) -> bool:
    """A relative sd a noise file or a stored record may hold: a finite number in 0..:data:`MAX_NOISE_SD`."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_NOISE_SD


def _shown(value: object) -> str:
    """A JSON value as a message shows it: ``-0.05``, ``'four'``, ``NaN``, ``null``, ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, list | dict):
        return f"a{'n object' if isinstance(value, dict) else ' list'}"
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # NaN, Infinity, -Infinity: as written in the file
    return repr(value)


def _noise_fix(profile: str) -> str:
    return (f"rerun calibrate (python -m pytest_specdec calibrate PROFILE_FILE --profile {profile} --runs K) or "
            "delete the file")  # fmt: skip
