"""KV transfer time in the simulator: bytes / link bandwidth, pipelined with the sender's
prefill layer by layer — only the last layer's share is exposed when the link keeps up, the
link's own time when it does not, and a busy link queues."""
from __future__ import annotations

import pytest

from switchyard_sim.fake import FakeCluster
from switchyard_sim.profile import HardwareProfile
from switchyard_sim.transfer import landing_time
from tests.sim.sim_helpers import assert_clean, run_requests

PROMPT = list(range(1000, 1100))


def test_a_fast_link_exposes_only_the_last_layer() -> None:
    # 80 MB over 4 layers at 100 GB/s: 0.2 ms per layer slice; the step computes for 40 ms.
    assert landing_time(0.0, 0.040, 80_000_000, 4, 100.0, 0.0) == pytest.approx(0.0402)


def test_a_slow_link_is_its_own_bound() -> None:
    # 4 MB at 0.001 GB/s = 4 s of link time; the 40 ms step hides only its first layer.
    assert landing_time(0.0, 0.040, 4_000_000, 4, 0.001, 0.0) == pytest.approx(0.010 + 4.0)


def test_a_busy_link_queues_the_next_step() -> None:
    # The link is busy until 1 s: this step's 4 x 0.25 s of slices start after it.
    assert landing_time(0.0, 0.040, 1_000_000, 4, 0.001, 1.0) == pytest.approx(2.0)


def test_pd_first_token_waits_for_the_last_bytes(tiny: HardwareProfile) -> None:
    out = run_requests(tiny, "pd", [PROMPT], max_tokens=2)
    assert out.runs[0].tokens == FakeCluster.reference(PROMPT, 2)
    assert [v for v, _ in out.runs[0].verbs] == ["prep_recv", "remote_send", "start_generate"]
    # The prefill engine computes tokens[:99] in chunks of 64 (42 ms) and 35 (27.5 ms). KV is
    # 2 x 4 layers x 2 heads x 8 x 2 B = 256 B/token on a 1 MB/s link, 4 layer slices a step:
    #   64 tokens: 16384 B -> slices of 4.096 ms; lands at max(4 x 4.096, 42/4 + 4 x 4.096,
    #              42 + 4.096) = 46.096 ms
    #   35 tokens:  8960 B -> slices of 2.24 ms; lands at max(46.096 + 8.96, 42 + 27.5/4 +
    #              8.96, 69.5 + 2.24) = 71.74 ms
    # then the decode engine computes the last prompt token: 10 + 0.5 = 10.5 -> 82.24 ms, and
    # decodes reading 101 positions: 12.01 -> 94.25 ms.
    assert out.token_times_ms[0] == pytest.approx([82.24, 94.25])
    sender = out.cluster.client("e0").link
    assert sender.bytes_sent == 99 * 256
    assert_clean(out)


def test_the_decode_engine_holds_the_sent_prefix_afterwards(tiny: HardwareProfile) -> None:
    # The received KV (full pages of it) is in the decode engine's prefix cache, so a second
    # request with the same prompt needs no transfer: pd skips remote_send.
    out = run_requests(tiny, "pd", [PROMPT, PROMPT], max_tokens=2, arrivals_ms=[0.0, 500.0])
    assert [v for v, _ in out.runs[1].verbs] == ["prep_recv", "start_generate"]
    assert "skipped=" in out.runs[1].route
    assert out.runs[1].tokens == out.runs[0].tokens
    assert_clean(out)
