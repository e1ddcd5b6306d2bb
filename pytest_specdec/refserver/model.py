"""The EAGLE-3 draft module of the reference server, in SGLang's ``LlamaForCausalLMEagle3`` checkpoint layout.

Tensor names and shapes mirror SGLang 0.5.23 ``python/sglang/srt/models/llama_eagle3.py`` (H = draft hidden size,
Ht = target hidden size, K = number of aux layers, V = vocab, Vd = draft vocab):

==========================================================  ==================
``fc.weight``                                               [H, K*Ht]
``midlayer.input_layernorm.weight`` / ``hidden_norm``       [H]
``midlayer.self_attn.{q,k,v}_proj.weight``                  [heads*hd, 2H]
``midlayer.self_attn.o_proj.weight``                        [H, heads*hd]
``midlayer.post_attention_layernorm.weight``                [H]
``midlayer.mlp.{gate,up}_proj.weight`` / ``down_proj``      [I, H] / [H, I]
``norm.weight``                                             [H]
``lm_head.weight``                                          [Vd, H]
``d2t`` (int64) / ``t2d`` (bool)                            [Vd] / [V]
==========================================================  ==================

The draft has no ``embed_tokens``: as in SGLang's EAGLE-3 worker it uses the target's token embedding.

Forward of the one decoder layer (as SGLang's ``LlamaDecoderLayer`` in llama_eagle3.py)::

    residual = hidden
    x = cat(input_layernorm(embeds), hidden_norm(hidden))          # [n, 2H]
    h = self_attn(x) + residual
    h = mlp(post_attention_layernorm(h)) + h                      # pre-norm output, fed back as next hidden
    logits = lm_head(norm(h))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DraftCache", "Eagle3Draft", "Eagle3DraftConfig", "apply_rope", "rope_cos_sin"]


@dataclass(frozen=True)
class Eagle3DraftConfig:
    """The subset of the draft ``config.json`` the module needs."""

    hidden_size: int
    target_hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    draft_vocab_size: int
    num_aux_hidden_states: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_json(cls, config: dict[str, Any]) -> Eagle3DraftConfig:
        """Read a draft ``config.json`` dict; K follows SGLang: ``num_aux_hidden_states``, else the id count, else 3."""
        ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        k = config.get("num_aux_hidden_states") or (len(ids) if ids else 3)
        rope = config.get("rope_parameters") or {}
        return cls(
            hidden_size=config["hidden_size"],
            target_hidden_size=config.get("target_hidden_size") or config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_attention_heads=config["num_attention_heads"],
            num_key_value_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
            vocab_size=config["vocab_size"],
            draft_vocab_size=config.get("draft_vocab_size") or config["vocab_size"],
            num_aux_hidden_states=k,
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=config.get("rope_theta", rope.get("rope_theta", 10000.0)),
        )


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Neox-style rotary tables for ``positions`` [n] -> (cos, sin), each [n, head_dim] (as HF Llama)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [..., n, head_dim] with HF's ``rotate_half`` convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class _Attention(nn.Module):
    def __init__(self, cfg: Eagle3DraftConfig) -> None:
        super().__init__()
        hd = cfg.head_dim
        self.q_proj = nn.Linear(2 * cfg.hidden_size, cfg.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, cfg.hidden_size, bias=False)


class _MLP(nn.Module):
    def __init__(self, cfg: Eagle3DraftConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, cfg: Eagle3DraftConfig) -> None:
        super().__init__()
        self.input_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)


@dataclass
class DraftCache:
    """The draft's KV cache for one sequence: ``k``/``v`` are [kv_heads, S, head_dim]; S = cached positions."""

    k: torch.Tensor
    v: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.k.shape[1])

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (drop rejected draft entries)."""
        self.k = self.k[:, :length]
        self.v = self.v[:, :length]


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft head: one Llama decoder layer over (token embedding, fused target hidden state).

    :param config: the draft's shape settings.
    :param embed_tokens: the target's embedding module (shared, frozen), mapping ids [n] -> [n, H].
    """

    # Registered buffers, declared so that type checkers see tensors (nn.Module.__getattr__ says Tensor | Module).
    d2t: torch.Tensor
    t2d: torch.Tensor

    def __init__(self, config: Eagle3DraftConfig, embed_tokens: nn.Module) -> None:
        super().__init__()
        self.config = config
        cfg = config
        self.fc = nn.Linear(cfg.num_aux_hidden_states * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = _MidLayer(cfg)
        self.norm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool))
        # Not a submodule: the target owns it, and it must not be saved with the draft.
        self._embed: list[nn.Module] = [embed_tokens]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        embed: nn.Module = self._embed[0]
        return embed(ids)

    def fuse(self, hidden: torch.Tensor) -> torch.Tensor:
        """Apply ``fc`` only when the width differs from H, as SGLang's llama_eagle3 does."""
        if hidden.shape[-1] != self.config.hidden_size:
            return self.fc(hidden)
        return hidden

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocab ids to target ids: ``target = draft + d2t[draft]`` (SGLang ``hot_token_id``)."""
        return draft_ids + self.d2t[draft_ids]

    def _qkv(self, embeds: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layer = self.midlayer
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        attn = layer.self_attn
        hd = self.config.head_dim
        q = attn.q_proj(x).unflatten(-1, (-1, hd)).transpose(-3, -2)
        k = attn.k_proj(x).unflatten(-1, (-1, hd)).transpose(-3, -2)
        v = attn.v_proj(x).unflatten(-1, (-1, hd)).transpose(-3, -2)
        return q, k, v

    def _finish(self, attn_out: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        layer = self.midlayer
        h = layer.self_attn.o_proj(attn_out.transpose(-3, -2).flatten(-2)) + residual
        return layer.mlp(layer.post_attention_layernorm(h)) + h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft-vocab logits [.., Vd] from pre-norm outputs [.., H]."""
        return self.lm_head(self.norm(h))

    @torch.inference_mode()
    def extend(
        self, cache: DraftCache | None, token_ids: torch.Tensor, hidden: torch.Tensor, start_pos: int,
        window: int | None = None,
    ) -> tuple[DraftCache, torch.Tensor]:
        """Run the draft over ``n`` new positions of one sequence and append them to the cache.

        :param cache: the sequence's cache, or None for the first call.
        :param token_ids: [n] token ids (the token *after* each hidden state's position).
        :param hidden: [n, K*Ht] fused aux states from the target, or [n, H] the draft's own previous outputs.
        :param start_pos: rotary position of the first new entry.
        :param window: attend only to the most recent ``window`` keys, the query's own included (SGLang 0.5.23
            ``--speculative-draft-window-size`` for Llama EAGLE-3: a sliding window on the drafter's attention);
            None = full context.
        :returns: the cache and the pre-norm outputs h [n, H] (``logits(h)`` gives draft-vocab logits).
        """
        hidden = self.fuse(hidden)
        q, k, v = self._qkv(self.embed(token_ids), hidden)
        n = token_ids.shape[0]
        pos = torch.arange(start_pos, start_pos + n)
        cos, sin = rope_cos_sin(pos, self.config.head_dim, self.config.rope_theta)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is None:
            cache = DraftCache(k, v)
        else:
            cache.k = torch.cat([cache.k, k], dim=1)
            cache.v = torch.cat([cache.v, v], dim=1)
        past = cache.length - n
        # Causal over the new block, full view of the past (or the last `window` keys).
        mask = torch.ones(n, cache.length, dtype=torch.bool).tril(diagonal=past)
        if window is not None:
            mask &= torch.ones(n, cache.length, dtype=torch.bool).triu(diagonal=past - window + 1)
        reps = q.shape[0] // k.shape[0]
        kk = cache.k.repeat_interleave(reps, 0) if reps > 1 else cache.k
        vv = cache.v.repeat_interleave(reps, 0) if reps > 1 else cache.v
        out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
        return cache, self._finish(out, hidden)

    def forward_ttt(self, input_ids: torch.Tensor, aux: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time-test unroll over a batch (EAGLE-3 paper §3).

        Step 1 at index t sees (embed(x[t+1]), fc(aux[t])) at position t with causal attention; step k >= 2 sees
        (embed(x[t+k]), h_{k-1}[t]) at position t+k-1 and attends to step-1 keys at indices <= t plus its own
        index's keys from steps 2..k, exactly what cached step-by-step inference sees.

        :param input_ids: [B, T] tokens.
        :param aux: [B, T, K*Ht] concatenated target hidden states.
        :returns: ``steps`` tensors of draft logits [B, T, Vd]; step k's entry t predicts the target's greedy
            token at t+k (entries with t+k >= T are padding the caller masks out).
        """
        b, t_len = input_ids.shape
        hd = self.config.head_dim
        scale = 1.0 / math.sqrt(hd)
        pad = torch.zeros(b, steps, dtype=input_ids.dtype)
        ids = torch.cat([input_ids, pad], dim=1)
        hidden = self.fuse(aux)
        causal = torch.ones(t_len, t_len, dtype=torch.bool).tril()
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        outputs = []
        for k_step in range(1, steps + 1):
            tokens = ids[:, k_step : k_step + t_len]
            q, k, v = self._qkv(self.embed(tokens), hidden)
            pos = torch.arange(t_len) + (k_step - 1)
            cos, sin = rope_cos_sin(pos, hd, self.config.rope_theta)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            keys.append(k)
            values.append(v)
            scores = [torch.matmul(q, keys[0].transpose(-1, -2)).masked_fill(~causal, float("-inf"))]
            scores += [(q * kj).sum(-1, keepdim=True) for kj in keys[1:]]
            probs = torch.softmax(torch.cat(scores, dim=-1) * scale, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs[..., :t_len], values[0])
            for j, vj in enumerate(values[1:]):
                out = out + probs[..., t_len + j : t_len + j + 1] * vj
            hidden = self._finish(out, hidden)
            outputs.append(self.logits(hidden))
        return outputs
