"""The run summary as GitHub-flavoured markdown, for ``$GITHUB_STEP_SUMMARY`` or ``--specdec-markdown PATH``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pytest_specdec.core.table import Column, markdown_table
from pytest_specdec.measure.results import ErroredTest, ResultRecord

__all__ = ["MARKDOWN_COLUMNS", "markdown_summary", "markdown_targets", "write_markdown"]

#: (metrics key, header, format) of the markdown table, between the test/profile and the result columns.
MARKDOWN_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("accept_length", "accept len", "{:.2f}"),
    ("accept_rate", "accept rate", "{:.3f}"),
    ("ttft_ms_p50", "TTFT p50 ms", "{:.1f}"),
    ("itl_ms_p50", "ITL p50 ms", "{:.2f}"),
)
_RESULT = {"passed": "✅ passed", "failed": "❌ failed", "skipped": "skipped"}


def markdown_summary(
    records: Sequence[ResultRecord],
    failures: Mapping[str, str] | None = None,
    *,
    title: str = "specdec summary",
    results_path: str | Path | None = None,
    sweep_lines: Sequence[str] = (),
    errored: Sequence[ErroredTest] = (),
    interrupted: bool = False,
) -> list[str]:
    """The summary as markdown lines (no trailing newlines).

    Layout: ``## <title>``, followed by what the run could not judge (``: interrupted; 1 test not judged (errored
    before it measured)``) when it was interrupted or a test errored before it measured; a table with columns test
    (node id without the file), profile, tok/s, accept len, accept rate, TTFT p50 ms, ITL p50 ms, result (``n/a``
    where a metric does not apply), or ``No test measured.``; then ``### Interrupted`` when it was; then ``### Errored
    before measuring`` with one item per such test: its profile, phase and the first line of its error; then, when a
    test failed, ``### Failed`` with each failed test's verdict text in a fenced block; then the sweep table
    (``sweep_table.sweep_table`` lines) in a fenced block under ``### Sweep``; then ``Results: `<path>```.

    :param records: the session's ``ResultRecord``s, in run order.
    :param failures: node id -> failure text (the test report's ``longreprtext``: verdict lines, compare table).
    :param results_path: the stored run file, named on the last line.
    :param sweep_lines: ``sweep_table.sweep_table`` output, or empty.
    :param errored: the tests that errored before they measured (``RunFile.errored``): a night whose EAGLE-3 server
        never started showed the baseline's table alone.
    :param interrupted: the session ended early (``RunFile.interrupted``).
    """
    failures = dict(failures or {})
    columns = [
        Column("test"),
        Column("profile"),
        *(Column(header, "right", fmt) for _, header, fmt in MARKDOWN_COLUMNS),
        Column("result"),
    ]
    rows = [
        [
            f"`{record.test_id.split('::', 1)[-1]}`",
            record.profile,
            *(record.metrics.get(key) for key, _, _ in MARKDOWN_COLUMNS),
            _RESULT.get(record.outcome, record.outcome or "?"),
        ]
        for record in records
    ]
    unjudged = [*(["interrupted"] if interrupted else []), *_not_judged(len(errored))]
    heading = f"## {title}: {'; '.join(unjudged)}" if unjudged else f"## {title}"
    lines = [heading, "", *(markdown_table(columns, rows) if rows else ["No test measured."])]
    if interrupted:
        lines += ["", "### Interrupted", "", "The session ended early (Ctrl-C, or an xdist worker interrupted): "
                  "tests it selected may be in no table here, so the run cannot be judged whole and `compare` exits 1 "
                  "on it. Rerun it."]  # fmt: skip
    if errored:
        lines += ["", "### Errored before measuring", "", "The run could not show a regression of these tests and "
                  "`compare` exits 1 on them; the first line of each one's error:", ""]  # fmt: skip
        for entry in errored:
            where = ", ".join(x for x in (f"profile `{entry.profile}`" if entry.profile else "", entry.when) if x)
            said = _code(entry.error) if entry.error else "no error line recorded"
            lines.append(f"- `{entry.test_id.split('::', 1)[-1]}` ({where}): {said}")
    failed = [(nodeid, text) for nodeid, text in failures.items() if text.strip()]
    if failed:
        lines += ["", "### Failed", ""]
        for nodeid, text in failed:
            lines += [f"**`{nodeid.split('::', 1)[-1]}`**", "", "```", *text.rstrip().splitlines(), "```", ""]
        lines.pop()
    if sweep_lines:
        lines += ["", "### Sweep", "", "```", *sweep_lines, "```"]
    if results_path is not None:
        lines += ["", f"Results: `{results_path}`"]
    return lines


def _not_judged(n: int) -> list[str]:
    """The heading's words for ``n`` tests that errored before they measured: ``1 test not judged (errored before it
    measured)``; none for 0."""
    if not n:
        return []
    return ["1 test not judged (errored before it measured)" if n == 1
            else f"{n} tests not judged (errored before they measured)"]  # fmt: skip


def _code(text: str) -> str:
    """``text`` as one inline code span, fenced by one backtick more than its longest run of them (CommonMark)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence, pad = "`" * (longest + 1), " " if longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_targets(option: str | None, environ: Mapping[str, str]) -> list[tuple[Path, bool]]:
    """Where the markdown summary goes, as (path, append) pairs.

    ``--specdec-markdown PATH`` is overwritten; ``$GITHUB_STEP_SUMMARY`` (set by GitHub Actions for each step) is
    appended to, since other tools of the same step write there too. Both are written when both are given.
    """
    targets: list[tuple[Path, bool]] = []
    if option:
        targets.append((Path(option), False))
    step_summary = environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and (not option or Path(step_summary).resolve() != Path(option).resolve()):
        targets.append((Path(step_summary), True))
    return targets


def write_markdown(lines: Iterable[str], path: str | Path, *, append: bool = False) -> Path:
    """Write ``lines`` (newline-terminated, UTF-8) to ``path``; parent directories are created.

    :param append: add to the end (``$GITHUB_STEP_SUMMARY``) instead of replacing the file; a blank line separates
        the summary from what is already there.
    :returns: ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    if append and path.exists() and path.stat().st_size > 0:
        text = "\n" + text
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        fh.write(text)
    return path
