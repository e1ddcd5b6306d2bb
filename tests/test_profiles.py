"""profiles.load_profiles: extends, relative paths, bundled defaults, and the exact error messages."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3, BUNDLED_TARGET, load_profiles, resolve_paths
from pytest_specdec.profiles.schema import Profile


def write(tmp_path: Path, text: str, name: str = "specdec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in tmp_path so messages show the file as 'specdec.yaml'."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def load_error(path: str) -> str:
    with pytest.raises(ProfileError) as info:
        load_profiles(path)
    return str(info.value)


def test_extends_chain_deep_merges_base_first(in_tmp: Path) -> None:
    write(
        in_tmp,
        """
        profiles:
          base:
            server: reference
            workload: {max_new_tokens: 32, num_requests: 8}
            env: {A: "1"}
          mid:
            extends: base
            workload: {num_requests: 4}
            speculative: {algorithm: eagle3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
            extra_args: [--a]
            thresholds: {min_accept_rate_at: {1: 0.6, 2: 0.4}}
          top:
            extends: mid
            speculative: {num_steps: 5, num_draft_tokens: 6}
            env: {B: "2"}
            extra_args: [--b]
            thresholds: {min_accept_rate_at: {1: 0.7}}
        """,
    )
    top = load_profiles("specdec.yaml").get("top")
    assert top.name == "top"
    assert top.workload.max_new_tokens == 32 and top.workload.num_requests == 4
    assert top.speculative is not None
    assert (top.speculative.algorithm, top.speculative.num_steps, top.speculative.eagle_topk) == ("EAGLE3", 5, 1)
    assert top.speculative.num_draft_tokens == 6
    assert top.env == {"A": "1", "B": "2"}
    # As docs/profiles.md says: mappings merge key by key (position 2's floor is inherited), lists are replaced.
    assert top.thresholds.min_accept_rate_at == {1: 0.7, 2: 0.4}
    assert top.extra_args == ["--b"]
    assert top.source == str((in_tmp / "specdec.yaml").resolve())


def test_invalid_value_names_file_profile_key_and_value(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  eagle3:\n    speculative: {algorithm: EAGLE3, num_steps: two}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.eagle3.speculative.num_steps: expected an integer >= 1, got 'two'"
    )


def test_a_bool_for_a_number_is_an_error_not_a_floor_of_one(in_tmp: Path) -> None:
    """pydantic reads true as 1: `min_accept_length: true` was a floor every server passes (a fresh-user trial)."""
    write(in_tmp, "profiles:\n  p:\n    server: reference\n    workload: {repeats: yes}\n"
                  "    thresholds: {min_accept_length: true}\n")  # fmt: skip
    assert load_error("specdec.yaml").splitlines() == [
        "specdec.yaml:4: profiles.p.workload.repeats: expected an integer >= 1, got True",
        "specdec.yaml:5: profiles.p.thresholds.min_accept_length: expected a number >= 1, got True",
    ]


def test_one_line_per_problem_with_bounds_literals_and_lists(in_tmp: Path) -> None:
    write(
        in_tmp,
        """
        profiles:
          a:
            server: sglan
            thresholds: {min_tok_s: 0}
            extra_args: [--x, 3]
            workload: {ignore_eos: maybe}
        """,
    )
    assert load_error("specdec.yaml").splitlines() == [
        "specdec.yaml:4: profiles.a.server: expected one of 'reference', 'sglang' or 'vllm', got 'sglan' (did you "
        "mean 'sglang'?)",
        "specdec.yaml:5: profiles.a.thresholds.min_tok_s: expected a number > 0, got 0",
        "specdec.yaml:6: profiles.a.extra_args[1]: expected a string, got 3",
        "specdec.yaml:7: profiles.a.workload.ignore_eos: expected true or false, got 'maybe'",
    ]
    # A fresh-user trial gave the URL under server:; it is a key of its own.
    write(in_tmp, "profiles:\n  a:\n    server: {url: 'http://127.0.0.1:30000'}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.a.server: expected one of 'reference', 'sglang' or 'vllm', got {'url': "
        "'http://127.0.0.1:30000'} (a running server is given by url: http://host:port, a key of its own beside "
        "server:)"
    )


def test_unknown_keys_get_a_suggestion(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  e:\n    servr: reference\n    speculative: {algorithm: EAGLE3, num_step: 3}\n")
    assert load_error("specdec.yaml").splitlines() == [
        "specdec.yaml:3: profiles.e: unknown key 'servr' (did you mean 'server'?)",
        "specdec.yaml:4: profiles.e.speculative: unknown key 'num_step' (did you mean 'num_steps'?)",
    ]


def test_unknown_top_level_key(in_tmp: Path) -> None:
    write(in_tmp, "profile:\n  a: {}\nprofiles:\n  a: {}\n")
    assert load_error("specdec.yaml") == "specdec.yaml:1: unknown top-level key 'profile' (did you mean 'profiles'?)"


def test_model_validator_message_is_unwrapped(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  s: {server: sglang}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:2: profiles.s: model_path is required for server: sglang (or give url:)"
    )


def test_extends_cycle_is_an_error(in_tmp: Path) -> None:
    # One cycle, one line (from its member first in the file), whichever profile of it or above it was resolved.
    write(in_tmp, "profiles:\n  a: {extends: b}\n  b: {extends: a}\n  c: {}\n  d: {extends: b}\n")
    assert load_error("specdec.yaml").splitlines() == [
        "specdec.yaml:2: profiles.a.extends: cycle a -> b -> a; remove one of these 'extends:' (inherited through "
        "extends: d -> b)",
    ]


def test_a_broken_extends_is_reported_once_under_its_profile(in_tmp: Path) -> None:
    # A fresh-user trial: `check` printed base's unknown parent three times, once per profile inheriting from base.
    write(in_tmp, "profiles:\n  base: {extends: basee}\n  e: {extends: base}\n  f: {extends: e}\n"
                  "  g: {extends: [e]}\n  h: {extends: g}\n")  # fmt: skip
    assert load_error("specdec.yaml").splitlines() == [
        "specdec.yaml:2: profiles.base.extends: no profile 'basee' in this file (did you mean 'base'?) (available: "
        "base, e, f, g, h) (inherited through extends: e -> base; f -> e -> base)",
        "specdec.yaml:5: profiles.g.extends: expected a profile name, got ['e'] (inherited through extends: h -> g)",
    ]


def test_extends_unknown_profile(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  base: {}\n  e: {extends: bsae}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.e.extends: no profile 'bsae' in this file (did you mean 'base'?) (available: base, e)"
    )


def test_yaml_syntax_error_has_line_and_column(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  a: {server: reference\n  b: {}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3:4: YAML syntax error: expected ',' or '}', but got ':' (while parsing a flow mapping that "
        "starts at 2:6: `a: {server: reference`; is its closing '}' missing?)"
    )


def test_a_key_given_twice_is_an_error_not_the_last_value(in_tmp: Path) -> None:
    """PyYAML keeps the last of two equal keys silently (a fresh user's finding: num_steps 3 then 4 ran 4)."""
    write(in_tmp, "profiles:\n  a:\n    server: reference\n    speculative: {algorithm: EAGLE3, num_steps: 3}\n"
                  "    speculative: {algorithm: EAGLE3, num_steps: 4}\n")  # fmt: skip
    assert load_error("specdec.yaml") == (
        "specdec.yaml:5:5: duplicate key 'speculative' in one mapping (first at line 4); YAML would silently keep "
        "only this last value: remove one of them"
    )
    write(in_tmp, "profiles:\n  a: {server: reference}\n  a: {server: reference}\n")
    assert load_error("specdec.yaml").startswith("specdec.yaml:3:3: duplicate key 'a' in one mapping (first at line 2)")
    # Merge keys are not duplicates: an anchored block overridden key by key is ordinary YAML.
    write(in_tmp, "base: &w {max_new_tokens: 8, num_requests: 2}\nprofiles:\n  a:\n    server: reference\n"
                  "    workload: {<<: *w, max_new_tokens: 16}\n")  # fmt: skip
    with pytest.raises(ProfileError, match="unknown top-level key 'base'"):
        load_profiles("specdec.yaml")


def test_yaml_error_names_the_line_of_the_unclosed_brace(in_tmp: Path) -> None:
    # PyYAML notices the missing '}' of line 4 only on line 5; the message names both lines.
    write(in_tmp, "profiles:\n  a:\n    server: reference\n    workload: {max_new_tokens: 64, num_requests: 8\n"
                  "    thresholds: {min_tok_s: 1}\n")  # fmt: skip
    assert load_error("specdec.yaml") == (
        "specdec.yaml:5:15: YAML syntax error: expected ',' or '}', but got ':' (while parsing a flow mapping that "
        "starts at 4:15: `workload: {max_new_tokens: 64, num_requests: 8`; is its closing '}' missing?)"
    )


def test_yaml_indentation_error_names_the_enclosing_mapping(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  a:\n    server: reference\n   bad: 1\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:4:4: YAML syntax error: expected <block end>, but found '<block mapping start>' "
        "(while parsing a block mapping that starts at 2:3: `a:`)"
    )


def test_tab_in_the_indentation_is_named_with_its_line(in_tmp: Path) -> None:
    # PyYAML alone says "found character '\\t' that cannot start any token".
    write(in_tmp, "profiles:\n  a:\n    server: reference\n    workload:\n\t  max_new_tokens: 8\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:5:1: YAML syntax error: a tab in the indentation of line 5 ('\\t  max_new_tokens: 8'); tabs are "
        "not allowed in YAML indentation: indent with spaces"
    )
    write(in_tmp, "profiles:\n  a:\n    server:\treference\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3:12: YAML syntax error: a tab in line 3 ('    server:\\treference'); YAML (PyYAML) accepts a "
        "tab only inside quotes or a comment: use spaces"
    )


def test_typo_in_server_gets_a_suggestion(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", specdec="profiles:\n  eagle3:\n    server: sgl\n    model_path: /m\n")
    pytester.makepyfile(test_x="def test_x(specdec_run): pass\n")
    result = pytester.runpytest_subprocess("--server-profile=eagle3", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: specdec: invalid profile file (nothing was launched):",
        f"error: {pytester.path / 'specdec.yaml'}:3: profiles.eagle3.server: expected one of 'reference', 'sglang' "
        "or 'vllm', got 'sgl' (did you mean 'sglang'?)",
    ])  # fmt: skip


def test_profile_file_indented_with_a_tab_is_a_usage_error_naming_the_line(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", specdec="profiles:\n  eagle3:\n\tserver: reference\n")
    pytester.makepyfile(test_x="def test_x(specdec_run): pass\n")
    result = pytester.runpytest_subprocess("--server-profile=eagle3", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: specdec: invalid profile file (nothing was launched):",
        f"error: {pytester.path / 'specdec.yaml'}:3:1: YAML syntax error: a tab in the indentation of line 3 "
        "('\\tserver: reference'); tabs are not allowed in YAML indentation: indent with spaces"
    ])  # fmt: skip


def test_missing_file_says_how_to_pass_one(in_tmp: Path) -> None:
    assert load_error("nope.yaml") == (
        "nope.yaml: profile file not found; check the path (pytest: --specdec-profiles=PATH or the ini key "
        "specdec_profiles; python -m pytest_specdec: the PROFILE_FILE argument)"
    )


def test_top_level_must_be_profiles_mapping(in_tmp: Path) -> None:
    write(in_tmp, "- a\n- b\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml: expected a top-level mapping 'profiles:' of name -> profile, got list"
    )
    # The key right, its value not a mapping (a fresh user read "got keys ['profiles']" and saw nothing wrong).
    write(in_tmp, "profiles: [1, 2]\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml: expected a top-level mapping 'profiles:' of name -> profile, got 'profiles:' holding a list"
    )


def test_relative_paths_resolve_against_the_yaml_directory(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "models" / "draft").mkdir(parents=True)
    write(
        conf,
        """
        profiles:
          a:
            server: sglang
            model_path: ./models/target
            python: ../venv/bin/python
            speculative: {algorithm: EAGLE3, draft_model_path: models/draft}
            workload: {prompts: data/prompts.jsonl}
          hub:
            server: sglang
            model_path: meta-llama/Llama-3.1-8B-Instruct
            speculative: {algorithm: EAGLE3, draft_model_path: lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B}
        """,
    )
    profiles = load_profiles(conf / "specdec.yaml")
    a, hub = profiles.get("a"), profiles.get("hub")
    assert a.model_path == str(conf / "models" / "target")
    assert a.python == str(tmp_path / "venv" / "bin" / "python")
    assert a.speculative is not None and a.speculative.draft_model_path == str(conf / "models" / "draft")
    assert a.workload.prompts == str(conf / "data" / "prompts.jsonl")
    # Hugging Face ids are not paths.
    assert hub.model_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert hub.speculative is not None
    assert hub.speculative.draft_model_path == "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"


def test_reference_server_defaults_to_the_bundled_assets(in_tmp: Path) -> None:
    write(
        in_tmp,
        """
        profiles:
          base: {server: reference}
          eagle3: {extends: base, speculative: {algorithm: EAGLE3}}
          ngram: {extends: base, speculative: {algorithm: NGRAM}}
          own: {server: reference, model_path: /m, speculative: {algorithm: EAGLE3, draft_model_path: /d}}
        """,
    )
    ps = load_profiles("specdec.yaml")
    assert ps.get("base").model_path == str(BUNDLED_TARGET)
    assert ps.get("base").speculative is None
    eagle3 = ps.get("eagle3").speculative
    assert eagle3 is not None and eagle3.draft_model_path == str(BUNDLED_DRAFT_EAGLE3)
    ngram = ps.get("ngram").speculative
    assert ngram is not None and ngram.draft_model_path is None
    own = ps.get("own")
    assert own.model_path == "/m" and own.speculative is not None and own.speculative.draft_model_path == "/d"


def test_resolve_paths_leaves_other_servers_alone() -> None:
    profile = Profile.model_validate({"name": "v", "server": "vllm", "speculative": {"algorithm": "EAGLE3"}})
    assert resolve_paths(profile) is profile


def test_env_scalars_become_strings(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  a: {env: {OMP_NUM_THREADS: 1, X: true, Y: 0.5}}\n")
    assert load_profiles("specdec.yaml").get("a").env == {"OMP_NUM_THREADS": "1", "X": "true", "Y": "0.5"}


def test_get_unknown_profile_lists_available(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  a: {}\n  b: {}\n")
    with pytest.raises(
        ProfileError, match=r"^--server-profile=c: no such profile in specdec.yaml \(available: a, b\)$"
    ):
        load_profiles("specdec.yaml").get("c")
    write(in_tmp, "profiles:\n  baseline: {}\n  eagle3: {}\n")
    with pytest.raises(ProfileError, match=r"^--server-profile=eagl3: no such profile in specdec.yaml \(did you mean "
                                           r"'eagle3'\?\) \(available: baseline, eagle3\)$"):  # fmt: skip
        load_profiles("specdec.yaml").get("eagl3")


def test_client_workers_is_auto_or_a_positive_number(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  p:\n    workload: {client_workers: 0}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.p.workload.client_workers: expected 'auto' or an integer >= 1, got 0"
    )
    write(in_tmp, "profiles:\n  p:\n    workload: {client_workers: many, client_overload: warn}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.p.workload.client_workers: expected 'auto' or an integer >= 1, got 'many'"
    )
    write(in_tmp, "profiles:\n  p:\n    workload: {client_workers: 4, client_overload: fail}\n")
    wl = load_profiles("specdec.yaml").get("p").workload
    assert (wl.client_workers, wl.client_overload) == (4, "fail")


def test_min_accept_rate_at_bad_position_and_rate(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  a:\n    thresholds: {min_accept_rate_at: {0: 0.7, 2: 2}}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.a.thresholds.min_accept_rate_at: position 0: positions are integers >= 1 (1 = the "
        "first draft token), e.g. {1: 0.7, 2: 0.5} (draft position -> minimum rate)"
    )
    write(in_tmp, "profiles:\n  a:\n    thresholds: {min_accept_rate_at: [0.7, 0.5]}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.a.thresholds.min_accept_rate_at: expected a non-empty mapping of draft position to "
        "rate, e.g. {1: 0.7, 2: 0.5} (draft position -> minimum rate), got [0.7, 0.5]"
    )
    write(in_tmp, "profiles:\n  a:\n    thresholds: {min_accept_rate_at: {1: 0.7, 2: 0.5}}\n")
    assert load_profiles("specdec.yaml").get("a").thresholds.min_accept_rate_at == {1: 0.7, 2: 0.5}


def test_a_bounded_number_and_an_empty_file_are_said_in_words(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  a:\n    server: reference\n    thresholds: {min_accept_rate: 1.5}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:4: profiles.a.thresholds.min_accept_rate: expected a number between 0 and 1, got 1.5 (a "
        "fraction: 1.5% is 0.015; an accept length is min_accept_length)"
    )
    # A fresh-user trial: 47 meant 47%; a bare ratio for min_speedup meant {vs, ratio}.
    write(in_tmp, "profiles:\n  a:\n    server: reference\n    thresholds: {min_accept_rate: 47}\n")
    assert load_error("specdec.yaml").endswith("got 47 (a fraction: 47% is 0.47)")
    write(in_tmp, "profiles:\n  a:\n    server: reference\n    thresholds: {min_speedup: 1.05}\n")
    assert load_error("specdec.yaml").endswith(
        "min_speedup: expected a mapping of keys, got 1.05; write min_speedup: {vs: baseline, ratio: 1.05} (the "
        "profile it is paired with)"
    )
    write(in_tmp, "")
    assert load_error("specdec.yaml") == (
        "specdec.yaml: expected a top-level mapping 'profiles:' of name -> profile, got an empty file"
    )


def test_a_parent_typo_is_reported_once_with_the_extends_chain(in_tmp: Path) -> None:
    write(
        in_tmp,
        """\
        profiles:
          base:
            server: reference
            speculative:
              algorithm: EAGLE3
              num_step: 3
          eagle3:
            extends: base
            thresholds: {min_tok_s: 0}
          eagle3-more:
            extends: eagle3
        """,
    )
    assert load_error("specdec.yaml").splitlines() == [
        "specdec.yaml:6: profiles.base.speculative: unknown key 'num_step' (did you mean 'num_steps'?) (inherited "
        "through extends: eagle3 -> base; eagle3-more -> eagle3 -> base)",
        "specdec.yaml:9: profiles.eagle3.thresholds.min_tok_s: expected a number > 0, got 0 (inherited through "
        "extends: eagle3-more -> eagle3)",
    ]


def test_did_you_mean_only_for_close_matches_else_the_allowed_keys(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  e:\n    speculative:\n      algorithm: EAGLE3\n      draft_temprature: 0.5\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:5: profiles.e.speculative: unknown key 'draft_temprature' (allowed: algorithm, "
        "allow_embedding_capture, aux_hidden_state_layer_ids, aux_id_convention, draft_model_path, eagle_topk, "
        "num_draft_tokens, num_steps)"
    )
    write(in_tmp, "profiles:\n  e:\n    speculative: {algorithm: EAGLE3, temprature: 0.5}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.e.speculative: unknown key 'temprature' (did you mean 'temperature', a key of "
        "profiles.e.workload?)"
    )
    # The right word in the wrong block says where it goes (helper-81 read "did you mean 'tolerances'" for it).
    write(in_tmp, "profiles:\n  e:\n    thresholds: {tolerances: {output_tok_s: 5%}}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.e.thresholds: unknown key 'tolerances' ('tolerances' is a key of profiles.e: move it "
        "there)"
    )


def test_locate_finds_the_line_through_extends_and_falls_back_to_the_block(in_tmp: Path) -> None:
    write(
        in_tmp,
        """\
        profiles:
          eagle3:
            speculative:
              algorithm: EAGLE3
              num_steps: 3
          wrong:
            extends: eagle3
            speculative: {aux_hidden_state_layer_ids: [0, 1, 2]}
        """,
    )
    profiles = load_profiles("specdec.yaml")
    assert profiles.locate("wrong", "speculative.num_steps") == (5, "eagle3")  # inherited: the parent's line
    assert profiles.locate("wrong", "speculative.aux_hidden_state_layer_ids[1]") == (8, "wrong")
    assert profiles.locate("wrong", "speculative.eagle_topk") == (8, "wrong")  # not written: its block
    assert profiles.locate("wrong", "workload.max_new_tokens") == (6, "wrong")  # no block: the profile's name
    assert profiles.locate("wrong@num_steps=2", "speculative.num_steps") == (5, "eagle3")  # a sweep point


def test_max_repeats_below_repeats_names_both(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  a:\n    server: reference\n    workload: {repeats: 3, max_repeats: 2}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:4: profiles.a.workload: max_repeats 2 is below repeats 3 (the first look); raise max_repeats or "
        "lower repeats"
    )


def test_open_loop_and_goodput_errors_name_file_line_key_value_and_fix(in_tmp: Path) -> None:
    write(
        in_tmp,
        """\
        profiles:
          a:
            workload:
              request_rate: 0
              burstiness: -1
              slo: {ttft_ms: 500, e2el: 900}
          b:
            workload: {burstiness: 2}
          c:
            thresholds: {min_goodput: 3}
          d:
            workload: {request_rate: inf, burstiness: .inf, slo: {tpot_ms: 50}}
            thresholds: {min_goodput: 3, max_ttft_ms_p99: 500}
        """,
    )
    assert load_error("specdec.yaml").splitlines() == [
        "specdec.yaml:4: profiles.a.workload.request_rate: expected requests per second > 0, got 0; fix: e.g. "
        "request_rate: 4 (a Poisson stream of 4 requests/s), inf to send every request at once, or leave "
        "request_rate out for a closed loop at concurrency",
        "specdec.yaml:5: profiles.a.workload.burstiness: expected a gamma shape > 0, got -1; fix: burstiness: 1.0 "
        "(Poisson arrivals), below 1 for bursts, above 1 (or inf) for evener arrivals",
        "specdec.yaml:6: profiles.a.workload.slo: unknown key 'e2el' (did you mean 'e2e_ms'? vLLM and SGLang spell "
        "it e2el; allowed: e2e_ms, tpot_ms, ttft_ms)",
        "specdec.yaml:8: profiles.b.workload: burstiness: 2 is set but request_rate is not (burstiness shapes the "
        "arrival times of an open loop); fix: add request_rate (requests/s), e.g. request_rate: 4, or remove "
        "burstiness",
        "specdec.yaml:9: profiles.c: thresholds.min_goodput: 3 needs workload.slo (the latencies a request must meet "
        "to count toward goodput); fix: add e.g. workload: {slo: {ttft_ms: 500, tpot_ms: 50}}",
    ]
    write(in_tmp, "profiles:\n  d:\n    workload: {request_rate: inf, slo: {tpot_ms: 50}}\n")
    d = load_profiles("specdec.yaml").get("d")
    assert d.workload.request_rate == float("inf") and d.workload.slo is not None
    assert d.workload.slo.as_ms() == {"tpot_ms": 50.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "  parent:\n    tolerances: {output_tok_s: 5}\n  child:\n    extends: parent\n"
            "    tolerances: {ttft_ms: 10%}\n",
            "specdec.yaml:3: profiles.parent.tolerances: bad tolerance 'output_tok_s:5': a bare number on output_tok_s "
            "(tok/s) is ambiguous: write output_tok_s:5% for 5 percent of the baseline, or output_tok_s:5tok/s for 5 "
            "tok/s absolute (inherited through extends: child -> parent)",
            id="merged-mapping",
        ),
        pytest.param(
            "  parent:\n    tolerances: ['output_tok_s/basline:10%']\n  child:\n    extends: parent\n"
            "    thresholds: {min_speedup: {vs: parent, ratio: 1.1}}\n",
            "specdec.yaml:2: profiles.parent: tolerances: bad tolerance output_tok_s/basline:10%: this test's ratio "
            "rows are to 'parent' (min_speedup vs), so no row would take it and the ratio row would run at its "
            "field's tolerance; write output_tok_s/parent:10% (inherited through extends: child -> parent)",
            id="arm-of-the-childs-min-speedup",
        ),
        pytest.param(
            "  parent:\n    tolerances: ['output_tok_s/basline:10%']\n"
            "    thresholds: {min_speedup: {vs: child, ratio: 1.1}}\n  child:\n    extends: parent\n",
            "specdec.yaml:2: profiles.parent: tolerances: bad tolerance output_tok_s/basline:10%: this test's ratio "
            "rows are to 'child' (min_speedup vs), so no row would take it and the ratio row would run at its "
            "field's tolerance; write output_tok_s/child:10% (inherited through extends: child -> parent)",
            id="parents-own-error-once",
        ),
    ],
)
def test_an_inherited_tolerance_error_is_reported_under_the_profile_that_wrote_it(
    in_tmp: Path, text: str, expected: str
) -> None:
    """Issue 43: a tolerance a child inherits was reported at the child's line (once more beside the parent's own),
    without saying it was inherited; it is the parent's, at the parent's line, as any inherited key's error is."""
    write(in_tmp, "profiles:\n" + text)
    assert load_error("specdec.yaml").splitlines() == [expected]


def test_a_childs_own_tolerance_error_stays_the_childs(in_tmp: Path) -> None:
    write(in_tmp, "profiles:\n  parent:\n    tolerances: {output_tok_s: 5%}\n  child:\n    extends: parent\n"
                  "    tolerances: {output_tok_s: 5}\n")  # fmt: skip
    assert load_error("specdec.yaml") == (
        "specdec.yaml:6: profiles.child.tolerances: bad tolerance 'output_tok_s:5': a bare number on output_tok_s "
        "(tok/s) is ambiguous: write output_tok_s:5% for 5 percent of the baseline, or output_tok_s:5tok/s for 5 tok/s "
        "absolute"
    )


def test_min_speedup_naming_no_profile_in_a_file_of_one_says_what_to_add(in_tmp: Path) -> None:
    """helper-81: "(available: )" in a file with no other profile; it says what to add instead."""
    write(in_tmp, "profiles:\n  e:\n    thresholds: {min_speedup: {vs: nothere, ratio: 1.05}}\n")
    assert load_error("specdec.yaml") == (
        "specdec.yaml:3: profiles.e.thresholds.min_speedup.vs: 'nothere' is not another profile of this file; this "
        "file has no other profile: add the one to compare against (e.g. baseline: the same server without "
        "speculative:) to it"
    )
