"""``python -m pytest_specdec save RUN NAME``: name a stored run, as pytest's ``--specdec-save NAME`` names the run
it stores; ``--specdec-compare=NAME`` (and the ``compare`` command's BASE) then finds it by that name."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from pytest_specdec.core.errors import CompareError
from pytest_specdec.judge.baseline import Baselines, shown
from pytest_specdec.measure.results import ResultStore, check_name

__all__ = ["save_command"]


def save_command(args: argparse.Namespace) -> int:
    """``save RUN NAME [--force] [--results-dir DIR]``: point NAME at stored run RUN (a name, run id or unique
    prefix, a run file in DIR, or ``latest``). A run with a test that is not clean (failed, undecided, interrupted:
    ``ResultRecord.baseline_problem``; errored before it measured: ``RunFile.errored``) is refused unless ``--force``;
    a run with no measured test (interrupted before any measured, or every test errored) is refused even with it.

    :returns: ``EXIT_OK`` named; ``EXIT_REFUSED`` (1) a run that is not clean, without ``--force``, or one with no
        measured test; ``EXIT_USAGE``
        (2) a bad name, no such run, or a run file outside DIR.
    """
    store = ResultStore(Path(args.results_dir))
    try:
        check_name(args.name)
        path = store.resolve(args.run)
        run = store.load(args.run)
    except (ValueError, CompareError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if path.resolve() != (store.root / f"{run.run_id}.json").resolve():
        print(f"error: {path} is not a run of {store.root}: a name points at a stored run (merge or copy it there, or "
              "pass --results-dir)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if not run.results:  # a name for it would compare nothing; --force cannot make it a baseline
        why = "the session was interrupted before any test measured" if run.interrupted else (
            "every test errored before it measured" if run.errored else "it holds no test")
        print(f"save: refused: run {run.run_id} has no measured test ({why}): a baseline named for it would compare "
              "nothing, with or without --force; name a run that measured")  # fmt: skip
        return EXIT_REFUSED
    unclean = [f"{r.test_id} ({p})" for r in run.results if (p := r.baseline_problem())]
    unclean += [f"{e.test_id} (errored before it measured)" for e in run.errored]  # absent from it: not clean
    if unclean and not args.force:
        print(f"save: refused: {len(unclean)} test(s) of run {run.run_id} not clean: {shown(unclean)}; a baseline "
              "completed, passed and every verdict passed (--force names it anyway)")  # fmt: skip
        return EXIT_REFUSED
    # Named, a run pytest's --specdec-compare passes over becomes the baseline as it is (a trial named one measured
    # after a REGRESSED night and the regressed server then read ok): say so, with why it was passed over.
    latest = Baselines.from_option("latest", store)
    assert latest is not None  # "latest" always gives the stored runs
    passed_over = [f"{r.test_id} ({why})" for r in run.results
                   if not r.baseline_problem() and (why := latest.passed_over(run, r))]  # fmt: skip
    before = store.named(args.name)
    where = store.save_name(args.name, run.run_id)
    moved = f" (was run {before})" if before and before != run.run_id else ""
    forced = f"; not clean, named with --force: {shown(unclean)}" if unclean else ""
    print(f"saved as {args.name}: {where} names run {run.run_id}{moved}{forced}")
    if passed_over:
        # Named, latest takes it too (a named run is chosen on purpose): a trial read "--specdec-compare=NAME" alone.
        print(f"note: --specdec-compare alone passed this run over for {shown(passed_over)}; named, it is a "
              f"baseline as it is, of --specdec-compare={args.name} and, while it is the newest clean run, of "
              "--specdec-compare alone: check that the server it measured is the one to keep")  # fmt: skip
    return EXIT_OK
