"""Server helpers without processes: range resolution, event batching, status-code mapping."""
from __future__ import annotations

import grpc
import pytest

from engine.kvcache.events import KVEvent
from engine.server.convert import event_batches
from engine.server.errors import RequestInUse, status_code
from engine.server.kv_sender import resolve_end
from engine.transfer import BadKVAddr, TransferError
from switchyard_engine_api.errors import InvalidRequest, LeaseExpired, NoCapacity, UnknownRequest


def test_negative_end_counts_from_the_end() -> None:
    assert resolve_end(-1, 10) == 9
    assert resolve_end(-10, 10) == 0
    assert resolve_end(10, 10) == 10
    for bad in (-11, 11):
        with pytest.raises(InvalidRequest):
            resolve_end(bad, 10)


def test_event_batches_keep_store_after_evict_in_a_new_batch() -> None:
    events = [KVEvent(1, "stored", (10, 11)), KVEvent(2, "evicted", (10,)),
              KVEvent(3, "evicted", (11,)), KVEvent(4, "stored", (10,))]
    batches = event_batches(events)
    assert [(b.first_seq, b.last_seq, list(b.stored), list(b.evicted)) for b in batches] == [
        (1, 3, [10, 11], [10, 11]), (4, 4, [10], [])]
    assert len(event_batches([KVEvent(i, "stored", (i,)) for i in range(1, 11)], 4)) == 3


def test_status_codes() -> None:
    assert status_code(InvalidRequest("x")) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_code(BadKVAddr("x")) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_code(RequestInUse("x")) == grpc.StatusCode.ALREADY_EXISTS
    assert status_code(LeaseExpired("x")) == grpc.StatusCode.FAILED_PRECONDITION
    assert status_code(UnknownRequest("x")) == grpc.StatusCode.NOT_FOUND
    assert status_code(NoCapacity("x")) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status_code(TransferError("x")) == grpc.StatusCode.UNAVAILABLE
    assert status_code(TransferError("x", "DATA_LOSS")) == grpc.StatusCode.DATA_LOSS
    assert status_code(RuntimeError("x")) == grpc.StatusCode.INTERNAL
