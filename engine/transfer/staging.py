"""The shared-memory staging area behind the `shm` transport.

The sender owns one area per receiver link: a file in /dev/shm mapped on both sides and viewed as a
torch uint8 tensor. The sender gathers a layer's K/V straight from its pages into the area (its one
copy), the receiver scatters from the area into its own pages (its one copy). Space is handed out
as a FIFO ring: the receiver processes chunks in order and acknowledges the latest one it has
consumed whenever it would otherwise wait (one ack for a burst of chunks), which frees it and
every chunk before it.
The file name is unlinked as soon as the receiver has mapped it, so a crash leaks nothing.
"""
from __future__ import annotations

import mmap
import os
import tempfile
import threading
import time
import uuid
from collections import deque
from typing import Protocol

import torch

_ALIGN = 64
SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class StagingTimeout(TimeoutError):
    """The receiver did not free staging space in time (stalled or dead)."""


def _map_file(path: str, nbytes: int, create: bool) -> mmap.mmap:
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, nbytes)
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


class _MappedArea:
    def __init__(self, path: str, nbytes: int, create: bool) -> None:
        self.path = path
        self.nbytes = nbytes
        # Every tensor made from this one holds the mmap object, and the mapping goes only
        # when the last of them does (see close).
        self.bytes: torch.Tensor | None = torch.frombuffer(
            _map_file(path, nbytes, create), dtype=torch.uint8)

    def view(self, offset: int, nbytes: int) -> torch.Tensor:
        if self.bytes is None:
            raise StagingTimeout("staging area closed: the link to the receiver is down")
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"staging range [{offset}, {offset + nbytes}) outside {self.nbytes}")
        return self.bytes[offset : offset + nbytes]

    def close(self) -> None:
        # Never mmap.close(): torch.frombuffer does not pin the buffer, so unmapping would
        # succeed while another thread still gathers into (or scatters from) a view of it, and
        # that thread would then crash the whole process (SIGSEGV) — a link dies on its ack
        # thread while the sender is mid-layer whenever the receiver is killed. Dropping our
        # reference unmaps the area once the last view in use is gone.
        self.bytes = None


class StagingArea(Protocol):
    """What a socket link needs of its sender-side staging: FIFO chunks, a tensor view of each,
    and the HELLO fields that let the receiver map the same bytes."""

    nbytes: int

    def alloc(self, nbytes: int, timeout_s: float) -> int: ...

    def release(self, offset: int) -> None: ...

    def discard(self, offset: int) -> None: ...

    def view(self, offset: int, nbytes: int) -> torch.Tensor: ...

    def hello(self) -> dict[str, object]: ...

    def unlink(self) -> None: ...

    def close(self) -> None: ...


class FifoRing:
    """Hands out byte ranges of an area of `nbytes` in FIFO order: the receiver processes chunks in
    order and acknowledges each, which frees the oldest. The area itself is the subclass's (a
    /dev/shm mapping here, device memory for CUDA IPC)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self._head = 0
        self._inflight: deque[tuple[int, int]] = deque()
        # Chunks allocated and never sent (their send failed in between): no ack will name
        # them, so they are freed once every chunk before them is.
        self._discarded: set[int] = set()
        self._cond = threading.Condition()
        self._closed = False

    def _fit(self, size: int) -> int | None:
        if not self._inflight:
            self._head = 0
            return 0 if size <= self.nbytes else None
        tail = self._inflight[0][0]
        # Strict inequalities keep head == tail meaning "empty", never "full".
        if self._head >= tail:
            if size <= self.nbytes - self._head:
                return self._head
            return 0 if size < tail else None
        return self._head if size < tail - self._head else None

    def alloc(self, nbytes: int, timeout_s: float) -> int:
        size = (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        if size > self.nbytes:
            raise ValueError(f"chunk of {nbytes} bytes exceeds the {self.nbytes}-byte staging area")
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._closed:
                    raise StagingTimeout("staging area closed: the link to the receiver is down")
                if (offset := self._fit(size)) is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StagingTimeout("staging area full: the receiver stopped consuming")
                self._cond.wait(remaining)
            self._inflight.append((offset, size))
            self._head = offset + size
            return offset

    def release(self, offset: int) -> None:
        """Free the chunk at `offset` and every chunk allocated before it (acks are
        cumulative: the receiver consumes chunks in order and acknowledges the latest)."""
        with self._cond:
            if all(start != offset for start, _ in self._inflight):
                raise RuntimeError(f"staging release of offset {offset}, which is not in flight")
            while True:
                start, _ = self._inflight.popleft()
                self._discarded.discard(start)  # a later chunk's ack freed it first
                if start == offset:
                    break
            self._drop_discarded()
            self._cond.notify_all()

    def discard(self, offset: int) -> None:
        """The chunk at `offset` will never be sent: free it as soon as it is the oldest (a
        chunk nobody acknowledges would otherwise hold the ring until a later chunk's ack, and
        forever when none comes)."""
        with self._cond:
            if all(start != offset for start, _ in self._inflight):
                return  # already freed by a later chunk's ack
            self._discarded.add(offset)
            self._drop_discarded()
            self._cond.notify_all()

    def _drop_discarded(self) -> None:
        while self._inflight and self._inflight[0][0] in self._discarded:
            self._discarded.discard(self._inflight.popleft()[0])

    def in_flight(self) -> int:
        with self._cond:
            return len(self._inflight)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class StagingRing(_MappedArea, FifoRing):
    """Sender side: creates the area and allocates chunks from it in FIFO order."""

    def __init__(self, nbytes: int) -> None:
        path = os.path.join(SHM_DIR, f"switchyard-kv-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        _MappedArea.__init__(self, path, nbytes, create=True)
        FifoRing.__init__(self, nbytes)
        # Touch every page now so the first transfer does not pay page faults.
        self.view(0, nbytes).zero_()

    def hello(self) -> dict[str, object]:
        """What the receiver needs to map the area (sent in the link's HELLO frame)."""
        return {"shm_path": self.path, "shm_bytes": self.nbytes}

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        FifoRing.close(self)
        self.unlink()
        _MappedArea.close(self)


class AttachedStaging(_MappedArea):
    """Receiver side: maps the sender's area by path."""

    def __init__(self, path: str, nbytes: int) -> None:
        if not os.path.realpath(path).startswith(os.path.realpath(SHM_DIR) + os.sep):
            raise ValueError(f"refusing to map {path!r}: not in {SHM_DIR}")
        super().__init__(path, nbytes, create=False)
