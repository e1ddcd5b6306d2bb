"""Decode math of the reference server that needs no model: speculative sampling keeps the target distribution."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch", reason="the reference server needs the reference extra (torch)")
import torch

from pytest_specdec.refserver.decoding import speculative_accept


def _emitted_distribution(p_all: torch.Tensor, qs: list[torch.Tensor], trials: int) -> tuple[torch.Tensor, float]:
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(p_all.shape[-1])
    accepted = 0
    for _ in range(trials):
        drafts = [int(torch.multinomial(q, 1, generator=gen)) for q in qs]
        a, bonus = speculative_accept(p_all, qs, drafts, gen)
        first = drafts[0] if a >= 1 else bonus
        counts[first] += 1
        accepted += a >= 1
    return counts / trials, accepted / trials


@pytest.mark.slow
def test_first_token_follows_target_not_draft() -> None:
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([0.4, 0.3, 0.2, 0.1])
    dist, accept = _emitted_distribution(p, [q], 20000)
    assert torch.allclose(dist, p[0], atol=0.015), dist
    # acceptance probability = sum(min(p, q)) = 0.1 + 0.2 + 0.2 + 0.1
    assert abs(accept - 0.6) < 0.015


def test_identical_draft_is_always_accepted_and_bonus_from_last_position() -> None:
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    gen = torch.Generator().manual_seed(1)
    assert speculative_accept(p, [p[0], p[1]], [1, 2], gen) == (2, 0)


def test_rejected_draft_resamples_from_residual() -> None:
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([0.0, 0.0, 1.0])  # the draft proposes a token the target never emits
    gen = torch.Generator().manual_seed(2)
    results = {speculative_accept(p, [q], [2], gen) for _ in range(50)}
    assert results == {(0, 0), (0, 1)}


def test_draft_window_limits_attention_to_the_last_keys() -> None:
    from pytest_specdec.refserver.model import Eagle3Draft, Eagle3DraftConfig

    torch.manual_seed(0)
    cfg = Eagle3DraftConfig(hidden_size=8, target_hidden_size=8, intermediate_size=16, num_attention_heads=2,
                            num_key_value_heads=2, vocab_size=11, draft_vocab_size=11, num_aux_hidden_states=3)
    draft = Eagle3Draft(cfg, torch.nn.Embedding(11, 8))
    ids, aux = torch.tensor([1, 2, 3, 4, 5]), torch.randn(5, 24)
    _, full = draft.extend(None, ids, aux, 0)
    _, wide = draft.extend(None, ids, aux, 0, window=5)
    _, one = draft.extend(None, ids, aux, 0, window=1)
    alone = torch.stack([draft.extend(None, ids[i:i + 1], aux[i:i + 1], i)[1][0] for i in range(5)])
    assert torch.allclose(full, wide)  # a window covering every key is full attention
    assert torch.allclose(one, alone, atol=1e-6)  # window 1: each position attends to itself only
    assert torch.allclose(one[0], full[0]) and not torch.allclose(one[4], full[4])


def test_a_request_in_prefill_counts_as_busy() -> None:
    """Issue 16.4: a request popped from the waiting queue is busy during its prefill (SGLang's /flush_cache refuses
    while any request is waiting or running); the engine's model math is replaced by events, so the window is held
    open deterministically."""
    import threading
    import types

    from pytest_specdec.refserver.decoding import SamplingParams, Sequence, SpecEngine

    args = types.SimpleNamespace(
        speculative_num_steps=None, speculative_num_draft_tokens=None, max_running_requests=None, random_seed=0,
        decode_log_interval=1000, ref_fault_stall_after_tokens=None, speculative_draft_window_size=None,
        ref_fault_verify_delay_ms=None, ref_embedding_capture="stock",
    )  # fmt: skip
    engine = SpecEngine(types.SimpleNamespace(draft=None), args)  # type: ignore[arg-type]
    in_prefill, release = threading.Event(), threading.Event()

    def prefill(seq: Sequence) -> None:
        in_prefill.set()
        assert release.wait(30)

    engine._prefill = prefill  # type: ignore[method-assign]
    engine._decode = lambda seq: setattr(seq, "finished", True)  # type: ignore[method-assign]
    engine.start()
    assert not engine.busy()
    engine.submit(Sequence(rid="r", prompt_ids=[1, 2, 3], params=SamplingParams(), emit=lambda out: None))
    assert in_prefill.wait(30)
    assert engine.busy()  # popped from the waiting queue, not yet running
    release.set()
    deadline = time.monotonic() + 30
    while engine.busy() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not engine.busy()


@pytest.mark.parametrize(("delay_ms", "slowdown"), [("15", None), (None, "2")])
def test_forward_slowdown_keeps_its_size_when_contention_stretches_the_compute(
    monkeypatch: pytest.MonkeyPatch, delay_ms: str | None, slowdown: str | None
) -> None:
    """Issue 45: a fixed sleep a forward (SPECDEC_REF_FORWARD_DELAY_MS) shrinks against a forward a busy CPU
    stretches, so a bisect's probe measured at another load than BAD drifted to the midpoint and stayed undecided.
    SPECDEC_REF_FORWARD_SLOWDOWN sleeps in proportion to the forward's own time. The forward's 10 ms quiet and 30 ms
    loaded are a fake clock's, and the sleeps are recorded, not slept."""
    import types

    from pytest_specdec.refserver import decoding

    for name, value in (("SPECDEC_REF_FORWARD_DELAY_MS", delay_ms), ("SPECDEC_REF_FORWARD_SLOWDOWN", slowdown)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    now, slept, compute_s = [100.0], [], [0.0]

    def forward(**kwargs: object) -> types.SimpleNamespace:
        now[0] += compute_s[0]
        return types.SimpleNamespace(logits=torch.zeros(1, 1, 4))

    monkeypatch.setattr(decoding.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(decoding.time, "sleep", slept.append)
    args = types.SimpleNamespace(speculative_num_steps=None, speculative_num_draft_tokens=None,
                                 speculative_draft_window_size=None, ref_fault_verify_delay_ms=None,
                                 max_running_requests=None, random_seed=0)  # fmt: skip
    engine = decoding.SpecEngine(types.SimpleNamespace(target=forward), args)  # type: ignore[arg-type]
    ratios = []
    for seconds in (0.010, 0.030):  # quiet, then a CPU 3x contended
        compute_s[0], slept[:] = seconds, []
        engine._target(torch.tensor([1]), None, False)
        ratios.append(round(seconds / (seconds + sum(slept)), 3))  # tok/s of the faulty server / a sound one's
    # The fixed 15 ms: x0.4 quiet, x0.667 loaded (a midpoint between x0.4 and 1 is x0.632); the factor: x0.5 both.
    assert ratios == ([0.4, 0.667] if delay_ms else [0.5, 0.5])


@pytest.mark.parametrize(("value", "factor"), [(None, 1.0), ("", 1.0), ("1", 1.0), ("2.5", 2.5)])
def test_forward_slowdown_reads_its_factor(value: str | None, factor: float) -> None:
    from pytest_specdec.refserver.decoding import forward_slowdown

    assert forward_slowdown(value) == factor


@pytest.mark.parametrize("value", ["abc", "0.5", "nan", "inf", "-2"])
def test_forward_slowdown_refuses_what_is_no_factor(value: str) -> None:
    from pytest_specdec.refserver.decoding import forward_slowdown

    with pytest.raises(ValueError) as info:
        forward_slowdown(value)
    assert str(info.value) == (
        f"SPECDEC_REF_FORWARD_SLOWDOWN={value!r}: expected a finite factor >= 1 (2 makes every target forward take "
        'twice its compute time); set it in the profile\'s env: as a string, e.g. "2", or unset it'
    )
