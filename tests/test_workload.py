"""Tests of pytest_specdec.measure.workload: prompt files, their errors, and the request schedule."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.measure import workload as workload_mod
from pytest_specdec.measure.workload import Prompt, RequestSpec, build_requests, load_prompts, prompt_set_hash
from pytest_specdec.profiles.schema import RandomPrompts, Workload


def texts(*items: str) -> list[Prompt]:
    return [Prompt(text) for text in items]


JSONL_FIX = 'fix: write one JSON object per line, e.g. {"prompt": "Explain speculative decoding."}'


def test_jsonl_prompt_and_text_keys_blank_lines_skipped(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('{"prompt": "one"}\n\n{"text": "two", "id": 3}\n', encoding="utf-8")
    assert load_prompts("p.jsonl", tmp_path) == [Prompt("one"), Prompt("two")]


def test_sharegpt_first_human_turn(tmp_path: Path) -> None:
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "first q"},
                {"from": "gpt", "value": "x"},
                {"from": "human", "value": "second q"},
            ],
        },
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn: skipped"}]},
        {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "third"}]},
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data), encoding="utf-8")
    assert load_prompts(str(tmp_path / "sg.json"), "/elsewhere") == [Prompt("first q"), Prompt("third")]


def test_builtin_points_at_the_bundled_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert workload_mod.BUILTIN_PROMPTS.parts[-2:] == ("refserver", "prompts.jsonl")
    fake = tmp_path / "prompts.jsonl"
    fake.write_text('{"prompt": "builtin one"}\n', encoding="utf-8")
    monkeypatch.setattr(workload_mod, "BUILTIN_PROMPTS", fake)
    assert load_prompts("builtin", "/unused") == [Prompt("builtin one")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": "bad"\n', "p.jsonl:2: invalid JSON (Expecting ',' delimiter); " + JSONL_FIX),
        (
            '{"prompt": "ok"}\n\n{"question": "q", "id": 1}\n',
            'p.jsonl:3: no "prompt" or "text" key (keys: id, question); ' + JSONL_FIX,
        ),
        ('["a list"]\n', None),  # a JSON list -> read as ShareGPT, see below
        ('"just a string"\n', "p.jsonl:1: expected a JSON object, got str; " + JSONL_FIX),
        ('{"prompt": 42}\n', 'p.jsonl:1: "prompt" must be a non-empty string, got 42; ' + JSONL_FIX),
        ("\n\n", "p.jsonl: no prompts found; " + JSONL_FIX),
    ],
)
def test_bad_jsonl_names_file_line_and_fix(tmp_path: Path, content: str, message: str | None) -> None:
    (tmp_path / "p.jsonl").write_text(content, encoding="utf-8")
    with pytest.raises(ProfileError) as excinfo:
        load_prompts("p.jsonl", tmp_path)
    if message is not None:
        assert str(excinfo.value) == f"{tmp_path}/{message}"
    else:
        assert str(excinfo.value).startswith(f'{tmp_path}/p.jsonl: entry 0: no "conversations" list; fix: ')
    assert excinfo.value.path == tmp_path / "p.jsonl"


def test_bad_sharegpt_json_names_line(tmp_path: Path) -> None:
    (tmp_path / "sg.json").write_text('[\n  {"conversations": []},\n  {oops}\n]', encoding="utf-8")
    with pytest.raises(
        ProfileError,
        match=r"sg\.json:3: invalid JSON \(Expecting property name enclosed in "
        r"double quotes\); fix: give a JSON list of",
    ):
        load_prompts("sg.json", tmp_path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as excinfo:
        load_prompts("nope.jsonl", tmp_path)
    assert str(excinfo.value) == (
        f"workload.prompts: prompt file not found: {tmp_path}/nope.jsonl; fix: give 'builtin' or a path to a "
        f".jsonl/.json file (relative paths resolve against {tmp_path})"
    )


def test_build_requests_cycles_deterministically() -> None:
    wl = Workload(num_requests=5, warmup_requests=2, max_new_tokens=32, temperature=0.5, ignore_eos=False)
    warmup, measured = build_requests(wl, texts("a", "b", "c"))
    assert [r.prompt for r in warmup] == ["a", "b"]
    assert [r.prompt for r in measured] == ["a", "b", "c", "a", "b"]
    assert measured[0] == RequestSpec(prompt="a", max_new_tokens=32, temperature=0.5, ignore_eos=False)
    assert build_requests(wl, texts("a", "b", "c")) == (warmup, measured)
    assert build_requests(Workload(warmup_requests=0, num_requests=1), texts("x"))[0] == []
    with pytest.raises(ValueError, match=r"^build_requests: empty prompt list$"):
        build_requests(wl, [])


def test_prompt_set_hash_is_sha256_order_and_boundary_sensitive() -> None:
    h = prompt_set_hash(texts("ab", "c"))
    assert h == hashlib.sha256(b'["ab", "c"]').hexdigest()
    assert len(h) == 64
    assert h != prompt_set_hash(texts("a", "bc"))
    assert h != prompt_set_hash(texts("c", "ab"))


def test_categories_from_jsonl_reach_the_requests(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text(
        '{"prompt": "a", "category": "code"}\n{"prompt": "b"}\n{"text": "c", "category": " prose "}\n',
        encoding="utf-8",
    )
    prompts = load_prompts("p.jsonl", tmp_path)
    assert [p.text for p in prompts] == ["a", "b", "c"] and [p.category for p in prompts] == ["code", None, "prose"]
    assert prompt_set_hash(prompts) == prompt_set_hash(texts("a", "b", "c"))  # labels do not change the hash
    _, measured = build_requests(Workload(num_requests=4, warmup_requests=0), prompts)
    assert [(r.prompt, r.category) for r in measured] == [("a", "code"), ("b", None), ("c", "prose"), ("a", "code")]
    assert type(measured[0].prompt) is str


@pytest.mark.parametrize("bad", ['""', "3", '["code"]'])
def test_bad_category_names_file_line_and_fix(tmp_path: Path, bad: str) -> None:
    (tmp_path / "p.jsonl").write_text(f'{{"prompt": "a", "category": {bad}}}\n', encoding="utf-8")
    with pytest.raises(ProfileError) as excinfo:
        load_prompts("p.jsonl", tmp_path)
    assert str(excinfo.value) == (
        f'{tmp_path}/p.jsonl:1: "category" must be a non-empty string such as "code", got {json.loads(bad)!r}; '
        'fix: {"prompt": "...", "category": "code"}, or leave "category" out'
    )


def test_builtin_set_has_five_categories_and_keeps_its_first_prompts() -> None:
    prompts = load_prompts("builtin", "/unused")
    assert {p.category for p in prompts} == {"code", "prose", "math", "dialogue", "structured"}
    # The examples' thresholds were measured on the first 16 prompts: they stay first, in order.
    assert prompts[0].text.startswith("def _check_type(value, name):")
    assert prompts[15].text.startswith("class TestCase(")
    assert len(prompts) == 44


# -- prompts: random (SGLang bench_serving's random-ids dataset) ------------------------------------------------

DATA = Path(__file__).parent / "data" / "sglang" / "0.5.17"


def _as_bench_rows(prompts: list[workload_mod.Prompt]) -> list[dict[str, object]]:
    return [{"input_ids": list(p.input_ids or ()), "output_len": p.max_new_tokens} for p in prompts]


def test_random_prompts_are_the_ids_sglang_bench_serving_drew() -> None:
    """Recorded by SGLang 0.5.17's own sample_random_requests (benchmarks/gpu/record_random_ids.py, seeded as
    serving.py seeds): lengths drawn with range ratio 0.5, consecutive ids from a random offset, wrapped at 2048."""
    recorded = json.loads((DATA / "random-ids.small.json").read_text(encoding="utf-8"))
    a = recorded["args"]
    settings = RandomPrompts(input_len=a["input_len"], range_ratio=a["range_ratio"], seed=a["seed"])
    prompts = workload_mod.random_prompts(settings, a["num_prompts"], a["output_len"], 2048)
    assert _as_bench_rows(prompts) == recorded["prompts"]
    assert len({len(p.input_ids or ()) for p in prompts}) > 1  # the range ratio varied the lengths
    assert all(p.text == "" and p.category is None for p in prompts)


def test_random_prompts_match_bench_serving_at_the_gpu_comparison_sizes() -> None:
    for line in (DATA / "random-ids.digests.jsonl").read_text(encoding="utf-8").splitlines():
        recorded = json.loads(line)
        a = recorded["args"]
        settings = RandomPrompts(input_len=a["input_len"], range_ratio=a["range_ratio"], seed=a["seed"])
        rows = _as_bench_rows(workload_mod.random_prompts(settings, a["num_prompts"], a["output_len"], 2048))
        assert hashlib.sha256(json.dumps(rows).encode()).hexdigest() == recorded["sha256"], a


def test_random_prompts_equal_a_reimplementation_on_numpys_global_generator() -> None:
    """bench_serving's algorithm written out as it runs there: np.random.seed, then three np.random.randint calls."""
    import numpy as np

    saved = np.random.get_state()
    try:
        np.random.seed(7)
        in_lens = np.random.randint(max(int(40 * 0.25), 1), 40 + 1, size=9).tolist()
        out_lens = np.random.randint(max(int(30 * 0.25), 1), 30 + 1, size=9).tolist()
        offsets = np.random.randint(0, 500, size=9)
        want = [
            {"input_ids": [int((offsets[i] + i + j) % 500) for j in range(in_lens[i])], "output_len": out_lens[i]}
            for i in range(9)
        ]
    finally:
        np.random.set_state(saved)
    got = workload_mod.random_prompts(RandomPrompts(input_len=40, range_ratio=0.25, seed=7), 9, 30, 500)
    assert _as_bench_rows(got) == want
    assert max(max(r["input_ids"]) for r in want) < 500  # type: ignore[type-var]


def test_random_workload_sends_input_ids_with_each_prompts_output_length() -> None:
    wl = Workload(
        prompts="random", max_new_tokens=20, num_requests=6, warmup_requests=7,
        random=RandomPrompts(input_len=12, range_ratio=0.5, seed=42, vocab_size=2048),
    )  # fmt: skip
    prompts = workload_mod.workload_prompts(wl, "/unused", None)
    warmup, measured = build_requests(wl, prompts)
    recorded = json.loads((DATA / "random-ids.small.json").read_text(encoding="utf-8"))["prompts"]
    assert [(list(r.input_ids or ()), r.max_new_tokens) for r in measured] == [
        (p["input_ids"], p["output_len"]) for p in recorded
    ]
    assert warmup[6] == measured[0] and measured[0].prompt == ""
    # The ids are what the run's fingerprint hashes: another seed is another prompt set, text prompts hash as before.
    other = workload_mod.workload_prompts(wl.model_copy(update={"random": RandomPrompts(seed=1, vocab_size=2048)}),
                                          "/unused", None)  # fmt: skip
    assert prompt_set_hash(prompts) != prompt_set_hash(other)
    assert prompt_set_hash(texts("a")) == hashlib.sha256(b'["a"]').hexdigest()


@pytest.mark.slow
def test_random_vocab_size_comes_from_the_tokenizer_at_model_path() -> None:
    pytest.importorskip("transformers")
    from pytest_specdec.engines.rules import BUNDLED_TARGET

    assert workload_mod.tokenizer_vocab_size(str(BUNDLED_TARGET)) == 2048
    wl = Workload(prompts="random", num_requests=2, random=RandomPrompts(input_len=4, range_ratio=1))
    assert [len(p.input_ids or ()) for p in workload_mod.workload_prompts(wl, "/x", str(BUNDLED_TARGET))] == [4, 4]
    with pytest.raises(ProfileError, match="no model_path to read the tokenizer's vocab_size from; fix: set workload"):
        workload_mod.workload_prompts(wl, "/x", None)
    with pytest.raises(ProfileError, match=r"cannot load the tokenizer of /nonexistent/model: .*fix: set workload"):
        workload_mod.tokenizer_vocab_size("/nonexistent/model")


def test_random_workload_validation() -> None:
    assert Workload(prompts="random").random == RandomPrompts(input_len=1024, range_ratio=0.0, seed=42)
    with pytest.raises(ValueError, match="random: is set but prompts is 'builtin'; fix: prompts: random"):
        Workload(random=RandomPrompts())
    with pytest.raises(ValueError, match="which api: chat cannot carry; fix: api: generate, or a prompt file"):
        Workload(prompts="random", api="chat")


# -- open loop: arrival times ---------------------------------------------------------------------------------------


def _bench_serving_arrivals(
    num: int, rate: float, seed: int, before: Callable[[], object] | None = None
) -> list[float]:
    """The arrival times SGLang 0.5.17 / 0.5.23 ``bench_serving`` sends at, computed the way it computes them:
    ``python/sglang/benchmark/serving.py::run_benchmark`` seeds numpy's global generator
    (``np.random.seed(args.seed)``),
    the dataset is sampled (``before``: what it draws from that generator), then ``get_request`` yields request i
    (sent now) and draws ``np.random.exponential(1.0 / request_rate)`` to sleep before the next one."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        if before is not None:
            before()
        at, out = 0.0, []
        for _ in range(num):
            out.append(at)  # yield request
            at += np.random.exponential(1.0 / rate)  # interval = np.random.exponential(1.0 / request_rate)
        return out
    finally:
        np.random.set_state(state)


def test_arrival_times_of_1000_requests_equal_bench_servings_for_the_same_seed() -> None:
    wl = Workload(request_rate=4, num_requests=1000, arrival_seed=7)
    got = workload_mod.workload_arrivals(wl)
    assert got == _bench_serving_arrivals(1000, 4.0, 7)  # exact: the same draws from the same generator state
    assert got[:3] == pytest.approx([0.0, 0.01984, 0.39828], abs=1e-5)
    assert 200 < got[-1] < 300  # 999 intervals of mean 0.25 s


def test_random_prompt_arrivals_continue_the_generator_after_the_prompts_as_bench_serving_does() -> None:
    """``--dataset-name random-ids``: ``sample_random_requests`` (``benchmark/datasets/random.py``, the same in
    0.5.17 and 0.5.23) draws input lengths, output lengths (``common.py::compute_random_lens``) and id offsets from
    the global generator before ``get_request`` draws the intervals."""
    settings = RandomPrompts(input_len=64, range_ratio=0.5, seed=3, vocab_size=1000)
    wl = Workload(prompts="random", random=settings, max_new_tokens=32, num_requests=1000, request_rate=2.5)

    def sample_random_requests() -> None:
        np.random.randint(max(int(64 * 0.5), 1), 64 + 1, size=1000)  # input_lens
        np.random.randint(max(int(32 * 0.5), 1), 32 + 1, size=1000)  # output_lens
        np.random.randint(0, 1000, size=1000)  # offsets

    assert workload_mod.workload_arrivals(wl) == _bench_serving_arrivals(1000, 2.5, 3, sample_random_requests)


def test_arrival_times_closed_loop_inf_rate_and_burstiness() -> None:
    assert workload_mod.workload_arrivals(Workload()) is None  # closed loop
    assert workload_mod.workload_arrivals(Workload(request_rate="inf", num_requests=3)) == [0.0, 0.0, 0.0]
    even = workload_mod.workload_arrivals(Workload(request_rate=4, burstiness="inf", num_requests=3))
    assert even == [0.0, 0.25, 0.5]
    # vLLM's gamma: shape 0.5, scale 1 / (rate * shape); mean interval stays 1 / rate.
    rs = np.random.RandomState(42)
    draws = [rs.gamma(0.5, 1 / (4 * 0.5)) for _ in range(2)]
    bursty = workload_mod.workload_arrivals(Workload(request_rate=4, burstiness=0.5, num_requests=3))
    assert bursty == [0.0, draws[0], draws[0] + draws[1]]


def test_measured_requests_carry_their_arrival_warmup_does_not() -> None:
    wl = Workload(num_requests=3, warmup_requests=1, request_rate=4)
    warmup, measured = build_requests(wl, texts("a", "b"), [0.0, 0.1, 0.3])
    assert [r.arrival_s for r in measured] == [0.0, 0.1, 0.3]
    assert warmup[0].arrival_s is None
    with pytest.raises(ValueError, match="2 arrival times for 3 requests"):
        build_requests(wl, texts("a"), [0.0, 0.1])
