"""serve's supervisor (pyrouter/supervisor/) without child processes: its state file, the
fingerprint of serve's arguments, the run directory's privacy and lock, how a process is known
again after a supervisor died (pid and start time), what a new supervisor takes over from an
earlier one, the engine token it keeps or makes, the restart count a replica is told, and an
unknown policy refused before anything starts."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest

from pyrouter import router_command, serve
from pyrouter.cli import build_parser
from pyrouter.replicas.restarts import RESTARTS_ENV, replica_restarts_from_env, restarts_env
from pyrouter.supervisor.engine_token import deployment_token
from pyrouter.supervisor.previous_run import take_over
from pyrouter.supervisor.process import Adopted
from pyrouter.supervisor.run_dir import RUN_DIR_ENV, RunDir, RunDirError
from pyrouter.supervisor.state import (
    ENGINE,
    ROUTER,
    ChildRecord,
    ServeState,
    StateError,
    args_fingerprint,
    read_state,
    write_state,
)
from switchyard_engine_api.auth import TOKEN_ENV, TOKEN_FILE_ENV

ME = os.getpid()
MY_START = psutil.Process(ME).create_time()


def _gone_pid() -> int:
    """A pid no process has now."""
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def _state(fingerprint: str = "f") -> ServeState:
    return ServeState(fingerprint, 1, (
        ChildRecord("engine-0", ENGINE, ME, MY_START, 7001, metrics_port=9001, restarts=2),
        ChildRecord("router-0", ROUTER, _gone_pid(), 1.0, 8000)))


def test_the_state_file_reads_back_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "serve-state.json"
    assert read_state(path) is None
    write_state(path, _state())
    assert read_state(path) == _state()
    assert [p.name for p in tmp_path.iterdir()] == ["serve-state.json"]  # no partial file left


@pytest.mark.parametrize("text", ["{not json", '{"version": 99, "fingerprint": "f", '
                                  '"supervisor_pid": 1, "children": []}', '{"version": 1}'])
def test_a_state_file_it_cannot_read_is_an_error_not_a_fresh_start(tmp_path: Path,
                                                                    text: str) -> None:
    path = tmp_path / "serve-state.json"
    path.write_text(text)
    with pytest.raises(StateError, match="may still run"):
        read_state(path)


def test_the_fingerprint_follows_the_arguments_and_the_operators_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    parse = build_parser().parse_args
    same = args_fingerprint(parse(["serve", "--routers", "2"]))
    assert args_fingerprint(parse(["serve", "--routers", "2"])) == same
    assert args_fingerprint(parse(["serve", "--routers", "3"])) != same
    monkeypatch.setenv(TOKEN_ENV, "secret")
    assert args_fingerprint(parse(["serve", "--routers", "2"])) != same


def test_the_run_directory_is_private_and_held_by_one_serve(tmp_path: Path) -> None:
    first = RunDir.for_address("127.0.0.1", 8000, tmp_path)
    assert first.path == tmp_path / "serve-127.0.0.1-8000"
    first.open()
    try:
        assert first.path.stat().st_mode & 0o777 == 0o700
        second = RunDir.for_address("127.0.0.1", 8000, tmp_path)
        with pytest.raises(RunDirError, match=f"pid {ME}"):
            second.open()
        RunDir.for_address("127.0.0.1", 8001, tmp_path).open()  # another address is free
    finally:
        first.close()
    again = RunDir.for_address("127.0.0.1", 8000, tmp_path)
    again.open()  # the lock went with the one that held it
    again.close()


def test_a_run_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    run_dir = RunDir.for_address("::", 8000, tmp_path)
    assert run_dir.path.name == "serve-__-8000"
    run_dir.path.mkdir()
    run_dir.path.chmod(0o777)
    with pytest.raises(RunDirError, match="only they can write"):
        run_dir.open()


def test_a_process_is_known_again_by_pid_and_start_time() -> None:
    assert Adopted.find(ME, MY_START) is not None
    assert Adopted.find(ME, MY_START - 5.0) is None  # the pid was reused by another process
    assert Adopted.find(_gone_pid(), MY_START) is None


def test_same_arguments_adopt_what_runs_and_keep_every_records_port() -> None:
    inherited = asyncio.run(take_over(_state("f"), "f", can_adopt=True, drain_s=1.0))
    assert sorted(inherited.records) == ["engine-0", "router-0"]
    assert inherited.records["router-0"].port == 8000  # gone: started again there
    assert list(inherited.running) == ["engine-0"]
    assert inherited.running["engine-0"].pid == ME


@pytest.mark.parametrize(("fingerprint", "can_adopt"), [("other", True), ("f", False)])
def test_other_arguments_or_a_lost_token_take_over_nothing(fingerprint: str,
                                                           can_adopt: bool) -> None:
    # Only the dead router is recorded, so nothing is stopped here (test_serve_supervisor.py
    # stops live ones).
    state = ServeState("f", 1, _state().children[1:])
    inherited = asyncio.run(take_over(state, fingerprint, can_adopt, drain_s=1.0))
    assert not inherited.records and not inherited.running


def test_the_engine_token_is_made_fresh_or_kept(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    path = tmp_path / "engine-token"
    deployment_token(path, keep=False)
    first = path.read_text()
    assert os.environ[TOKEN_FILE_ENV] == str(path) and path.stat().st_mode & 0o777 == 0o600
    for keep in (True, False):  # each as a new serve would, with the variable not yet set
        monkeypatch.delenv(TOKEN_FILE_ENV)
        deployment_token(path, keep=keep)
        # Kept when adopted engines still hold it; else a new one.
        assert (path.read_text() == first) == keep
    monkeypatch.setenv(TOKEN_ENV, "the operator's")
    deployment_token(tmp_path / "unused", keep=False)
    assert not (tmp_path / "unused").exists()


def test_a_replica_is_told_its_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RESTARTS_ENV, raising=False)
    assert replica_restarts_from_env() is None
    monkeypatch.setenv(RESTARTS_ENV, restarts_env(1, 3)[RESTARTS_ENV])
    collector = replica_restarts_from_env()
    assert collector is not None and RESTARTS_ENV not in os.environ
    (family,) = collector.collect()
    assert [(s.labels, s.value) for s in family.samples] == [({"replica": "1"}, 3)]
    monkeypatch.setenv(RESTARTS_ENV, "1=x")
    with pytest.raises(ValueError, match="INDEX=COUNT"):
        replica_restarts_from_env()


def test_an_unknown_policy_is_refused_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(router_command, "setup_logging_and_loop", lambda: None)
    args = build_parser().parse_args(["serve", "--policy", "nope", "--port", "8000"])
    assert serve.run(args) == 2
    assert "switchyard serve: unknown policy 'nope'" in capsys.readouterr().err
    assert not RunDir.for_address("127.0.0.1", 8000, tmp_path).state_path.exists()
