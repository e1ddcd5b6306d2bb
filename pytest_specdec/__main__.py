"""``python -m pytest_specdec``: the command line (``pytest_specdec.cli.main``)."""

from pytest_specdec.cli.main import entry

# Guarded so that importing the module (tests/test_imports.py imports every module) does not run the CLI.
if __name__ == "__main__":
    raise SystemExit(entry())
