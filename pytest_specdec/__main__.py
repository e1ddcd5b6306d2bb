"""``python -m pytest_specdec``: the command line (``pytest_specdec.cli.main``)."""

from pytest_specdec.cli.main import main

raise SystemExit(main())
