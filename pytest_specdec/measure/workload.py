"""Prompt sets and the request schedule of one phase: which prompts are sent, in which order, with which settings,
and, in an open loop (``workload.request_rate``), when each request arrives."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.profiles.schema import RandomPrompts, Workload

__all__ = [
    "BUILTIN_PROMPTS",
    "Prompt",
    "RequestSpec",
    "arrival_times",
    "build_requests",
    "load_prompts",
    "prompt_set_hash",
    "random_prompts",
    "tokenizer_vocab_size",
    "workload_arrivals",
    "workload_prompts",
]

#: The bundled prompt set, one ``{"prompt": ...}`` object per line; ``workload.prompts: builtin`` selects it.
BUILTIN_PROMPTS = Path(__file__).parents[1] / "refserver" / "prompts.jsonl"

_JSONL_FIX = 'fix: write one JSON object per line, e.g. {"prompt": "Explain speculative decoding."}'
_SHAREGPT_FIX = (
    'fix: give a JSON list of {"conversations": [{"from": "human", "value": "..."}, ...]} entries, '
    'or use a .jsonl file with one {"prompt": ...} per line'
)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt of a prompt set: its text, its category, and for ``prompts: random`` its token ids and output
    length.

    Usage::

        Prompt("Explain speculative decoding.", "prose")
        Prompt("", input_ids=(17, 18, 19), max_new_tokens=64)   # a prompts: random entry
    """

    #: The prompt sent as ``text`` / ``prompt`` / the user message; ``""`` for a token-id prompt.
    text: str
    #: The JSONL ``category`` field (e.g. ``code``), for per-category results; None when the file gives none.
    category: str | None = None
    #: Token ids sent as ``input_ids`` instead of the text; None for a text prompt.
    input_ids: tuple[int, ...] | None = None
    #: This prompt's ``max_new_tokens`` (bench_serving draws one per prompt); None: the workload's.
    max_new_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send: the prompt text and its sampling settings (SGLang ``sampling_params`` names)."""

    prompt: str
    max_new_tokens: int
    temperature: float
    ignore_eos: bool
    #: Token ids sent instead of ``prompt`` (SGLang ``/generate`` ``input_ids``; ``bench_serving``'s random ids).
    input_ids: tuple[int, ...] | None = None
    #: The prompt's category (``Prompt.category``), for per-category results; None when uncategorized.
    category: str | None = None
    #: Open loop: seconds after the phase's start at which the request arrives (``workload_arrivals``); None in a
    #: closed loop (sent as soon as one of ``concurrency`` slots is free).
    arrival_s: float | None = None


def load_prompts(spec: str, base_dir: str | Path) -> list[Prompt]:
    """Read a prompt set.

    :param spec: ``"builtin"`` (:data:`BUILTIN_PROMPTS`) or a path, relative paths resolved against ``base_dir``
        (the profile file's directory). Format by content: a file whose first non-blank character is ``[`` is
        ShareGPT-style JSON (a list of ``{"conversations": [{"from": "human", "value": ...}, ...]}``; the first
        human turn is the prompt; entries without one are skipped, as SGLang's ``sharegpt`` dataset loader does);
        anything else is JSONL, one object per line with a string ``"prompt"`` or ``"text"`` and an optional string
        ``"category"`` (``code``, ``prose``, ...: results are also reported per category); blank lines skipped.
    :param base_dir: directory relative paths resolve against.
    :returns: the prompts in file order, at least one.
    :raises ProfileError: file missing or unreadable, invalid JSON, a line/entry without a usable prompt, or no
        prompt at all; the message names the file, the line (JSONL) or entry index (JSON) and the fix.
    """
    path = BUILTIN_PROMPTS if spec == "builtin" else Path(base_dir) / Path(spec).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(
            f"workload.prompts: prompt file not found: {path}; fix: give 'builtin' or a path to a .jsonl/.json "
            f"file (relative paths resolve against {base_dir})",
            path=path,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"workload.prompts: cannot read {path}: {exc}", path=path) from None
    if text.lstrip().startswith("["):
        prompts = _parse_sharegpt(text, path)
    else:
        prompts = _parse_jsonl(text, path)
    if not prompts:
        raise ProfileError(f"{path}: no prompts found; {_JSONL_FIX}", path=path)
    return prompts


def _parse_jsonl(text: str, path: Path) -> list[Prompt]:
    prompts: list[Prompt] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{path}:{lineno}: invalid JSON ({exc.msg}); {_JSONL_FIX}", path=path) from None
        if not isinstance(obj, dict):
            raise ProfileError(
                f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}; {_JSONL_FIX}", path=path
            )
        key = "prompt" if "prompt" in obj else "text" if "text" in obj else None
        if key is None:
            keys = ", ".join(sorted(obj)) or "none"
            raise ProfileError(f'{path}:{lineno}: no "prompt" or "text" key (keys: {keys}); {_JSONL_FIX}', path=path)
        value = obj[key]
        if not isinstance(value, str) or not value:
            raise ProfileError(
                f'{path}:{lineno}: "{key}" must be a non-empty string, got {value!r:.40}; {_JSONL_FIX}', path=path
            )
        category = obj.get("category")
        if category is not None and (not isinstance(category, str) or not category.strip()):
            raise ProfileError(
                f'{path}:{lineno}: "category" must be a non-empty string such as "code", got {category!r:.40}; '
                'fix: {"prompt": "...", "category": "code"}, or leave "category" out',
                path=path,
            )
        prompts.append(Prompt(value, category.strip() if category else None))
    return prompts


def _parse_sharegpt(text: str, path: Path) -> list[Prompt]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg}); {_SHAREGPT_FIX}", path=path) from None
    prompts: list[Prompt] = []
    for index, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise ProfileError(f'{path}: entry {index}: no "conversations" list; {_SHAREGPT_FIX}', path=path)
        for turn in turns:
            if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
                value = turn.get("value")
                if not isinstance(value, str):
                    raise ProfileError(
                        f'{path}: entry {index}: human turn has no string "value"; {_SHAREGPT_FIX}', path=path
                    )
                if value:
                    # SPEED-Bench style entries carry a "category" beside "conversations"; others none.
                    category = entry.get("category")
                    prompts.append(Prompt(value, category if isinstance(category, str) and category else None))
                break
    return prompts


def _random_lens(rs: Any, full_len: int, range_ratio: float, num: int) -> list[int]:
    # sglang/benchmark/datasets/common.py::compute_random_lens (0.5.17), on the generator bench_serving seeds.
    if full_len <= 0:
        return [0] * num
    return [int(x) for x in rs.randint(max(int(full_len * range_ratio), 1), full_len + 1, size=num)]


def random_prompts(settings: RandomPrompts, num_prompts: int, output_len: int, vocab_size: int) -> list[Prompt]:
    """The prompts SGLang ``bench_serving --dataset-name random-ids --tokenize-prompt`` sends.

    Algorithm of SGLang 0.5.17 ``sglang/benchmark/datasets/random.py::sample_random_requests`` with
    ``random_sample=False`` and ``return_text=False``, after ``serving.py`` seeds ``np.random.seed(args.seed)``
    (nothing else draws from numpy's generator before it): input lengths, then output lengths, each
    ``np.random.randint(max(int(len * range_ratio), 1), len + 1, size=num_prompts)``, then
    ``offsets = np.random.randint(0, vocab_size, size=num_prompts)``; prompt ``i`` is the ids
    ``(offsets[i] + i + j) % vocab_size`` for ``j < input_lens[i]`` (consecutive ids, not independent draws).
    The draws depend on ``num_prompts``: compare with bench_serving at ``--num-prompts`` = ``num_requests``.
    Without ``--tokenize-prompt`` bench_serving decodes these ids to text (one id fewer per special token the
    tokenizer adds) and the server re-tokenizes it, which need not give the same ids back.

    :param settings: ``workload.random`` (input length, range ratio, seed).
    :param num_prompts: ``--num-prompts`` (the workload's ``num_requests``).
    :param output_len: ``--random-output-len`` (the workload's ``max_new_tokens``).
    :param vocab_size: the tokenizer's ``vocab_size`` (:func:`tokenizer_vocab_size`).
    :returns: ``num_prompts`` prompts with text ``""``, ``input_ids`` and ``max_new_tokens`` set.
    """
    import numpy as np

    rs = np.random.RandomState(settings.seed)  # the generator np.random.seed(seed) resets
    input_lens, output_lens, offsets = _random_draws(rs, settings, num_prompts, output_len, vocab_size)
    return [
        Prompt(
            "",
            input_ids=tuple((offsets[i] + i + j) % vocab_size for j in range(input_lens[i])),
            max_new_tokens=output_lens[i],
        )
        for i in range(num_prompts)
    ]


def _random_draws(
    rs: Any, settings: RandomPrompts, num_prompts: int, output_len: int, vocab_size: int
) -> tuple[list[int], list[int], list[int]]:
    """Input lengths, output lengths and id offsets of :func:`random_prompts`, drawn from ``rs`` in bench_serving's
    order (what they consume of the generator is what the arrival times start after)."""
    input_lens = _random_lens(rs, settings.input_len, settings.range_ratio, num_prompts)
    output_lens = _random_lens(rs, output_len, settings.range_ratio, num_prompts)
    offsets = [int(x) for x in rs.randint(0, vocab_size, size=num_prompts)]
    return input_lens, output_lens, offsets


@functools.lru_cache(maxsize=8)
def tokenizer_vocab_size(model_path: str) -> int:
    """``AutoTokenizer.from_pretrained(model_path).vocab_size``: what bench_serving wraps its random ids around.

    :raises ProfileError: ``transformers`` is not installed or the tokenizer cannot be loaded; the fix is
        ``workload.random.vocab_size``.
    """
    fix = "fix: set workload.random.vocab_size (the tokenizer's vocab_size)"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ProfileError(
            f"workload.prompts: random: reading the tokenizer of {model_path} needs transformers; {fix}"
        ) from None
    try:
        return int(AutoTokenizer.from_pretrained(model_path).vocab_size)
    except Exception as exc:  # noqa: BLE001 (any loader failure has the same fix)
        raise ProfileError(
            f"workload.prompts: random: cannot load the tokenizer of {model_path}: {exc}; {fix}"
        ) from None


def workload_prompts(workload: Workload, base_dir: str | Path, model_path: str | None) -> list[Prompt]:
    """The prompt set of a workload: :func:`random_prompts` for ``prompts: random`` (vocabulary from
    ``random.vocab_size`` or the tokenizer at ``model_path``), else :func:`load_prompts`.

    :raises ProfileError: as :func:`load_prompts`; for ``random`` without ``vocab_size``, no ``model_path`` or a
        tokenizer that cannot be read.
    """
    if workload.prompts != "random":
        return load_prompts(workload.prompts, base_dir)
    settings = workload.random or RandomPrompts()
    vocab = settings.vocab_size or _vocab_for(model_path)
    return random_prompts(settings, workload.num_requests, workload.max_new_tokens, vocab)


def arrival_times(num_requests: int, request_rate: float, burstiness: float, rs: Any) -> list[float]:
    """Seconds from the phase's start at which each request of an open loop arrives: request 0 at 0, request i at
    the sum of the first i inter-arrival times.

    The inter-arrival times are ``rs.gamma(shape=burstiness, scale=1 / (request_rate * burstiness))``, one draw per
    request in order, the last one unused. At ``burstiness`` 1 this is SGLang 0.5.17's and 0.5.23's
    ``python/sglang/benchmark/serving.py::get_request`` draw for draw: it yields a request, then draws
    ``np.random.exponential(1.0 / request_rate)`` and sleeps that long (numpy's legacy generator gives
    ``gamma(1, s)`` and ``exponential(s)`` the same values from the same state; bench_serving has no burstiness). At
    other shapes it is vLLM ``benchmarks/serve.py::get_request``'s distribution (``np.random.gamma(shape=burstiness,
    scale=theta)``, ``theta = 1 / (request_rate * burstiness)``), whose schedule differs otherwise: vLLM delays
    request 0 by the first draw too and rescales the sum so the last request arrives at ``n / request_rate``.
    ``burstiness`` inf spaces the requests evenly by ``1 / request_rate`` (vLLM's limit), rate inf sends all at 0;
    neither draws.

    Worked example: rate 4/s, shape 1, ``RandomState(42)``: draws 0.117, 0.753, 0.329, ... s -> arrivals 0.0,
    0.117, 0.870, 1.199 s.

    :param rs: a ``numpy.random.RandomState`` (bench_serving's global generator after ``np.random.seed(seed)``).
    :returns: ``num_requests`` non-decreasing times in seconds.
    :raises ValueError: ``request_rate`` or ``burstiness`` is not > 0.
    """
    if not request_rate > 0 or not burstiness > 0:
        raise ValueError(f"arrival_times: request_rate and burstiness must be > 0, got {request_rate}, {burstiness}")
    if math.isinf(request_rate):
        return [0.0] * num_requests
    if math.isinf(burstiness):
        return [i / request_rate for i in range(num_requests)]
    scale = 1.0 / (request_rate * burstiness)
    out, at = [], 0.0
    for _ in range(num_requests):
        out.append(at)
        at += float(rs.gamma(burstiness, scale))
    return out


def workload_arrivals(workload: Workload, model_path: str | None = None) -> list[float] | None:
    """The arrival times of the measured requests of an open-loop workload (:func:`arrival_times`); None for a
    closed loop (no ``request_rate``).

    The generator is bench_serving's: ``RandomState(workload.arrival_seed)``, or for ``prompts: random``
    ``RandomState(random.seed)`` after the prompts' draws (bench_serving seeds one global generator and samples the
    dataset before it sends; ``sharegpt`` and JSONL datasets draw from Python's ``random``, not numpy). Every repeat
    sends the same schedule.

    :param model_path: the tokenizer ``prompts: random`` reads ``vocab_size`` from when ``random.vocab_size`` is not
        set (``tokenizer_vocab_size``; the id draws depend on it).
    :raises ProfileError: as :func:`workload_prompts` for ``prompts: random``.
    """
    import numpy as np

    if workload.request_rate is None:
        return None
    burstiness = workload.burstiness or 1.0
    if workload.prompts == "random":
        settings = workload.random or RandomPrompts()
        rs = np.random.RandomState(settings.seed)
        vocab = settings.vocab_size or _vocab_for(model_path)
        _random_draws(rs, settings, workload.num_requests, workload.max_new_tokens, vocab)
    else:
        rs = np.random.RandomState(workload.arrival_seed)
    return arrival_times(workload.num_requests, workload.request_rate, burstiness, rs)


def _vocab_for(model_path: str | None) -> int:
    if model_path is None:
        raise ProfileError(
            "workload.prompts: random: no model_path to read the tokenizer's vocab_size from; "
            "fix: set workload.random.vocab_size"
        )
    return tokenizer_vocab_size(model_path)


def build_requests(
    workload: Workload, prompts: Sequence[Prompt], arrivals: Sequence[float] | None = None
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """The warmup and measured request lists of one phase.

    Warmup request ``i`` and measured request ``i`` both use ``prompts[i % len(prompts)]``: the schedule depends
    only on the workload and the prompt list, so two runs with the same fingerprint send the same requests in the
    same order. (Like SGLang ``bench_serving``, whose warmup reuses the first input request and is not paced.)

    :param arrivals: the measured requests' arrival times (:func:`workload_arrivals`), or None for a closed loop.
    :returns: ``(warmup, measured)`` with ``workload.warmup_requests`` and ``workload.num_requests`` entries.
    :raises ValueError: ``prompts`` is empty, or ``arrivals`` is not one time per measured request.
    """
    if not prompts:
        raise ValueError("build_requests: empty prompt list")
    if arrivals is not None and len(arrivals) != workload.num_requests:
        raise ValueError(f"build_requests: {len(arrivals)} arrival times for {workload.num_requests} requests")

    def make(i: int) -> RequestSpec:
        prompt = prompts[i % len(prompts)]
        return RequestSpec(
            prompt=prompt.text,
            max_new_tokens=prompt.max_new_tokens or workload.max_new_tokens,
            temperature=workload.temperature,
            ignore_eos=workload.ignore_eos,
            input_ids=prompt.input_ids,
            category=prompt.category,
        )

    measured = [make(i) for i in range(workload.num_requests)]
    if arrivals is not None:
        measured = [dataclasses.replace(spec, arrival_s=float(at)) for spec, at in zip(measured, arrivals, strict=True)]
    return [make(i) for i in range(workload.warmup_requests)], measured


def prompt_set_hash(prompts: Sequence[Prompt]) -> str:
    """SHA-256 hex digest (64 chars) of the prompt list, order-sensitive, for result fingerprints.

    Computed over ``json.dumps`` of the texts (``ensure_ascii=False``) in UTF-8, so the boundaries between prompts
    count; categories are not part of it (relabelling a prompt set keeps its runs comparable). A token-id prompt
    (``prompts: random``) enters as ``{"input_ids": [...], "max_new_tokens": n}``.
    """
    items: list[Any] = [
        p.text if p.input_ids is None else {"input_ids": list(p.input_ids), "max_new_tokens": p.max_new_tokens}
        for p in prompts
    ]
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()
