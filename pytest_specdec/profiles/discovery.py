"""Where the profile file is when no option or ini key names it, searched the way pytest finds its ini file.

pytest looks for its ini file in the common ancestor of the command-line paths and upwards
(``_pytest/config/findpaths.py::determine_setup``); ``specdec.yaml`` is searched the same way, stopping at the rootdir,
so ``pytest tests/perf`` finds ``tests/perf/specdec.yaml`` and ``pytest`` from a subdirectory finds the project's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DEFAULT_PROFILE_FILE", "args_ancestor", "find_profile_file", "not_found_message", "space_form_trap"]

#: The profile file's name when neither ``--specdec-profiles`` nor ini ``specdec_profiles`` is given.
DEFAULT_PROFILE_FILE = "specdec.yaml"
#: Files whose presence makes pytest take their directory as the rootdir (``findpaths.locate_config``, setup.py).
_ROOT_MARKERS = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", "setup.py")


def args_ancestor(args: Sequence[str], invocation_dir: Path) -> Path:
    """The deepest directory holding every command-line path (node ids ``file.py::test`` count as their file),
    as pytest's ``get_common_ancestor``; the invocation directory when no argument is an existing path.

    :param args: pytest's positional arguments after option parsing (``config.args``), relative to
        ``invocation_dir`` or absolute.
    """
    dirs = []
    for arg in args:
        path = invocation_dir / arg.split("::", 1)[0]
        if path.exists():
            dirs.append(os.path.abspath(path if path.is_dir() else path.parent))
    return Path(os.path.commonpath(dirs)) if dirs else invocation_dir


def find_profile_file(
    start: Path, rootdir: Path, *, project_root: bool, name: str = DEFAULT_PROFILE_FILE
) -> tuple[Path | None, list[Path]]:
    """Search ``name`` in ``start`` and its parents, as pytest searches its ini file: up to and including
    ``rootdir`` when ``project_root`` (the rootdir came from an ini file, so it bounds the project), else up to the
    filesystem root; then in ``rootdir`` when the walk did not pass it.

    :returns: ``(the first file found or None, every directory looked in, in order)``.
    """
    looked: list[Path] = []
    for folder in (start, *start.parents):
        looked.append(folder)
        if project_root and folder == rootdir:
            break
    if rootdir not in looked:
        looked.append(rootdir)
    found = next((folder / name for folder in looked if (folder / name).is_file()), None)
    return found, looked


def not_found_message(name: str, looked: Sequence[Path], rootdir: Path) -> str:
    """``specdec.yaml: profile file not found; looked in A, B (rootdir); ...`` with the ways to name one."""
    where = ", ".join(f"{p} (rootdir)" if p == rootdir else str(p) for p in looked)
    return (
        f"{name}: profile file not found; looked in {where}. Put {name} in one of these, or pass "
        "--specdec-profiles=PATH or set the ini key specdec_profiles"
    )


def space_form_trap(
    invocation_args: Sequence[str], invocation_dir: Path, rootdir: Path, ancestor: Path, option: str
) -> str | None:
    """Detect ``OPTION DIR`` (two words) with an existing DIR having moved pytest's rootdir.

    pytest chooses its rootdir before plugins add their options, so at that moment ``--specdec-dir DIR`` reads as an
    unknown flag followed by the test path DIR (``_pytest/config/__init__.py::Config.parse``). The rootdir then
    comes from DIR: DIR itself when it lies outside the project, and the project's ini file may go unread.

    :param ancestor: :func:`args_ancestor` of the parsed arguments, where pytest would have started without DIR.
    :returns: the explanation with the fix, or None when the space form was not used or did not change the rootdir.
    """
    args = list(invocation_args)
    if any(a == "--rootdir" or a.startswith("--rootdir=") for a in args):
        return None
    for i, arg in enumerate(args[:-1]):
        if arg != option:
            continue
        value = args[i + 1]
        folder = Path(os.path.abspath(invocation_dir / value))
        if not folder.is_dir():
            continue
        # Without DIR the rootdir is the nearest of `ancestor` and its parents with an ini file (or setup.py),
        # else the common directory of the invocation dir and `ancestor` (`findpaths.determine_setup`).
        moved = rootdir != ancestor and rootdir not in ancestor.parents
        if not moved:
            between = [p for p in (ancestor, *ancestor.parents) if rootdir in p.parents]  # below rootdir
            moved = any((p / marker).is_file() for p in between for marker in _ROOT_MARKERS)
        if not moved and not any((rootdir / marker).is_file() for marker in _ROOT_MARKERS):
            common = Path(os.path.commonpath([invocation_dir, ancestor]))
            moved = rootdir != (ancestor if common == Path(common.anchor) else common)
        if moved:
            return (
                f"{option} {value}: pytest took {value} for a test path when it chose its rootdir (it reads the "
                f"command line before plugins add their options), so the rootdir is {rootdir} (test ids, the ini "
                f"file and relative paths follow it); write {option}={value}"
            )
    return None
