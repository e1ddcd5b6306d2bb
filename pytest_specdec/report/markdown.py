"""The run summary as GitHub-flavoured markdown, for ``$GITHUB_STEP_SUMMARY`` or ``--specdec-markdown PATH``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pytest_specdec.core.table import Column, markdown_table
from pytest_specdec.measure.results import ErroredTest, ResultRecord

__all__ = [
    "MARKDOWN_COLUMNS",
    "markdown_summary",
    "markdown_targets",
    "shown_outcome",
    "undecided_lines",
    "write_markdown",
]

#: (metrics key, header, format) of the markdown table, between the test/profile and the result columns.
MARKDOWN_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("accept_length", "accept len", "{:.2f}"),
    ("accept_rate", "accept rate", "{:.3f}"),
    ("ttft_ms_p50", "TTFT p50 ms", "{:.1f}"),
    ("itl_ms_p50", "ITL p50 ms", "{:.2f}"),
)
#: The result cell of a test that passed with a verdict undecided at its budget (``--specdec-undecided=warn``).
_UNDECIDED = "⚠️ undecided"
_RESULT = {"passed": "✅ passed", "failed": "❌ failed", "skipped": "skipped", "undecided": _UNDECIDED}


def markdown_summary(
    records: Sequence[ResultRecord],
    failures: Mapping[str, str] | None = None,
    *,
    title: str = "specdec summary",
    results_path: str | Path | None = None,
    sweep_lines: Sequence[str] = (),
    errored: Sequence[ErroredTest] = (),
    interrupted: bool = False,
    sweep_undecided: Sequence[str] = (),
    sweep_red: Sequence[str] = (),
) -> list[str]:
    """The summary as markdown lines (no trailing newlines).

    Layout: ``## <title>``, followed by what the run could not judge (``: interrupted; 1 test not judged (errored
    before it measured); 2 tests undecided (could not tell at their budget)``) when it was interrupted, a test errored
    before it measured or a verdict stayed undecided; a table with columns test (node id without the file), profile,
    tok/s, accept len, accept rate, TTFT p50 ms, ITL p50 ms, result (``n/a`` where a metric does not apply; ``⚠️
    undecided`` for a test that passed with an undecided verdict), or ``No test measured.``; then ``### Interrupted``
    when it was; then ``### Errored before measuring`` with one item per such test: its profile, phase and the first
    line of its error; then ``### Undecided`` with one item per test with an undecided verdict: what would decide it,
    in the verdict's own words (:func:`undecided_lines`); then, when a test failed, ``### Failed`` with each failed
    test's verdict text in a fenced block; then the sweep table (``sweep_table.sweep_table`` lines) in a fenced block
    under ``### Sweep``; then ``Results: `<path>```.

    :param records: the session's ``ResultRecord``s, in run order (a merge's: every shard's, from the run file).
    :param failures: node id -> failure text (the test report's ``longreprtext``: verdict lines, compare table).
    :param results_path: the stored run file, named on the last line.
    :param sweep_lines: ``sweep_table.sweep_table`` output, or empty.
    :param errored: the tests that errored before they measured (``RunFile.errored``): a night whose EAGLE-3 server
        never started showed the baseline's table alone.
    :param interrupted: the session ended early (``RunFile.interrupted``).
    :param sweep_undecided: the sweep's configured-point lines left undecided (``Outputs.sweep_undecided``): said in
        the heading and under the sweep table, as the terminal says them above pytest's final line.
    :param sweep_red: the sweep's lines that fail the run (``Outputs.sweep_red``): said in the heading and under the
        sweep table, as the terminal's ``FAIL specdec sweep:`` lines (a trial read a failed sweep's summary as all
        passed: the reason was only inside the table's block).
    """
    failures = dict(failures or {})
    columns = [
        Column("test"),
        Column("profile"),
        *(Column(header, "right", fmt) for _, header, fmt in MARKDOWN_COLUMNS),
        Column("result"),
    ]
    undecided = {record.test_id: (record, lines) for record in records if (lines := undecided_lines(record))}
    rows = [
        [
            f"`{record.test_id.split('::', 1)[-1]}`",
            record.profile,
            *(record.metrics.get(key) for key, _, _ in MARKDOWN_COLUMNS),
            # A test the warn policy passed with an open verdict is not green: the night could not tell.
            _RESULT.get(outcome := _shown(record.outcome, record.test_id in undecided), outcome or "?"),
        ]
        for record in records
    ]  # fmt: skip
    unjudged = [*(["the sweep failed the run"] if sweep_red else []), *(["interrupted"] if interrupted else []),
                *_not_judged(len(errored)), *_undecided(len(undecided)),
                *(["the sweep's configured point undecided"] if sweep_undecided else [])]  # fmt: skip
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
    if undecided:
        lines += ["", "### Undecided", "", "At its budget each verdict below could neither pass nor fail: the run "
                  f"could not tell. A test that passed with one shows `{_UNDECIDED}` (`--specdec-undecided=warn`; "
                  "`=fail` fails it). What would decide each:", ""]  # fmt: skip
        shared: dict[tuple[str, tuple[str, ...]], str] = {}
        for record, open_lines in undecided.values():
            name = record.test_id.split("::", 1)[-1]
            head = f"- `{name}` (profile `{record.profile}`)"
            # Every test of a profile reads one measurement and shares its verdicts: said once, as the terminal does.
            first = shared.setdefault((record.profile, tuple(open_lines)), name)
            if first != name:
                lines.append(f"{head}: the same verdicts as `{first}`")
            elif len(open_lines) == 1:
                lines.append(f"{head}: {_code(open_lines[0])}")
            else:
                lines += [f"{head}:", *(f"  - {_code(line)}" for line in open_lines)]
    failed = [(nodeid, text) for nodeid, text in failures.items() if text.strip()]
    if failed:
        lines += ["", "### Failed", ""]
        for nodeid, text in failed:
            lines += [f"**`{nodeid.split('::', 1)[-1]}`**", "", "```", *text.rstrip().splitlines(), "```", ""]
        lines.pop()
    if sweep_lines:
        lines += ["", "### Sweep", "", "```", *sweep_lines, "```"]
        lines += [item for line in sweep_red for item in ("", f"❌ **FAIL specdec sweep**: {line}")]
        if sweep_undecided:
            lines += ["", f"{_UNDECIDED}: the configured point could not be told from the others at the sweep's "
                      "repeats, or was not swept (`--specdec-undecided=fail` fails the run); its line above says what "
                      "would decide it."]
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


def _undecided(n: int) -> list[str]:
    """The heading's words for ``n`` tests with a verdict undecided at its budget: ``2 tests undecided (could not
    tell at their budget)``; none for 0."""
    if not n:
        return []
    return ["1 test undecided (could not tell at its budget)" if n == 1
            else f"{n} tests undecided (could not tell at their budget)"]  # fmt: skip


def shown_outcome(record: ResultRecord) -> str:
    """The result a summary table shows for ``record``: ``undecided`` for a test that passed with a verdict open at
    its budget (``--specdec-undecided=warn``: pytest's outcome, but the night could not tell), else its outcome (a
    fresh-user trial read ``passed`` in the terminal's table on every undecided night, ``⚠️ undecided`` in the
    markdown)."""
    return _shown(record.outcome, bool(undecided_lines(record)))


def _shown(outcome: str, open_verdict: bool) -> str:
    """:func:`shown_outcome` of a test whose outcome is ``outcome`` and that has (``open_verdict``) a verdict left
    undecided at its budget, for a caller that has read its undecided lines already."""
    return "undecided" if outcome == "passed" and open_verdict else outcome


def undecided_lines(record: ResultRecord) -> list[str]:
    """What would decide each verdict of ``record`` left undecided at its budget, one line each, as the run's
    warnings said it; empty when none was. The verdicts are those the terminal's count reads
    (``report.summary.undecided_lines``: ``ResultRecord.undecided_keys``; not measured further is not counted); the
    text is stored with the record, so a merge of shards says the same: a threshold's line from ``checks``
    (``output_tok_s 101.2 tok/s: undecided vs min 100 [...; about 110 repeats in all would decide it ...]``), a
    compare's open rows from ``cost["verdicts"]["compare"]["open"]`` (``verdict.judge_compare``), each headed
    ``compare:`` (``compare: output_tok_s x0.948, CI 0.4554-1.975 (99.2%) holds the tolerance 5%; about 40 repeats in
    all would decide it ...``). A record stored before the text was says ``<key>: undecided`` and where to read it.
    """
    verdicts = (record.cost or {}).get("verdicts") or {}
    lines: list[str] = []
    for key in record.undecided_keys():
        cost = verdicts.get(key) if isinstance(verdicts, Mapping) else None
        rows = cost.get("open") if key == "compare" and isinstance(cost, Mapping) else None
        check = str(record.checks.get(key, ""))
        if isinstance(rows, list) and rows:
            lines += [f"compare: {row}" for row in rows]
        elif check.startswith("undecided: "):
            lines.append(check.removeprefix("undecided: "))
        else:
            lines.append(f"{key}: undecided (what would decide it is in the run's warnings)")
    return lines


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
