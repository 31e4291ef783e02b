"""serve's run directory: one per address (host and port), private to this user. The supervisor
keeps there its lock, its state file (what it started: state.py), the engines' token and every
child's log. The same address always names the same directory, so a new `serve` finds what a
killed one left running, and the lock keeps a second supervisor off an address one already
holds."""
from __future__ import annotations

import fcntl
import os
import re
import stat
import tempfile
from pathlib import Path

RUN_DIR_ENV = "SWITCHYARD_RUN_DIR"  # where the run directories are made (default: runs_root)


class RunDirError(RuntimeError):
    """The run directory cannot be used: not this user's own, or another serve holds it."""


def runs_root() -> Path:
    """$SWITCHYARD_RUN_DIR, else $XDG_RUNTIME_DIR/switchyard, else /tmp/switchyard-UID."""
    configured = os.environ.get(RUN_DIR_ENV)
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "switchyard"
    return Path(tempfile.gettempdir()) / f"switchyard-{os.getuid()}"


def _own_dir(path: Path, forbidden_bits: int) -> None:
    """Make `path` (0700) or check that it is a directory of this user's with none of
    `forbidden_bits` set: in a shared /tmp another user could otherwise plant a state file
    naming their processes, or a link."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & forbidden_bits):
        raise RunDirError(f"{path} is not a directory of this user's that only they can write "
                          f"({stat.filemode(info.st_mode)}, owner uid {info.st_uid}); remove "
                          f"it or set {RUN_DIR_ENV} to another place")


class RunDir:
    """The run directory of one serve address; `open` makes it and takes its lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_fd: int | None = None

    @classmethod
    def for_address(cls, host: str, port: int, root: Path | None = None) -> RunDir:
        safe_host = re.sub(r"[^A-Za-z0-9.-]", "_", host) or "_"
        return cls((root or runs_root()) / f"serve-{safe_host}-{port}")

    @property
    def state_path(self) -> Path:
        return self.path / "serve-state.json"

    @property
    def token_path(self) -> Path:
        return self.path / "engine-token"

    def open(self) -> None:
        """Make the directory (the root may be group-readable; this one is private) and lock it
        for this process. RunDirError when another serve holds it."""
        _own_dir(self.path.parent, 0o022)
        _own_dir(self.path, 0o077)
        fd = os.open(self.path / "serve.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Released by the kernel when this process ends, however it ends: a supervisor
            # killed with SIGKILL leaves no stale lock behind.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunDirError(f"another switchyard serve (pid {holder}) supervises this address "
                              f"(run directory {self.path}); stop it first") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
