"""Every command shown in README.md and docs/ is run by a test or CI, and the shipped text stays shippable.

A command is a line of a ```bash block, or an inline code span that starts with ``pytest``, ``python -m pytest_specdec``
or a ``benchmarks/`` script (a span that is a lone ``--specdec-*`` / ``--benchmark-*`` flag is checked as a pytest
flag). What covers each kind:

- ``pytest ...``: every flag exists in ``pytest --help`` (run once, with the plugin), and a path under ``tests/`` or
  ``examples/`` that it names exists; the test command and the main command are run by ``.ci/run``.
- ``python -m pytest_specdec SUB ...``: ``SUB --help`` succeeds and lists every flag; the same for
  ``python -m pytest_specdec.refserver`` and ``.refserver.train``, and ``benchmarks/*.py`` scripts.
- anything else in a ```bash block (pip, bash .ci/..., cp, ...): listed in ``ALLOWED`` with the file that runs it and
  a fragment of that file showing it does.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def doc_files() -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True, slots=True)
class Command:
    """One shell command as shown in a document.

    :param where: ``FILE:LINE`` of its first line (FILE relative to the repository root).
    :param text: the command, continuation lines joined, without a leading ``$``.
    :param fenced: True for a line of a ```bash block, False for an inline code span.
    """

    where: str
    text: str
    fenced: bool


@dataclass(frozen=True, slots=True)
class Allowed:
    """A command that is neither pytest nor our CLI, and the file that runs it.

    :param pattern: regular expression the whole command must match.
    :param runner: file (relative to the root) that runs it: a CI script, a workflow, a test module.
    :param evidence: text that occurs in ``runner`` where it runs the command.
    """

    pattern: str
    runner: str
    evidence: str


# Commands the docs show that pytest --help and our CLI cannot vouch for. Each names the CI step that runs it.
ALLOWED = (
    Allowed(r"python3 -m venv \.venv", ".ci/run", "python3 -m venv .venv-ci"),
    Allowed(r"\. \.venv/bin/activate", ".ci/run", ". .venv-ci/bin/activate"),
    # The +cpu pin and the index are what a user needs; CI's machines take the same build through pip's find-links.
    Allowed(
        r"pip install 'torch==2\.13\.0\+cpu' --extra-index-url https://download\.pytorch\.org/whl/cpu"
        r" --retries 1 --timeout 10",
        ".ci/run",
        "pip install -q torch==2.13.0",
    ),
    Allowed(r"pip install torch==2\.13\.0", ".ci/run", "pip install -q torch==2.13.0"),
    Allowed(r"pip install -e '\.\[dev\]'", ".ci/run", "pip install -q -e '.[dev]'"),
    Allowed(r"pip install '/path/to/clone\[reference\]'", ".ci/package.sh", '/dist/*.whl)[reference]"'),
    Allowed(r"mkdir -p tests", ".ci/package.sh", 'mkdir -p "$work/project/tests"'),
    Allowed(
        r"cp /path/to/clone/examples/specdec\.yaml /path/to/clone/examples/test_specdec\.py tests/",
        ".ci/package.sh",
        "cp examples/specdec.yaml examples/test_specdec.py",
    ),
    Allowed(r"bash \.ci/vllm-setup\.sh", ".ci/run", "bash .ci/vllm-setup.sh"),
    # GPU-runner commands (docs/sglang-gpu.md): CI has no GPU. The deep_gemm check runs in the H200 session script;
    # the sglang extra is not run anywhere here (SGLang needs CUDA): the evidence is the extra it installs.
    Allowed(
        r'python -c "import torch, deep_gemm; print\(deep_gemm\.get_num_sms\(\)\)"',
        "benchmarks/gpu/session-2026-12-02-graphs.sh",
        "import torch, deep_gemm",
    ),
    Allowed(r'pip install "pytest-specdec\[sglang\]"', "pyproject.toml", 'sglang = ["sglang>=0.5.23"]'),
)

_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_FLAG = re.compile(r"(?<![\w/.-])(--?[A-Za-z][\w-]*)")
_SHELL_BLOCKS = {"bash", "sh", "shell", "console"}


def extract_commands(markdown: str, name: str) -> list[Command]:
    """Commands shown in one markdown text.

    :param markdown: the document's text.
    :param name: what ``Command.where`` starts with (the file's path).
    :returns: fenced commands first (lines of ```bash blocks, `` && ``-joined ones split), then inline spans that
        start like a command (see the module docstring), in document order.
    """
    commands: list[Command] = []
    fenced_spans: list[tuple[int, int]] = []
    for block in _FENCE.finditer(markdown):
        fenced_spans.append(block.span())
        if block.group(1) not in _SHELL_BLOCKS:
            continue
        first_line = markdown.count("\n", 0, block.start(2)) + 1
        pending = ""
        for offset, line in enumerate(block.group(2).splitlines()):
            line = pending + line.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            line = line.removeprefix("$ ")
            if not line or line.startswith("#"):
                continue
            for part in line.split(" && "):
                commands.append(Command(f"{name}:{first_line + offset}", part.strip(), fenced=True))
    for span in _SPAN.finditer(markdown):
        if any(start <= span.start() < end for start, end in fenced_spans):
            continue
        text = " ".join(span.group(1).split())
        if _looks_like_command(text):
            line = markdown.count("\n", 0, span.start()) + 1
            commands.append(Command(f"{name}:{line}", text, fenced=False))
    return commands


def _looks_like_command(text: str) -> bool:
    words = _words(text)
    if not words:
        return False
    return _kind(words)[0] != "other"


def _words(text: str) -> list[str]:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in a span that shows part of a command
        words = text.split()
    while words and _ENV.match(words[0]):
        words.pop(0)
    return words


def _kind(words: list[str]) -> tuple[str, str, list[str]]:
    """(kind, program, arguments): kind is pytest, module (``python -m X``), script (benchmarks/), flag or other."""
    head = words[0]
    if head == "pytest" or head.endswith("/pytest"):
        return "pytest", "pytest", words[1:]
    if re.fullmatch(r"--(specdec|benchmark)-[\w-]+(=\S*)?", head) and len(words) == 1:
        return "flag", "pytest", words
    if re.fullmatch(r"(.*/)?python3?", head) and len(words) > 1:
        if words[1] == "-m" and len(words) > 2:
            module = words[2]
            if module == "pytest":
                return "pytest", "pytest", words[3:]
            if module == "pytest_specdec" or module.startswith("pytest_specdec."):
                return "module", module, words[3:]
        elif words[1].startswith("benchmarks/"):
            return "script", words[1], words[2:]
    if head.startswith("benchmarks/") and head.endswith(".py"):
        return "script", head, words[1:]
    return "other", head, words[1:]


def _flags(arguments: Iterable[str]) -> list[str]:
    """Flags among the arguments: ``[--strict]`` -> ``--strict``, ``--x=1`` -> ``--x``; values are skipped."""
    found = []
    for word in arguments:
        word = word.strip("[]|")
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word):
            found.append(word.split("=", 1)[0])
    return found


def help_flags(help_text: str) -> frozenset[str]:
    """Every ``-x`` / ``--long-flag`` that a ``--help`` text names."""
    return frozenset(_FLAG.findall(help_text))


HelpFor = Callable[[tuple[str, ...]], "str | None"]


def _run_help(argv: tuple[str, ...]) -> str | None:
    """The ``--help`` output of ``python argv... --help`` run in the root, or None when it exits non-zero."""
    done = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return done.stdout if done.returncode == 0 else None


#: Run in one ``python -c`` in the root: ``--help`` of each argv (JSON list on argv[1]) as ``python argv... --help``
#: would print it (``-m X``: ``runpy.run_module``; a script: ``runpy.run_path`` with its folder first on sys.path),
#: printed as JSON ``[[argv, stdout or null], ...]``; null where it exits non-zero or raises. One interpreter instead
#: of one per argv: ~30 argvs cost ~30 interpreter starts and package imports (issue 45).
_BATCH_HELP = """
import contextlib, io, json, runpy, sys
found = []
for argv in json.loads(sys.argv[1]):
    out, path = io.StringIO(), list(sys.path)
    sys.argv = [argv[1] if argv[0] == "-m" else argv[0], *argv[2 if argv[0] == "-m" else 1:], "--help"]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            if argv[0] == "-m":
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.path.insert(0, argv[0].rsplit("/", 1)[0])
                runpy.run_path(argv[0], run_name="__main__")
        ok = True
    except SystemExit as stop:
        ok = stop.code in (None, 0)
    except BaseException:
        ok = False
    sys.path[:] = path
    found.append([argv, out.getvalue() if ok else None])
sys.__stdout__.write(json.dumps(found))
"""


def _batch_help(argvs: Iterable[tuple[str, ...]]) -> dict[tuple[str, ...], str | None]:
    """``_run_help`` of every argv from one interpreter (``_BATCH_HELP``); each argv on its own if that one fails."""
    argvs = list(argvs)
    if not argvs:
        return {}
    done = subprocess.run([sys.executable, "-c", _BATCH_HELP, json.dumps(argvs)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    try:
        return {tuple(argv): text for argv, text in json.loads(done.stdout)}
    except ValueError:  # the batch itself broke (a script that exits the interpreter): the slow way
        return {argv: _run_help(argv) for argv in argvs}


def help_argv(command: Command) -> tuple[str, ...] | None:
    """The argv whose ``--help`` vouches for the command's flags, or None for an allow-listed kind."""
    kind, program, arguments = _kind(_words(command.text))
    if kind in ("pytest", "flag"):
        return ("-m", "pytest")
    if kind == "module" and program == "pytest_specdec":
        sub = next((word for word in arguments if not word.startswith("-")), None)
        return ("-m", "pytest_specdec", sub) if sub else ("-m", "pytest_specdec")
    if kind == "module":
        return ("-m", program)
    if kind == "script":
        return (program,)
    return None


def problems(commands: Iterable[Command], help_for: HelpFor) -> list[str]:
    """What is wrong with the commands, one line each (empty: every command is covered).

    :param help_for: returns the ``--help`` text of an argv (as from ``help_argv``), None when that argv fails.
    """
    found = []
    for command in commands:
        words = _words(command.text)
        if not words:
            continue
        kind, program, arguments = _kind(words)
        argv = help_argv(command)
        if argv is None:
            bare = re.sub(r"\s+#.*$", "", command.text)
            if command.fenced and not any(re.fullmatch(a.pattern, bare) for a in ALLOWED):
                found.append(f"{command.where}: {command.text!r} is run by no test or CI: add it to ALLOWED")
            continue
        if kind == "script" and not (ROOT / program).is_file():
            found.append(f"{command.where}: {program} does not exist")
            continue
        flags = _flags(arguments)
        if kind == "script" and not flags:
            continue  # a script named without flags: its existence is the claim
        text = help_for(argv)
        if text is None:
            found.append(f"{command.where}: `python {' '.join(argv)} --help` fails ({command.text!r})")
            continue
        known = help_flags(text)
        unknown = [flag for flag in flags if flag not in known]
        if unknown:
            shown = " ".join(argv)
            found.append(f"{command.where}: {', '.join(unknown)} not in `python {shown} --help` ({command.text!r})")
        if kind == "pytest":
            for word in arguments:
                if re.match(r"(tests|examples)/", word) and not (ROOT / word.split("::")[0]).exists():
                    found.append(f"{command.where}: {word} does not exist ({command.text!r})")
    return found


def all_commands() -> list[Command]:
    commands = []
    for path in doc_files():
        commands += extract_commands(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return commands


#: ``--help`` texts already run in this process, by argv: ``pytest --help`` (the slowest) runs once for all tests.
_HELPS: dict[tuple[str, ...], str | None] = {}


def _helps(argvs: frozenset[tuple[str, ...]]) -> dict[tuple[str, ...], str | None]:
    """``--help`` of each argv: ``pytest --help`` in its own interpreter (with the plugin and the root conftest, as a
    user runs it) beside one interpreter for all the others (``_batch_help``)."""
    todo = sorted(argvs - _HELPS.keys())
    pytest_argv = ("-m", "pytest")
    with ThreadPoolExecutor(max_workers=1) as pool:
        pytest_help = pool.submit(_run_help, pytest_argv) if pytest_argv in todo else None
        _HELPS.update(_batch_help(argv for argv in todo if argv != pytest_argv))
        if pytest_help is not None:
            _HELPS[pytest_argv] = pytest_help.result()
    return {argv: _HELPS[argv] for argv in argvs}


def real_help(commands: list[Command]) -> HelpFor:
    """``help_for`` backed by real ``--help`` runs, each argv once."""
    helps = _helps(frozenset(argv for c in commands if (argv := help_argv(c)) is not None))
    return lambda argv: helps[argv] if argv in helps else _run_help(argv)


@pytest.mark.slow
def test_every_command_in_readme_and_docs_is_covered() -> None:
    commands = all_commands()
    helps = real_help(commands)
    assert "--specdec-compare" in (helps(("-m", "pytest")) or ""), "pytest --help ran without the plugin"
    assert len(commands) > 50, len(commands)  # the extractor still finds the docs' commands
    assert problems(commands, helps) == []


def test_allow_list_names_where_each_command_runs() -> None:
    for allowed in ALLOWED:
        assert allowed.evidence in (ROOT / allowed.runner).read_text(encoding="utf-8"), allowed


def test_readme_test_command_and_main_command_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    readme = README.read_text(encoding="utf-8")
    for heading in ("## The test command", "## The main command"):
        block = readme.split(heading, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
        assert block.strip() in ci, (heading, block)


def test_readme_reads_in_five_minutes() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_links_resolve(path: Path) -> None:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            if linked.relative_to(ROOT).as_posix() not in PENDING:
                broken.append(target)
            continue
        if anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    assert broken == []


# Pages linked before they land, with who writes them; a link to any other missing file fails.
PENDING: dict[str, str] = {}


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces to -."""
    headings = re.findall(r"^#+ (.+)$", _FENCE.sub("", path.read_text(encoding="utf-8")), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_shipped_text_names_no_path_of_our_machines_nor_our_tickets() -> None:
    # A user of the wheel can open neither our machines' paths nor our issue tracker: the text says what is true
    # now (with dates where it matters), not which ticket did it.
    shipped = [
        *doc_files(),
        *(p for p in (ROOT / "examples").rglob("*") if p.is_file() and "__pycache__" not in p.parts),
        *_package_sources(),
    ]
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in shipped
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.\./shared|shared/reference|/work/|/tmp/|\b[Ii]ssues? \d", line)
    ]
    assert found == []


# The extractor and the checks, on planted text: each must be able to fail.

PLANTED = """\
Run it:

```bash
pytest -m specdec --server-profile=eagle3 --specdec-no-such-flag
python -m pytest_specdec compare A.json B.json --no-such-option
python -m pytest_specdec no-such-command x
rm -rf build && pip install -e '.[dev]'
```

Inline: `pytest --specdec-compare` and `python -m pytest_specdec check FILE [--strict]`; not a command: `specdec.yaml`.

```
pytest --output-sample-is-not-a-command
```
"""


def test_extractor_finds_fenced_lines_and_inline_commands_only() -> None:
    commands = extract_commands(PLANTED, "planted.md")
    assert [(c.where, c.text, c.fenced) for c in commands] == [
        ("planted.md:4", "pytest -m specdec --server-profile=eagle3 --specdec-no-such-flag", True),
        ("planted.md:5", "python -m pytest_specdec compare A.json B.json --no-such-option", True),
        ("planted.md:6", "python -m pytest_specdec no-such-command x", True),
        ("planted.md:7", "rm -rf build", True),
        ("planted.md:7", "pip install -e '.[dev]'", True),
        ("planted.md:10", "pytest --specdec-compare", False),
        ("planted.md:10", "python -m pytest_specdec check FILE [--strict]", False),
    ]


@pytest.mark.slow
def test_planted_unknown_flags_commands_and_unlisted_programs_fail() -> None:
    commands = extract_commands(PLANTED, "planted.md")
    found = problems(commands, real_help(commands))
    assert found == [
        "planted.md:4: --specdec-no-such-flag not in `python -m pytest --help` "
        "('pytest -m specdec --server-profile=eagle3 --specdec-no-such-flag')",
        "planted.md:5: --no-such-option not in `python -m pytest_specdec compare --help` "
        "('python -m pytest_specdec compare A.json B.json --no-such-option')",
        "planted.md:6: `python -m pytest_specdec no-such-command --help` fails "
        "('python -m pytest_specdec no-such-command x')",
        "planted.md:7: 'rm -rf build' is run by no test or CI: add it to ALLOWED",
    ]


def test_a_missing_test_path_in_a_pytest_command_fails() -> None:
    commands = extract_commands("`pytest tests/no_such_dir -m gpu`", "planted.md")
    assert problems(commands, lambda argv: "-m MARKEXPR") == [
        "planted.md:1: tests/no_such_dir does not exist ('pytest tests/no_such_dir -m gpu')"
    ]


#: The package's job folders: a reference to one of their modules is written ``judge.verdict`` or
#: ``measure.store.MeasurementStore`` (dotted, so it names what it means and this test can resolve it).
_JOB_FOLDERS = "run|judge|measure|serve|core|engines|profiles|report|cli|bisection|refserver"


def _package_sources() -> list[Path]:
    return sorted((ROOT / "pytest_specdec").rglob("*.py"))


def test_package_text_names_modules_and_objects_that_exist() -> None:
    # Module references in docstrings and comments broke twice when a module moved: written as dotted names they
    # are checked here, so the next move fails this test instead of leaving a stale path.
    import importlib

    dotted = re.compile(rf"``(?:pytest_specdec\.)?((?:{_JOB_FOLDERS})(?:\.[A-Za-z_]\w*)+)``")
    stale: list[str] = []
    for path in _package_sources():
        text = path.read_text(encoding="utf-8")
        if re.search(rf"(?<![\w/])(?:{_JOB_FOLDERS})/[a-z_]+\.py", text):
            stale.append(f"{path.relative_to(ROOT)}: a file path of ours (write the dotted module name)")
        for ref in sorted(set(dotted.findall(text))):
            parts = ["pytest_specdec", *ref.split(".")]
            for cut in range(len(parts), 1, -1):
                try:
                    obj: object = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                try:
                    for attr in parts[cut:]:
                        obj = getattr(obj, attr)
                except AttributeError:
                    stale.append(f"{path.relative_to(ROOT)}: ``{ref}`` does not exist")
                break
            else:
                stale.append(f"{path.relative_to(ROOT)}: ``{ref}`` names no module")
    assert not stale, "\n".join(stale)
