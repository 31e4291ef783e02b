"""`switchyard bench simulate` end to end: a small policies x rates sweep writes the same
summary.json, table and plots as `bench serve`, the same inputs give the same figures, and bad
input is a clear error (exit 2), not a traceback."""
from __future__ import annotations

import argparse
import json
import os

import pytest

from switchyard_bench.simulate.main import run
from switchyard_sim.profile import ProfileError, load_profile, profile_from_dict
from switchyard_sim.profiles.build_h100_70b import NAME as H100
from switchyard_sim.profiles.build_h100_70b import build
from tests.sim.sim_helpers import TINY

pytestmark = pytest.mark.procs


def _simulate(tmp: str, *extra: str) -> int:
    return run(argparse.Namespace(rest=[
        "--profile", TINY, "--policies", "round_robin,pd", "--rates", "4,8",
        "--num-prompts", "12", "--input-mean", "120", "--input-std", "30", "--output-mean",
        "8", "--output-std", "2", "--slo-ttft-ms", "400", "--slo-tpot-ms", "40",
        "--no-progress", "--result-dir", tmp, *extra]))


def test_a_small_sweep_end_to_end(tmp_path: os.PathLike[str],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    first, second = os.path.join(tmp_path, "a"), os.path.join(tmp_path, "b")
    assert _simulate(first, "--plot") == 0
    printed = capsys.readouterr().out
    assert "round_robin@4" in printed and "pd@8" in printed and "P90 TTFT (ms)" in printed
    with open(os.path.join(first, "summary.json"), encoding="utf-8") as f:
        body = json.load(f)
    assert body["bench"] == "simulate" and body["profile"] == "test-tiny"
    assert [r["label"] for r in body["runs"]] == ["round_robin@4", "round_robin@8", "pd@4",
                                                  "pd@8"]
    for r in body["runs"]:
        assert r["completed"] == 12 and r["failed"] == 0 and r["simulated"]
        assert 0 < r["mean_ttft_ms"] <= r["mean_jct_ms"]
        assert r["slo_attainment"] is not None and os.path.exists(r["records_file"])
    pd_routes = body["runs"][2]["routes"]
    assert pd_routes == {"pd": 12}
    assert os.path.exists(os.path.join(first, "latency_vs_rate.png"))
    assert os.path.exists(os.path.join(first, "slo_attainment_vs_rate.png"))
    # Deterministic: the same command gives the same figures.
    assert _simulate(second) == 0
    with open(os.path.join(second, "summary.json"), encoding="utf-8") as f:
        again = json.load(f)
    for a, b in zip(body["runs"], again["runs"], strict=True):
        assert (a["mean_jct_ms"], a["p99_ttft_ms"]) == (b["mean_jct_ms"], b["p99_ttft_ms"])


@pytest.mark.parametrize("args, message", [
    (["--profile", "no-such-profile"], "no profile 'no-such-profile'"),
    (["--policies", "nope"], "unknown policy 'nope'"),
    (["--engines", "2", "--roles", "prefill"], "--roles names 1 roles for 2 engines"),
    (["--policies", "pd", "--policy-params", '{"pd": {"bogus": 1}}'], "has no parameter"),
    (["--policy-params", '{"pd": {}}'], "not in --policies"),
    (["--rates", "1", "--coalesce", "0"], "--coalesce must be >= 1"),
    ([], "no timestamps: give --rates"),
    (["--rates", "1", "--burstiness", "0"], "burstiness"),
])
def test_bad_input_is_a_clear_error(args: list[str], message: str,
                                    capsys: pytest.CaptureFixture[str],
                                    tmp_path: os.PathLike[str]) -> None:
    assert run(argparse.Namespace(rest=[*args, "--result-dir", str(tmp_path)])) == 2
    assert message in capsys.readouterr().err


def test_a_bad_profile_file_is_a_clear_error(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "bad.json")
    with open(TINY, encoding="utf-8") as f:
        body = json.load(f)
    body["latency_model"] = {"warp_drive": 1.0}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f)
    with pytest.raises(ProfileError, match="unknown latency term 'warp_drive'"):
        load_profile(path)
    body["latency_model"] = {"const": 1.0}
    body["kv_bytes_per_token"] = 7
    with pytest.raises(ProfileError, match="kv_bytes_per_token 7 does not match"):
        profile_from_dict(body)


def test_the_h100_profile_is_what_its_script_builds_from_the_csvs() -> None:
    profile = load_profile(H100)
    built = profile_from_dict(build(), H100)
    assert profile == built
    # The arithmetic it states, checked against the shape: Llama-3.1-70B's KV in bf16.
    assert profile.model.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    step = profile.latency()
    from engine.core.latency_model import StepShape

    decode_32 = step.predict(StepShape((), 32, 32 * 3100))
    prefill_2k = step.predict(StepShape(((0, 2048),), 0, 0))
    assert 10 < decode_32 < 30  # ms: a TP4 70B decode step
    assert 60 < prefill_2k < 200  # ms: a 2048-token chunk
