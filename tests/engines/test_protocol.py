"""engines/base.py::Engine is complete: every engine implements every member, with the protocol's signature.

mypy checks the same structurally (``engines.get_engine`` returns each class as an ``Engine``); this test catches a
member added to one engine and forgotten in the protocol's users, and a protocol member an engine lacks at runtime.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import get_args

import pytest

import pytest_specdec
from pytest_specdec.engines import get_engine
from pytest_specdec.engines.base import AuxIdConvention, Engine, PairingMode
from pytest_specdec.engines.reference import ReferenceEngine
from pytest_specdec.engines.sglang import SglangEngine
from pytest_specdec.engines.vllm import VllmEngine
from pytest_specdec.profiles.schema import Profile

ENGINES = [SglangEngine, ReferenceEngine, VllmEngine]
ATTRIBUTES = set(Engine.__annotations__)
METHODS = {name for name, value in vars(Engine).items() if not name.startswith("_") and callable(value)}


def test_protocol_lists_what_callers_use() -> None:
    assert ATTRIBUTES == {
        "name", "native_accept_length", "aux_id_convention", "default_pairing", "crashes_on_embedding_capture",
    }  # fmt: skip
    assert {"python", "env", "prepare", "launch_spec", "flag_issues", "speculative_issues", "max_tokens_per_step",
            "speculative_at", "expected_config", "log_warnings", "probe_ready", "effective_config", "counters",
            "reset_prefix_cache", "scheduler_accept_length", "start_trace", "stop_trace"} == METHODS  # fmt: skip


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_engine_has_every_member_with_the_protocol_signature(engine_cls: type) -> None:
    engine = engine_cls()
    for name in ATTRIBUTES:
        assert hasattr(engine, name), f"{engine_cls.__name__} lacks {name}"
    assert engine.aux_id_convention in get_args(AuxIdConvention)
    assert engine.default_pairing in get_args(PairingMode)
    assert isinstance(engine.crashes_on_embedding_capture, bool)
    for name in METHODS:
        want = inspect.signature(getattr(Engine, name))
        got = inspect.signature(getattr(engine_cls, name))
        assert list(got.parameters) == list(want.parameters), f"{engine_cls.__name__}.{name}{got} vs {want}"
        kinds = [p.kind for p in got.parameters.values()]
        assert kinds == [p.kind for p in want.parameters.values()], f"{engine_cls.__name__}.{name}"


@pytest.mark.parametrize(("server", "name", "pairing"), [
    ("sglang", "sglang", "bracketed"), ("reference", "reference", "interleaved"), ("vllm", "vllm", "bracketed"),
])  # fmt: skip
def test_get_engine_name_and_default_pairing(server: str, name: str, pairing: str) -> None:
    engine = get_engine(Profile(name="p", server=server, model_path="/m"))  # type: ignore[arg-type]
    assert (engine.name, engine.default_pairing) == (name, pairing)


def test_no_caller_reaches_past_the_protocol() -> None:
    """No ``getattr`` on an engine and no ``profile.server ==`` outside the dispatch (``engines/__init__.py``) and
    the profile schema (``profiles/schema.py``)."""
    root = Path(pytest_specdec.__file__).parent
    allowed = {root / "engines" / "__init__.py", root / "profiles" / "schema.py"}
    offenders = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for lineno, line in enumerate(text.splitlines(), 1):
            if re.search(r"getattr\([^,]*engine\b", line) or (
                path not in allowed and re.search(r"\bserver\s*[!=]=\s*[\"']", line)
            ):
                offenders.append(f"{path.relative_to(root)}:{lineno}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("engine_cls", [SglangEngine, ReferenceEngine], ids=lambda c: c.__name__)
def test_prepare_is_a_no_op_for_sglang_and_reference(engine_cls: type, tmp_path: Path) -> None:
    profile = Profile(name="p", server="sglang", model_path="/m")
    assert engine_cls().prepare(profile, work_dir=tmp_path / "w", draft_path=None) is None
    assert engine_cls().prepare(profile, work_dir=tmp_path / "w", draft_path=tmp_path) == tmp_path
    assert not (tmp_path / "w").exists()


def test_start_server_prepares_under_its_log_dir_before_building_argv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``startup.start_server`` calls ``Engine.prepare`` with ``<log_dir>/drafts`` and passes its draft to
    ``launch_spec``."""
    from pytest_specdec.serve import startup

    calls: list[tuple[str, object]] = []

    class Stop(Exception):
        pass

    class Recorder(SglangEngine):
        def prepare(self, profile: Profile, *, work_dir: Path, draft_path: Path | None) -> Path | None:
            calls.append(("prepare", work_dir))
            return work_dir / "copy"

        def launch_spec(self, profile: Profile, *, port: int, draft_path: Path | None) -> object:  # type: ignore[override]
            calls.append(("launch_spec", draft_path))
            raise Stop

    monkeypatch.setattr(startup, "get_engine", lambda profile: Recorder())
    with pytest.raises(Stop):
        startup.start_server(Profile(name="p", server="sglang", model_path="/m"), log_dir=tmp_path / "logs")
    assert calls == [("prepare", tmp_path / "logs" / "drafts"), ("launch_spec", tmp_path / "logs" / "drafts" / "copy")]


def test_sweep_points_are_resolved_by_the_profiles_engine() -> None:
    """Issue 17: the topk-1 coupling of a sweep point (draft tokens = steps + 1) is the engine's, named after it."""
    from pytest_specdec.profiles.schema import SpeculativeConfig

    spec = SpeculativeConfig(algorithm="EAGLE3", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    sglang = Profile(name="e", server="sglang", model_path="/m", speculative=spec)
    got = SglangEngine().speculative_at(sglang, {"num_steps": 2}, label="num_steps=2")
    assert (got.num_steps, got.eagle_topk, got.num_draft_tokens) == (2, 1, 3)
    vllm = Profile(name="v", server="vllm", model_path="/m", speculative=SpeculativeConfig(algorithm="EAGLE3"))
    with pytest.raises(ValueError) as info:
        VllmEngine().speculative_at(vllm, {"eagle_topk": 1}, label="eagle_topk=1")
    assert str(info.value) == (
        "point eagle_topk=1 of profile 'v': the profile leaves num_steps/num_draft_tokens to vLLM; set all three of "
        "num_steps, eagle_topk, num_draft_tokens in its speculative: block to sweep one of them"
    )
