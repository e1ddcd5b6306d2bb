"""The two streaming APIs on the wire: the request body of SGLang ``/generate`` and of the OpenAI-compatible
``/v1/completions`` / ``/v1/chat/completions``, and their SSE streams parsed, after the stream ended, into token
events (arrival time, tokens), totals and the per-request spec fields.

Token counting never assumes one token per chunk: SGLang ``/generate`` events carry the cumulative
``meta_info.completion_tokens``; OpenAI streams carry token counts only in ``usage`` (per chunk when the server
honours ``stream_options.continuous_usage_stats`` — vLLM does, SGLang does not — else once at the end).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_specdec.measure.workload import RequestSpec

__all__ = ["PATHS", "Api", "Parsed", "RequestFailed", "parse", "parse_generate_fast", "request_body", "tokens_so_far"]

Api = Literal["generate", "completions", "chat"]

#: ``(arrival_s, payload)`` per SSE ``data:`` line; payload None is ``[DONE]``.
_Event = tuple[float, "dict[str, Any] | None"]

PATHS: dict[str, str] = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}

#: Per-request spec fields of ``meta_info``, newest SGLang name first (0.5.23 ``spec_num_correct_drafts``/
#: ``spec_num_proposed_drafts``), then the names older releases used (``spec_accepted_drafts``/
#: ``spec_proposed_drafts``, before them ``spec_accept_token_num``/``spec_draft_token_num``).
_SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    "spec_verify_ct": ("spec_verify_ct",),
    "spec_num_correct_drafts": ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num"),
    "spec_num_proposed_drafts": ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num"),
    "spec_accept_length": ("spec_accept_length",),
    "spec_accept_rate": ("spec_accept_rate",),
}

#: ``"completion_tokens": N`` as JSON syntax: inside a JSON string a quote is always escaped, so ``tokens":`` can only
#: be a key. Used by the fast /generate path; any doubt (count mismatch, two per line) falls back to full parsing.
_COMPLETION_RE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')


class RequestFailed(Exception):
    """One request failed (HTTP status, error event, bad stream); becomes a record with ``ok=False``."""


@dataclass(slots=True)
class Parsed:
    """A finished stream, parsed: token events, totals, and the ``[DONE]`` arrival (None when missing)."""

    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    tokens: int = 0
    prompt_tokens: int = 0
    text: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    done_s: float | None = None
    #: Why the stream cannot be read past some event (a malformed payload), else None.
    error: str | None = None


#: The per-request acceptance histogram, newest name first (SGLang 0.5.17 also sends ``spec_accept_histogram``).
_HISTOGRAM_FIELDS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def _spec_fields(source: dict[str, Any]) -> dict[str, Any]:
    """Pick the spec fields out of a ``meta_info`` / ``spec_tokens_details`` dict, accepting older names."""
    out: dict[str, Any] = {}
    for name, candidates in _SPEC_FIELDS.items():
        for key in candidates:
            value = source.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[name] = value
                break
    for key in _HISTOGRAM_FIELDS:
        hist = source.get(key)
        if isinstance(hist, list) and hist and all(isinstance(n, int) and not isinstance(n, bool) for n in hist):
            out["spec_correct_drafts_histogram"] = tuple(hist)
            break
    return out


def _error_text(data: dict[str, Any]) -> str:
    error = data["error"]
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def request_body(api: Api, spec: RequestSpec, model: str | None) -> dict[str, Any]:
    """The JSON body; field names as in SGLang ``bench_serving`` (``python/sglang/benchmark/serving.py``) and the
    OpenAI API (SGLang ``python/sglang/srt/entrypoints/openai/protocol.py``: ``return_spec_tokens_details``)."""
    if api == "generate":
        body: dict[str, Any] = (
            {"input_ids": list(spec.input_ids)} if spec.input_ids is not None else {"text": spec.prompt}
        )
        body["sampling_params"] = {
            "max_new_tokens": spec.max_new_tokens,
            "temperature": spec.temperature,
            "ignore_eos": spec.ignore_eos,
        }
        body["stream"] = True
        return body
    body = {
        "model": model,
        "max_tokens": spec.max_new_tokens,
        "temperature": spec.temperature,
        "ignore_eos": spec.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_spec_tokens_details": True,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    return body


def _data_lines(times: Sequence[float], data: Sequence[bytes]) -> list[tuple[float, bytes]]:
    """``(arrival_s, payload)`` per SSE ``data:`` line; a line arrives with the read that holds its newline.

    SSE framing: blank lines separate events, ``:`` lines are comments, ``event:``/``id:`` carry nothing we use.
    A last line without a newline counts (with the last read's time), as a line iterator would yield it.
    """
    out: list[tuple[float, bytes]] = []
    rest = b""
    for t, chunk in zip(times, data, strict=True):
        if rest:
            chunk = rest + chunk
        lines = chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            line = line.strip()
            if line.startswith(b"data:"):
                out.append((t, line[5:].strip()))
    rest = rest.strip()
    if rest.startswith(b"data:") and times:
        out.append((times[-1], rest[5:].strip()))
    return out


def _decode_events(lines: list[tuple[float, bytes]], parsed: Parsed) -> list[_Event]:
    """JSON-decode each ``data:`` payload; ``[DONE]`` becomes None. Stops at the first payload that is not a JSON
    object (a later ``[DONE]`` does not make a broken stream whole); ``parsed.error`` then says why."""
    out: list[_Event] = []
    for t, payload in lines:
        if payload == b"[DONE]":
            out.append((t, None))
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            what = "not an object" if data is not None else "not JSON"
            parsed.error = f"malformed SSE event ({what}): {payload[:200].decode('utf-8', 'replace')!r}"
            break
        out.append((t, data))
    return out


def _parse_generate(events: list[_Event], parsed: Parsed) -> None:
    """An SGLang ``/generate`` stream into ``parsed`` (``done_s`` None when ``[DONE]`` never came).

    Each event's ``text`` is cumulative (default ``--incremental-streaming-output`` off) and
    ``meta_info.completion_tokens`` is cumulative; an event's tokens = Δcompletion_tokens, and an event adding
    none records nothing (as ``async_request_sglang_generate`` in SGLang ``benchmark/serving.py``). The spec
    fields are read from the last ``meta_info`` carrying them (SGLang sends them on the final event only).
    One difference from bench_serving: the first token event is the first with new tokens even if its ``text``
    is still empty (a token can decode to "" mid UTF-8 sequence); bench_serving waits for non-empty text.

    :raises RequestFailed: an error event, or an event without a token count.
    """
    for arrival_s, data in events:
        if data is None:
            parsed.done_s = arrival_s
            return
        if "error" in data:
            raise RequestFailed(f"server error event: {_error_text(data)}")
        meta = data.get("meta_info") or {}
        completion = meta.get("completion_tokens")
        if completion is None and isinstance(data.get("output_ids"), list):
            completion = len(data["output_ids"])
        if not isinstance(completion, int):
            raise RequestFailed("event without meta_info.completion_tokens: cannot count tokens")
        if isinstance(meta.get("prompt_tokens"), int):
            parsed.prompt_tokens = meta["prompt_tokens"]
        if isinstance(data.get("text"), str):
            parsed.text = data["text"]
        parsed.spec.update(_spec_fields(meta))
        new_tokens = completion - parsed.tokens
        if new_tokens > 0:
            parsed.chunk_times_s.append(arrival_s)
            parsed.chunk_tokens.append(new_tokens)
            parsed.tokens = completion


def parse_generate_fast(times: Sequence[float], data: Sequence[bytes]) -> Parsed | None:
    """The common case of :func:`_parse_generate` without decoding every event, or None when in any doubt.

    SGLang's cumulative events grow with the output (256 tokens: ~390 kB per request); JSON-decoding all of them
    costs more than reading them. Here the token counts are found with one regular-expression pass over the bytes
    and only the last event is decoded (text, prompt_tokens, spec fields, and a check of its count); the spec
    fields are the last event's (SGLang's cumulative values). None (the caller then decodes every event) when the
    number of counts differs from the number of data lines (an error event, a line without a count), a line holds
    two counts, or the last event is not a well-formed token event agreeing with the count found.
    """
    joined = b"".join(data)
    ends = _cumulative(data)
    done = joined.rfind(b"[DONE]")
    done_s: float | None = None
    n_lines = joined.count(b"\ndata:") + joined.startswith(b"data:")
    if done >= 0:
        line_start = joined.rfind(b"\n", 0, done) + 1
        if joined[line_start:done].strip() != b"data:":
            return None
        done_s = times[bisect.bisect_right(ends, done)]
        n_lines -= 1
    parsed = Parsed(done_s=done_s)
    chunk_times_s = parsed.chunk_times_s
    chunk_tokens = parsed.chunk_tokens
    find = joined.find
    tokens = 0
    last_value = -1
    last_end = -1
    last_match_start = 0
    for match in _COMPLETION_RE.finditer(joined):
        line_end = find(b"\n", match.end())
        if line_end <= last_end:  # no newline (-1), or a second count on one line
            return None
        last_end = line_end
        last_match_start = match.start()
        n_lines -= 1
        last_value = int(match.group(1))
        if last_value > tokens:
            chunk_times_s.append(times[bisect.bisect_right(ends, line_end)])
            chunk_tokens.append(last_value - tokens)
            tokens = last_value
    if n_lines != 0 or last_end < 0:
        return None
    line = joined[joined.rfind(b"\n", 0, last_match_start) + 1 : last_end].strip()
    try:
        last = json.loads(line[5:]) if line.startswith(b"data:") else None
    except ValueError:
        return None
    if not isinstance(last, dict) or "error" in last or not isinstance(last.get("text"), str):
        return None
    meta = last.get("meta_info")
    if not isinstance(meta, dict) or meta.get("completion_tokens") != last_value:
        return None
    if not isinstance(meta.get("prompt_tokens"), int):
        return None
    parsed.tokens = tokens
    parsed.prompt_tokens = meta["prompt_tokens"]
    parsed.text = last["text"]
    parsed.spec = _spec_fields(meta)
    return parsed


def _cumulative(data: Sequence[bytes]) -> list[int]:
    """End offset (exclusive) of each read in the joined bytes."""
    out = []
    total = 0
    for chunk in data:
        total += len(chunk)
        out.append(total)
    return out


def _parse_openai(events: list[_Event], parsed: Parsed) -> None:
    """An OpenAI completions/chat stream into ``parsed`` (``done_s`` None when ``[DONE]`` never came).

    With continuous usage (a chunk that has choices also has ``usage``; vLLM) each chunk's tokens are
    Δ``usage.completion_tokens``. Otherwise (SGLang sends usage once, on a final ``choices: []`` chunk) the
    per-chunk token counts are unknown: the arrivals of chunks with non-empty text are kept, ``chunk_tokens`` is
    left empty (so per-token ITL is None for this request) and the final usage gives the totals. Spec fields come
    from ``sglext.spec_tokens_details`` (SGLang, on ``return_spec_tokens_details``; a list when n > 1).

    :raises RequestFailed: an error event, or ``[DONE]`` without any usage.
    """
    usage_chunks: list[tuple[float, int]] = []
    text_times: list[float] = []
    pieces: list[str] = []
    continuous = False
    saw_usage = False
    for arrival_s, data in events:
        if data is None:
            if not saw_usage:
                raise RequestFailed(
                    "stream has no usage: cannot count tokens (the server ignored stream_options.include_usage)"
                )
            parsed.done_s = arrival_s
            break
        if "error" in data:
            raise RequestFailed(f"server error event: {_error_text(data)}")
        choices = data.get("choices") or []
        piece = ""
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or {}
            piece += choice.get("text") or delta.get("content") or delta.get("reasoning_content") or ""
        if piece:
            pieces.append(piece)
            text_times.append(arrival_s)
        usage = data.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            saw_usage = True
            if choices:
                continuous = True
            if isinstance(usage.get("prompt_tokens"), int):
                parsed.prompt_tokens = usage["prompt_tokens"]
            new_tokens = usage["completion_tokens"] - parsed.tokens
            if new_tokens > 0:
                usage_chunks.append((arrival_s, new_tokens))
            parsed.tokens = usage["completion_tokens"]
        sglext = data.get("sglext")
        details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
        if isinstance(details, list):
            details = details[0] if details else None
        if isinstance(details, dict):
            parsed.spec.update(_spec_fields(details))
    parsed.text = "".join(pieces)
    if continuous:
        parsed.chunk_times_s = [t for t, _ in usage_chunks]
        parsed.chunk_tokens = [n for _, n in usage_chunks]
    else:
        parsed.chunk_times_s = text_times
        parsed.chunk_tokens = []


def parse(api: Api, times: Sequence[float], data: Sequence[bytes], parsed: Parsed | None = None) -> Parsed:
    """Parse a stream's reads; ``done_s`` None when it ended without ``[DONE]``.

    :param parsed: filled in place when given, so a caller catching the error keeps what was parsed before it.
    :raises RequestFailed: a malformed event, an error event, or tokens that cannot be counted.
    """
    if api == "generate" and parsed is None:
        fast = parse_generate_fast(times, data)
        if fast is not None:
            return fast
    parsed = parsed if parsed is not None else Parsed()
    events = _decode_events(_data_lines(times, data), parsed)
    if api == "generate":
        _parse_generate(events, parsed)
    else:
        _parse_openai(events, parsed)
    if parsed.error is not None:
        raise RequestFailed(parsed.error)
    return parsed


def tokens_so_far(api: Api, times: Sequence[float], data: Sequence[bytes]) -> int:
    """Tokens received by an unfinished request (for stall and timeout messages); 0 when they cannot be told."""
    parsed = Parsed()
    with contextlib.suppress(RequestFailed):
        parse(api, list(times), list(data), parsed)
    return parsed.tokens
