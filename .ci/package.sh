#!/usr/bin/env bash
# Publish-ready check (issue 27): the sdist and wheel build, `twine check` passes on both (the README renders on the
# package page), and the wheel installed alone in a fresh venv runs the README's "In your own project" commands.
# Run from .ci/run (a few minutes: the build, one venv, one main command on the reference server).
set -euo pipefail
cd "$(dirname "$0")/.."

rm -rf dist
python -m build -q --outdir dist .
twine check --strict dist/*

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
(
  . "$work/venv/bin/activate"
  # CPU torch first, as in .ci/run and the README (this pip takes the local CPU wheel).
  pip install -q torch==2.13.0
  pip install -q "$(ls "$PWD"/dist/*.whl)[reference]"
  mkdir -p "$work/project/tests"
  cp examples/specdec.yaml examples/test_specdec.py "$work/project/tests/"
  cd "$work/project"                       # no checkout on sys.path: only the installed wheel
  python -c "import pytest_specdec, sys; assert '/site-packages/' in pytest_specdec.__file__, pytest_specdec.__file__"
  python -m pytest_specdec check tests/specdec.yaml
  pytest tests -m specdec --server-profile=eagle3 -p no:cacheprovider
)
