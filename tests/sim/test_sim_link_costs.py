"""What a KV send costs besides its bytes (switchyard_sim/send_cost.py, transfer.py): the sender's
step lasts as long as its gathers and chunk hand-offs take, each slice on the link pays a
per-chunk cost, and a receiver stepping while K/V lands loses its share of the link's work.
The local profile's constants reproduce the shm link as measured on this machine
(tests/sim/measured_local.json, from switchyard_sim/profiles/measure_local.py)."""
from __future__ import annotations

import asyncio
import json
import os

import pytest

from engine.core.outputs import SendChunk
from switchyard_sim.clock import run_virtual
from switchyard_sim.cluster import SimCluster
from switchyard_sim.fake import FakeCluster
from switchyard_sim.profile import load_profile
from switchyard_sim.send_cost import chunks_per_layer
from switchyard_sim.transfer import KvLink, KvTransfer
from tests.sim.sim_helpers import assert_clean, run_requests, tiny_profile

MEASURED = os.path.join(os.path.dirname(__file__), "measured_local.json")
PROMPT = list(range(1000, 1100))


def test_the_senders_step_lasts_as_long_as_its_gathers() -> None:
    # As test_sim_transfer's pd case, with 1 ms per chunk and a 1 MB/s gather on the sender's
    # step thread (4 layers, one chunk each per step):
    #   64 tokens: 42 + 4 + 16.384 = 62.384 ms; slices of 4.096 ms land by 62.384 + 4.096
    #              = 66.48 ms
    #   35 tokens: 27.5 + 4 + 8.96 = 40.46 ms from 62.384; lands at 102.844 + 2.24 = 105.084
    # then the decode engine: 10.5 -> 115.584 ms and 12.01 -> 127.594 ms.
    profile = tiny_profile(send_chunk_ms=1.0, gather_gbps=0.001)
    out = run_requests(profile, "pd", [PROMPT], max_tokens=2)
    assert out.runs[0].tokens == FakeCluster.reference(PROMPT, 2)
    assert out.token_times_ms[0] == pytest.approx([115.584, 127.594])
    assert out.cluster.sim("e0").busy_s == pytest.approx(0.062384 + 0.04046)
    assert_clean(out)


def test_each_slice_pays_the_per_chunk_cost() -> None:
    # 2 ms per chunk on the link: slices of 6.096 and 4.24 ms.
    #   64 tokens: max(4 x 6.096, 10.5 + 24.384, 42 + 6.096) = 48.096 ms
    #   35 tokens: max(48.096 + 16.96, 42 + 6.875 + 16.96, 69.5 + 4.24) = 73.74 ms
    # then 10.5 -> 84.24 ms, 12.01 -> 96.25 ms.
    out = run_requests(tiny_profile(link_chunk_ms=2.0), "pd", [PROMPT], max_tokens=2)
    assert out.token_times_ms[0] == pytest.approx([84.24, 96.25])
    assert_clean(out)


def test_a_receiver_stepping_while_kv_lands_loses_its_share() -> None:
    profile = tiny_profile(link_chunk_ms=2.0, recv_step_share=0.5)

    async def main() -> tuple[float, float]:
        cluster = SimCluster(profile, ["prefill", "decode"])
        sender, receiver = cluster.sim("e0"), cluster.sim("e1")
        tokens = list(range(100, 164))
        receiver.core.prep_recv("r", tokens, 64, 10.0)
        transfer = KvTransfer(sender, KvLink(), receiver, "r", 0, 64)
        sender.step_started, sender.step_s = 0.0, 0.040
        receiver.stepping = True  # in the middle of a step when the slices land
        pages = receiver.core.reservations.get("r").reservation.page_table
        transfer.on_layer(SendChunk(0, 0, 64, list(pages)))
        transfer.sender_finished()
        await transfer.landed()
        return asyncio.get_running_loop().time(), receiver.owed_s

    landed, owed = run_virtual(main)
    # 4 slices of 2 ms + 4096 B at 1 MB/s: 24.384 ms of link work, half of it owed.
    # Slices of 6.096 ms: the last lands at 40 + 6.096 ms (only the last layer exposed).
    assert landed == pytest.approx(0.046096)
    assert owed == pytest.approx(0.5 * 0.024384)


def test_a_long_range_is_cut_into_4_mib_chunks_per_layer() -> None:
    profile = load_profile("local-smollm2-cpu")  # 768 B per token and layer: 5461 per chunk
    assert [chunks_per_layer(n, profile) for n in (0, 1, 5461, 5462, 16384)] == [0, 1, 1, 2, 4]


@pytest.mark.parametrize("side", ["sender", "receiver"])
def test_the_local_profile_matches_the_measured_shm_link(side: str) -> None:
    with open(MEASURED, encoding="utf-8") as f:
        rows = json.load(f)["chunks"]  # per chunk, 1 to 4096 tokens (768 B each per layer)
    profile = load_profile("local-smollm2-cpu")
    fixed, gbps = ((profile.send_chunk_ms, profile.gather_gbps) if side == "sender"
                   else (profile.link_chunk_ms, profile.link_gbps))
    modelled = [fixed + row["bytes"] / (gbps * 1e6) for row in rows]
    measured = [row[f"{side}_ms"] for row in rows]
    # One noisy run on a shared machine: the whole trace within 20%, each chunk within 2x.
    assert sum(modelled) == pytest.approx(sum(measured), rel=0.2)
    for got, want in zip(modelled, measured, strict=True):
        assert want / 2 <= got <= want * 2
