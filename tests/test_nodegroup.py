"""Multi-node servers (``nodes:``): launcher templates, SGLang's multi-node flags, group readiness and teardown.

The end-to-end tests run the reference server's stand-in node mode: three processes on 127.0.0.1-3 (Linux routes
all of 127/8 to loopback), rank 0 the leader, launched with ``launcher: "{cmd}"``.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import psutil
import pytest

from pytest_specdec.core.errors import ProfileError, ServerError, ServerStartError
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.engines.reference import ReferenceEngine
from pytest_specdec.engines.rules import load_profiles, resolve_paths
from pytest_specdec.engines.sglang import SglangEngine
from pytest_specdec.measure import runner
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.refserver.args import ArgsError, parse_args, resolve_args
from pytest_specdec.serve.nodegroup import (
    FOLLOWER_WINDOW_S,
    NodeGroup,
    Rank,
    blame_order,
    death_times,
    render_launcher,
)
from pytest_specdec.serve.ports import find_free_port
from tests.helpers import IN_PROCESS_INI, run_in_process

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
SGLANG_DATA = Path(__file__).parent / "data" / "sglang" / "0.5.17"


def test_render_launcher_local_srun_and_ssh() -> None:
    spec = LaunchSpec(argv=("sglang", "serve", "--model-path", "my model"), env={"PATH": "/bin", "NCCL_PROTO": "LL"},
                      host="h", port=1)  # fmt: skip
    assert render_launcher("{cmd}", spec, host="h", rank=0, nnodes=2) == (
        "env", "NCCL_PROTO=LL", "sglang", "serve", "--model-path", "my model",
    )  # fmt: skip
    assert render_launcher("srun -N1 -n1 -w {host} {cmd}", spec, host="gpu-b", rank=1, nnodes=2)[:5] == (
        "srun", "-N1", "-n1", "-w", "gpu-b",
    )  # fmt: skip
    assert render_launcher("ssh -tt {host} {shell_cmd}", spec, host="gpu-b", rank=1, nnodes=2) == (
        "ssh", "-tt", "gpu-b", "env NCCL_PROTO=LL sglang serve --model-path 'my model'",
    )  # fmt: skip


def test_nodes_profile_errors_name_file_key_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "specdec.yaml"
    path.write_text(
        textwrap.dedent(
            """
            profiles:
              a: {tp_size: 2, nodes: {hosts: [x, y], launcher: "ssh {host} 'run {cmd}'"}}
              b: {tp_size: 3, nodes: {hosts: [x, y]}}
              c: {nodes: {hosts: [x]}}
              d: {tp_size: 2, nodes: {hosts: [x, y], launcher: "srun -w {hst} {cmd}"}}
            """
        )
    )
    with pytest.raises(ProfileError) as info:
        load_profiles(path)
    lines = str(info.value).splitlines()
    assert any("profiles.a.nodes.launcher" in line and "{cmd} must be a word of its own" in line and "{shell_cmd}"
               in line for line in lines)  # fmt: skip
    assert any("profiles.b" in line and "tp_size 3 is not a multiple of the 2 nodes.hosts" in line for line in lines)
    assert any("profiles.c.nodes.hosts" in line for line in lines)
    assert any("profiles.d.nodes.launcher" in line and "unknown placeholder {hst}" in line for line in lines)


def test_rank_command_has_sglang_multinode_flags_before_extra_args() -> None:
    profile = resolve_paths(Profile(name="p", tp_size=3, extra_args=["--log-level", "debug"], nodes={"hosts": HOSTS}))
    spec = ReferenceEngine().node_launch_spec(
        profile, rank=2, host="127.0.0.3", port=30000, dist_init_addr="127.0.0.1:5000", draft_path=None
    )
    argv = list(spec.argv)
    assert argv[argv.index("--host") + 1] == "127.0.0.3"
    assert argv[-8:] == ["--nnodes", "3", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:5000",
                         "--log-level", "debug"]  # fmt: skip


def test_sglang_joined_lines() -> None:
    engine = SglangEngine()
    # SGLang utils/common.py::launch_dummy_health_check_server, both branches.
    assert engine.node_joined("[2026-12-01 02:00:00] Starting dummy health check server at 0.0.0.0:30000")
    assert engine.node_joined("[...] Dummy health check server scheduled on existing loop at 10.0.0.2:30000")
    assert not engine.node_joined("[2026-12-01 02:00:00 TP8] Init torch distributed begin.")
    assert engine.node_at_rendezvous("[2026-12-01 02:00:00 TP8] Init torch distributed begin.")


def test_multinode_flags_in_extra_args_are_a_preflight_error() -> None:
    profile = Profile(name="p", tp_size=2, extra_args=["--nnodes", "2"], nodes={"hosts": HOSTS[:2]})
    issues = ReferenceEngine().flag_issues(profile)
    assert [(i.severity, i.value, i.fix) for i in issues if i.key == "extra_args"][0] == (
        "error", "--nnodes", "remove --nnodes from extra_args",
    )  # fmt: skip


def test_refserver_node_flags_are_checked() -> None:
    with pytest.raises(ArgsError, match=r"--dist-init-addr None: --nnodes 2 needs HOST:PORT of rank 0"):
        resolve_args(parse_args(["--model-path", "m", "--nnodes", "2", "--node-rank", "1", "--tp-size", "2"]))
    with pytest.raises(ArgsError, match=r"--node-rank 2: expected 0 <= rank < --nnodes \(2\)"):
        resolve_args(parse_args(["--model-path", "m", "--nnodes", "2", "--node-rank", "2",
                                 "--dist-init-addr", "127.0.0.1:1"]))  # fmt: skip


class _ReplayEngine:
    """Rank 0 idles; rank 1 prints a recorded SGLang log, then dies the way that SGLang did (SIGKILL to itself)."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def node_launch_spec(
        self, profile: Profile, *, rank: int, host: str, port: int, dist_init_addr: str, draft_path: Path | None
    ) -> LaunchSpec:
        script = (
            "import time; time.sleep(120)" if rank == 0 else
            "import os, signal, sys; sys.stdout.write(open(sys.argv[1]).read()); sys.stdout.flush(); "
            "os.kill(os.getpid(), signal.SIGKILL)"
        )  # fmt: skip
        argv = (sys.executable, "-c", script, str(self.log), "--api-key", "sk-node-secret")
        return LaunchSpec(argv=argv, env={"PATH": os.environ["PATH"]}, host=host, port=port)

    def node_joined(self, log_text: str) -> bool:
        return False

    def node_at_rendezvous(self, log_text: str) -> bool:
        return False


def test_rank_that_dies_of_a_scheduler_exception_names_the_exception_and_where(tmp_path: Path) -> None:
    """A rank whose output is SGLang 0.5.17's aux-id -1 crash: the exception and its file:line, as for one server."""
    log = tmp_path / "sglang.log"
    log.write_text((SGLANG_DATA / "eagle3-aux-minus1.log").read_text() + "server_args api_key='sk-node-secret'\n")
    profile = Profile(name="p", tp_size=2, nodes={"hosts": HOSTS[:2]})
    logs = tmp_path / "logs"
    engine = _ReplayEngine(log)
    group = NodeGroup.start(profile, engine, port=find_free_port("127.0.0.1"), log_dir=logs, draft_path=None)
    with pytest.raises(ServerStartError) as info:
        group.wait_ready(lambda: False, engine=engine, timeout_s=60)
    first = str(info.value).splitlines()[0]
    assert first == (
        "server 'p': node rank 1 on 127.0.0.2 was killed by signal 9 (SIGKILL) before the group was ready (cause: "
        "scheduler exception): TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType' at "
        "sglang/srt/models/llama.py:437; the server then stopped its own process tree (signal 9); "
        f"log: {(logs / 'p.rank1.log').resolve()}"
    )
    assert info.value.cause == "scheduler exception"
    assert info.value.log_tail.splitlines()[-1].startswith("server_args api_key=")
    assert "sk-node-secret" not in str(info.value) + info.value.log_tail
    assert not group.alive()


# -- end to end on the reference server's node mode ---------------------------------------------------------------


def _profile(tmp_path: Path, *extra: str, timeout_s: int = 240) -> Profile:
    tag = str(tmp_path)
    path = tmp_path / "specdec.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            profiles:
              tp3:
                server: reference
                tp_size: 3
                env: {{SPECDEC_TEST_TAG: "{tag}"}}
                startup_timeout_s: {timeout_s}
                extra_args: {list(extra)!r}
                nodes: {{hosts: {HOSTS!r}, launcher: "{{cmd}}"}}
                workload: {{max_new_tokens: 8, num_requests: 2, warmup_requests: 0, repeats: 1}}
            """
        )
    )
    return load_profiles(path).get("tp3")


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SPECDEC_TEST_TAG") == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.slow
def test_rank_that_never_joins_names_rank_host_and_log(tmp_path: Path) -> None:
    # 8 s: rank 1 registers about 1 s after launch on a quiet runner (before any torch import), so it is seen
    # waiting at the rendezvous with room for a slow one; the fault (rank 2 never joins) shows at any budget.
    profile = _profile(tmp_path, "--ref-fault-node-never-join", "2", timeout_s=8)
    logs = tmp_path / "logs"
    with pytest.raises(ServerStartError) as info:
        runner.start_server(profile, log_dir=logs)
    first = str(info.value).splitlines()[0]
    assert first == (
        "server 'tp3': after 8 s (startup_timeout_s) not every node rank joined: node rank 2 on 127.0.0.3 never "
        "reached the rendezvous (no 'Init torch distributed begin' in its log; log: "
        f"{(logs / 'tp3.rank2.log').resolve()}); node rank 1 on 127.0.0.2 waits at the rendezvous (log: "
        f"{(logs / 'tp3.rank1.log').resolve()}); a rank that never "
        "reaches it holds up all the others: check its host, launcher and environment"
    )
    assert info.value.cause == "timeout"
    assert "ref fault: --ref-fault-node-never-join 2" in info.value.log_tail
    assert "node rank 1 joined from 127.0.0.1 (1/2)" in (logs / "tp3.log").read_text()
    assert not _tagged(str(tmp_path))


@pytest.mark.slow
def test_blame_goes_to_the_rank_whose_peers_failed_their_collective_even_when_reaped_later() -> None:
    # Seen under load: rank 0 (its log: "lost node rank 1", an NCCL error) reaped 0.05 s before rank 1, which died
    # first. Within the window the cause decides; beyond it, the time; unknown times last, non-leaders first.
    ranks = [cast(Rank, SimpleNamespace(rank=i)) for i in range(4)]
    causes = {0: "CUDA/NCCL error", 1: "unknown", 2: "CUDA/NCCL error", 3: "unknown"}
    times: dict[int, float | None] = {0: 10.00, 1: 10.05, 2: 10.01, 3: None}
    assert [r.rank for r in blame_order(ranks, times, causes)] == [1, 0, 2, 3]
    # A failed collective long before the others is itself the first failure.
    times = {0: 10.0 + FOLLOWER_WINDOW_S + 1, 1: 10.0 + FOLLOWER_WINDOW_S + 2, 2: 10.0, 3: None}
    assert [r.rank for r in blame_order(ranks, times, causes)] == [2, 0, 1, 3]
    # Every rank failed its collective (an NCCL misconfiguration): time order alone.
    same = dict.fromkeys(range(4), "CUDA/NCCL error")
    assert [r.rank for r in blame_order(ranks, {0: 1.2, 1: 1.1, 2: 1.3, 3: 1.0}, same)] == [3, 1, 0, 2]


def test_a_rank_whose_supervisor_never_said_when_it_died_is_timed_when_it_was_seen_dead() -> None:
    # A flake hunt at load 4.6: rank 1 (the fault) exited first, but its supervisor, starved, had not reported the
    # reap when the group stopped; with no time it sorted last and rank 2 ("lost node rank 1") took the blame.
    def rank(i: int, exited_at: float | None) -> Rank:
        return cast(Rank, SimpleNamespace(rank=i, process=SimpleNamespace(exited_at=lambda: exited_at)))

    dead = [rank(1, None), rank(2, 10.3)]
    times = death_times(dead, seen_at=10.4)
    assert times == {1: 10.4, 2: 10.3}
    causes = {1: "reference server fault", 2: "CUDA/NCCL error"}
    assert [r.rank for r in blame_order(dead, times, causes)] == [1, 2]


def test_rank_that_dies_before_ready_names_rank_host_and_log(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "--ref-fault-node-exit", "1:0")
    logs = tmp_path / "logs"
    with pytest.raises(ServerStartError) as info:
        runner.start_server(profile, log_dir=logs)
    first = str(info.value).splitlines()[0]
    assert first.startswith(
        f"server 'tp3': node rank 1 on 127.0.0.2 exited with code 1 before the group was ready (cause: reference "
        "server fault): ref fault: --ref-fault-node-exit 1:0: node rank 1 exits with status 1; "
        f"log: {(logs / 'tp3.rank1.log').resolve()}"
    )
    assert "ref fault: --ref-fault-node-exit 1:0: node rank 1 exits with status 1" in info.value.log_tail
    assert not _tagged(str(tmp_path))


@pytest.mark.slow
def test_group_serves_then_a_dead_rank_is_named_and_every_rank_stopped(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    logs = tmp_path / "logs"
    server = runner.start_server(profile, log_dir=logs)
    try:
        group = server.process
        assert isinstance(group, NodeGroup)
        assert server.base_url.startswith("http://127.0.0.1:")
        for rank in (1, 2):
            text = (logs / f"tp3.rank{rank}.log").read_text()
            assert f"Starting dummy health check server at 127.0.0.{rank + 1}:" in text
        measurement = runner.measure(server)
        assert measurement.metrics.num_ok == 2
        victim = group.ranks[2].process
        os.kill(victim.pid, signal.SIGKILL)
        # Rank 0 exits on the lost peer and rank 1 on the broken collective: wait for the followers too, so the
        # blame must come from the order of death, not from which ranks happen to be dead when we look.
        deadline = time.monotonic() + 10
        while any(r.process.alive() for r in group.ranks) and time.monotonic() < deadline:
            time.sleep(0.05)
        followers = [r.rank for r in group.ranks if not r.process.alive() and r.rank != 2]
        with pytest.raises(ServerError) as info:
            group.check_alive()
        first = str(info.value).splitlines()[0]
        for rank in followers:
            assert f"node rank {rank} on 127.0.0.{rank + 1} exited with code" in first.split("as followers")[1]
        assert re.match(
            r"server 'tp3': node rank 2 on 127\.0\.0\.3 was killed by signal 9 \(SIGKILL\) while running \(no cause "
            r'found in its log; its last [1-3] lines?: "[^"]+"(, "[^"]+")*\): something outside killed it \(the kernel '
            r"OOM killer would say so in dmesg, which could not be read or had no line for this server\); log: "
            + re.escape(str((logs / "tp3.rank2.log").resolve())),
            first,
        ), first
    finally:
        server.stop()
    assert not _tagged(str(tmp_path))


@pytest.mark.slow
def test_plugin_runs_a_multinode_profile(pytester: pytest.Pytester) -> None:
    profile = _profile(pytester.path)
    assert profile.source
    pytester.makepyfile(
        test_mn="""
        def test_tp3(specdec_run):
            assert specdec_run.metrics.num_ok == 2
        """
    )
    # In process (no second interpreter and plugin import); the plugin, an entry point, was imported before the run
    # could rewrite it: not this test's concern.
    pytester.makeini(IN_PROCESS_INI)
    result = run_in_process(pytester, "--specdec-profiles=specdec.yaml", "--server-profile=tp3")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    # passed, or undecided where a loaded runner left a verdict open ("[pu][an]*": not failed)
    result.stdout.fnmatch_lines(["test_tp3[[]tp3[]] * tp3 * [pu][an]*"])
    logs = pytester.path / ".specdec" / "logs"
    pointers = sorted(p.name for p in logs.glob("tp3*.log") if p.is_symlink())
    assert pointers == ["tp3.log", "tp3.rank1.log", "tp3.rank2.log"]
    stamps = {p.resolve().name.rsplit(".", 2)[-2] for p in logs.glob("tp3*.log") if p.is_symlink()}
    assert len(stamps) == 1  # one stamp for the ranks of one launch
    assert not _tagged(str(pytester.path))


@pytest.mark.slow
def test_killed_pytest_leaves_no_rank_behind(tmp_path: Path) -> None:
    import subprocess
    import sys

    _profile(tmp_path, "--ref-fault-node-never-join", "2")
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from pytest_specdec.engines import get_engine
        from pytest_specdec.serve.nodegroup import NodeGroup
        from pytest_specdec.engines.rules import load_profiles
        p = load_profiles({str(tmp_path / "specdec.yaml")!r}).get("tp3")
        g = NodeGroup.start(p, get_engine(p), port=int(sys.argv[1]), log_dir=Path({str(tmp_path / "logs")!r}),
                            draft_path=None, record_dir=Path({str(tmp_path / "servers")!r}))
        print("launched", flush=True)
        time.sleep(600)
        """
    )
    from pytest_specdec.serve.ports import find_free_port

    owner = subprocess.Popen([sys.executable, "-c", script, str(find_free_port())], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "launched"
        deadline = time.monotonic() + 60
        while len(_tagged(str(tmp_path))) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_tagged(str(tmp_path))) >= 3
    finally:
        owner.kill()  # SIGKILL: no teardown runs in the owner; each rank's supervisor must stop it
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    deadline = time.monotonic() + 15
    while _tagged(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _tagged(str(tmp_path))
