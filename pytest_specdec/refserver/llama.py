"""The reference server's target model: HF ``LlamaForCausalLM``'s forward on torch alone, loaded from safetensors.

Importing ``transformers`` to build the target took 4.3 of a start's 7 s at load 5 (``python -X importtime``: its
``modeling_utils`` pulls in ``torch._dynamo``, ``torch.distributed.tensor``, sympy and scipy), and loading the
weights 0.2 s. This module does the same arithmetic in the same order as transformers 5.x
``models/llama/modeling_llama.py`` with ``attn_implementation="sdpa"`` (``integrations/sdpa_attention.py``, masks of
``masking_utils.py::sdpa_mask``), so logits and hidden states are bit-identical to the HF model's
(``tests/refserver/test_llama.py`` compares them where transformers is installed). Tensor names are HF's
(``model.layers.{i}.self_attn.q_proj.weight``, ...), so checkpoints that ``LlamaForCausalLM.from_pretrained`` reads
load unchanged, and ``model.embed_tokens`` is where the EAGLE-3 draft finds the shared embedding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LlamaConfig", "LlamaTarget", "TargetCache", "TargetOutput", "load_target"]


class ModelConfigError(ValueError):
    """A ``config.json`` the reference server's target cannot be built from (a traceback at startup, exit 1)."""


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """The keys of a Llama ``config.json`` the forward uses (HF ``LlamaConfig`` names and defaults)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    attention_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    eos_token_id: Any
    architectures: tuple[str, ...]
    model_type: str

    @classmethod
    def from_file(cls, path: Path) -> LlamaConfig:
        """Read ``path`` (a model's ``config.json``).

        :raises ModelConfigError: not a Llama config, or one whose forward this module does not implement (a rope
            type other than "default", an activation other than silu); the message names the file, key and value.
        """
        raw = json.loads(path.read_text())
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        checks = (
            ("model_type", raw.get("model_type", "llama"), "llama"),
            ("hidden_act", raw.get("hidden_act", "silu"), "silu"),
            ("rope_parameters.rope_type", rope.get("rope_type", rope.get("type", "default")), "default"),
        )
        for key, value, wanted in checks:
            if value != wanted:
                raise ModelConfigError(
                    f"{path}: {key}: the reference server runs only Llama with {key} {wanted!r}, got {value!r}; "
                    f"fix: serve this model with server: sglang or vllm, or point --model-path at a Llama checkpoint"
                )
        heads = raw["num_attention_heads"]
        return cls(
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads") or heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            vocab_size=raw["vocab_size"],
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", raw.get("rope_theta", 10000.0)),
            attention_bias=bool(raw.get("attention_bias", False)),
            mlp_bias=bool(raw.get("mlp_bias", False)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            eos_token_id=raw.get("eos_token_id"),
            architectures=tuple(raw.get("architectures") or ("LlamaForCausalLM",)),
            model_type=raw.get("model_type", "llama"),
        )


@dataclass
class TargetCache:
    """One sequence's KV cache: per layer ``(k, v)``, each [1, kv_heads, S, head_dim] (HF ``DynamicCache``'s API:
    ``get_seq_length``, ``crop``)."""

    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def get_seq_length(self) -> int:
        """S, the cached positions (0 before the first forward)."""
        return int(self.layers[0][0].shape[-2]) if self.layers else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' ``k``/``v`` [1, kv_heads, n, head_dim] to ``layer``; return all of them."""
        if layer == len(self.layers):
            self.layers.append((k, v))
        else:
            old_k, old_v = self.layers[layer]
            self.layers[layer] = (torch.cat([old_k, k], dim=-2), torch.cat([old_v, v], dim=-2))
        return self.layers[layer]

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` positions; negative: drop that many from the end (as ``DynamicCache``)."""
        if max_length < 0:
            max_length = self.get_seq_length() - abs(max_length)
        self.layers = [(k[..., :max_length, :], v[..., :max_length, :]) for k, v in self.layers]


@dataclass(frozen=True, slots=True)
class TargetOutput:
    """``logits`` [1, n, V]; ``hidden_states`` (only when asked): L + 1 tensors [1, n, H], the residual stream
    entering each decoder layer, then the final norm's output (HF's ``hidden_states``)."""

    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # HF LlamaRMSNorm, op for op (the fp32 round trip is a no-op for fp32 weights, kept for the same graph).
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


class _Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        hd, bias = cfg.head_dim, cfg.attention_bias
        self.head_dim = hd
        self.groups = cfg.num_attention_heads // cfg.num_key_value_heads
        self.scaling = hd**-0.5
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * hd, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=bias)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, cfg.hidden_size, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: TargetCache | None,
        layer: int,
    ) -> torch.Tensor:
        shape = (*x.shape[:-1], -1, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, layer)
        n = q.shape[2]
        kwargs: dict[str, Any] = {}
        if self.groups > 1:
            # transformers' sdpa_attention_forward: GQA in sdpa without a mask, one query packed per kv head, else
            # kv heads repeated.
            if mask is None and k.shape[-1] <= 256:
                kwargs["enable_gqa"] = True
            elif n == 1:
                q = q.reshape(q.shape[0], q.shape[1] // self.groups, self.groups, q.shape[-1])
            else:
                k, v = _repeat_kv(k, self.groups), _repeat_kv(v, self.groups)
        is_causal = n > 1 and mask is None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.scaling, is_causal=is_causal, **kwargs
        )
        out = out.reshape(out.shape[0], -1, n, v.shape[-1]).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(*x.shape[:-1], -1).contiguous())


class _MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)
        self.input_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: TargetCache | None,
        layer: int,
    ) -> torch.Tensor:
        # HF LlamaDecoderLayer: residual first in both sums.
        residual = x
        x = residual + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        residual = x
        return residual + self.mlp(self.post_attention_layernorm(x))


class _Model(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(_DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF ``apply_rotary_pos_emb`` for one tensor [1, heads, n, hd] with cos/sin [1, n, hd]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, heads, s, hd = x.shape
    return x[:, :, None, :, :].expand(b, heads, n_rep, s, hd).reshape(b, heads * n_rep, s, hd)


class LlamaTarget(nn.Module):
    """The target: ``forward(input_ids [1, n], cache, ...)`` -> :class:`TargetOutput`, as HF ``LlamaForCausalLM``.

    :param config: the model's shape settings (:meth:`LlamaConfig.from_file`).
    """

    inv_freq: torch.Tensor

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = _Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        hd = config.head_dim
        # HF LlamaRotaryEmbedding.compute_default_rope_parameters.
        self.register_buffer(
            "inv_freq", 1.0 / (config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd)), persistent=False
        )

    def new_cache(self) -> TargetCache:
        """An empty KV cache for one sequence."""
        return TargetCache()

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: TargetCache | None = None,
        use_cache: bool = True,
        output_hidden_states: bool = False,
    ) -> TargetOutput:
        """Logits for ``input_ids`` [1, n] after the ``cache``'s positions (appended to it when ``use_cache``)."""
        cache = cache if use_cache else None
        past = cache.get_seq_length() if cache is not None else 0
        n = input_ids.shape[1]
        x = self.model.embed_tokens(input_ids)
        position_ids = (torch.arange(n) + past).unsqueeze(0)
        # HF LlamaRotaryEmbedding.forward (attention_scaling 1.0 for the default rope type).
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (emb.cos() * 1.0).to(x.dtype), (emb.sin() * 1.0).to(x.dtype)
        mask = None
        if n > 1 and past > 0:
            # masking_utils.sdpa_mask: no mask (sdpa's is_causal) for a prefill or one query; else a boolean
            # [1, 1, n, past + n] causal mask over the cached positions.
            q_pos = torch.arange(n) + past
            mask = (torch.arange(past + n)[None, :] <= q_pos[:, None]).view(1, 1, n, past + n)
        hidden: list[torch.Tensor] = []
        for i, layer in enumerate(self.model.layers):
            if output_hidden_states:
                hidden.append(x)
            x = layer(x, cos, sin, mask, cache, i)
        x = self.model.norm(x)
        if output_hidden_states:
            hidden.append(x)
        return TargetOutput(logits=self.lm_head(x), hidden_states=tuple(hidden) if output_hidden_states else None)


def _read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """``model.safetensors``, or the shards ``model.safetensors.index.json`` names."""
    from safetensors.torch import load_file

    index = model_dir / "model.safetensors.index.json"
    if not index.exists():
        return load_file(str(model_dir / "model.safetensors"))
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load_file(str(model_dir / shard)))
    return state


def load_target(model_dir: str | Path) -> LlamaTarget:
    """Build the target from ``model_dir`` (``config.json`` and safetensors), weights in fp32 (bf16 -> fp32 is
    exact), in eval mode.

    :raises ModelConfigError: a config this module does not run (:meth:`LlamaConfig.from_file`).
    :raises OSError: unreadable files; :raises RuntimeError: tensor names or shapes not matching the config.
    """
    model_dir = Path(model_dir)
    config = LlamaConfig.from_file(model_dir / "config.json")
    # Built on the CPU: its random init costs ~20 ms, where building on the meta device imports torch._dynamo
    # (torch.nn.init's normal_ on meta goes through torch._refs), 3 s.
    target = LlamaTarget(config)
    state = {k: v.to(torch.float32) if v.is_floating_point() else v for k, v in _read_weights(model_dir).items()}
    if config.tie_word_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    # HF checkpoints may carry the rotary buffer; HF recomputes it, as LlamaTarget's init did.
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    target.load_state_dict(state, strict=True, assign=True)
    target.requires_grad_(False)
    return target.eval()
