"""Secret redaction: which names are secret, and their values replaced by ``<redacted>`` in text, env and argv.

One rule for every place a secret could leak (messages, kept server logs, fingerprints, stored runs): a variable
or flag name is secret when one of its words, split on ``_`` and ``-`` and compared case-insensitively, is TOKEN,
KEY, SECRET, PASSWORD or APIKEY. Whole words only, so that ``HF_TOKEN``, ``OPENAI_API_KEY``, ``--hf-token`` and
``--api-key`` are secret while ``TOKENIZERS_PARALLELISM``, ``MAX_TOKENS`` and ``--speculative-num-draft-tokens``
are not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["REDACTED", "is_secret", "launch_secrets", "redact", "redact_argv", "redact_env"]

#: What a secret value is replaced by.
REDACTED = "<redacted>"
#: Words of a name that make it secret.
_SECRET_WORDS = frozenset({"TOKEN", "KEY", "SECRET", "PASSWORD", "APIKEY"})
#: Values shorter than this are not searched for in text (replacing "1" everywhere would garble a log).
_MIN_SECRET_LEN = 4


def is_secret(name: str) -> bool:
    """Whether ``name`` (an environment variable, or a flag with or without its leading dashes) names a secret.

    Example: ``is_secret("HF_TOKEN")``, ``is_secret("--admin-api-key")`` are True; ``is_secret("MAX_TOKENS")`` is
    False.
    """
    return any(word in _SECRET_WORDS for word in re.split(r"[_\-]+", name.upper()))


def _flag_name(arg: str) -> str | None:
    """``--hf-token=x`` -> ``hf-token``; None for an argument that is not a long flag."""
    return arg[2:].split("=", 1)[0] if arg.startswith("--") else None


def launch_secrets(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The secret values of a launch: the value of every secret flag (``--api-key K``, ``--hf-token=T``) and of every
    secret env variable; values shorter than 4 characters are left out. Longest first, so that :func:`redact`
    replaces whole values before their substrings."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        name = _flag_name(arg)
        if name is None or not is_secret(name):
            continue
        if "=" in arg:
            found.append(arg.split("=", 1)[1])
        elif i + 1 < len(argv):
            found.append(argv[i + 1])
    found += [value for name, value in env.items() if is_secret(name)]
    return tuple(sorted({v for v in found if len(v) >= _MIN_SECRET_LEN}, key=len, reverse=True))


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``<redacted>`` (in the given order)."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the value of every secret variable (:func:`is_secret`) replaced by ``<redacted>``; keys sorted."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in sorted(env.items())}


def redact_argv(argv: Sequence[str], api_key: str | None) -> list[str]:
    """``argv`` with the api key value replaced wherever it occurs (``--api-key K``, ``--api-key=K``, inside a
    JSON argument), and the value of every secret flag (:func:`is_secret`: ``--hf-token T``, ``--x-key=K``)."""
    out: list[str] = []
    redact_next = False
    for arg in argv:
        if redact_next:
            out.append(REDACTED)
            redact_next = False
            continue
        if api_key:
            arg = arg.replace(api_key, REDACTED)
        name = _flag_name(arg)
        if name is not None and is_secret(name):
            if "=" in arg:
                arg = arg.split("=", 1)[0] + "=" + REDACTED
            else:
                redact_next = True
        out.append(arg)
    return out
