"""Admin changes shared between router replicas, in-process (pyrouter/replicas/admin_propagation.py):
which of two records wins, that a received record is applied once and never sent on, and that
two replicas running slo_mux over the same engines agree on its roles — the one whose own
requests made it switch decides, the other adopts (pyrouter/runtime/shared_policy_state.py)."""
from __future__ import annotations

from typing import Any, cast

import pytest

from pyrouter.engines.membership import EngineMembership
from pyrouter.errors import BadRequest
from pyrouter.model_groups import ModelGroup, ModelSpec
from pyrouter.planning.slo_fit import MuxRoles
from pyrouter.replicas.admin_propagation import AdminPropagation, ChangeRecord, Generation
from pyrouter.replicas.admin_sync import adopt_shared_state, share_on_events
from pyrouter.replicas.peers import RouterPeers
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_registry import ActivePolicy, get_policy
from switchyard_sim.fake import FakeCluster, FakeEngine
from switchyard_sim.fake.front_run import FrontHarness

MODEL = {"const": 5.0, "prefill_tokens": 0.5, "decode_seqs": 2.0, "decode_context": 0.001}
PROMPT = list(range(5000, 5060))


def _record(key: str, counter: int, origin: str, **body: Any) -> ChangeRecord:
    return ChangeRecord(key, Generation(counter, origin), body)


async def test_the_newest_record_wins_whatever_order_they_arrive_in() -> None:
    applied: list[ChangeRecord] = []

    async def apply(record: ChangeRecord) -> None:
        applied.append(record)

    replica = AdminPropagation(RouterPeers(("127.0.0.1:1",)), apply)
    older, newer = _record("policy:m", 3, "b", policy="pd"), _record("policy:m", 4, "a",
                                                                        policy="tandem")
    assert await replica.receive(newer)
    assert not await replica.receive(older)  # arrived late: not applied over the newer one
    assert not await replica.receive(newer)  # the same record again: applied once
    tie = _record("policy:m", 4, "z", policy="least_load")  # equal counters: larger origin
    assert await replica.receive(tie)
    assert [r.body["policy"] for r in applied] == ["tandem", "least_load"]
    # A change made here afterwards outranks everything this replica has seen.
    mine = replica.stamp("policy:m", {"policy": "round_robin"})
    assert mine.generation.counter == 5 and replica.newest("policy:m") is mine


async def test_a_record_this_replica_refuses_is_kept_and_logged() -> None:
    async def refuse(record: ChangeRecord) -> None:
        raise BadRequest("no such policy here")

    replica = AdminPropagation(RouterPeers(("127.0.0.1:1",)), refuse)
    record = _record("policy:m", 1, "a", policy="mine")
    assert await replica.receive(record)
    assert replica.newest("policy:m") == record  # the peers agree on what is newest


@pytest.mark.parametrize("bad", [
    {}, {"key": "", "generation": {"counter": 1, "origin": "a"}, "body": {}},
    {"key": "k", "generation": {"counter": 0, "origin": "a"}, "body": {}},
    {"key": "k", "generation": {"counter": True, "origin": "a"}, "body": {}},
    {"key": "k", "generation": {"counter": 1}, "body": {}},
    {"key": "k", "generation": {"counter": 1, "origin": "a"}, "body": []}, ["k"]])
def test_a_malformed_record_is_a_bad_request(bad: object) -> None:
    with pytest.raises(BadRequest):
        ChangeRecord.from_json(bad)


def test_a_record_round_trips_through_json() -> None:
    record = _record("engine:10.0.0.1:50051", 7, "abc", member=False, migrate=True)
    assert ChangeRecord.from_json(record.to_json()) == record


async def test_peer_admin_addresses_shift_by_the_admin_port_offset() -> None:
    async def apply(record: ChangeRecord) -> None:
        pass

    replica = AdminPropagation(RouterPeers(("127.0.0.1:8001", "[::1]:8002")), apply,
                               admin_offset=1000)
    assert await replica.peer_admin_addresses() == ["127.0.0.1:9001", "[::1]:9002"]


def test_mux_roles_adopt_rejects_what_is_not_roles() -> None:
    roles = MuxRoles()
    with pytest.raises(BadRequest):
        roles.adopt({"roles": {"e0": "decode"}})
    roles.adopt({"roles": {"e0": "prefill", "e1": "mux"}, "switches": ["e1:prefill->mux (x)"]},
                now=5.0)
    assert roles.roles == {"e0": "prefill", "e1": "mux"} and roles.last_switch == 5.0


# ---- slo_mux's roles across two replicas ----
SLO_MUX = {"switch_interval_s": 0.0, "ttft_ms": 500.0}


class Replica:
    """One router replica in-process: engines with the Stats every replica reads alike, the
    policy slot and dispatcher, and its admin propagation wired to the others' in-process."""

    def __init__(self, name: str) -> None:
        mux = dict(role="decode", running_decodes=6, queued_prefill_tokens=20_000)
        self.cluster = FakeCluster([
            FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256, role="prefill",
                       queued_prefill_tokens=20_000),
            *(FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256, **mux)
              for _ in range(2))])
        spec = get_policy("slo_mux")
        self.slot = PolicySlot(ActivePolicy(spec, spec.check_params(SLO_MUX)))
        # 20k queued prefill tokens are ~10 s of wait: under the timeout, so slo_mux places
        # (late) rather than refusing, and its lateness turns a role.
        self.dispatcher = Dispatcher(self.cluster, self.slot, policy_timeout_s=60.0)
        self.group = ModelGroup(ModelSpec("m", None), self.cluster, self.slot, self.dispatcher)
        self.peers: list[Replica] = []
        self.harness: FrontHarness | None = None  # its front, made on the loop that runs it
        self.replication = AdminPropagation(RouterPeers(("127.0.0.1:1",)), self._apply)
        self.replication.origin = name
        self.replication.push = self._push  # type: ignore[method-assign]

    async def _apply(self, record: ChangeRecord) -> None:
        adopt_shared_state(self.group, self.replication, record)

    async def _push(self, record: ChangeRecord) -> tuple[int, int]:
        return sum([await p.replication.receive(record) for p in self.peers]), len(self.peers)

    async def run(self, salt: int) -> str:
        req = self.cluster.request([7, *PROMPT, salt], max_tokens=4)
        if self.harness is None:
            self.harness = FrontHarness(cast(EngineMembership, self.cluster), self.dispatcher)
        run = await self.harness.run(req)
        assert run.error is None, run.error
        return run.route

    def roles(self) -> dict[str, str]:
        return dict(self.slot.current.state["roles"].roles)


async def _settle() -> None:
    import asyncio

    for _ in range(5):  # the pushes are tasks the event sink started
        await asyncio.sleep(0)


async def test_two_replicas_agree_on_slo_mux_roles_one_decides_the_other_follows() -> None:
    a, b, alone = Replica("a"), Replica("b"), Replica("c")
    a.peers, b.peers = [b], [a]
    share_on_events(a.replication, a.group)
    share_on_events(b.replication, b.group)
    await b.run(0)  # b knows the engines (e0 prefill, e1 and e2 multiplexing) and stays so
    await alone.run(0)
    assert b.roles() == alone.roles() == {"e0": "prefill", "e1": "mux", "e2": "mux"}
    # a's own prefills wait past their TTFT: a turns a multiplexing engine into prefill ...
    routes = [await a.run(i) for i in range(12)]
    assert any("switched=e1" in r for r in routes), routes
    await _settle()
    assert a.roles() == {"e0": "prefill", "e1": "prefill", "e2": "mux"}
    # ... and b, whose requests saw no such wait, follows it; a replica without peers does not.
    assert b.roles() == a.roles()
    assert alone.roles() != a.roles()
    # b's next request over the same Stats keeps the roles it adopted.
    await b.run(99)
    await _settle()
    assert b.roles() == a.roles()


async def test_state_from_before_a_policy_switch_is_not_adopted() -> None:
    b = Replica("b")
    await b.run(0)
    b.replication.records["policy:m"] = _record("policy:m", 5, "a", policy="slo_mux")
    stale = _record("state:slo_mux:roles:m", 4, "a", value={"roles": {"e0": "mux"}})
    await b.replication.receive(stale)
    assert b.roles() == {"e0": "prefill", "e1": "mux", "e2": "mux"}
    fresh = _record("state:slo_mux:roles:m", 6, "a",
                    value={"roles": {"e0": "mux", "e1": "prefill", "e2": "mux"}})
    await b.replication.receive(fresh)
    assert b.roles() == {"e0": "mux", "e1": "prefill", "e2": "mux"}
