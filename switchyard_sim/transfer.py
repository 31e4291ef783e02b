"""KV transfer timing in a simulation: per-chunk costs plus bytes / link bandwidth, pipelined
with the sender's prefill layer by layer, so only the last layer's share is exposed when the
link keeps up.

A sender's step of duration d (its gathers included, switchyard_sim/send_cost.py) computes its
send's K/V layer by layer: layer l's bytes are ready at t0 + (l+1)·d/L and queue on the sender's
link (FIFO), one slice of b/L bytes each, taking s = k·link_chunk_ms + b/L/bandwidth (k chunks
per layer; the receiver takes each chunk in and writes its pages). The last slice lands at

    max(link free + L·s,  t0 + d/L + L·s,  t0 + d + s)

(the link's backlog, a link slower than the layers, or only the last layer exposed). Each
step's slices land in the receiver's reservation at that time; the send is answered when the
sender has finished and every slice has landed (as RemoteSend waits for the acknowledgements).
The receiver's step loop loses `recv_step_share` of the link's L·s when it lands during one of
its steps (the receiving thread shares its cores): its next step lasts that much longer.
"""
from __future__ import annotations

import asyncio

from engine.core.outputs import SendChunk
from switchyard_engine_api.errors import LeaseExpired, UnknownRequest
from switchyard_sim.engine import SimEngine
from switchyard_sim.send_cost import chunks_per_layer


class KvLink:
    """A sender's outgoing link: when it is free again."""

    def __init__(self) -> None:
        self.free_at = 0.0
        self.bytes_sent = 0


def slice_s(num_bytes: int, layers: int, link_gbps: float, chunk_s: float = 0.0) -> float:
    """The link's time for one layer's slice of a step's `num_bytes` (`chunk_s`: the slice's
    per-chunk costs)."""
    return chunk_s + num_bytes / layers / (link_gbps * 1e9)


def landing_time(t0: float, step_s: float, num_bytes: int, layers: int, link_gbps: float,
                 link_free_at: float, chunk_s: float = 0.0) -> float:
    """When the last layer of a step's `num_bytes` lands (see the module docstring)."""
    slice_s_ = slice_s(num_bytes, layers, link_gbps, chunk_s)
    return max(link_free_at + layers * slice_s_, t0 + step_s / layers + layers * slice_s_,
               t0 + step_s + slice_s_)


class KvTransfer:
    """One RemoteSend's K/V on its way from `sender` into `receiver`'s reservation."""

    def __init__(self, sender: SimEngine, link: KvLink, receiver: SimEngine, request_id: str,
                 begin: int, end: int) -> None:
        self.sender = sender
        self.link = link
        self.receiver = receiver
        self.request_id = request_id
        self.begin = begin
        self.end = end
        self.bytes = 0
        self.error: str | None = None
        self._in_flight = 0
        self._sender_done = False
        self._landed = asyncio.get_running_loop().create_future()
        profile = sender.profile
        self._bytes_per_token = profile.model.kv_bytes_per_token
        self._layers = profile.model.num_layers
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        link.free_at = max(link.free_at, self.started + profile.link_latency_ms / 1e3)

    def on_layer(self, chunk: SendChunk) -> None:
        """The sender's step runner: positions [start, stop) now hold K/V (all layers: the
        simulation reports a step once). Raises when the receiver no longer holds the
        reservation, which ends the send with an error, as a failed write does."""
        start, stop = max(chunk.start, self.begin), min(chunk.stop, self.end)
        if start >= stop:
            return
        self.receiver.core.reservations.get(self.request_id)  # LeaseExpired / UnknownRequest
        num_bytes = (stop - start) * self._bytes_per_token
        sender, profile = self.sender, self.sender.profile
        chunk_s = chunks_per_layer(stop - start, profile) * profile.link_chunk_ms / 1e3
        at = landing_time(sender.step_started, sender.step_s, num_bytes, self._layers,
                          profile.link_gbps, self.link.free_at, chunk_s)
        self.link.free_at = at
        self.link.bytes_sent += num_bytes
        self.bytes += num_bytes
        self._in_flight += 1
        work_s = self._layers * slice_s(num_bytes, self._layers, profile.link_gbps, chunk_s)
        loop = asyncio.get_running_loop()
        loop.call_at(at, self._land, start, stop, work_s)

    def _land(self, start: int, stop: int, work_s: float) -> None:
        self._in_flight -= 1
        if self.receiver.stepping:  # the receiving thread took its share of the step's cores
            self.receiver.owed_s += self.receiver.profile.recv_step_share * work_s
        try:
            held = self.receiver.core.reservations.get(self.request_id)
            self.receiver.core.reservations.mark_written(held, 0, start, stop)
        except (LeaseExpired, UnknownRequest) as exc:  # expired or aborted meanwhile
            self.error = self.error or f"the receiver's reservation is gone: {exc}"
        self.receiver.wake()
        self._maybe_done()

    def sender_finished(self) -> None:
        self._sender_done = True
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self._sender_done and not self._in_flight and not self._landed.done():
            self._landed.set_result(None)

    async def landed(self) -> None:
        """Every byte the sender computed has landed (or failed to)."""
        await self._landed
