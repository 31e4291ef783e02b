"""The one interface every KV transport implements (shm and tcp now, NCCL with the GPU issue).

A sender opens one `SendSession` per RemoteSend. From the step thread, for each layer slice the
prefill produced, it asks the session for a destination `buffer`, gathers the K/V into it (the
sender's only copy) and `commit`s it; a transport thread moves it while later layers compute.
`finish` blocks until the receiver has acknowledged every byte, then reports what moved.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple

import torch

# How long a finished send may wait for the receiver's last acknowledgement: a fixed allowance
# for a busy receiver plus the bytes still in flight at a bandwidth floor far below any link's
# (a loaded CPU receiver scatters hundreds of MB/s). A dead receiver fails the link at once
# (socket error); this bounds the wait on one that is alive but stuck.
ACK_BASE_S = 5.0
ACK_FLOOR_BYTES_PER_S = 20e6


def ack_deadline_s(bytes_in_flight: int) -> float:
    """Seconds to wait for the acknowledgement of `bytes_in_flight` bytes before giving up."""
    return ACK_BASE_S + max(0, bytes_in_flight) / ACK_FLOOR_BYTES_PER_S


class TransferError(RuntimeError):
    """A transfer that did not land. `code` names the gRPC status the server answers with."""

    def __init__(self, message: str, code: str = "UNAVAILABLE") -> None:
        super().__init__(message)
        self.code = code


class ChunkBuffer(NamedTuple):
    """Where the caller writes one chunk: `tensor` is [2, n, kv_heads, head_dim] (K then V)."""

    tensor: torch.Tensor
    # Byte offset in the shm staging area (-1 for transports that own private buffers).
    offset: int


@dataclass(slots=True)
class TransferResult:
    bytes_acked: int  # bytes the receiver wrote into its pages
    chunks: int
    transfer_ms: float  # first chunk committed -> receiver's final acknowledgement
    tail_ms: float  # finish() called (sender compute done) -> final acknowledgement
    receiver_busy_ms: float  # time the receiver spent taking chunks in and writing its pages


class SendSession(ABC):
    @abstractmethod
    def buffer(self, layer: int, start: int, stop: int) -> ChunkBuffer: ...

    @abstractmethod
    def commit(self, layer: int, start: int, stop: int, chunk: ChunkBuffer) -> None:
        """Send the chunk; a chunk it could not send (the session failed) is discarded."""

    @abstractmethod
    def discard(self, chunk: ChunkBuffer) -> None:
        """A chunk from `buffer` that will not be committed (filling it failed): free it."""

    @abstractmethod
    def finish(self, timeout_s: float | None = None) -> TransferResult:
        """Blocks until the receiver acknowledged everything; raises TransferError otherwise
        (also after `timeout_s`; None: ack_deadline_s of the bytes this session committed)."""

    @abstractmethod
    def abort(self, reason: str) -> None:
        """Give up: the receiver drops what it got (its lease frees the pages)."""


class Transport(ABC):
    """A link from this engine to one receiver engine."""

    name: str

    @abstractmethod
    def open_session(self, request_id: str) -> SendSession: ...

    @property
    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def close(self) -> None: ...
