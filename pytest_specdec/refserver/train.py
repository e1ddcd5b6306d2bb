"""How the committed reference assets were made: tokenizer, target Llama and EAGLE-3 draft, all from fixed seeds.

Run ``python -m pytest_specdec.refserver.train --out pytest_specdec/refserver/assets`` (about 18 minutes on 2 idle CPU
cores; steps, not wall time, bound it, so the result does not depend on the machine's load). The corpus is the running
Python's own standard library source, so it exists offline on every machine; a different Python version gives a
slightly different corpus and therefore different (equally valid) weights.

Recipe (sized by a training trial on a 2-core CPU: ~16 min, accept length ~2.5 with 3 draft steps; training step 1
only gave 1.86, hence the 3-step training-time-test unroll):

- tokenizer: byte-level BPE, vocab 2048, ``<|eot|>`` (id 0) between files;
- target: ``LlamaForCausalLM``, 8 layers, hidden 256, 4 heads, intermediate 688, trained with bf16 autocast on
  random 256-token windows, AdamW, cosine schedule, 650 steps;
- draft: EAGLE-3 over the target's hidden states after layers ``AUX_LAYER_IDS`` (SGLang convention: id i is the
  output of decoder layer i = HF ``hidden_states[i + 1]``), trained with a 3-step training-time-test unroll,
  step losses weighted 0.8^(k-1), cross-entropy against the target's greedy argmax.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from pytest_specdec.refserver.model import Eagle3Draft, Eagle3DraftConfig

#: The layers the committed draft was trained on (SGLang ids; the analogue of [2, 30, 58] on a 61-layer model).
AUX_LAYER_IDS = [1, 3, 5]
EOT = "<|eot|>"
SEED = 0

TARGET_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 2048,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "attention_bias": False,
    "mlp_bias": False,
}


def corpus_files() -> tuple[list[Path], list[Path]]:
    """Stdlib ``.py`` files, split into (train, held out) by md5(path) % 100 < 3."""
    root = Path(os.path.dirname(os.__file__))
    train: list[Path] = []
    held: list[Path] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if parts[0] in {"site-packages", "idlelib", "dist-packages"} or any("test" in p for p in parts):
            continue
        bucket = held if int(hashlib.md5(rel.encode()).hexdigest(), 16) % 100 < 3 else train
        bucket.append(path)
    return train, held


def build_tokenizer(files: list[Path], out: Path) -> Any:
    """Train the byte-level BPE, save ``tokenizer.json`` + HF ``tokenizer_config.json``; return the fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_CONFIG["vocab_size"],
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOT, bos_token=EOT, pad_token=EOT)
    # A plain template so OpenAI chat requests work on both the reference server and vLLM.
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    fast.save_pretrained(out)
    return fast


def encode(fast: Any, files: list[Path]) -> torch.Tensor:
    ids: list[int] = []
    eot = fast.convert_tokens_to_ids(EOT)
    for p in files:
        ids.extend(fast(p.read_text(encoding="utf-8", errors="replace"), add_special_tokens=False)["input_ids"])
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.int64)


def batches(data: torch.Tensor, batch: int, seq: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    while True:
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=gen)
        yield torch.stack([data[s : s + seq] for s in starts.tolist()])


def lr_at(step_frac: float, step: int, warmup: int, base: float, floor: float) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(step_frac, 1.0))))


def train_target(data: torch.Tensor, held: torch.Tensor, steps: int, log: Callable[[str], None]) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    model = LlamaForCausalLM(LlamaConfig(**TARGET_CONFIG))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(SEED)
    start = time.monotonic()
    losses: list[float] = []
    for step, x in enumerate(batches(data, 16, 256, gen)):
        if step >= steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step / steps, step, 50, 3e-3, 0.1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0:
            log(
                f"target step {step} loss {sum(losses[-50:]) / len(losses[-50:]):.3f} ({time.monotonic() - start:.0f}s)"
            )
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        x = held[: 16 * 256].view(16, 256)
        log(f"target done: {step} steps, held-out loss {model(input_ids=x, labels=x).loss.item():.3f}")
    return model


def draft_config() -> dict[str, Any]:
    t = TARGET_CONFIG
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": t["hidden_size"],
        "target_hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"],
        "num_hidden_layers": 1,
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": t["head_dim"],
        "vocab_size": t["vocab_size"],
        "draft_vocab_size": t["vocab_size"],
        "max_position_embeddings": t["max_position_embeddings"],
        "rms_norm_eps": t["rms_norm_eps"],
        "rope_theta": t["rope_theta"],
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS, "use_aux_hidden_state": True},
    }


def target_features(target: Any, x: torch.Tensor, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(aux [B, T, K*H] from HF ``hidden_states[i + 1]`` per id, greedy labels [B, T])."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = target(input_ids=x, output_hidden_states=True)
    aux = torch.cat([out.hidden_states[i + 1] for i in sorted(ids)], dim=-1).float()
    return aux, out.logits.argmax(-1)


def train_draft(
    target: Any, data: torch.Tensor, held: torch.Tensor, train_steps: int, log: Callable[[str], None], steps: int = 3
) -> Eagle3Draft:
    torch.manual_seed(SEED + 1)
    cfg = draft_config()
    draft = Eagle3Draft(Eagle3DraftConfig.from_json(cfg), target.model.embed_tokens)
    draft.lm_head.weight.data.copy_(target.lm_head.weight.data)
    for p in target.parameters():
        p.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(SEED + 1)
    weights = [0.8**k for k in range(steps)]
    start = time.monotonic()
    hist: list[list[float]] = []
    for step, x in enumerate(batches(data, 16, 256, gen)):
        if step >= train_steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step / train_steps, step, 30, 3e-3, 0.05)
        aux, y = target_features(target, x, AUX_LAYER_IDS)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs = draft.forward_ttt(x, aux, steps)
        loss = torch.zeros(())
        accs = []
        t_len = x.shape[1]
        for k, logits in enumerate(outs, start=1):
            valid = t_len - k
            pred = logits[:, :valid].float()
            label = y[:, k : k + valid]
            loss = loss + weights[k - 1] * F.cross_entropy(pred.reshape(-1, pred.shape[-1]), label.reshape(-1))
            accs.append((pred.argmax(-1) == label).float().mean().item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        hist.append(accs)
        if step % 25 == 0:
            recent = hist[-25:]
            mean = [sum(a[i] for a in recent) / len(recent) for i in range(steps)]
            log(
                f"draft step {step} loss {loss.item():.3f} agreement {' / '.join(f'{m:.3f}' for m in mean)} "
                f"({time.monotonic() - start:.0f}s)"
            )
    draft.eval()
    with torch.no_grad():
        x = held[: 8 * 256].view(8, 256)
        for name, ids in [("trained", AUX_LAYER_IDS), ("[-1,1,3]", [-1, 1, 3]), ("[0,1,2]", [0, 1, 2])]:
            aux, y = target_features(target, x, ids)
            outs = draft.forward_ttt(x, aux, steps)
            acc = [(o[:, : 256 - k].argmax(-1) == y[:, k:]).float().mean().item() for k, o in enumerate(outs, 1)]
            log(f"held-out teacher-forced agreement, ids {name}: {' / '.join(f'{a:.3f}' for a in acc)}")
    return draft


def save(target: Any, draft: Eagle3Draft, out: Path) -> None:
    from safetensors.torch import save_file

    target_dir, draft_dir = out / "target", out / "draft-eagle3"
    target.to(torch.bfloat16).save_pretrained(target_dir, safe_serialization=True)
    draft_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in draft.state_dict().items()}
    state = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in state.items()}
    save_file(state, str(draft_dir / "model.safetensors"), metadata={"format": "pt"})
    (draft_dir / "config.json").write_text(json.dumps(draft_config(), indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--target-steps", type=int, default=650, help="optimizer steps of 16 x 256 tokens")
    parser.add_argument("--draft-steps", type=int, default=400, help="optimizer steps of 16 x 256 tokens")
    args = parser.parse_args(argv)
    random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    def log(msg: str) -> None:
        print(msg, flush=True)

    train_files, held_files = corpus_files()
    target_dir = args.out / "target"
    target_dir.mkdir(parents=True, exist_ok=True)
    fast = build_tokenizer(train_files, target_dir)
    data, held = encode(fast, train_files), encode(fast, held_files)
    log(f"corpus: {len(train_files)} files, {len(data)} train tokens, {len(held)} held-out tokens")
    target = train_target(data, held, args.target_steps, log)
    draft = train_draft(target, data, held, args.draft_steps, log)
    save(target, draft, args.out)
    log(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
