"""The three verbs at core level, two EngineCores in one process (KV copied tensor by tensor):
every orchestration pattern yields exactly the greedy tokens of a single engine."""
from __future__ import annotations

import time

import pytest
import torch
from test_core_support import PROMPTS, assert_pool_idle, drain, generate, greedy, make_engine

from engine.core.engine_core import EngineCore
from engine.core.outputs import SendChunk
from engine.model.loader import LoadedModel
from switchyard_engine_api.errors import LeaseExpired

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]
MAX_TOKENS = 12
SYSTEM = "You are Switchyard's assistant. Keep answers short, factual and polite. " * 3


class Transfer:
    """on_layer for a sender: copy each reported range into the receiver's reservation."""

    def __init__(self, sender: EngineCore, receiver: EngineCore, request_id: str) -> None:
        self.sender, self.receiver, self.request_id = sender, receiver, request_id
        self.ranges: set[tuple[int, int]] = set()
        self.layers_seen: set[int] = set()

    def __call__(self, chunk: SendChunk) -> None:
        k, v = self.sender.kv.read(chunk.layer, chunk.page_table, chunk.start, chunk.stop)
        self.receiver.write_kv(self.request_id, chunk.layer, chunk.start, k, v)
        res_pages = self.receiver.reservations.get(self.request_id).reservation.page_table
        k2, v2 = self.receiver.kv.read(chunk.layer, res_pages, chunk.start, chunk.stop)
        assert torch.equal(k, k2) and torch.equal(v, v2)  # the bytes landed unchanged
        self.ranges.add((chunk.start, chunk.stop))
        self.layers_seen.add(chunk.layer)


def send_kv(sender: EngineCore, receiver: EngineCore, request_id: str, tokens: list[int],
            end: int) -> tuple[int, Transfer]:
    """prep_recv on the receiver + add_send on the sender, run to completion."""
    res = receiver.prep_recv(request_id, tokens, end)
    transfer = Transfer(sender, receiver, request_id)
    sender.add_send(request_id, tokens, res.matched_len, res.end, transfer)
    run = drain(sender)
    assert run.finish[request_id] == "sent"
    if res.matched_len < res.end:
        assert min(s for s, _ in transfer.ranges) == res.matched_len
        assert max(e for _, e in transfer.ranges) == res.end
        assert len(transfer.layers_seen) == sender.model_config.num_layers
    return res.matched_len, transfer


@pytest.fixture(scope="module")
def prompts(loaded_model_fp32: LoadedModel) -> list[list[int]]:
    tok = loaded_model_fp32.tokenizer
    return [tok.encode(SYSTEM + p) for p in PROMPTS[:3]]


@pytest.fixture(scope="module")
def single(loaded_model_fp32: LoadedModel, prompts: list[list[int]]) -> list[list[int]]:
    return [generate(make_engine(loaded_model_fp32), p, greedy(MAX_TOKENS)) for p in prompts]


@pytest.fixture
def pair(loaded_model_fp32: LoadedModel) -> tuple[EngineCore, EngineCore]:
    return make_engine(loaded_model_fp32), make_engine(loaded_model_fp32)


def test_pd_sends_all_but_the_last_token(pair: tuple[EngineCore, EngineCore],
                                         prompts: list[list[int]],
                                         single: list[list[int]]) -> None:
    prefill, decode = pair
    prompt = prompts[0]
    matched, _ = send_kv(prefill, decode, "pd", prompt, len(prompt) - 1)
    assert matched == 0
    decode.add_request("pd", prompt, greedy(MAX_TOKENS), begin=len(prompt) - 1)
    run = drain(decode)
    assert run.tokens["pd"] == single[0]
    first = next(o for o in run.outputs if o.first)
    assert first.cached_tokens == len(prompt) - 1
    assert_pool_idle(prefill)
    assert_pool_idle(decode)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_balanced_pd(pair: tuple[EngineCore, EngineCore], prompts: list[list[int]],
                     single: list[list[int]], fraction: float) -> None:
    prefill, decode = pair
    prompt = prompts[1]
    decode_start = int(len(prompt) * fraction)
    send_kv(prefill, decode, "bpd", prompt, decode_start)
    decode.add_request("bpd", prompt, greedy(MAX_TOKENS), begin=decode_start)
    assert drain(decode).tokens["bpd"] == single[1]
    assert_pool_idle(decode)


def test_cache_aware_pd_writes_only_the_missing_range(
        pair: tuple[EngineCore, EngineCore], prompts: list[list[int]],
        single: list[list[int]]) -> None:
    prefill, decode = pair
    generate(decode, prompts[0], greedy(2), "warm")  # decode now caches the shared system prompt
    prompt = prompts[2]
    matched, transfer = send_kv(prefill, decode, "ca", prompt, len(prompt) - 1)
    assert matched >= 16 * (len(SYSTEM) // 80) and matched % 16 == 0
    assert min(start for start, _ in transfer.ranges) == matched
    decode.add_request("ca", prompt, greedy(MAX_TOKENS), begin=len(prompt) - 1)
    assert drain(decode).tokens["ca"] == single[2]
    # Sender already holding the prefix reports its cached positions too.
    matched2, transfer2 = send_kv(prefill, make_engine(prefill.loaded), "again", prompt, 40)
    assert matched2 == 0 and min(s for s, _ in transfer2.ranges) == 0
    assert_pool_idle(decode)


@pytest.mark.parametrize("k", [1, 5])
def test_tandem_handoff(pair: tuple[EngineCore, EngineCore], prompts: list[list[int]],
                        single: list[list[int]], k: int) -> None:
    lead, follow = pair
    prompt = prompts[0]
    lead.add_request("t", prompt, greedy(MAX_TOKENS), max_new_tokens_here=k)
    run = drain(lead)
    assert run.finish["t"] == "handoff" and run.tokens["t"] == single[0][:k]
    so_far = prompt + run.tokens["t"]
    send_kv(lead, follow, "t2", so_far, len(so_far) - 1)
    follow.add_request("t2", so_far, greedy(MAX_TOKENS - k), begin=len(so_far) - 1)
    assert run.tokens["t"] + drain(follow).tokens["t2"] == single[0]
    assert_pool_idle(lead)
    assert_pool_idle(follow)


def test_migration_then_generation_hits_the_cache(pair: tuple[EngineCore, EngineCore],
                                                  prompts: list[list[int]],
                                                  single: list[list[int]]) -> None:
    source, target = pair
    prompt = prompts[1]
    generate(source, prompt, greedy(2), "history")
    send_kv(source, target, "migrate", prompt, len(prompt))  # no generation on the target
    full = len(prompt) // 16 * 16
    assert target.match_prefix(prompt) == full
    target.expire_leases(time.monotonic() + 3600)
    target.add_request("after", prompt, greedy(MAX_TOKENS))
    run = drain(target)
    assert run.tokens["after"] == single[1]
    assert next(o for o in run.outputs if o.first).cached_tokens == full
    assert_pool_idle(target)


def test_expired_lease_frees_pages_and_late_write_fails(
        pair: tuple[EngineCore, EngineCore], prompts: list[list[int]]) -> None:
    sender, receiver = pair
    prompt = prompts[0]
    res = receiver.prep_recv("late", prompt, len(prompt) - 1, lease_s=0.5)
    assert receiver.stats().leases == 1 and receiver.pool.num_used == len(res.page_table)
    assert receiver.expire_leases(time.monotonic() + 1.0) == ["late"]
    assert receiver.pool.num_used == 0 and receiver.stats().leases == 0
    sender.add_send("late", prompt, 0, len(prompt) - 1, Transfer(sender, receiver, "late"))
    run = drain(sender)
    assert run.finish["late"] == "error" and "LeaseExpired" in (run.outputs[-1].error or "")
    k = torch.zeros(1, sender.model_config.num_kv_heads, sender.model_config.head_dim)
    with pytest.raises(LeaseExpired):
        receiver.write_kv("late", 0, 0, k, k)
    # A generation under that id falls back to computing the prompt itself.
    receiver.add_request("late", prompt, greedy(3), begin=len(prompt) - 1)
    assert len(drain(receiver).tokens["late"]) == 3
    assert_pool_idle(sender)
    assert_pool_idle(receiver)


def test_writes_renew_the_lease(pair: tuple[EngineCore, EngineCore],
                                prompts: list[list[int]]) -> None:
    _, receiver = pair
    prompt = prompts[0]
    start = time.monotonic()
    res = receiver.prep_recv("renewed", prompt, len(prompt) - 1, lease_s=0.5)
    time.sleep(0.3)
    k = torch.zeros(1, receiver.model_config.num_kv_heads, receiver.model_config.head_dim)
    receiver.write_kv("renewed", 0, res.matched_len, k, k)
    # Past the original deadline, but the write moved it: the reservation is still held.
    assert receiver.expire_leases(start + 0.6) == []
    assert receiver.expire_leases(time.monotonic() + 1.0) == ["renewed"]
    assert_pool_idle(receiver)


def test_generation_never_writes_into_pages_the_cache_shares(
        pair: tuple[EngineCore, EngineCore], prompts: list[list[int]]) -> None:
    sender, receiver = pair
    prompt = prompts[2][:len(prompts[2]) // 16 * 16]  # whole pages: all of them get committed
    reference = generate(make_engine(sender.loaded), prompt, greedy(MAX_TOKENS))
    send_kv(sender, receiver, "cow", prompt, len(prompt))
    held = receiver.reservations.get("cow").reservation.page_table
    last = held[-1]
    assert receiver.pool.refcount(last) == 2  # reservation + prefix cache
    before = receiver.kv.layer(3)[last].clone()
    # begin == len(prompt): the last token is recomputed for its logits, into a private copy.
    receiver.add_request("cow", prompt, greedy(MAX_TOKENS), begin=len(prompt))
    assert receiver.request("cow").page_table[-1] != last
    assert drain(receiver).tokens["cow"] == reference
    assert torch.equal(receiver.kv.layer(3)[last], before)
    assert_pool_idle(receiver)


def test_write_kv_from_another_thread_while_the_receiver_steps(
        pair: tuple[EngineCore, EngineCore], prompts: list[list[int]],
        single: list[list[int]]) -> None:
    import queue
    import threading

    sender, receiver = pair
    prompt = prompts[0]
    receiver.add_request("busy", prompts[1], greedy(MAX_TOKENS))  # keeps the step thread busy
    res = receiver.prep_recv("pd", prompt, len(prompt) - 1)
    landed: queue.Queue[tuple[int, int, torch.Tensor, torch.Tensor] | None] = queue.Queue()

    def on_layer(chunk: SendChunk) -> None:
        k, v = sender.kv.read(chunk.layer, chunk.page_table, chunk.start, chunk.stop)
        landed.put((chunk.layer, chunk.start, k, v))

    def writer() -> None:  # the transport's receiving thread
        while (item := landed.get()) is not None:
            receiver.write_kv("pd", item[0], item[1], item[2], item[3])

    thread = threading.Thread(target=writer)
    thread.start()
    sender.add_send("pd", prompt, res.matched_len, res.end, on_layer)
    busy = {}
    while sender.has_work():
        sender.step()
        for out in receiver.step():
            busy.setdefault(out.request_id, []).extend(out.new_token_ids)
    landed.put(None)
    thread.join(timeout=60)
    assert receiver.reservations.get("pd").written_upto() == res.end
    receiver.add_request("pd", prompt, greedy(MAX_TOKENS), begin=res.end)
    run = drain(receiver)
    assert run.tokens["pd"] == single[0]
    assert busy.get("busy", []) + run.tokens.get("busy", []) == single[1]
    assert_pool_idle(receiver)


def test_live_migration_by_handoff_abort(pair: tuple[EngineCore, EngineCore],
                                         prompts: list[list[int]],
                                         single: list[list[int]]) -> None:
    """abort(handoff=True) ends a running generation with "handoff" after whatever it produced,
    its KV in the prefix cache; prompt + those tokens then move and the request continues."""
    source, target = pair
    prompt = prompts[2]
    source.add_request("mig", prompt, greedy(MAX_TOKENS))
    produced: list[int] = []
    while len(produced) < 4:
        for out in source.step():
            produced.extend(out.new_token_ids)
    assert source.abort("mig", handoff=True)
    run = drain(source)
    produced += run.tokens.get("mig", [])
    assert run.finish["mig"] == "handoff" and produced == single[2][:len(produced)]
    tokens = prompt + produced
    matched, _ = send_kv(source, target, "mig", tokens, len(tokens) - 1)
    assert matched == 0
    rest = greedy(MAX_TOKENS - len(produced))
    target.add_request("mig", tokens, rest, begin=len(tokens) - 1, output_offset=len(produced))
    assert produced + drain(target).tokens["mig"] == single[2]
    assert_pool_idle(source)
    assert_pool_idle(target)
