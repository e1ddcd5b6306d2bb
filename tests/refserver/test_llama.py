"""The target model and tokenizer the reference server builds without transformers: same outputs, fewer imports.

The pinned token ids and verify counts below were computed by the server before it stopped building its target and
tokenizer through transformers (``LlamaForCausalLM.from_pretrained``, ``AutoTokenizer``; main at 6512e26, torch
2.13.0+cpu, transformers 5.25.0), over HTTP with ``--random-seed 0``; this machine's server gives the same.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the reference server needs the reference extra (torch)")
from refhelpers import asset_dir, load_prompts, server_env

from pytest_specdec.refserver.llama import ModelConfigError, load_target

#: Greedy, 32 new tokens, ignore_eos, prompts 0 and 1 of prompts.jsonl: the target's tokens (every algorithm).
PINNED_IDS = [
    [289, 354, 51, 79, 411, 277, 13, 87, 462, 354, 66, 2, 507, 363, 280, 14, 378, 9, 267, 314, 294, 14, 539, 322, 390,
     404, 26, 289, 342, 294, 14, 539],
    [416, 8, 567, 12, 494, 29, 567, 307, 266, 384, 266, 384, 266, 384, 266, 384, 266, 1161, 295, 727, 386, 295, 727,
     386, 295, 727, 386, 295, 727, 386, 295, 727],
]  # fmt: skip
#: Verify forwards for those two requests (3 steps, topk 1): EAGLE3 reads the aux states of layers [1, 3, 5], EAGLE
#: the final norm's output through the target's lm_head, so both pin the hidden states too.
PINNED_VERIFY_CT = {"EAGLE3": [10, 16], "EAGLE": [28, 27]}
#: temperature 0.8, top_p 0.9, prompt 7, the first sampled request after --random-seed 0 (EAGLE3).
PINNED_SAMPLED = [284, 266, 351, 371, 736, 63, 367, 265, 70, 414, 8, 280, 12, 1760, 12, 691, 307, 267, 379, 274, 310,
                  294, 14, 568, 513, 613, 294, 338, 931, 522, 12, 294]  # fmt: skip

#: Loads the models as ``__main__`` does, runs the engine, prints the outputs and which heavy modules got imported.
ENGINE_SCRIPT = """
import json, os, sys, threading
import torch
torch.set_num_threads(1)
from pytest_specdec.refserver.args import parse_args, resolve_args
from pytest_specdec.refserver.decoding import SamplingParams, Sequence, SpecEngine, load_models

assets, prompts = sys.argv[1], json.loads(sys.argv[2])
result = {}
for algo in ("plain", "EAGLE3", "EAGLE"):
    flags = ["--model-path", assets + "/target", "--random-seed", "0"]
    if algo != "plain":
        flags += ["--speculative-algorithm", algo, "--speculative-draft-model-path", assets + "/draft-eagle3",
                  "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", "4"]
    args = resolve_args(parse_args(flags))
    engine = SpecEngine(load_models(args), args)
    engine.start()
    outs = []
    for prompt, temperature in [(prompts[0], 0.0), (prompts[1], 0.0), (prompts[7], 0.8)]:
        done, last = threading.Event(), []
        def emit(out, done=done, last=last):
            last[:] = [out]
            if out.finished:
                done.set()
        ids = engine.m.tokenizer.encode(prompt, add_special_tokens=False)
        params = SamplingParams(max_new_tokens=32, temperature=temperature, top_p=0.9, ignore_eos=True)
        engine.submit(Sequence(rid="r", prompt_ids=ids, params=params, emit=emit))
        assert done.wait(120)
        outs.append({"ids": list(last[0].output_ids), "verify_ct": last[0].spec_verify_ct})
    result[algo] = outs
heavy = ("transformers", "scipy", "sympy", "torch._dynamo", "torch.distributed.tensor", "pytest")
result["imported"] = sorted(m for m in heavy if m in sys.modules)
print(json.dumps(result), flush=True)
# The engine threads are daemons that ran torch ops: finalizing the interpreter under them aborted ("terminate called
# without an active exception", status -6) in 2 of 4 runs without torch._dynamo imported. The server never gets
# there: SIGTERM/SIGINT end it by the re-raised signal, its faults by os._exit.
os._exit(0)
"""


@pytest.mark.slow
def test_served_tokens_are_the_pinned_ones_and_no_transformers_or_pytest_is_imported() -> None:
    prompts = load_prompts()
    res = subprocess.run(
        [sys.executable, "-c", ENGINE_SCRIPT, str(asset_dir()), json.dumps(prompts)],
        capture_output=True,
        text=True,
        timeout=300,
        env=server_env(),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.splitlines()[-1])
    for algo in ("plain", "EAGLE3", "EAGLE"):
        assert [o["ids"] for o in out[algo][:2]] == PINNED_IDS, algo
    for algo, counts in PINNED_VERIFY_CT.items():
        assert [o["verify_ct"] for o in out[algo][:2]] == counts, algo
    assert out["EAGLE3"][2]["ids"] == PINNED_SAMPLED
    # transformers' modeling stack imports all but pytest: 4.3 of a 7 s start; pytest came with the package's
    # errors, 0.25-0.5 s (docs/measurements/tooling.md).
    assert out["imported"] == []


@pytest.mark.slow
def test_target_and_tokenizer_match_transformers_bit_for_bit(tmp_path: Path) -> None:
    """Prefill, one-token decodes, multi-token verifies over a cache, and rolled-back caches, as the engine runs them;
    on the bundled target and on a random GQA target with tied embeddings and attention biases."""
    transformers = pytest.importorskip("transformers")
    import torch

    gqa_dir = tmp_path / "gqa"
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, vocab_size=97, max_position_embeddings=256,
                                   tie_word_embeddings=True, attention_bias=True)  # fmt: skip
    transformers.LlamaForCausalLM(cfg).save_pretrained(gqa_dir)
    rng = random.Random(0)
    for model_dir in (asset_dir() / "target", gqa_dir):
        hf = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        ours = load_target(model_dir)
        vocab = hf.config.vocab_size
        with torch.inference_mode():
            for _ in range(4):
                hf_cache, our_cache = transformers.DynamicCache(), ours.new_cache()
                for n in [rng.randint(2, 40), 1, 4, 1, 4, 2]:
                    ids = torch.tensor([[rng.randrange(vocab) for _ in range(n)]])
                    a = hf(input_ids=ids, cache=hf_cache, use_cache=True, output_hidden_states=True)
                    b = ours(input_ids=ids, cache=our_cache, use_cache=True, output_hidden_states=True)
                    assert torch.equal(a.logits, b.logits)
                    assert b.hidden_states is not None and len(a.hidden_states) == len(b.hidden_states)
                    assert all(torch.equal(x, y) for x, y in zip(a.hidden_states, b.hidden_states, strict=True))
                    if n > 1:  # a rejected draft: drop the last positions
                        hf_cache.crop(-(n - 1))
                        our_cache.crop(-(n - 1))
                    assert hf_cache.get_seq_length() == our_cache.get_seq_length()

    from pytest_specdec.refserver.tokenizer import Tokenizer

    hf_tok = transformers.AutoTokenizer.from_pretrained(asset_dir() / "target")
    our_tok = Tokenizer(asset_dir() / "target")
    for text in [*load_prompts(), "", "héllo wörld ✓ 日本", "<|eot|>x<|eot|>", "a\n\n\tb  c"]:
        assert our_tok.encode(text, add_special_tokens=False) == hf_tok.encode(text, add_special_tokens=False)
    for _ in range(500):
        ids = [rng.randrange(2048) for _ in range(rng.randint(0, 30))] + [0]
        rng.shuffle(ids)
        for skip in (False, True):
            assert our_tok.decode(ids, skip_special_tokens=skip) == hf_tok.decode(ids, skip_special_tokens=skip)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi <b>&"}]
    assert our_tok.apply_chat_template(messages, add_generation_prompt=True) == hf_tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert our_tok.eos_token_id == hf_tok.eos_token_id == 0


def test_a_target_that_is_not_llama_is_refused_naming_file_key_and_value(tmp_path: Path) -> None:
    config = json.loads((asset_dir() / "target" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "qwen3"}))
    with pytest.raises(ModelConfigError) as exc:
        load_target(tmp_path)
    assert str(exc.value) == (
        f"{tmp_path / 'config.json'}: model_type: the reference server runs only Llama with model_type 'llama', got "
        "'qwen3'; fix: serve this model with server: sglang or vllm, or point --model-path at a Llama checkpoint"
    )
