"""adaptive's fallback (pyrouter/planning/error_fallback.py): a pattern whose recent predictions
are far off is avoided for data parallel on the least-loaded engine, probed now and then, and
trusted again once its error falls; the window it reads (recent_error.py)."""
from __future__ import annotations

import math
from typing import Any

import pytest

from pyrouter.planning.error_fallback import ENTER, LEAVE, MIN_OBS, PROBE_EVERY, ErrorFallback
from pyrouter.planning.prediction_feedback import TPOT, TTFT
from pyrouter.planning.recent_error import RecentError
from switchyard_sim.fake import FakeCluster, FakeEngine

MODEL = {"const": 5.0, "prefill_tokens": 0.5, "decode_seqs": 2.0, "decode_context": 0.001}
BUSY = {"running_decodes": 20, "decode_context_tokens": 20_000}


def test_the_window_is_the_mean_abs_log_ratio_of_the_last_requests() -> None:
    recent = RecentError(window=4)
    assert recent.error(TTFT, "pd") == (0.0, 0)
    for ratio in (2.0, 0.5, 1.0, 1.0):  # twice too slow and twice too fast weigh the same
        recent.observe(TTFT, "pd", ratio)
    assert recent.error(TTFT, "pd") == pytest.approx((math.log(2) / 2, 4))
    for _ in range(2):  # the two off ones leave the window
        recent.observe(TTFT, "pd", 1.0)
    assert recent.error(TTFT, "pd") == pytest.approx((0.0, 4))
    recent.observe(TTFT, "pd", float("nan"))  # nothing learned from a broken measurement
    assert recent.error(TPOT, "pd") == (0.0, 0) and recent.error(TTFT, "pd")[1] == 4


def test_a_pattern_is_avoided_above_enter_and_trusted_again_below_leave() -> None:
    recent, fallback = RecentError(), ErrorFallback()
    off = math.exp(ENTER) * 1.1
    for _ in range(MIN_OBS - 1):
        recent.observe(TPOT, "pd", off)
    fallback.update(recent, ["dp", "pd"], "dp")
    assert not fallback.avoided  # too few requests to judge
    recent.observe(TPOT, "pd", off)
    recent.observe(TPOT, "dp", off)  # the trusted pattern is never avoided
    fallback.update(recent, ["dp", "pd"], "dp")
    assert fallback.avoided == {"pd"}
    # between the thresholds: still avoided (hysteresis)
    between = math.exp((ENTER + LEAVE) / 2)
    for _ in range(recent.window):
        recent.observe(TPOT, "pd", between)
    fallback.update(recent, ["dp", "pd"], "dp")
    assert fallback.avoided == {"pd"}
    # every PROBE_EVERY-th request that would run on it runs there anyway
    overridden = [fallback.overrides("pd") for _ in range(2 * PROBE_EVERY)]
    assert overridden.count(False) == 2 and not overridden[PROBE_EVERY - 1]
    assert not fallback.overrides("dp")
    for _ in range(recent.window):
        recent.observe(TPOT, "pd", 1.1)
    fallback.update(recent, ["dp", "pd"], "dp")
    assert not fallback.avoided and not fallback.overrides("pd")


def _cluster() -> FakeCluster:
    # As test_seed_policies' disaggregation: two engines decoding 20 sequences each near a
    # 100 ms TPOT SLO and an idle prefill engine; a 1500-token prompt goes pd (e2 -> e0).
    return FakeCluster([FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256, **BUSY),
                        FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256, **BUSY),
                        FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256,
                                   role="prefill")])


async def _route(cluster: FakeCluster, prompt_start: int, **params: Any) -> dict[str, str]:
    prompt = list(range(prompt_start, prompt_start + 1500))
    run = await cluster.run("adaptive", prompt, max_tokens=8,
                            params={"tpot_ms": 100.0, "fallback": True, **params})
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(prompt, 8)
    cluster.assert_clean()
    return dict(kv.split("=", 1) for kv in run.route.split()[1:])


def _teach(cluster: FakeCluster, ratio: float, n: int) -> None:
    for _ in range(n):
        cluster.feedback.recent.observe(TTFT, "pd", ratio)


async def test_a_large_recent_pd_error_makes_adaptive_run_dp_on_the_least_loaded_engine() -> None:
    cluster = _cluster()
    _teach(cluster, 3.0, MIN_OBS - 1)  # below the minimum: nothing changes
    p = await _route(cluster, 20_000)
    assert p["chose"] == "pd" and "fallback" not in p and "probe" not in p
    _teach(cluster, 3.0, 1)
    p = await _route(cluster, 30_000)
    assert (p["chose"], p["fallback"]) == ("dp", "dp") and p["engine"] in ("e0", "e1")
    # ...and with the fallback off, pd as before
    off = _cluster()
    _teach(off, 3.0, MIN_OBS)
    p = await _route(off, 20_000, fallback=False)
    assert p["chose"] == "pd" and "fallback" not in p


async def test_probes_run_the_avoided_pattern_and_a_falling_error_brings_it_back() -> None:
    cluster = _cluster()
    _teach(cluster, 3.0, MIN_OBS)
    chosen = [(await _route(cluster, 20_000 + 2000 * i)) for i in range(PROBE_EVERY)]
    assert [p["chose"] for p in chosen] == ["dp"] * (PROBE_EVERY - 1) + ["pd"]
    assert chosen[-1]["probe"] == "pd"
    _teach(cluster, 1.0, cluster.feedback.recent.window)  # the probes found pd right again
    p = await _route(cluster, 40_000)
    assert p["chose"] == "pd" and "fallback" not in p and "probe" not in p
