"""The JSON report of ``--specdec-report PATH``: the run with every result and its fingerprint."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_specdec.measure.results import RunFile

__all__ = ["write_json_report"]


def write_json_report(run: RunFile, path: str | Path) -> Path:
    """Write ``run`` (every result with its fingerprint, the format of ``.specdec/results/*.json``) to ``path``
    for ``--specdec-report``: a temp file in the same directory, then ``os.replace``; parents are created.

    :returns: ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(run.to_json(), encoding="utf-8")
    os.replace(tmp, path)
    return path
