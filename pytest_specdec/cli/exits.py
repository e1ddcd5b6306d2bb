"""Exit codes of the command line's subcommands (``python -m pytest_specdec COMMAND``)."""

from __future__ import annotations

__all__ = [
    "EXIT_BAD_PROFILE",
    "EXIT_CLOSED_PIPE",
    "EXIT_FINDINGS",
    "EXIT_NO_PROPOSAL",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STOPPED",
    "EXIT_USAGE",
]

#: Done, nothing found (``check``: no finding that fails; ``trend``: no worse change point).
EXIT_OK = 0
#: Something found (``check``: findings; ``trend``: a worse change point; ``bisect``: no culprit named; ``compare``:
#: a regression, a threshold pytest failed, a test not measured; ``calibrate``: a run left out as an outlier, or a
#: proposal that leaves out a field whose rows no tolerance below the cap decides, or whose figure is no gate: it fails
#: neither a 50% tok/s loss nor a 2x rise of a time, ``calibrate.BLUNT_FACTOR``).
EXIT_FINDINGS = 1
#: ``merge``: the runs differ (commit, profile or metric definitions, a test measured twice); see ``--force``.
EXIT_REFUSED = 1
#: A bad option or unreadable input (usage errors exit 2 too, the argparse way).
EXIT_USAGE = 2
#: ``check``: a profile file that cannot be loaded, or an unknown ``--profile``.
EXIT_BAD_PROFILE = 2
#: ``bisect``: stopped before the end (``--max-launches``, Ctrl-C, SIGTERM); the report says what is known.
EXIT_STOPPED = 3
#: ``calibrate``: no ini block proposed: every field an unchanged night is judged on statistically has a row that no
#: tolerance below the cap (``noise.TOLERANCE_CAP``) decides, so no block passes the night as calibrate sizes it, or
#: whose figure is no gate (``calibrate.BLUNT_FACTOR``) (the rows, their figures and what would decide or size them
#: are printed; the noise file is written: it is measurement).
EXIT_NO_PROPOSAL = 4
#: The reader closed the output pipe (``compare ... | head``): 128 + SIGPIPE, as a shell reports a process the signal
#: ended; not 1, which is a verdict (a trial's ``| head`` read as REGRESSED, after a BrokenPipeError traceback).
EXIT_CLOSED_PIPE = 141
