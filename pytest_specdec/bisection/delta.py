"""Zeller's delta debugging (ddmin) over numbered differences: the search a bisect runs.

A. Zeller and R. Hildebrandt, "Simplifying and Isolating Failure-Inducing Input", IEEE Transactions on Software
Engineering 28(2), 2002, Fig. 5: split the differences into n parts; if one part applied alone to the good
configuration reproduces the regression, continue on it (n = 2); else if one complement does, continue on it
(n - 1); else split finer (2n) until the parts are single differences (bisect tests the complements only, see
:func:`ddmin`'s ``subsets``). The result is *1-minimal*: it reproduces the regression and removing any one of its
differences does not. A test that cannot be decided is *unresolved* (ddmin's "?"), taken as not reproducing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

__all__ = ["Outcome", "ddmin"]

#: ddmin's three test outcomes: the probe reproduces the regression (Zeller's ✗), does not (✓), or could not be
#: measured (?).
Outcome = Literal["FAIL", "PASS", "UNRESOLVED"]


def _split(items: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """``items`` in ``n`` contiguous parts whose sizes differ by at most one."""
    size, extra = divmod(len(items), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(tuple(items[start:end]))
        start = end
    return parts


def ddmin(
    count: int,
    test: Callable[[tuple[int, ...]], Outcome],
    *,
    order: Callable[[list[tuple[int, ...]]], list[tuple[int, ...]]] | None = None,
    subsets: bool = True,
    on_step: Callable[[tuple[int, ...]], None] | None = None,
) -> tuple[int, ...]:
    """Zeller's ddmin over the differences ``0 .. count - 1`` (module docstring). ``test(subset)`` says whether
    ``subset`` applied to the good configuration reproduces the regression; the full set is assumed to (the caller
    measured it) and is never tested. Each distinct subset is tested at most once.

    :param order: reorders the subsets (then the complements) of one step before they are tested, e.g. those whose
        server is already running first; any order keeps the result 1-minimal.
    :param subsets: False skips "reduce to subset" and tests complements only. The result is still 1-minimal (the
        last step, at one difference per part, tests every complement), and with several culprits fewer tests are
        needed: a part holding one culprit of three never reproduces alone, so its test is wasted (simulated over
        random culprit sets, 7 differences with 3 culprits: 19.3 tests with subsets, 12.4 without; 1 culprit: 4.2
        and 4.3).
    :param on_step: called with the candidate set each time it narrows (first with all of them): what a stopped
        search still suspects.
    :returns: a 1-minimal failing subset, ascending. Example: with ``test = lambda s: "FAIL" if {1, 3} <= set(s)
        else "PASS"`` and ``count = 4``, ``(1, 3)``.
    """
    seen: dict[tuple[int, ...], Outcome] = {tuple(range(count)): "FAIL"}

    def run(subset: tuple[int, ...]) -> Outcome:
        if subset not in seen:
            seen[subset] = test(subset)
        return seen[subset]

    def arranged(candidates: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return order(candidates) if order is not None else candidates

    current, n = tuple(range(count)), 2
    if on_step is not None:
        on_step(current)
    while len(current) >= 2:
        parts = _split(current, n)
        hit = next((p for p in arranged(parts) if run(p) == "FAIL"), None) if subsets else None
        if hit is not None:
            current, n = hit, 2
            if on_step is not None:
                on_step(current)
            continue
        complements = [tuple(x for x in current if x not in p) for p in parts]
        # At n = 2 the complements are the subsets: Zeller skips them there, unless subsets were not tested.
        if n > 2 or not subsets:
            hit = next((c for c in arranged(complements) if run(c) == "FAIL"), None)
        if hit is not None:
            current, n = hit, max(n - 1, 2)
            if on_step is not None:
                on_step(current)
            continue
        if n >= len(current):
            break
        n = min(2 * n, len(current))
    return current
