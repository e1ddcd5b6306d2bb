"""The bundled reference server (``python -m pytest_specdec.refserver``): SGLang's API, a subset of its flags."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.engines.base import AuxIdConvention, FlagIssue, LaunchSpec, PairingMode, SpecCounters
from pytest_specdec.engines.common import clean_env, flag_name
from pytest_specdec.engines.prometheus import per_position, sum_samples
from pytest_specdec.engines.sglang import SGLANG_FLAGS, SglangEngine, SglangVersion, node_flag_issues
from pytest_specdec.profiles.schema import Profile

__all__ = [
    "ENV_KNOBS",
    "PER_POSITION_SERIES",
    "REFERENCE_FLAGS",
    "ReferenceEngine",
    "reference_value_issues",
]

#: The reference server's environment knobs (``refserver.decoding``'s ``FORWARD_DELAY_ENV`` and
#: ``FORWARD_SLOWDOWN_ENV``; that module imports torch, so they are named again here and a test keeps the two
#: equal): they reach the server only through ``profile.env`` (:meth:`ReferenceEngine.env`). Not every
#: ``SPECDEC_REF_*`` variable: ``SPECDEC_REF_ASSETS`` is the test suite's, which a developer's shell may well hold.
ENV_KNOBS = ("SPECDEC_REF_FORWARD_DELAY_MS", "SPECDEC_REF_FORWARD_SLOWDOWN")

#: The reference server's per-position counter: vLLM's ``spec_decode_num_accepted_tokens_per_pos`` (same
#: semantics, 0-based ``position`` label) under its own prefix, since SGLang 0.5.23 exports no such series.
PER_POSITION_SERIES = "refserver:spec_decode_num_accepted_tokens_per_pos_total"


def _reference_flags() -> frozenset[str]:
    """Every option string of the reference server's parser (``refserver.args.build_parser``): SGLang 0.5.23
    spellings and aliases, plus its ``--ref-fault-*`` fault-injection flags. Read from the parser so the two cannot
    drift; ``args.py`` imports only the standard library."""
    from pytest_specdec.refserver.args import build_parser

    parser = build_parser()
    return frozenset(s for action in parser._actions for s in action.option_strings if s not in ("-h", "--help"))


#: Flags the reference server accepts (see ``_reference_flags``).
REFERENCE_FLAGS: frozenset[str] = _reference_flags()

#: Values the reference server's parser takes but its start (``refserver.args.resolve_args``) or its scheduler
#: cannot run: flag -> (least value, why a smaller one fails). ``--max-running-requests`` 0 is read as unset
#: (``decoding.SpecEngine``: ``or 1024``); below 0 no request is ever admitted, so its warmup waits forever.
_REFERENCE_MINIMUMS: Mapping[str, tuple[int, str]] = {
    "--max-running-requests": (
        0,
        "below 0 the scheduler admits no request, so the server never answers one (0 is read as unset)",
    ),
    "--decode-log-interval": (1, "the server exits at startup on a value below 1"),
    "--speculative-draft-window-size": (1, "the server raises ValueError at startup on a value below 1"),
}


class _ParseError(Exception):
    """argparse's error message, raised in place of its usage print and exit status 2."""


def _raise_parse_error(message: str) -> None:
    raise _ParseError(message)


def _flag_groups(extra_args: Sequence[str]) -> list[list[str]]:
    """``extra_args`` cut into one list per flag with the words after it (``["--port", "1"]``, ``["--x=1"]``); a
    word starting with ``--`` starts a list, so a negative number such as ``-3`` stays with its flag."""
    groups: list[list[str]] = []
    for arg in extra_args:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def _expected(action: argparse.Action) -> str:
    """What ``action`` takes, as a message says it: "an integer", "a number", "one of a, b", "no value" (a switch such
    as ``--enable-metrics``) or "a value"."""
    if action.nargs == 0:
        return "no value"
    if action.choices is not None:
        return "one of " + ", ".join(str(c) for c in action.choices)
    return {int: "an integer", float: "a number"}.get(action.type, "a value")  # type: ignore[call-overload]


def reference_value_issues(extra_args: Sequence[str]) -> list[FlagIssue]:
    """Errors for values in ``extra_args`` the reference server would exit on at startup, found by its own parser
    (``refserver.args.build_parser``, standard library only: nothing is started and torch is not imported): each flag
    with the words after it is parsed as ``python -m pytest_specdec.refserver`` parses it, and argparse's error
    (``invalid int value``, ``invalid choice``, ``expected one argument``) becomes the finding's reason; then the
    values the parser takes but the server cannot run (:data:`_REFERENCE_MINIMUMS`). Flags the server does not
    implement are left to ``ReferenceEngine._unsupported``.

    Example: ``["--random-seed", "abc"]`` -> an error at ``extra_args``, value ``"--random-seed abc"``, why "the
    reference server's --random-seed takes an integer, got 'abc' (its parser: argument --random-seed: invalid int
    value: 'abc'); the server would exit at startup".
    """
    from pytest_specdec.refserver.args import build_parser

    parser = build_parser()
    # argparse calls self.error (print usage, exit 2); raise instead, so no SystemExit and nothing on stderr.
    parser.error = _raise_parse_error  # type: ignore[method-assign,assignment]
    actions = parser._option_string_actions
    issues: list[FlagIssue] = []
    for group in _flag_groups(extra_args):
        flag, eq, inline = group[0].partition("=")
        action = actions.get(flag)
        if action is None or flag not in REFERENCE_FLAGS:
            continue
        shown = " ".join(group)
        value = inline if eq else (group[1] if len(group) > 1 else None)
        expected = _expected(action)
        try:
            # --model-path is required by the parser: a placeholder, never read.
            ns, rest = parser.parse_known_args(["--model-path", "-", *group])
        except _ParseError as exc:
            got = "no value" if value is None else repr(value)
            issues.append(
                FlagIssue("error", "extra_args", shown,
                          f"the reference server's {flag} takes {expected}, got {got} (its parser: {exc}); the "
                          "server would exit at startup",
                          f"give {flag} {expected} (python -m pytest_specdec.refserver --help lists its flags)")
            )  # fmt: skip
            continue
        if rest:
            # refserver.args.parse_args exits on any word its parser left ("unsupported flag").
            issues.append(
                FlagIssue("error", "extra_args", shown,
                          f"the reference server's {flag} takes {expected}; {' '.join(rest)!r} after it is left over, "
                          "and the server exits at startup on a word it cannot place",
                          f"remove {' '.join(rest)!r} or give it its flag")
            )  # fmt: skip
            continue
        least = _REFERENCE_MINIMUMS.get(flag)
        parsed = getattr(ns, action.dest, None)
        if least is not None and isinstance(parsed, int) and parsed < least[0]:
            issues.append(
                FlagIssue("error", "extra_args", shown,
                          f"the reference server's {flag} takes an integer >= {least[0]}, got {parsed}: {least[1]}",
                          f"give {flag} an integer >= {least[0]}, or leave it out")
            )  # fmt: skip
    return issues


_ROW = SglangVersion(
    since="reference",
    console_script=False,
    server_info_paths=("/server_info",),
    # The bundled server implements exactly the flags the plugin emits, under SGLang 0.5.23's names.
    flags=dict(SGLANG_FLAGS),
)

#: The directory holding the ``pytest_specdec`` package, put first on the server's PYTHONPATH so it runs this code.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


class ReferenceEngine(SglangEngine):
    """``server: reference``: SGLang's argv, readiness, readback and counters; only the head and flags differ."""

    name = "reference"
    aux_id_convention: AuxIdConvention = "sglang"
    #: A CPU process of ~430 MiB: the target and the reference server both fit, so their phases interleave.
    default_pairing: PairingMode = "interleaved"
    #: How it serves id -1 is chosen by ``--ref-embedding-capture`` (default: crash as stock SGLang), so a profile
    #: that allows embedding capture is taken to have chosen; preflight does not warn.
    crashes_on_embedding_capture = False

    def version(self, profile: Profile) -> str | None:
        """The reference server has no sglang version; it follows 0.5.23's API."""
        return None

    def log_warnings(self, profile: Profile, log_text: str) -> list[str]:
        """None: the CPU server never runs CUDA graphs (its decode lines say ``cuda graph: False``)."""
        return []

    def row(self, profile: Profile) -> SglangVersion:
        return _ROW

    def head(self, profile: Profile, env: Mapping[str, str]) -> list[str]:
        """``[<python>, "-m", "pytest_specdec.refserver"]``; python is ``profile.python`` or ``sys.executable``."""
        return [profile.python or sys.executable, "-m", "pytest_specdec.refserver"]

    def env(self, profile: Profile) -> dict[str, str]:
        """``clean_env(profile.env)`` with this package's parent directory first on ``PYTHONPATH``.

        ``OMP_NUM_THREADS`` and ``SPECDEC_REF_*`` reach the server only through ``profile.env``.
        """
        env = clean_env(profile.env)
        parts = [_PACKAGE_PARENT, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
        return env

    def launch_spec(self, profile: Profile, *, port: int, draft_path: Path | None) -> LaunchSpec:
        """As ``SglangEngine.launch_spec`` with the reference head.

        :raises ProfileError: ``extra_args`` holds a flag the reference server does not implement (listed), or
            see ``SglangEngine.launch_spec``.
        """
        bad = self._unsupported(profile)
        if bad:
            raise ProfileError(
                f"{profile.source or '<profile>'}: profiles.{profile.name}.extra_args: "
                f"{', '.join(bad)} not supported by the reference server; "
                f"supported: {', '.join(sorted(REFERENCE_FLAGS))}",
                path=profile.source or None,
                profile=profile.name,
            )
        return super().launch_spec(profile, port=port, draft_path=draft_path)

    def server_args(self, profile: Profile, *, port: int, draft_path: Path | None) -> list[str]:
        """SGLang's flags plus ``--decode-log-interval 1`` (unless ``extra_args`` sets it): the reference server then
        folds its speculative totals every decode iteration, so ``/server_info``'s ``avg_spec_accept_length`` covers
        the whole measured phase and the scheduler cross-check (``metrics.cross_check``) is exact, not windowed."""
        args = super().server_args(profile, port=port, draft_path=draft_path)
        if any(flag_name(a) == "--decode-log-interval" for a in profile.extra_args):
            return args
        cut = len(args) - len(profile.extra_args)
        return [*args[:cut], "--decode-log-interval", "1", *args[cut:]]

    def flag_issues(self, profile: Profile) -> list[FlagIssue]:
        """Errors for what the reference server rejects at startup (``refserver.args.resolve_args``): a flag it
        does not implement, a value its parser rejects or it cannot run (:func:`reference_value_issues`), ``tp_size``
        other than 1, an algorithm other than EAGLE/EAGLE3/NEXTN, ``eagle_topk`` > 1
        (it drafts chains only)."""
        issues = [
            FlagIssue("error", "extra_args", flag, "the reference server does not implement this flag",
                      f"remove it; supported: {', '.join(sorted(REFERENCE_FLAGS))}")
            for flag in self._unsupported(profile)
        ]  # fmt: skip
        issues += reference_value_issues(profile.extra_args)
        issues += node_flag_issues(profile)
        nnodes = len(profile.nodes.hosts) if profile.nodes is not None else 1
        if profile.tp_size != 1 and not (nnodes > 1 and profile.tp_size == nnodes):
            issues.append(FlagIssue("error", "tp_size", profile.tp_size,
                                    "the reference server runs on one CPU process (per node with nodes:)",
                                    "set tp_size: 1, or the number of nodes.hosts"))  # fmt: skip
        spec = profile.speculative
        if spec is not None and spec.algorithm not in ("EAGLE", "EAGLE3", "NEXTN"):
            issues.append(FlagIssue("error", "speculative.algorithm", spec.algorithm,
                                    "the reference server implements EAGLE and EAGLE3 (NEXTN = EAGLE) only",
                                    "use algorithm: EAGLE3, or server: sglang for other algorithms"))  # fmt: skip
        if spec is not None and spec.eagle_topk is not None and spec.eagle_topk > 1:
            issues.append(FlagIssue("error", "speculative.eagle_topk", spec.eagle_topk,
                                    "the reference server drafts chains only (topk 1)",
                                    "set eagle_topk: 1 and num_draft_tokens: num_steps + 1"))  # fmt: skip
        return issues

    def counters(self, metrics_text: str) -> SpecCounters:
        """SGLang's counters (``SglangEngine.counters``) plus :data:`PER_POSITION_SERIES` per position and the
        seconds of drafting and verifying (``refserver:spec_{draft,verify}_seconds_total``).

        :raises ValueError: the text is not Prometheus exposition format.
        """
        base = super().counters(metrics_text)
        per_pos = per_position(metrics_text, PER_POSITION_SERIES)
        totals = sum_samples(metrics_text)
        return dataclasses.replace(
            base,
            accepted_per_position=per_pos,
            per_position_series=PER_POSITION_SERIES if per_pos else None,
            draft_seconds=totals.get("refserver:spec_draft_seconds_total"),
            verify_seconds=totals.get("refserver:spec_verify_seconds_total"),
        )

    def _unsupported(self, profile: Profile) -> list[str]:
        return [
            flag_name(arg)
            for arg in profile.extra_args
            if arg.startswith("--") and flag_name(arg) not in REFERENCE_FLAGS
        ]

