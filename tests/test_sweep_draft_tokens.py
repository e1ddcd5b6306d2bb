"""A ``num_draft_tokens`` sweep at ``eagle_topk`` 1 (report/sweep_table.py's ``draft_token_lines``): a chain verifies
num_steps + 1 draft tokens, so the point runs other steps than the profile's, and the sweep says so under the table."""

from __future__ import annotations

from pathlib import Path

from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.measure.results import ResultRecord
from pytest_specdec.report import sweep_table
from pytest_specdec.run import sweep_spec
from tests.helpers import record, with_repeats

PROFILES = """
profiles:
  eagle3:
    server: reference
    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
  tree:
    server: reference
    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 4, num_draft_tokens: 8}
"""


def _points(tmp_path: Path, selected: str, sweep: str) -> tuple[list[ResultRecord], dict]:
    """Records of a sweep as the run stores them: each point's ``fingerprint["speculative"]`` is its derived
    profile's (``measure.results``)."""
    path = tmp_path / "specdec.yaml"
    path.write_text(PROFILES)
    profiles, names = sweep_spec.expand_profiles(dict(load_profiles(path).profiles), [selected],
                                                 sweep_spec.parse_sweep(sweep))  # fmt: skip
    out = []
    for i, name in enumerate(names):
        r = with_repeats(record(name, 90.0 + i, 2.5), [89.0 + i, 90.0 + i, 91.0 + i])
        r.fingerprint["speculative"] = profiles[name].speculative.model_dump(mode="json")
        out.append(r)
    return out, profiles


def test_a_draft_tokens_point_at_topk_1_says_the_steps_it_ran(tmp_path: Path) -> None:
    """An adversarial trial: ``--specdec-sweep "num_draft_tokens=3,4"`` on a profile of 3 steps at topk 1 ran 2 steps
    at the row named num_draft_tokens=3 and said nothing."""
    points, profiles = _points(tmp_path, "eagle3", "num_draft_tokens=3,4")
    assert points[0].fingerprint["speculative"]["num_steps"] == 2  # what chain_speculative_at runs
    line = (
        "eagle3@num_draft_tokens=3 ran num_steps 2, not profile eagle3's 3 (eagle_topk 1: a chain verifies num_steps "
        "+ 1 draft tokens, as SGLang sets num_draft_tokens = num_steps + 1); sweep num_steps to name the points by "
        "the steps they run"
    )
    # The =4 point runs the profile's own 3 steps: nothing to say.
    assert sweep_table.draft_token_lines(points, profiles) == [line]
    summary = sweep_table.sweep_summary(points, profiles, baseline=None, max_gap=0.05)
    assert summary is not None and line in summary.table and line not in summary.red


def test_draft_tokens_at_topk_above_1_and_steps_sweeps_say_nothing(tmp_path: Path) -> None:
    points, profiles = _points(tmp_path, "tree", "num_draft_tokens=6,8")  # a knob of its own at topk 4
    assert sweep_table.draft_token_lines(points, profiles) == []
    points, profiles = _points(tmp_path, "eagle3", "num_steps=2,3")
    assert sweep_table.draft_token_lines(points, profiles) == []
