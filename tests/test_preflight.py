"""preflight: one test per rule on tiny config dirs; the bundled assets pass; the ``check`` CLI exit codes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.engines.preflight import Finding, format_findings, read_safetensors_header, run_preflight
from pytest_specdec.engines.reference import ReferenceEngine
from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3, BUNDLED_TARGET, load_profiles
from pytest_specdec.profiles.schema import Profile

HIDDEN, LAYERS, VOCAB = 16, 8, 100


def write_safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    """A valid safetensors file of zero-filled F32 tensors (header + data)."""
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in tensors.items():
        size = 4 * int(__import__("math").prod(shape))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def make_models(root: Path, *, draft: dict[str, Any] | None = None, fc_in: int = 3 * HIDDEN) -> tuple[Path, Path]:
    target = root / "target"
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "vocab_size": VOCAB, "max_position_embeddings": 2048,
    }))  # fmt: skip
    d = root / "draft"
    d.mkdir()
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": HIDDEN, "target_hidden_size": HIDDEN,
        "vocab_size": VOCAB, "draft_vocab_size": 50, "max_position_embeddings": 2048,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True},
    }  # fmt: skip
    config.update(draft or {})
    (d / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    write_safetensors(d / "model.safetensors", {"fc.weight": [HIDDEN, fc_in], "norm.weight": [HIDDEN]})
    return target, d


def profile(target: Path, draft: Path, *, spec: dict[str, Any] | None = None, **extra: Any) -> Profile:
    speculative = {"algorithm": "EAGLE3", "draft_model_path": str(draft), "num_steps": 3, "eagle_topk": 1,
                   "num_draft_tokens": 4}  # fmt: skip
    speculative.update(spec or {})
    fields: dict[str, Any] = {"name": "e3", "source": "specdec.yaml", "model_path": str(target),
                              "speculative": {k: v for k, v in speculative.items() if v is not None}}  # fmt: skip
    fields.update(extra)
    return Profile.model_validate(fields)


def only(findings: list[Finding], key: str) -> Finding:
    hits = [f for f in findings if f.key == key]
    assert len(hits) == 1, findings
    return hits[0]


def test_a_coherent_setup_has_no_findings(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    assert run_preflight(profile(target, draft)) == []


def test_safetensors_header_only(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "x.safetensors", {"fc.weight": [2, 6]})
    assert read_safetensors_header(tmp_path / "x.safetensors")["fc.weight"]["shape"] == [2, 6]
    (tmp_path / "bad.safetensors").write_bytes(struct.pack("<Q", 10**12))
    with pytest.raises(ValueError, match="header length 1000000000000 bytes is not plausible"):
        read_safetensors_header(tmp_path / "bad.safetensors")


# ---------------------------------------------------------------- rule 1
def test_rule1_eagle3_with_an_eagle2_draft(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path, draft={"architectures": ["LlamaForCausalLMEagle"], "eagle_config": None})
    f = only(run_preflight(profile(target, draft)), "speculative.algorithm")
    assert (f.severity, f.value, f.file) == ("error", "EAGLE3", "specdec.yaml")
    assert "EAGLE(-2) model (LlamaForCausalLMEagle)" in f.why
    assert f.fix == "set speculative.algorithm: EAGLE for this draft, or use an EAGLE-3 draft"


def test_rule1_eagle_with_an_eagle3_draft(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    findings = run_preflight(profile(target, draft, spec={"algorithm": "NEXTN"}))
    f = only(findings, "speculative.algorithm")
    assert f.severity == "error" and f.fix == "set speculative.algorithm: EAGLE3"
    assert str(f).startswith("error: specdec.yaml: profiles.e3.speculative.algorithm: the draft is an EAGLE-3 model")


# ---------------------------------------------------------------- rule 2
def test_rule2_top_level_only_ids(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path, draft={"eagle_config": None, "eagle_aux_hidden_state_layer_ids": [1, 3, 5]})
    f = only(run_preflight(profile(target, draft)), "eagle_aux_hidden_state_layer_ids")
    assert f.severity == "error" and f.file == str(draft / "config.json")
    assert "SGLang's target side reads only eagle_config.eagle_aux_hidden_state_layer_ids" in f.why
    assert f.fix.startswith("move the key under eagle_config, or set speculative.aux_hidden_state_layer_ids: [1, 3, 5]")


def test_rule2_top_level_ids_are_what_vllm_reads_first(tmp_path: Path) -> None:
    """vLLM reads the top-level key first, else the nested one (shared/reference/aux_layer_ids.md): top-level-only
    ids are no error there, and a nested copy that differs is named."""

    class VllmLike(ReferenceEngine):
        aux_id_convention = "vllm"

    target, draft = make_models(tmp_path, draft={"eagle_config": None, "eagle_aux_hidden_state_layer_ids": [2, 4, 6]})
    p = profile(target, draft, spec={"aux_id_convention": "vllm"})
    assert [f for f in run_preflight(p, engine=VllmLike()) if "layer_ids" in f.key] == []
    both = tmp_path / "both"
    target, draft = make_models(both, draft={"eagle_aux_hidden_state_layer_ids": [2, 4, 6]})  # nested: [1, 3, 5]
    f = only(run_preflight(profile(target, draft, spec={"aux_id_convention": "vllm"}), engine=VllmLike()),
             "eagle_config.eagle_aux_hidden_state_layer_ids")  # fmt: skip
    assert (f.severity, f.value) == ("note", [1, 3, 5])
    assert f.why == "vLLM captures the top-level eagle_aux_hidden_state_layer_ids [2, 4, 6]; SGLang would capture these"


def test_rule2_minus_one_is_the_embedding_output(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path, draft={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 3, 5]}})
    f = only(run_preflight(profile(target, draft)), "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert f.severity == "error" and "id -1 is the embedding output in SGLang" in f.why
    # What stock SGLang does with it, measured on an H200 (tests/data/sglang/0.5.17/eagle3-aux-minus1.log).
    assert "stock SGLang crashes on it at the first forward (measured on 0.5.17" in f.why
    assert "models/llama.py:437" in f.why
    assert "speculative.allow_embedding_capture: true" in f.fix
    assert run_preflight(profile(target, draft, spec={"allow_embedding_capture": True})) == []
    allowed = only(run_preflight(profile(target, draft, server="sglang", python=sys.executable,
                                         spec={"allow_embedding_capture": True})),
                   "eagle_config.eagle_aux_hidden_state_layer_ids")  # fmt: skip
    assert allowed.severity == "warning" and "stock SGLang crashes on it" in allowed.why


def test_url_profile_needs_no_local_model_files(tmp_path: Path) -> None:
    """An external server (url:) launches nothing here: missing model paths are notes, not errors (issue 12)."""
    missing = tmp_path / "nowhere"
    found = run_preflight(profile(missing / "target", missing / "draft", url="http://127.0.0.1:9"))
    assert [f.severity for f in found] == ["note", "note"]
    assert "is not launched here" in found[0].why
    launched = run_preflight(profile(missing / "target", missing / "draft"))
    assert {f.severity for f in launched} == {"error"}


def test_rule2_profile_ids_override_and_range(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    findings = run_preflight(profile(target, draft, spec={"aux_hidden_state_layer_ids": [1, 3, 7]}))
    f = only(findings, "speculative.aux_hidden_state_layer_ids")
    assert f.file == "specdec.yaml" and f.value == [1, 3, 7]
    assert f.why.startswith(
        "ids [7] are outside [-1, 6], the range SGLang captures for a target with num_hidden_layers 8"
    )
    assert f.fix == "use ids between -1 and 6 (id i = output of layer i)"


def test_rule2_order_is_a_note_and_duplicates_an_error(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    note = only(run_preflight(profile(target, draft, spec={"aux_hidden_state_layer_ids": [5, 1, 3]})),
                "speculative.aux_hidden_state_layer_ids")  # fmt: skip
    assert note.severity == "note" and note.fix == "write them ascending ([1, 3, 5]) so the config says what runs"
    dupes = [f for f in run_preflight(profile(target, draft, spec={"aux_hidden_state_layer_ids": [1, 1, 3]}))
             if f.severity == "error" and f.key == "speculative.aux_hidden_state_layer_ids"]  # fmt: skip
    assert [f.fix for f in dupes] == ["list each layer once"]


def test_rule2_num_aux_hidden_states_disagrees(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path, draft={"num_aux_hidden_states": 4})
    f = only(run_preflight(profile(target, draft)), "num_aux_hidden_states")
    assert f.severity == "error" and f.fix == "set num_aux_hidden_states to 3 or remove it"


def test_rule2_an_override_of_the_trained_ids_is_named_up_front(tmp_path: Path) -> None:
    # Shown in pytest's header and by `check` before any server starts (the failure itself names only the symptom).
    target, draft = make_models(tmp_path)
    f = only(run_preflight(profile(target, draft, spec={"aux_hidden_state_layer_ids": [0, 1, 2]})),
             "speculative.aux_hidden_state_layer_ids")  # fmt: skip
    assert (f.severity, f.value) == ("note", [0, 1, 2])
    assert f.why == (
        f"differs from the ids the draft was trained on ([1, 3, 5], {draft / 'config.json'}); a drafter "
        "fed other layers accepts fewer drafts (a reported case: 47% -> 19% per draft token)"
    )
    assert run_preflight(profile(target, draft, spec={"aux_hidden_state_layer_ids": [1, 3, 5]})) == []


# ---------------------------------------------------------------- rule 3
def test_rule3_fc_width_from_the_safetensors_header(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    f = only(run_preflight(profile(target, draft, spec={"aux_hidden_state_layer_ids": [1, 5]})), "fc.weight")
    assert (f.severity, f.file, f.value) == ("error", str(draft / "model.safetensors"), [HIDDEN, 3 * HIDDEN])
    assert f.why == "fc.weight takes 48 inputs but 2 aux ids x target hidden_size 16 = 32"
    assert f.fix == "use exactly 3 aux ids (the draft was trained with that many)"


# ---------------------------------------------------------------- rule 4
def test_rule4_partial_triple(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    f = only(run_preflight(profile(target, draft, spec={"eagle_topk": None, "num_draft_tokens": None})),
             "speculative.eagle_topk")  # fmt: skip
    assert f.severity == "error" and f.fix == "set all three, or none to let SGLang choose"
    assert "missing eagle_topk, num_draft_tokens" in f.why


def test_rule4_topk1_and_tree_size(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    warn = only(run_preflight(profile(target, draft, spec={"num_draft_tokens": 8})), "speculative.num_draft_tokens")
    assert warn.severity == "warning" and warn.fix == "set num_draft_tokens: 4"
    assert "will run steps 3, topk 1, draft tokens 4" in warn.why
    spec = {"num_steps": 2, "eagle_topk": 4, "num_draft_tokens": 10}
    err = only(run_preflight(profile(target, draft, spec=spec)), "speculative.num_draft_tokens")
    assert err.severity == "error" and err.fix == "set num_draft_tokens <= 9 or raise num_steps/eagle_topk"
    none = {"num_steps": None, "eagle_topk": None, "num_draft_tokens": None}
    note = only(run_preflight(profile(target, draft, spec=none)), "speculative")
    assert note.severity == "note" and "SGLang picks (5, 4, 8) for target architecture LlamaForCausalLM" in note.why


def test_rule4_is_the_engines_own(tmp_path: Path) -> None:
    """Issue 17: SGLang's "all three or none" is SGLang's; a vLLM profile needs only num_steps, and gets vLLM's chain
    rule (what its launch would refuse) instead."""
    from pytest_specdec.engines.vllm import VllmEngine

    target, draft = make_models(tmp_path)
    steps_only = profile(target, draft, server="vllm", spec={"eagle_topk": None, "num_draft_tokens": None},
                         thresholds={"min_accept_length": 5})  # fmt: skip
    findings = run_preflight(steps_only, engine=VllmEngine())
    assert [(f.severity, f.key) for f in findings if f.key.startswith(("speculative.", "thresholds."))] == [
        ("error", "thresholds.min_accept_length"),  # 3 steps emit at most 4 tokens per verify step, on vLLM too
    ]
    tree = profile(target, draft, server="vllm", spec={"eagle_topk": 2, "num_draft_tokens": 6})
    keys = [(f.severity, f.key) for f in run_preflight(tree, engine=VllmEngine()) if f.key.startswith("speculative.")]
    assert keys == [("error", "speculative.eagle_topk"), ("error", "speculative.num_draft_tokens")]


# ---------------------------------------------------------------- rule 5
def test_rule5_hidden_and_vocab(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path, draft={"target_hidden_size": 32, "vocab_size": 99})
    findings = run_preflight(profile(target, draft))
    hidden = only(findings, "target_hidden_size")
    assert hidden.value == 32 and hidden.why.endswith("the target's hidden_size is 16")
    assert only(findings, "vocab_size").fix == "use the draft trained for this target"


def test_rule5_context_length_vs_prompts(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path, draft={"max_position_embeddings": 64})
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "x" * 300}) + "\n" + json.dumps({"text": "short"}) + "\n")
    p = profile(target, draft, workload={"prompts": str(prompts), "max_new_tokens": 16})
    f = only(run_preflight(p), "max_position_embeddings")
    assert f.severity == "warning" and f.value == 64
    assert "(~100 tokens, estimated as UTF-8 bytes / 3) plus max_new_tokens 16 is ~116 positions" in f.why


# ---------------------------------------------------------------- rule 6
def test_rule6_required_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target, draft = make_models(tmp_path)
    monkeypatch.setenv("HF_TOKEN", "x")  # set in the shell, but not passed to servers
    f = only(run_preflight(profile(target, draft, required_env=["HF_TOKEN"])), "required_env")
    assert f.severity == "error" and f.value == "HF_TOKEN" and f.fix == "add HF_TOKEN under env: in this profile"
    assert run_preflight(profile(target, draft, required_env=["HF_TOKEN"], env={"HF_TOKEN": "x"})) == []


# ---------------------------------------------------------------- rule 7
def test_rule7_removed_flag_for_the_installed_sglang(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path)
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f"#!{sys.executable}\nprint('0.5.23')\n")
    python.chmod(0o755)
    p = profile(target, draft, server="sglang", python=str(python), extra_args=["--cuda-graph-max-bs", "8"],
                env={"NCCL_NVLS_ENABLE": "0"})  # fmt: skip
    f = only(run_preflight(p), "extra_args")
    assert (f.severity, f.value) == ("error", "--cuda-graph-max-bs")
    assert f.why == "SGLang 0.5.23 has no flag --cuda-graph-max-bs"
    assert f.fix == "use --cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill"


def test_rule7_a_flag_value_the_installed_sglang_cannot_parse(tmp_path: Path) -> None:
    """``--max-running-requests abc`` passed preflight and the server died 0.3 s after launch (a fresh-user trial):
    a typed flag's value is parsed as SGLang's argparse would (int, float, choices), in both spellings."""
    target, draft = make_models(tmp_path)
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f"#!{sys.executable}\nprint('0.5.17')\n")
    python.chmod(0o755)
    bad = ["--max-running-requests", "abc", "--mem-fraction-static=lots", "--dtype", "fp8", "--tp-size", "2"]
    p = profile(target, draft, server="sglang", python=str(python), extra_args=bad)
    found = [(f.severity, f.key, f.value, f.why, f.fix) for f in run_preflight(p) if f.key.endswith("extra_args")]
    assert found == [
        ("error", "extra_args", "--max-running-requests abc",
         "SGLang's --max-running-requests takes an integer, got 'abc'; the server would exit at startup",
         "give --max-running-requests an integer"),
        ("error", "extra_args", "--mem-fraction-static=lots",
         "SGLang's --mem-fraction-static takes a number, got 'lots'; the server would exit at startup",
         "give --mem-fraction-static a number"),
        ("error", "extra_args", "--dtype fp8",
         "SGLang's --dtype takes one of auto, half, float16, bfloat16, float, float32, got 'fp8'; the server would "
         "exit at startup", "give --dtype one of auto, half, float16, bfloat16, float, float32"),
    ], found  # fmt: skip
    good = ["--max-running-requests", "8", "--mem-fraction-static=0.8", "--dtype", "bfloat16"]
    assert not [f for f in run_preflight(profile(target, draft, server="sglang", python=str(python), extra_args=good))
                if f.key.endswith("extra_args")]  # fmt: skip


def test_rule7_a_value_the_reference_servers_own_parser_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh-user trial: ``--random-seed abc``, ``--max-running-requests -3``, ``--ref-fault-verify-delay-ms x``,
    a bare ``--decode-log-interval`` and ``--log-level loud`` in a reference profile's extra_args each printed
    ``profile ...: ok`` and the server died at startup. They are parsed by the server's own argparse parser, and
    check exits 1 naming the file, key, flag, value and argparse's message."""
    target, draft = make_models(tmp_path)
    bad = ["--random-seed", "abc", "--max-running-requests", "-3", "--ref-fault-verify-delay-ms", "x",
           "--log-level", "loud", "--decode-log-interval"]  # fmt: skip
    found = [(f.severity, f.value, f.why) for f in run_preflight(profile(target, draft, extra_args=bad))
             if f.key == "extra_args"]  # fmt: skip
    assert found == [
        ("error", "--random-seed abc", "the reference server's --random-seed takes an integer, got 'abc' (its parser: "
         "argument --random-seed: invalid int value: 'abc'); the server would exit at startup"),
        ("error", "--max-running-requests -3", "the reference server's --max-running-requests takes an integer >= 0, "
         "got -3: below 0 the scheduler admits no request, so the server never answers one (0 is read as unset)"),
        ("error", "--ref-fault-verify-delay-ms x", "the reference server's --ref-fault-verify-delay-ms takes a number, "
         "got 'x' (its parser: argument --ref-fault-verify-delay-ms: invalid float value: 'x'); the server would exit "
         "at startup"),
        ("error", "--log-level loud", "the reference server's --log-level takes one of debug, info, warning, error, "
         "critical, got 'loud' (its parser: argument --log-level: invalid choice: 'loud' (choose from 'debug', "
         "'info', 'warning', 'error', 'critical')); the server would exit at startup"),
        ("error", "--decode-log-interval", "the reference server's --decode-log-interval takes an integer, got no "
         "value (its parser: argument --decode-log-interval: expected one argument); the server would exit at "
         "startup"),
    ], found  # fmt: skip
    good = ["--random-seed=7", "--max-running-requests", "0", "--log-level", "debug", "--enable-metrics",
            "--decode-log-interval", "4", "--ref-fault-verify-delay-ms", "2.5"]  # fmt: skip
    assert not [f for f in run_preflight(profile(target, draft, extra_args=good)) if f.key == "extra_args"]

    path = write_profile_file(tmp_path / "cli", "num_steps: 3, eagle_topk: 1, num_draft_tokens: 4")
    path.write_text(path.read_text() + "    extra_args: [--random-seed, abc]\n")
    assert main(["check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "ok" not in out
    assert err.splitlines()[0] == (
        f"error: {path}:6: profiles.e3.extra_args: the reference server's --random-seed takes an integer, got 'abc' "
        "(its parser: argument --random-seed: invalid int value: 'abc'); the server would exit at startup (got "
        "'--random-seed abc'); fix: give --random-seed an integer (python -m pytest_specdec.refserver --help lists "
        "its flags)"
    )


def test_rule7_aux_id_convention_of_the_other_engine(tmp_path: Path) -> None:
    class VllmLike(ReferenceEngine):
        aux_id_convention = "vllm"

    target, draft = make_models(tmp_path)
    p = profile(target, draft, spec={"aux_id_convention": "sglang"})
    f = only(run_preflight(p, engine=VllmLike()), "speculative.aux_id_convention")
    assert (
        f.severity == "warning"
        and f.fix == "shift every id by +1 ([2, 4, 6]) in speculative.aux_hidden_state_layer_ids"
    )
    assert run_preflight(p, engine=ReferenceEngine()) == []


def test_missing_paths_and_uncached_hub_ids(tmp_path: Path) -> None:
    p = Profile.model_validate({
        "name": "h", "source": "specdec.yaml", "server": "sglang", "model_path": "nobody-xyz/absent-model-123",
        "speculative": {"algorithm": "EAGLE3", "draft_model_path": str(tmp_path / "nope")},
    })  # fmt: skip
    findings = run_preflight(p, engine=ReferenceEngine())
    assert [(f.severity, f.key) for f in findings] == [
        ("note", "model_path"),
        ("error", "speculative.draft_model_path"),
        ("note", "speculative"),  # steps/topk/draft tokens left to SGLang
    ]
    assert findings[0].why.startswith("target is a Hugging Face id not found in the local HF cache")


def test_missing_bundled_assets_say_reinstall() -> None:
    p = Profile(name="r", source="specdec.yaml", model_path=str(BUNDLED_TARGET.parent / "no-such-asset"))
    f = only(run_preflight(p), "model_path")
    assert f.why == "the bundled reference target is missing from this installation"
    assert f.fix == "reinstall pytest-specdec (its package data includes refserver/assets)"


@pytest.mark.skipif(not (BUNDLED_TARGET / "config.json").is_file(), reason="bundled assets not committed yet")
def test_the_bundled_assets_pass(tmp_path: Path) -> None:
    (tmp_path / "specdec.yaml").write_text(
        "profiles:\n  e3: {server: reference, "
        "speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}\n"
    )
    p = load_profiles(tmp_path / "specdec.yaml").get("e3")
    assert p.speculative is not None and p.speculative.draft_model_path == str(BUNDLED_DRAFT_EAGLE3)
    assert [f for f in run_preflight(p) if f.severity != "note"] == []


def test_format_findings_orders_by_severity_and_counts() -> None:
    n = Finding("note", "p", "specdec.yaml", "k", None, "why n", "fix n")
    e = Finding("error", "p", "/d/config.json", "vocab_size", 3, "why e", "fix e")
    assert format_findings([n, e]) == [
        "error: /d/config.json: vocab_size: why e (got 3) [profile p]; fix: fix e",
        "note: specdec.yaml: profiles.p.k: why n; fix: fix n",
        "preflight: 1 error, 0 warnings, 1 note",
    ]
    assert format_findings([]) == []


# ---------------------------------------------------------------- CLI
def write_profile_file(tmp_path: Path, spec: str) -> Path:
    target, draft = make_models(tmp_path)
    path = tmp_path / "specdec.yaml"
    path.write_text(textwrap.dedent(f"""\
        profiles:
          e3:
            server: reference
            model_path: {target}
            speculative: {{algorithm: EAGLE3, draft_model_path: {draft}, {spec}}}
        """))  # fmt: skip
    return path


def test_cli_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = write_profile_file(tmp_path / "a", "num_steps: 3, eagle_topk: 1, num_draft_tokens: 4")
    assert main(["check", str(ok)]) == 0
    assert capsys.readouterr().out == "profile e3: ok\n"
    warn = write_profile_file(tmp_path / "b", "num_steps: 3, eagle_topk: 1, num_draft_tokens: 5")
    assert main(["check", str(warn)]) == 0
    out, err = capsys.readouterr()
    assert out == ""  # diagnostics go to stderr, in the loader's shape FILE:LINE: profiles.NAME.KEY
    assert err.splitlines()[0].startswith(
        f"warning: {warn}:5: profiles.e3.speculative.num_draft_tokens: with eagle_topk 1"
    )
    assert err.splitlines()[-1] == "preflight: 0 errors, 1 warning, 0 notes"
    assert main(["check", str(warn), "--strict"]) == 1
    capsys.readouterr()
    bad = write_profile_file(tmp_path / "c", "num_steps: 3, aux_hidden_state_layer_ids: [1, 9]")
    assert main(["check", str(bad), "--profile", "e3"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == "preflight: 3 errors, 0 warnings, 0 notes"


def test_cli_check_prints_the_ok_line_of_a_profile_with_a_note_and_the_note_below_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fresh-user trial: a profile whose only finding was a note got no "ok" line, as if it had failed.
    path = write_profile_file(tmp_path, "num_steps: 3, eagle_topk: 1, num_draft_tokens: 4")
    path.write_text(path.read_text() + "  remote:\n    url: http://127.0.0.1:30000\n    model_path: /no/such/model\n")
    assert main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "profile e3: ok",
        "profile remote: ok",
        f"  note: {path}:8: profiles.remote.model_path: the server at http://127.0.0.1:30000 is not launched here and "
        "its target is not on this machine, so the file checks were skipped (got '/no/such/model'); fix: point "
        "model_path to a local copy to have it checked",
    ]
    assert err == ""


def test_cli_bad_profile_file_and_unknown_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("profiles:\n  a: {speculative: {algorithm: EAGLE3, num_steps: two}}\n")
    assert main(["check", str(broken)]) == 2
    assert capsys.readouterr().err == (
        f"error: {broken}:2: profiles.a.speculative.num_steps: expected an integer >= 1, got 'two'\n"
    )
    ok = write_profile_file(tmp_path, "num_steps: 3, eagle_topk: 1, num_draft_tokens: 4")
    assert main(["check", str(ok), "--profile", "nope"]) == 2
    assert capsys.readouterr().err == f"error: --profile=nope: no such profile in {ok} (available: e3)\n"


def test_cli_check_reports_a_broken_extends_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A fresh-user trial: the same `extends` error once per profile inheriting from the broken one (3 lines here).
    path = tmp_path / "specdec.yaml"
    path.write_text("profiles:\n  base:\n    server: reference\n    extends: basee\n  eagle3:\n    extends: base\n"
                    "  eagle3-more:\n    extends: eagle3\n")  # fmt: skip
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"error: {path}:4: profiles.base.extends: no profile 'basee' in this file (did you mean 'base'?) (available: "
        "base, eagle3, eagle3-more) (inherited through extends: eagle3 -> base; eagle3-more -> eagle3 -> base)\n"
    )


def test_cli_runs_as_a_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = write_profile_file(tmp_path, "num_steps: 3, eagle_topk: 1, num_draft_tokens: 4")
    repo = str(Path(__file__).resolve().parents[1])
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": repo}
    done = subprocess.run([sys.executable, "-m", "pytest_specdec", "check", str(ok)], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "profile e3: ok\n")
    # No command: argparse's usage error, exit 2 (in process: the run above shows the module passes its arguments on).
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2 and "the following arguments are required: COMMAND" in capsys.readouterr().err


def test_a_closed_pipe_ends_the_cli_quietly_with_141_not_a_verdict(tmp_path: Path) -> None:
    """A trial piped ``compare`` into ``head``: a BrokenPipeError traceback and exit 1, which the docs call REGRESSED.
    The reader here closes its end before the command writes (its imports take far longer than the close)."""
    ok = write_profile_file(tmp_path, "num_steps: 3, eagle_topk: 1, num_draft_tokens: 4")
    repo = str(Path(__file__).resolve().parents[1])
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": repo}
    proc = subprocess.Popen([sys.executable, "-m", "pytest_specdec", "check", str(ok)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err, err


def test_unreachable_acceptance_floors_are_errors_before_launch(tmp_path: Path) -> None:
    """min_accept_length above num_steps + 1, or a per-position floor past num_steps, can never be met (found by a
    fresh user: `check` said ok, the server started, and the failure never said the floor was impossible)."""
    target, draft = make_models(tmp_path)
    found = run_preflight(profile(target, draft, thresholds={"min_accept_length": 9, "min_accept_rate_at": {5: 0.5}}))
    length = only(found, "thresholds.min_accept_length")
    assert length.severity == "error"
    assert length.why == "can never be met: with num_steps 3 one verify step emits at most num_steps + 1 = 4 tokens"
    assert length.fix == "set min_accept_length <= 4 (or raise speculative.num_steps)"
    position = only(found, "thresholds.min_accept_rate_at")
    assert position.why == "draft position(s) [5] are never proposed with num_steps 3 (positions 1..3)"
    fine = run_preflight(profile(target, draft, thresholds={"min_accept_length": 4, "min_accept_rate_at": {3: 0.1}}))
    assert not [f for f in fine if f.key.startswith("thresholds")]


def test_findings_name_the_line_of_the_key_and_the_profile_that_sets_it(tmp_path: Path) -> None:
    from pytest_specdec.engines.preflight import locate
    from pytest_specdec.engines.rules import load_profiles

    path = write_profile_file(tmp_path, "num_steps: 3, eagle_topk: 1, num_draft_tokens: 5")
    with path.open("a") as f:
        f.write("  child:\n    extends: e3\n")
    profiles = load_profiles(path)
    [warn] = locate(run_preflight(profiles.get("child")), profiles)
    assert str(warn).startswith(
        f"warning: {path}:5: profiles.child.speculative.num_draft_tokens (set in profiles.e3, through extends:): "
        "with eagle_topk 1"
    )


def test_rule8_tolerances_that_do_not_do_what_they_seem(tmp_path: Path) -> None:
    """A p99 field on 16 requests a repeat can only read n/a in a compare. Metric names (``ttft_ms:25%``, which also
    covers p50), 5% and an absolute part with its unit are fine. (A bare ``output_tok_s:5``, which a fresh-user
    trial wrote meaning 5%, no longer loads: ``tests/test_tolerances.py``.)"""
    target, draft = make_models(tmp_path)
    found = run_preflight(profile(target, draft, tolerances=["output_tok_s:5tok/s", "ttft_ms:25%", "tpot_ms_p99:20%",
                                                             "itl_ms_p99:20%", "requests_per_s:0%+1"],
                                  workload={"num_requests": 16}))  # fmt: skip
    (tail,) = (f for f in found if f.key == "tolerances")
    assert (tail.severity, tail.value) == ("warning", "tpot_ms_p99")
    assert tail.why.startswith("16 requests a repeat (workload.num_requests 16): a compare row of tpot_ms_p99 "
                               "needs 100 per repeat")  # fmt: skip
    # 16 requests x 63 intervals: enough for the ITL p99; "0%+1" and "5tok/s" say absolute on purpose.
    assert run_preflight(profile(target, draft, tolerances=["output_tok_s:5%"])) == []


def test_min_goodput_above_the_request_rate_can_only_fail(tmp_path: Path) -> None:
    """A fresh-user trial: min_goodput 8 at request_rate 4 measured to a verdict that could only be FAILED."""
    target, draft = make_models(tmp_path)
    slo = {"ttft_ms": 500}
    over = only(run_preflight(profile(target, draft, workload={"request_rate": 4, "slo": slo},
                                      thresholds={"min_goodput": 8})), "thresholds.min_goodput")  # fmt: skip
    assert (over.severity, over.value) == ("warning", 8)
    assert str(over).endswith(
        "above workload.request_rate 4: goodput counts the requests that met the SLO per second, and this open loop "
        "sends 4 requests/s, so the floor can only fail (got 8); fix: set min_goodput below 4 (e.g. 3.6, 90% of the "
        "requests within the SLO) or raise request_rate"
    )
    # Below the rate, and a closed loop (no request_rate: its rate is what the server serves): nothing to say.
    for workload in ({"request_rate": 4, "slo": slo}, {"slo": slo}):
        assert run_preflight(profile(target, draft, workload=workload, thresholds={"min_goodput": 3})) == []
