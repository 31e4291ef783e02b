"""RemoteSend on the sending engine: prefill [begin, end) and stream each layer out as it lands.

`LayerPump.on_layer` runs on the step thread right after a layer wrote its K/V: it gathers that
layer's slice straight into the transport's buffer (shm staging or a wire buffer) and commits it,
so the transport thread moves layer i while layer i+1 computes. `remote_send` awaits the core's
"sent" output, then waits (off the event loop) for the receiver's acknowledgement of every byte.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from engine.core.outputs import SendChunk
from engine.core.step_trace import StepTrace
from engine.server.step_loop import StepLoop
from engine.transfer import KVAddr, KVLayout, SendSession, TransferError, TransportPool
from engine.transfer.gather import gather_into
from switchyard_engine_api.errors import InvalidRequest
from switchyard_rpc import engine_pb2 as pb

# Largest chunk handed to a transport at once (keeps shm staging and wire buffers bounded;
# the simulator counts chunks with it, switchyard_sim/send_cost.py).
MAX_CHUNK_BYTES = 4 << 20


def resolve_end(end: int, n_tokens: int) -> int:
    """Negative `end` counts from the end of the prompt, as in the MicroServing API."""
    resolved = n_tokens + end if end < 0 else end
    if not 0 <= resolved <= n_tokens:
        raise InvalidRequest(f"end={end} is outside a prompt of {n_tokens} tokens")
    return resolved


class LayerPump:
    def __init__(self, session: SendSession, kv: Any, layout: KVLayout, begin: int, end: int,
                 on_error: Callable[[], None]) -> None:
        self._session = session
        self._on_error = on_error
        self._kv = kv
        self._begin = begin
        self._end = end
        self._max_tokens = max(1, MAX_CHUNK_BYTES // layout.bytes_per_token_layer)
        self.error: BaseException | None = None
        self.tokens_pushed = 0

    def on_layer(self, chunk: SendChunk) -> None:
        if self.error is not None:
            return
        start, stop = max(chunk.start, self._begin), min(chunk.stop, self._end)
        try:
            layer_kv = self._kv.layer(chunk.layer)
            for a in range(start, stop, self._max_tokens):
                b = min(stop, a + self._max_tokens)
                buf = self._session.buffer(chunk.layer, a, b)
                try:
                    gather_into(layer_kv, chunk.page_table, a, b, buf.tensor)
                except BaseException:
                    self._session.discard(buf)
                    raise
                self._session.commit(chunk.layer, a, b, buf)
                self.tokens_pushed += b - a
        except Exception as exc:  # noqa: BLE001 - must not break the step; reported by remote_send
            self.error = exc
            self._on_error()  # stop computing a send that can no longer land


class KVSender:
    def __init__(self, steps: StepLoop, kv: Any, layout: KVLayout) -> None:
        self._steps = steps
        self._kv = kv
        self._layout = layout
        self.pool = TransportPool(layout, str(kv.device))
        self.bytes_sent = 0

    async def remote_send(self, req: pb.RemoteSendRequest, trace: StepTrace | None = None
                          ) -> pb.RemoteSendResponse:
        t0 = time.perf_counter()
        addr = KVAddr.decode(req.kv_addr)
        tokens = list(req.tokens)
        end = resolve_end(req.end, len(tokens))
        if not 0 <= req.begin <= end:
            raise InvalidRequest(f"begin={req.begin} must be in [0, end={end}]")
        if end > addr.end:
            raise InvalidRequest(f"end={end} is past the receiver's reservation (end={addr.end})")
        # What the receiver already holds never crosses the wire.
        begin = max(req.begin, addr.matched_len)
        expected = self._layout.range_bytes(end - begin)
        response = pb.RemoteSendResponse(begin=begin, end=end, bytes_expected=expected)
        if begin >= end:
            response.total_ms = (time.perf_counter() - t0) * 1e3
            return response
        send_id = f"{req.request_id}#send"
        outputs = self._steps.watch(send_id)  # raises if this id is already sending from here
        try:
            transport = await asyncio.to_thread(self.pool.get, addr, req.transport)
            session = transport.open_session(addr.request_id)
        except BaseException:
            self._steps.unwatch(send_id)
            raise
        pump = LayerPump(session, self._kv, self._layout, begin, end,
                         lambda: self._steps.submit(lambda core: core.abort(send_id)))
        finished = False
        try:
            def start(core: Any) -> int:
                cached = int(core.match_prefix(tokens[:end]))
                core.add_send(send_id, tokens, begin, end, pump.on_layer, trace=trace,
                              first_token_due_ms=req.first_token_due_ms)
                return cached

            cached = await self._steps.call(start)
            t_compute = time.perf_counter()
            while (out := await outputs.get()).finish_reason is None:
                pass
            finished = True
            compute_ms = (time.perf_counter() - t_compute) * 1e3
            if pump.error is not None:
                raise pump.error
            if out.finish_reason != "sent":
                raise TransferError(out.error or f"send ended with {out.finish_reason}", "ABORTED")
            # Bounded by the bytes in flight (engine/transfer/base.py: ack_deadline_s).
            result = await asyncio.to_thread(session.finish)
        except BaseException:
            session.abort("the sender failed")
            if not finished:
                self._steps.submit(lambda core: core.abort(send_id))
            raise
        finally:
            self._steps.unwatch(send_id)
        if result.bytes_acked != expected:
            raise TransferError(
                f"only {result.bytes_acked} of {expected} KV bytes landed", "DATA_LOSS")
        self.bytes_sent += result.bytes_acked
        response.bytes_sent = result.bytes_acked
        response.transport = transport.name
        response.compute_ms = compute_ms
        response.transfer_ms = result.transfer_ms
        response.total_ms = (time.perf_counter() - t0) * 1e3
        response.tail_ms = result.tail_ms
        response.cached_on_sender = max(0, min(cached, end) - begin)
        if result.transfer_ms > 0:
            response.hidden_fraction = max(0.0, min(1.0, 1 - result.tail_ms / result.transfer_ms))
        return response

    def close(self) -> None:
        self.pool.close()
