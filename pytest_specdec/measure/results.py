"""Result records and fingerprints of specdec runs, and the JSON store they are saved in.

One ``RunFile`` per pytest session (``<root>/<run id>.json``) holds one ``ResultRecord`` per specdec test. Files are
written whole (temp file + ``os.replace``) and read leniently: unknown keys are ignored and missing optional keys
take their defaults, so old files stay readable (guidellm ``schemas/base.py`` tolerates extra keys the same way).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_specdec.core.errors import CompareError
from pytest_specdec.core.records import RunMetrics, median_metrics
from pytest_specdec.core.redaction import REDACTED, redact_argv, redact_env
from pytest_specdec.core.tolerances import parse_tolerances

if TYPE_CHECKING:
    from pytest_specdec.measure.runner import Measurement
    from pytest_specdec.serve.startup import RunningServer

__all__ = [
    "FINGERPRINT_PACKAGES",
    "ErroredTest",
    "RequestSample",
    "ResultRecord",
    "ResultStore",
    "RunFile",
    "SCHEMA_VERSION",
    "build_fingerprint",
    "check_name",
    "commit_info",
    "gpu_info",
    "machine_info",
    "metric_definitions",
    "new_run_id",
    "package_versions",
    "plugin_version",
    "profile_definition",
    "read_run_file",
]

#: Version of the JSON layout written by :class:`ResultStore`; readers accept any version. A key added that older
#: readers ignore and newer ones default when absent (``errored``) keeps the version.
SCHEMA_VERSION = 1
#: Distributions whose versions go into the fingerprint when installed in the server's Python environment.
FINGERPRINT_PACKAGES = (
    "sglang",
    "sgl-kernel",
    "sglang-kernel",
    "flashinfer-python",
    "flashinfer",
    "torch",
    "transformers",
    "vllm",
    "triton",
)
#: Launch-env prefixes recorded in the fingerprint (besides every variable the profile sets).
_ENV_PREFIXES = ("NCCL_", "SGLANG_", "CUDA_")
_PROBE_TIMEOUT_S = 30.0
#: Workload fields recorded in the fingerprint (``profiles.schema.Workload``).
_WORKLOAD_FIELDS = (
    "prompts",
    "api",
    "max_new_tokens",
    "num_requests",
    "concurrency",
    "warmup_requests",
    "temperature",
    "ignore_eos",
    "repeats",
    "request_rate",
    "burstiness",
    "arrival_seed",
    "slo",
)


# -- fingerprint ------------------------------------------------------------------------------------------------


def plugin_version() -> str:
    """The installed pytest-specdec version, or ``"unknown"`` when run from a source tree without metadata."""
    try:
        return importlib.metadata.version("pytest-specdec")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_PACKAGE_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(out))\n"
)


def package_versions(python: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Versions of :data:`FINGERPRINT_PACKAGES` installed for interpreter ``python``, read in a subprocess with
    ``importlib.metadata`` (nothing is imported: importing torch or sglang takes seconds and may touch the GPU).

    :param python: the server's interpreter (``profile.python`` or ``sys.executable``).
    :param env: the environment to run it with (the server's launch env, so ``PYTHONPATH`` matches).
    :returns: name -> version for the installed ones; ``{"error": "..."}`` when the probe itself failed.
    """
    try:
        done = subprocess.run(
            [python, "-c", _PACKAGE_PROBE, *FINGERPRINT_PACKAGES],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            env=dict(env) if env is not None else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"{python}: {exc}"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{python} exited {done.returncode}: {tail}"}
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"{python}: unreadable output {done.stdout[-200:]!r}"}
    return {str(k): str(v) for k, v in sorted(data.items())}


@lru_cache(maxsize=1)
def gpu_info() -> tuple[dict[str, str], ...]:
    """One ``{"name", "driver", "cuda"}`` per GPU from ``nvidia-smi --query-gpu=name,driver_version
    --format=csv,noheader`` (CUDA: the ``CUDA Version:`` of plain ``nvidia-smi``); empty without nvidia-smi.
    Cached per process (GPUs do not change during a session)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        query = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
        )
        banner = subprocess.run([exe], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return ()
    match = re.search(r"CUDA Version:\s*([0-9.]+)", banner.stdout or "")
    cuda = match.group(1) if match else ""
    gpus = []
    for line in (query.stdout or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0]:
            gpus.append({"name": parts[0], "driver": parts[1], "cuda": cuda})
    return tuple(gpus)


def commit_info(root: str | Path | None = None) -> dict[str, Any]:
    """The code a run measured, as pytest-benchmark's ``commit_info``: ``{"id", "dirty", "branch"}``.

    Read with ``git rev-parse HEAD`` / ``git status --porcelain`` / ``git rev-parse --abbrev-ref HEAD`` in ``root``
    (default: the working directory); outside a git checkout, ``$GITHUB_SHA`` (set by GitHub Actions) gives the id
    with ``dirty`` None. ``merge`` refuses to combine runs whose ids or dirty flags differ.

    :returns: the dict, or ``{}`` when neither git nor ``$GITHUB_SHA`` knows the commit.
    """
    cwd = str(root) if root is not None else None

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit:
        status = git("status", "--porcelain", "--untracked-files=no")
        return {
            "id": commit,
            "dirty": bool(status) if status is not None else None,
            "branch": git("rev-parse", "--abbrev-ref", "HEAD") or "",
        }
    sha = os.environ.get("GITHUB_SHA")
    return {"id": sha, "dirty": None, "branch": os.environ.get("GITHUB_REF_NAME", "")} if sha else {}


def machine_info() -> dict[str, Any]:
    """Host facts stored once per run: host name, OS, Python, GPUs (:func:`gpu_info`), plugin version, and the
    commit measured (:func:`commit_info` of the working directory)."""
    return {
        "host": platform.node(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpus": [dict(g) for g in gpu_info()],
        "plugin_version": plugin_version(),
        "commit": commit_info(),
    }


#: The installed package directory, written as ``<pytest_specdec>`` in profile definitions (bundled assets).
_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])


def profile_definition(profile: Any) -> dict[str, Any]:
    """The profile as its file defines it (``Profile.model_dump``, ``extends:`` already merged), made comparable
    across machines: ``name`` and ``source`` dropped, the profile file's directory written as ``<profiles>`` and
    this package's directory as ``<pytest_specdec>`` inside every string (two CI runners check the same repository
    out at different paths), ``api_key``, secret-looking ``env`` values and ``extra_args`` redacted as in the rest
    of the fingerprint. Stored as ``fingerprint["profile_def"]``; ``merge`` refuses
    runs whose definitions of one profile name differ.

    :param profile: a ``profiles.schema.Profile``.
    """
    data = profile.model_dump(mode="json", exclude={"name", "source"})
    base = str(Path(profile.source).resolve().parent) if profile.source else None

    def norm(value: Any) -> Any:
        if isinstance(value, str):
            if base and value.startswith(base):
                value = "<profiles>" + value[len(base) :]
            if value.startswith(_PACKAGE_DIR):
                value = "<pytest_specdec>" + value[len(_PACKAGE_DIR) :]
            return value
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            return [norm(v) for v in value]
        return value

    out = norm(data)
    if out.get("api_key") is not None:
        out["api_key"] = REDACTED
    out["env"] = redact_env(out.get("env") or {})
    out["extra_args"] = redact_argv(out.get("extra_args") or [], profile.api_key)
    return out


def _draft_facts(server: RunningServer) -> dict[str, Any]:
    """Draft path, sha256 of the draft's config.json (first 16 hex) and aux layer ids; empty without a draft.

    A launched server runs the draft it was given (an aux-id overlay included); a server given by URL runs what it
    reports (``speculative_draft_model_path`` of SGLang's ``/server_info``), read from that path when it is on this
    machine; the profile's own draft and aux ids say nothing of it (a fresh-user trial's URL server changed its aux
    ids and read "fingerprint: same as baseline")."""
    spec = server.profile.speculative
    if spec is None:
        return {}
    launch = server.launch
    reported = server.effective.raw.get("speculative_draft_model_path") if server.effective is not None else None
    if launch is None and isinstance(reported, str) and reported:
        return _draft_config({"path": reported, "config_hash": None, "aux_ids": None}, reported, None)
    path = launch.draft_path if launch is not None and launch.draft_path is not None else spec.draft_model_path
    facts: dict[str, Any] = {"path": str(path) if path else None, "config_hash": None, "aux_ids": None}
    return _draft_config(facts, path, spec.aux_hidden_state_layer_ids)


def _draft_config(facts: dict[str, Any], path: str | Path | None, aux: Sequence[int] | None) -> dict[str, Any]:
    """``facts`` with the config hash and aux ids of the draft at ``path`` (``aux`` when given: what the launch
    passed); left None when its config.json cannot be read (a URL server's draft on another machine)."""
    config: dict[str, Any] = {}
    if path:
        try:
            raw = (Path(path) / "config.json").read_bytes()
            facts["config_hash"] = hashlib.sha256(raw).hexdigest()[:16]
            loaded = json.loads(raw)
            config = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            pass
    if aux is None:
        eagle = config.get("eagle_config")
        aux = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    facts["aux_ids"] = list(aux) if aux is not None else None
    return facts


def _plain(value: Any) -> Any:
    """A workload value as JSON keeps it: ``workload.slo`` as ``{"ttft_ms": 500.0, ...}`` (None when unset)."""
    return value.as_ms() if hasattr(value, "as_ms") else value


def build_fingerprint(server: RunningServer, prompt_hash: str) -> dict[str, Any]:
    """Everything that can explain a performance change, as a JSON-safe dict (secrets redacted).

    Keys: ``plugin_version``; ``engine`` (``server.engine.name``); ``accept_length_native`` (how the engine states
    accept length itself, ``Engine.native_accept_length``); ``packages`` (:func:`package_versions` in the
    server's interpreter, ``{}`` for a server given by URL); ``argv`` (launch argv, api key redacted); ``env``
    (launch env variables starting NCCL_/SGLANG_/CUDA_ plus every variable the profile sets, redacted by name);
    ``draft`` (path, config hash, aux ids); ``speculative`` (the profile's block); ``effective`` (what the server
    reported, ``EffectiveConfig`` without ``raw``); ``prompt_hash``; ``workload`` (``profiles.schema.Workload`` fields);
    ``gpus`` (:func:`gpu_info`); ``host``; ``profile_def`` (:func:`profile_definition`); ``url`` (only for a server
    given by URL).

    :param server: the running server (``runner.RunningServer``), after its effective config was read back.
    :param prompt_hash: ``workload.prompt_set_hash`` of the prompts measured (``Measurement.prompt_hash``).
    """
    profile = server.profile
    launch = server.launch
    interpreter = server.engine.python(profile)
    if launch is not None:
        env_src = {k: v for k, v in launch.env.items() if k.startswith(_ENV_PREFIXES) or k in profile.env}
        packages = package_versions(interpreter, launch.env)
        argv = redact_argv(launch.argv, server.api_key)
    else:
        env_src = dict(profile.env)
        packages = {}
        argv = []
    eff = server.effective
    effective = None
    if eff is not None:
        effective = {f.name: getattr(eff, f.name) for f in dataclasses.fields(eff) if f.name != "raw"}
    wl = profile.workload
    fingerprint: dict[str, Any] = {
        "plugin_version": plugin_version(),
        "engine": server.engine.name,
        "accept_length_native": server.engine.native_accept_length,
        "packages": packages,
        "argv": argv,
        "env": redact_env(env_src),
        "draft": _draft_facts(server),
        "speculative": profile.speculative.model_dump(mode="json") if profile.speculative is not None else None,
        "effective": effective,
        "prompt_hash": prompt_hash,
        "workload": {name: _plain(getattr(wl, name)) for name in _WORKLOAD_FIELDS},
        "gpus": [dict(g) for g in gpu_info()],
        "host": platform.node(),
        "profile_def": profile_definition(profile),
    }
    if launch is None:
        fingerprint["url"] = server.base_url
    return fingerprint


# -- records ----------------------------------------------------------------------------------------------------


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that are fields of dataclass ``cls`` (lenient reading: the rest is ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True, slots=True)
class RequestSample:
    """One measured request, reduced to what a distribution plot or a re-analysis needs. Times in ms; None when
    not applicable (see ``metrics.RequestTiming``). ``itl_ms_mean`` is the mean of the request's per-token ITLs."""

    repeat: int
    ok: bool
    completion_tokens: int
    ttft_ms: float | None = None
    itl_ms_mean: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestSample:
        return cls(**_known(cls, data))


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else value_s * 1000.0


@dataclass(frozen=True, slots=True)
class ResultRecord:
    """The result of one specdec test on one profile.

    ``repeats`` maps every ``RunMetrics`` field to its per-repeat values (one per ``Measurement``, in order);
    ``metrics`` is the per-field median over repeats, ``records.median_metrics`` (the same numbers as
    ``runner.RunResult.metrics``: counts are lower medians, so integers). ``fingerprint`` is :func:`build_fingerprint`.
    """

    test_id: str
    profile: str
    metrics: dict[str, Any]
    repeats: dict[str, list[Any]]
    fingerprint: dict[str, Any]
    samples: tuple[RequestSample, ...] = ()
    outcome: str = ""
    wall_time: float = 0.0
    #: The paired reference arm (``pairing.PairedArms.to_dict``: vs, mode, pairs, first, per-pair values of both
    #: arms); empty when this profile was not measured against another.
    paired: dict[str, Any] = field(default_factory=dict)
    #: Threshold key -> "passed" | "FAILED: <verdict line>" | "undecided: <verdict line>" (a sequential verdict
    #: that spent its budget) | "n/a: <why>" (``thresholds.ThresholdChecks.outcomes``) of this
    #: test's marker/profile thresholds; empty for old records or tests without thresholds.
    checks: dict[str, str] = field(default_factory=dict)
    #: What the verdicts cost: ``server_s`` (seconds the record's phases held servers, warmups and a paired
    #: reference arm included), ``repeats``, and with sequential verdicts ``verdicts``: key -> ``{"verdict",
    #: "repeats", "server_s"}`` at the look that decided it (``verdict.record_cost``); empty for old records.
    cost: dict[str, Any] = field(default_factory=dict)
    #: The session was interrupted (Ctrl-C) before it completed: the record is kept, but never becomes a baseline.
    interrupted: bool = False
    #: What this record cannot decide as a baseline, said when it was stored (``judge.baseline.baseline_notes``: an
    #: outlier repeat, a spread too wide for the tolerances), each with its fix; empty when it can, or for old records.
    baseline_notes: tuple[str, ...] = ()

    def baseline_problem(self) -> str:
        """Why this record may not become a baseline, or ``""`` when it may: a baseline is clean, i.e. its test
        completed (the session was not interrupted), passed, and every verdict it recorded passed (none failed or
        undecided: ``cost["verdicts"]`` and ``checks``).

        Examples: ``"interrupted"``, ``"failed"``, ``"undecided: compare, min_tok_s"``. Old records without
        verdicts are judged on their outcome alone.
        """
        return self._problem(open_compare=False)

    def history_problem(self) -> str:
        """Why this record may not join a baseline's history (the stored runs whose repeats a compare pools), or
        ``""`` when it may: as :meth:`baseline_problem`, except that a compare left undecided with no open row's
        estimate beyond its tolerance (``cost["verdicts"]["compare"]["suspected"]`` empty) may join, also when
        ``--specdec-undecided=fail`` failed the test for it alone (``cost["failed_by"] == "undecided"``). Those are
        the unchanged nights of a gated nightly: the runs that measure the run-to-run spread which keeps the first
        nights undecided (refused, every such night stayed undecided; fresh-user trial). One with a suspected row
        may be the regression it could not decide, and stays out; records stored before ``suspected`` was, too.
        """
        return self._problem(open_compare=True)

    def undecided_keys(self) -> list[str]:
        """The verdicts of this record left undecided at their budget: the keys of ``cost["verdicts"]`` that say so
        (the sequential ones: floors, compare, ``min_speedup``), then those of ``checks`` that start ``undecided:``
        and have no cost entry (the tail ceilings and ``min_goodput``, judged once on every request: a trial saw a
        p99 ceiling open in the warnings read ``passed`` in the table and go uncounted). Empty when none is."""
        verdicts = self.cost.get("verdicts") or {}
        keys = [str(k) for k, c in verdicts.items() if isinstance(c, Mapping) and c.get("verdict") == "undecided"]
        return keys + [k for k, text in self.checks.items()
                       if str(text).startswith("undecided:") and k not in verdicts]  # fmt: skip

    def compare_cost(self) -> Mapping[str, Any] | None:
        """What this record's baseline compare stored (``cost["verdicts"]["compare"]``: verdict, baseline_run, ...),
        None for a record that was not compared."""
        verdicts = self.cost.get("verdicts") or {}
        compare = verdicts.get("compare") if isinstance(verdicts, Mapping) else None
        return compare if isinstance(compare, Mapping) else None

    def passed_against(self) -> str | None:
        """The run id whose record of this test this record's compare passed against: the link
        ``judge.baseline.Baselines.find`` follows back from the newest clean night to the reference it was judged
        by, so that a night passing within its tolerance does not move the reference. None when the compare did
        not pass, crossed to another test (``--specdec-compare-profile``: ``baseline_test``), or restarted the
        reference (``new_reference``: a row improved beyond its tolerance and none was worse than half of its own,
        ``judge.verdict.judge_compare``); and for records stored before 2026-12-07 (no ``baseline_run``)."""
        compare = self.compare_cost()
        if compare is None or compare.get("verdict") != "passed" or compare.get("new_reference"):
            return None
        run = compare.get("baseline_run")
        return run if isinstance(run, str) and run and compare.get("baseline_test") == self.test_id else None

    def _problem(self, *, open_compare: bool) -> str:
        if self.interrupted:
            return "interrupted"
        by_policy = open_compare and self.outcome == "failed" and self.cost.get("failed_by") == "undecided"
        if self.outcome not in ("passed", "") and not by_policy:
            return self.outcome
        found: dict[str, list[str]] = {}
        verdicts = self.cost.get("verdicts") or {}
        compare = verdicts.get("compare") if isinstance(verdicts, Mapping) else None
        # Only the compare may be open, and only with no suspected row (its check repeats it in words).
        unsuspected = (open_compare and isinstance(compare, Mapping) and compare.get("verdict") == "undecided"
                       and compare.get("suspected") == [])  # fmt: skip
        for key, cost in verdicts.items():
            verdict = cost.get("verdict") if isinstance(cost, Mapping) else None
            if unsuspected and key == "compare":
                continue
            if verdict in ("FAILED", "undecided"):
                found.setdefault(str(verdict), []).append(str(key))
        for key, text in self.checks.items():
            verdict = text.split(":", 1)[0]
            if unsuspected and key == "compare" and verdict == "undecided":
                continue
            if verdict in ("FAILED", "undecided") and key not in found.get(verdict, []):
                found.setdefault(verdict, []).append(key)
        return "; ".join(f"{verdict}: {', '.join(keys)}" for verdict, keys in sorted(found.items()))

    @property
    def categories(self) -> list[str]:
        """The prompt categories this record has results for (``metrics["by_category"]``), sorted."""
        by = self.metrics.get("by_category")
        return sorted(by) if isinstance(by, dict) else []

    @property
    def workload(self) -> dict[str, Any]:
        """``fingerprint["workload"]`` (empty when absent)."""
        wl = self.fingerprint.get("workload")
        return dict(wl) if isinstance(wl, dict) else {}

    def values(self, field_name: str) -> list[float]:
        """Per-repeat values of one metric field, None dropped (falls back to ``metrics`` for old records).

        ``FIELD[CATEGORY]`` (``accept_length[code]``) reads the field of one prompt category (``by_category``).
        """
        if field_name.endswith("]") and "[" in field_name:
            name, category = field_name[:-1].split("[", 1)
            per_repeat = self.repeats.get("by_category") or [self.metrics.get("by_category")]
            found = [(d.get(category) or {}).get(name) if isinstance(d, dict) else None for d in per_repeat]
            return [float(v) for v in found if isinstance(v, int | float) and not isinstance(v, bool)]
        vals = self.repeats.get(field_name)
        if vals is None:
            vals = [self.metrics.get(field_name)]
        return [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]

    @classmethod
    def from_measurements(
        cls,
        test_id: str,
        measurements: Sequence[Measurement],
        fingerprint: Mapping[str, Any],
        *,
        outcome: str = "",
        paired: Mapping[str, Any] | None = None,
    ) -> ResultRecord:
        """Build a record from the repeats of one test.

        :param test_id: the pytest node id.
        :param measurements: one ``runner.Measurement`` per repeat, all of the same profile.
        :raises ValueError: no measurement given.
        """
        if not measurements:
            raise ValueError(f"{test_id}: no measurement to record")
        from pytest_specdec.measure.metrics import pooled_tails, request_timing

        per_repeat = [m.metrics.as_dict() for m in measurements]
        names = [f.name for f in dataclasses.fields(RunMetrics)]
        repeats = {name: [d.get(name) for d in per_repeat] for name in names}
        merged = median_metrics([m.metrics for m in measurements]).as_dict()
        if any(m.records for m in measurements):  # tails weigh every repeat's requests (``runner.pooled_metrics``)
            merged["tails"] = pooled_tails([(m.records, m.metrics.tails) for m in measurements])
        samples = []
        for i, m in enumerate(measurements):
            for rec in m.records:
                if not rec.ok:
                    samples.append(RequestSample(repeat=i, ok=False, completion_tokens=rec.completion_tokens))
                    continue
                t = request_timing(rec)
                itl = sum(t.itl_s) / len(t.itl_s) * 1000.0 if t.itl_s else None
                samples.append(
                    RequestSample(
                        repeat=i,
                        ok=True,
                        completion_tokens=rec.completion_tokens,
                        ttft_ms=_ms(t.ttft_s),
                        itl_ms_mean=itl,
                        tpot_ms=_ms(t.tpot_s),
                        e2e_ms=_ms(t.e2e_s),
                    )
                )
        return cls(
            test_id=test_id,
            profile=measurements[0].profile,
            metrics=merged,
            repeats=repeats,
            fingerprint=dict(fingerprint),
            samples=tuple(samples),
            outcome=outcome,
            wall_time=measurements[-1].wall_time,
            paired=dict(paired or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (``json.dumps`` works on it); inverse of :meth:`from_dict`."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        # Field by field: dataclasses.asdict deep-copies and took 8x longer (13 s for the 192,000 samples of a merged
        # 1,000-shard run); a sample holds only scalars.
        names = [f.name for f in dataclasses.fields(RequestSample)]
        data["samples"] = [{n: getattr(s, n) for n in names} for s in self.samples]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultRecord:
        """Lenient: unknown keys ignored, optional keys defaulted.

        :raises ValueError: a required key (test_id, profile, metrics) is missing or has the wrong type.
        """
        for key, typ in (("test_id", str), ("profile", str), ("metrics", dict)):
            if not isinstance(data.get(key), typ):
                raise ValueError(f"result record: {key!r} missing or not a {typ.__name__}")
        kw = _known(cls, data)
        kw["repeats"] = {str(k): list(v) for k, v in (data.get("repeats") or {}).items()}
        kw["fingerprint"] = dict(data.get("fingerprint") or {})
        kw["paired"] = dict(data.get("paired") or {}) if isinstance(data.get("paired"), dict) else {}
        checks = data.get("checks")
        kw["checks"] = {str(k): str(v) for k, v in checks.items()} if isinstance(checks, dict) else {}
        kw["cost"] = dict(data["cost"]) if isinstance(data.get("cost"), dict) else {}
        kw["interrupted"] = data.get("interrupted") is True
        notes = data.get("baseline_notes")
        kw["baseline_notes"] = tuple(str(n) for n in notes) if isinstance(notes, list) else ()
        kw["samples"] = tuple(RequestSample.from_dict(s) for s in data.get("samples") or () if isinstance(s, dict))
        return cls(**kw)


#: The phases of a test that can fail before it measured (``specdec_run`` measures in its setup).
_ERRORED_WHEN = ("setup", "call")


@dataclass(frozen=True, slots=True)
class ErroredTest:
    """A specdec test that errored or failed before it measured: its server did not start, or its setup (or body)
    raised before ``specdec_run`` returned. It has no :class:`ResultRecord`, and a compare of its run could not have
    seen a regression of it. Kept at run level (``RunFile.errored``), apart from the records, so every reader that
    iterates records (summary, trend, plot, merge, calibrate) sees what it saw before.

    Example: ``ErroredTest("t.py::test_run[eagle3]", "eagle3", "setup", "server 'eagle3' exited with code 3 before
    it was ready after 0.4 s ...")``.
    """

    #: The pytest node id.
    test_id: str
    #: The profile of its ``specdec_profile`` parametrization; None where it is not known.
    profile: str | None
    #: The phase that failed: ``"setup"`` or ``"call"``; ``"crash"`` where its xdist worker crashed while running it
    #: (pytest-xdist does not know the phase).
    when: str
    #: The first line of the error (its exception's message).
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"test_id": self.test_id, "profile": self.profile, "when": self.when, "error": self.error}

    @classmethod
    def from_dict(cls, data: object) -> ErroredTest:
        """:raises ValueError: not an object, or ``test_id`` missing or not a string (no run writes one)."""
        if not isinstance(data, dict) or not isinstance(data.get("test_id"), str):
            raise ValueError(f'expected {{"test_id": "...", ...}}, got {json.dumps(data, default=str)[:200]}')
        profile = data.get("profile")
        return cls(
            test_id=data["test_id"],
            profile=profile if isinstance(profile, str) else None,
            when=str(data.get("when") or ""),
            error=str(data.get("error") or ""),
        )


@dataclass(frozen=True, slots=True)
class RunFile:
    """One pytest session's results: ``run_id`` (also the file stem), start wall time (``time.time()``), machine
    info (:func:`machine_info`), one record per specdec test that measured, and the specdec tests that errored or
    failed before they measured (``errored``: empty in a run where none did, and in files written before the key
    was). ``interrupted``: the session ended early (Ctrl-C, an xdist worker's KeyboardInterrupt): tests it selected
    may be in neither list, so the run cannot be judged whole (False in files written before the key was)."""

    run_id: str
    started: float
    machine: dict[str, Any] = field(default_factory=dict)
    results: tuple[ResultRecord, ...] = ()
    schema: int = SCHEMA_VERSION
    errored: tuple[ErroredTest, ...] = ()
    interrupted: bool = False

    def find(self, test_id: str) -> ResultRecord | None:
        """The record of ``test_id``, or None."""
        return next((r for r in self.results if r.test_id == test_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "started": self.started,
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "machine": self.machine,
            "metric_definitions": metric_definitions(),
            "results": [r.to_dict() for r in self.results],
            "errored": [e.to_dict() for e in self.errored],
            "interrupted": self.interrupted,
        }

    def to_json(self, *, compact: bool = False) -> str:
        """The file content; ``compact`` drops the indentation (json's C encoder runs only without ``indent``:
        4-5x faster on a merged run of many shards, and half the size)."""
        if compact:
            return json.dumps(self.to_dict(), separators=(",", ":"), default=str) + "\n"
        return json.dumps(self.to_dict(), indent=1, sort_keys=False, default=str) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunFile:
        """Lenient as :meth:`ResultRecord.from_dict`; ``errored`` absent (files written before it was) reads as none.

        :raises ValueError: not a run file (no ``run_id`` or ``results`` list), a bad record, or an ``errored`` that
            is not a list of ``{"test_id": ...}`` objects.
        """
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
            raise ValueError("not a pytest-specdec run file: no 'run_id'")
        results = data.get("results", [])
        if not isinstance(results, list):
            raise ValueError("not a pytest-specdec run file: 'results' is not a list")
        errored = data.get("errored") or []
        if not isinstance(errored, list):
            raise ValueError(f"errored: expected a list of the tests that errored before they measured, got "
                             f"{json.dumps(errored, default=str)[:200]}; {_EDITED_FIX}")  # fmt: skip
        found = []
        for i, entry in enumerate(errored):
            try:
                found.append(ErroredTest.from_dict(entry))
            except ValueError as exc:
                raise ValueError(f"errored[{i}]: {exc}; {_EDITED_FIX}") from None
        return cls(
            run_id=data["run_id"],
            started=float(data.get("started") or 0.0),
            machine=dict(data.get("machine") or {}),
            results=tuple(ResultRecord.from_dict(r) for r in results),
            schema=int(data.get("schema") or SCHEMA_VERSION),
            errored=tuple(found),
            interrupted=data.get("interrupted") is True,
        )


def metric_definitions() -> dict[str, str]:
    """Metric name -> "formula [unit]; source" for every metric (``metrics.METRICS``), written into each run file so
    a stored accept length says which definition it is in."""
    from pytest_specdec.core.metric_table import METRICS

    return {name: f"{spec.formula} [{spec.unit}]; source: {spec.source}" for name, spec in METRICS.items()}


def new_run_id(now: float | None = None) -> str:
    """``YYYYmmddTHHMMSSZ-mmmxxxx``: UTC start time, its milliseconds, and 4 random hex digits. Ids sort by start
    time, also for runs started in the same second (the store's "newest clean run" depends on it: a failed run that
    sorted before the clean run of its second was not "passed over"); the random part keeps sessions that start in
    the same millisecond apart."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"{stamp}-{int(now % 1 * 1000):03d}{secrets.token_hex(2)}"


#: Characters a baseline name may not hold (pytest-benchmark's ``--benchmark-save`` refuses the same), besides
#: whitespace and a leading dot.
_NAME_FORBIDDEN = set("\\/:*?<>|")


#: Saved names an unknown run's message lists, at most.
_NAMES_SHOWN = 10


def check_name(name: str) -> str:
    """A baseline name as given to ``--specdec-save`` or ``save``: returned unchanged when usable.

    :raises ValueError: empty, ``latest`` (the option's own value), a leading dot, whitespace, or one of
        ``\\ / : * ? < > |`` (the message says which).
    """
    if not name:
        raise ValueError("a name cannot be empty, e.g. night-1")
    if name == "latest":
        raise ValueError("'latest' means the newest clean run; choose another name, e.g. night-1")
    bad = "".join(sorted({c for c in name if c in _NAME_FORBIDDEN or c.isspace()}))
    if bad or name.startswith("."):
        shown = f"it has {bad!r}" if bad else "it starts with a dot"
        raise ValueError(f"{name!r}: must not start with a dot or hold whitespace or any of \\/:*?<>| ({shown})")
    return name


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file in its directory and ``os.replace``: a reader never sees a
    partial file (the last replace wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class ResultStore:
    """A directory of run files, ``<root>/<run id>.json``, and the names given to some of them,
    ``<root>/names/<NAME>`` (a text file holding the run id, as a git ref holds a commit).

    Usage::

        store = ResultStore(out_dir / "results", current=run.run_id)
        path = store.save(run)           # controller only under xdist
        store.save_name("night-1", run.run_id)
        baseline = store.load("night-1")  # a name, a run id (or unique prefix), a file, or "latest"
    """

    #: The folder of names under the root (not a ``*.json``: every run file lister skips it).
    NAMES = "names"

    def __init__(self, root: Path, *, current: str | None = None) -> None:
        self.root = Path(root)
        #: The running session's id: ``load("latest")`` skips it.
        self.current = current

    def __repr__(self) -> str:
        return f"ResultStore({str(self.root)!r}, current={self.current!r})"

    def save(self, run: RunFile, *, compact: bool = False) -> Path:
        """Write ``run`` atomically: a temp file in ``root`` then ``os.replace``; concurrent writers never leave a
        partial file (the last replace wins for the same run id). ``compact``: see ``RunFile.to_json``.

        :returns: the file written.
        """
        path = self.root / f"{run.run_id}.json"
        _write_atomic(path, run.to_json(compact=compact))
        return path

    def save_name(self, name: str, run_id: str) -> Path:
        """Name stored run ``run_id`` ``name`` (``--specdec-save``, ``save``): ``<root>/names/<name>`` then holds the
        run id; a name given again moves to the new run (the last save wins), as a branch moves.

        :raises ValueError: an unusable name (:func:`check_name`).
        :raises CompareError: no run file of ``run_id`` in the store.
        :returns: the name's file.
        """
        check_name(name)
        if not (self.root / f"{run_id}.json").is_file():
            raise CompareError(f"no run {run_id!r} in {self.root}: nothing to name {name!r}")
        path = self.root / self.NAMES / name
        _write_atomic(path, run_id + "\n")
        return path

    def names(self) -> dict[str, str]:
        """Every name given in this store -> the run id it points at (sorted by name; unreadable files skipped)."""
        folder = self.root / self.NAMES
        found: dict[str, str] = {}
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if path.is_file() and not path.name.startswith("."):
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    run_id = path.read_text(encoding="utf-8").strip()
                    if run_id:
                        found[path.name] = run_id
        return found

    def named(self, name: str) -> str | None:
        """The run id ``name`` points at (``save_name``), or None when no such name was given."""
        try:
            check_name(name)
        except ValueError:
            return None
        return self.names().get(name)

    def list(self) -> list[Path]:
        """Run files, oldest first (by file stem = run id, which starts with the UTC time)."""
        if not self.root.is_dir():
            return []
        return sorted((p for p in self.root.glob("*.json") if not p.name.startswith(".")), key=lambda p: p.stem)

    def load(self, ref: str) -> RunFile:
        """Load a run by ``ref``: a name given with ``--specdec-save``/``save`` (names resolve first), a path to a
        file, a run id (file stem) or a unique stem prefix, or ``latest`` (the newest run older than ``current``: run
        ids sort by their UTC start, so a later run is never the baseline of an earlier one).

        :raises CompareError: nothing matches, the prefix is ambiguous, or the file is not a readable run file.
        """
        path = self.resolve(ref)
        return read_run_file(path)

    def _nothing_before(self) -> str:
        """Why ``latest`` names no run: none is stored, or every stored run is ``current`` or newer (``compare latest
        RUN`` with RUN the oldest stored run said "run once to create one" beside runs that existed)."""
        files = self.list()
        if not files:
            return f"no run stored in {self.root}: run the tests once to store one, then compare the next run with it"
        if [p.stem for p in files] == [self.current]:
            where = f"{self.current} is the only run stored in {self.root}"
        elif any(p.stem == self.current for p in files):
            where = f"{self.current} is the oldest of the {len(files)} runs stored in {self.root}"
        else:
            where = f"every run stored in {self.root} ({len(files)}) is newer than {self.current}"
        return (f"no run stored before {self.current}: {where}, so 'latest' (the newest run stored before CURRENT) "
                "names none; name BASE explicitly (a run id or a saved name), or store a later run and compare that "
                "with 'latest'")  # fmt: skip

    def resolve(self, ref: str) -> Path:
        """The file ``ref`` names (see :meth:`load`). :raises CompareError: as :meth:`load`."""
        named = self.named(ref) if ref != "latest" else None
        if named is not None:
            path = self.root / f"{named}.json"
            if not path.is_file():
                raise CompareError(f"name {ref!r} points at run {named}, which is not in {self.root} (removed?); "
                                   f"name another run: python -m pytest_specdec save RUN {ref}")  # fmt: skip
            return path
        direct = Path(ref)
        if ref != "latest" and (direct.suffix == ".json" or os.sep in ref) and direct.is_file():
            return direct
        files = self.list()
        if ref == "latest":
            # Older than the current run only: `compare latest RUN` once took a run stored after RUN as its BASE.
            others = [p for p in files if self.current is None or p.stem < self.current]
            if not others:
                raise CompareError(self._nothing_before())
            return others[-1]
        exact = [p for p in files if p.stem == ref]
        if exact:
            return exact[0]
        prefixed = [p for p in files if p.stem.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if len(prefixed) > 1:
            names = ", ".join(p.stem for p in prefixed[:5])
            raise CompareError(f"run {ref!r} is ambiguous in {self.root}: {names}")
        given = sorted(self.names())
        # A fresh user gave --specdec-compare=night-1: the names that exist are what to pick from (or how to make one).
        if given:
            more = f", ... ({len(given)} in all)" if len(given) > _NAMES_SHOWN else ""
            known = f"; saved names: {', '.join(given[:_NAMES_SHOWN])}{more}"
        else:
            known = "; no names saved (pytest --specdec-save NAME, or python -m pytest_specdec save RUN NAME)"
        close = difflib.get_close_matches(ref, ["latest", *given], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise CompareError(f"no run {ref!r}{hint}: not a file and no run id in {self.root} ({len(files)} "
                           f"run{'s' if len(files) != 1 else ''} stored{known})")  # fmt: skip


#: ``RunMetrics`` fields that hold a count, a duration, a rate or a latency: a number >= 0, or None (not applicable).
_NUMBER_FIELDS = frozenset(
    f.name for f in dataclasses.fields(RunMetrics) if f.type in ("int", "float", "int | None", "float | None")
)


#: The fix a stored run no run could have written is refused with (``read_run_file``).
_EDITED_FIX = "the file was edited or damaged: store the run again (rerun its tests) or remove the file"


def _bad_number(value: object) -> bool:
    """Whether a stored metric value is none of: None (not applicable), a finite number >= 0."""
    if value is None:
        return False
    if not isinstance(value, int | float) or isinstance(value, bool):
        return True
    return not math.isfinite(value) or value < 0


def _check_numbers(path: Path, run: RunFile) -> None:
    """:raises CompareError: a record's ``metrics`` or ``repeats`` value of a numeric ``RunMetrics`` field, or a paired
    arm's per-pair value (``paired.target``/``paired.reference``), is a string,
    a list, a boolean, negative or not finite (no run writes one: the file was edited or damaged; a trial's
    ``output_tok_s`` repeats ``[-5, "x", null]`` read as "-104.5%")."""
    for record in run.results:
        for name in sorted(_NUMBER_FIELDS.intersection(record.repeats)):
            for i, value in enumerate(record.repeats[name]):
                if _bad_number(value):
                    raise CompareError(f"{path}: {record.test_id}: repeats.{name}[{i}]: expected a number >= 0 or "
                                       f"null, got {json.dumps(value)}; {_EDITED_FIX}")  # fmt: skip
        for name in sorted(_NUMBER_FIELDS.intersection(record.metrics)):
            if _bad_number(record.metrics[name]):
                raise CompareError(f"{path}: {record.test_id}: metrics.{name}: expected a number >= 0 or null, got "
                                   f"{json.dumps(record.metrics[name])}; {_EDITED_FIX}")  # fmt: skip
        # The paired arms' per-pair values: what a paired profile's ratio rows are judged on (a trial's NaN there was
        # dropped silently: n=23 of 24).
        for arm in ("target", "reference"):
            values_of = (record.paired or {}).get(arm)
            for name, values in sorted(values_of.items()) if isinstance(values_of, dict) else ():
                for i, value in enumerate(values if isinstance(values, list) else ()):
                    if _bad_number(value):
                        raise CompareError(f"{path}: {record.test_id}: paired.{arm}.{name}[{i}]: expected a number "
                                           f">= 0 or null, got {json.dumps(value)}; {_EDITED_FIX}")  # fmt: skip


def _design_problem(design: object) -> str:
    """What is wrong with a stored ``cost["design"]`` (``verdict.record_cost`` writes ``{"start": N,
    "max_repeats": M}``, integers with 1 <= N <= M: ``verdict.design_for``), as ``key: expected ..., got ...``; ``""``
    when nothing is."""
    if not isinstance(design, dict):
        return (f"cost.design: expected an object {{\"start\": N, \"max_repeats\": M}} (the sequential design the test "
                f"was judged with), got {json.dumps(design)}")  # fmt: skip
    for key in ("start", "max_repeats"):
        value = design.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            shown = json.dumps(value) if key in design else "nothing (the key is missing)"
            return f"cost.design.{key}: expected an integer >= 1, got {shown}"
    if design["max_repeats"] < design["start"]:
        return f"cost.design.max_repeats: expected an integer >= start ({design['start']}), got {design['max_repeats']}"
    return ""


def _tolerances_problem(spec: object) -> str:
    """What is wrong with a stored ``cost["tolerances"]`` (``verdict.record_cost`` writes ``format_tolerances`` of
    the merged layers, a non-empty string ``parse_tolerances`` reads; a list of such strings reads too, as a
    profile's ``tolerances:``), as ``key: expected ..., got ...``; ``""`` when nothing is."""
    texts = [str(t) for t in spec] if isinstance(spec, list) and all(isinstance(t, str) for t in spec) else []
    if isinstance(spec, str):
        texts = [spec]
    if not any(t.strip() for t in texts):
        return (f"cost.tolerances: expected the tolerances the test was judged with, e.g. \"output_tok_s:5% "
                f"accept_length:2%\", got {json.dumps(spec)}")  # fmt: skip
    try:
        parse_tolerances(texts)
    except ValueError as exc:
        return f"cost.tolerances: {exc}"
    return ""


def _check_cost(path: Path, run: RunFile) -> None:
    """:raises CompareError: a record's ``cost.design`` or ``cost.tolerances`` is present but of a shape no run
    writes (:func:`_design_problem`, :func:`_tolerances_problem`). The ``compare`` command judges a stored run at
    them (``judge.compare.design_of``, ``judged_tolerances``): a hand-edited one was ignored there, silently, and
    the run judged at a single look or its profile's tolerances. Absent keys (records stored before they were) are
    fine."""
    for record in run.results:
        problem = ""
        if "design" in record.cost:
            problem = _design_problem(record.cost["design"])
        if not problem and "tolerances" in record.cost:
            problem = _tolerances_problem(record.cost["tolerances"])
        if problem:
            raise CompareError(f"{path}: {record.test_id}: {problem}; {_EDITED_FIX}")


def read_run_file(path: Path) -> RunFile:
    """:raises CompareError: unreadable, not JSON, not a run file, a record's metric value no run writes (a
    string, a negative or a non-finite number: ``_check_numbers``), or a record's stored design or tolerances of a
    shape no run writes (``_check_cost``); the message names the path (and the test, the key and the value)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CompareError(f"{path}: cannot read run file: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CompareError(f"{path}: not JSON: {exc}") from None
    try:
        run = RunFile.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise CompareError(f"{path}: {exc}") from None
    _check_numbers(Path(path), run)
    _check_cost(Path(path), run)
    return run
