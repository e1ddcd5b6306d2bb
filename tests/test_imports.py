"""No import circle among pytest_specdec's modules (issue 17: engines -> vllm -> preflight -> engines), and job folders
that import only downward (issue 35: ``FLOORS``).

Two checks: a static one over every ``import`` of a pytest_specdec module (function-level ones too, since a lazy
import only hides a circle until the function runs; ``if TYPE_CHECKING:`` blocks excluded), and a dynamic one that
imports each module first, in a fresh set of pytest_specdec modules, in one subprocess (a circle that breaks some
import order fails there with ImportError). Both are checked against a planted circle so they cannot pass vacuously.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pytest_specdec

PACKAGE_DIR = Path(pytest_specdec.__file__).resolve().parent


def module_files(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``package_dir`` (a package ``__init__`` under its own name)."""
    out: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(path: Path, modules: dict[str, Path], *, type_checking: bool = False) -> set[str]:
    """The modules of ``modules`` that ``path`` imports anywhere (``from pkg import submodule`` counts as the
    submodule), except under ``if TYPE_CHECKING:`` unless ``type_checking``. Relative imports are resolved against
    the file's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set() if type_checking else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node)
        for child in node.body for n in ast.walk(child)
    }  # fmt: skip
    name = next(m for m, p in modules.items() if p == path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def import_graph(package_dir: Path, *, type_checking: bool = False) -> dict[str, set[str]]:
    modules = module_files(package_dir)
    return {name: imported_modules(path, modules, type_checking=type_checking) for name, path in modules.items()}


IMPORT_EACH = textwrap.dedent(
    """
    import importlib, sys, traceback
    package, names = sys.argv[1], sys.argv[2:]
    failed = []
    for name in names:
        for loaded in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name + ": " + traceback.format_exc().strip().splitlines()[-1])
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
    """
)


def import_each_first(package_dir: Path) -> subprocess.CompletedProcess[str]:
    """Import every module of the package as the first one of it, in one fresh interpreter."""
    names = list(module_files(package_dir))
    return subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, package_dir.name, *names],
        capture_output=True,
        text=True,
        cwd=package_dir.parent,
        timeout=600,
    )


def _planted_circle(tmp_path: Path) -> Path:
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    # a needs b.B at import time; b needs a.A: importing b first breaks (a's body runs while b is half done).
    (pkg / "a.py").write_text("A = 1\nfrom circ.b import B\n")
    (pkg / "b.py").write_text("from circ.a import A\nB = A + 1\n")
    (pkg / "c.py").write_text("def lazy():\n    from circ import d\n    return d\n")
    (pkg / "d.py").write_text("def lazy():\n    from circ import c\n    return c\n")
    return pkg


def test_no_import_cycle_counting_lazy_imports() -> None:
    assert find_cycle(import_graph(PACKAGE_DIR)) is None


@pytest.mark.slow  # ~70 imports, the reference server's torch among them: 10-20 s on 2 busy cores
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    done = import_each_first(PACKAGE_DIR)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_checks_catch_a_planted_circle(tmp_path: Path) -> None:
    pkg = _planted_circle(tmp_path)
    assert find_cycle(import_graph(pkg)) in (["circ.a", "circ.b", "circ.a"], ["circ.c", "circ.d", "circ.c"])
    graph = import_graph(pkg)
    graph.pop("circ.a"), graph.pop("circ.b")
    graph = {k: v - {"circ.a", "circ.b"} for k, v in graph.items()}
    assert find_cycle(graph) == ["circ.c", "circ.d", "circ.c"]  # a lazy circle is a circle too
    done = import_each_first(pkg)
    assert done.returncode == 1
    assert "circ.b: ImportError: cannot import name 'B' from partially initialized module 'circ.b'" in done.stdout


#: The job folders, ground floor first (issue 35): a module imports only from its own folder or a lower one. ``cli``
#: and ``run`` share the top floor and do not import each other; ``plugin`` (the entry point) and the package's
#: ``__init__`` stand above all. ``refserver`` is its own package: the plugin only launches it as a process (the
#: engine reads its flag table), and it imports only the plugin's ground floor (``core``).
FLOORS = {
    "core": 1, "profiles": 2, "engines": 3, "serve": 4, "measure": 5, "judge": 6, "bisection": 7, "report": 8,
    "run": 9, "cli": 9, "plugin": 10, "__main__": 10, "": 10,
}  # fmt: skip


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of ``graph`` that runs up a floor, sideways between two folders of one floor, or
    out of ``refserver`` into the plugin above its ground floor (type-only imports count: they are arrows of the
    design too)."""

    def folder(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else ""

    bad = []
    for name, imported in sorted(graph.items()):
        for other in sorted(imported):
            mine, theirs = folder(name), folder(other)
            if mine == theirs or theirs == "refserver":
                continue
            if (theirs != "core") if mine == "refserver" else FLOORS[theirs] >= FLOORS[mine]:
                bad.append(f"{name} -> {other}")
    return bad


def test_job_folders_import_only_downward() -> None:
    graph = import_graph(PACKAGE_DIR, type_checking=True)
    folders = {name.split(".")[1] for name in graph if name.count(".") >= 1}
    assert folders <= set(FLOORS) | {"refserver"}, f"a folder without a floor: {folders - set(FLOORS)}"
    assert upward_imports(graph) == []


def test_the_floor_check_catches_an_import_up() -> None:
    graph = {"pytest_specdec.core.stats": {"pytest_specdec.judge.compare"}, "pytest_specdec.run.marker": {
        "pytest_specdec.cli.main"}, "pytest_specdec.judge.compare": {"pytest_specdec.core.stats"},
        "pytest_specdec.refserver.app": {"pytest_specdec.core.auth", "pytest_specdec.measure.client"}}  # fmt: skip
    assert upward_imports(graph) == [
        "pytest_specdec.core.stats -> pytest_specdec.judge.compare",
        "pytest_specdec.refserver.app -> pytest_specdec.measure.client",
        "pytest_specdec.run.marker -> pytest_specdec.cli.main",
    ]
