"""`switchyard router --policy-dir DIR`: every `*.py` policy file in DIR, reloaded on change.

All files load at start, so `--policy NAME` and `PUT /admin/policy {"policy": NAME}` can name
any policy they register. A poll (cheap `stat` calls) notices a changed file and loads it again;
re-registering a name replaces it, and when the active policy is among the reloaded names, new
requests get the new code with the same parameters (in-flight ones finish under the old).

A Kubernetes ConfigMap volume updates by swapping a hidden `..data` symlink to a new directory,
so each file keeps its name but resolves to a new inode: the change key is the resolved file's
(inode, size, mtime), not the directory entry's. Hidden entries (`..data`, editors' swap files)
are skipped. A file that fails to load is reported and keeps its previous registration; a
removed file's policies stay registered (one may be serving) until the router restarts.
"""
from __future__ import annotations

import asyncio
import glob
import logging
import os
from collections.abc import Callable

from pyrouter.errors import BadRequest, Forbidden, NotFound
from pyrouter.runtime.policy_registry import load_policy_file

log = logging.getLogger("switchyard.router")

FileKey = tuple[int, int, int]  # (inode, size, mtime_ns) of the file a name resolves to


def _file_key(path: str) -> FileKey | None:
    try:
        st = os.stat(path)  # follows symlinks: the ConfigMap's current revision
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class PolicyDir:
    """The policy files of one directory and what each registered."""

    def __init__(self, directory: str,
                 on_reload: Callable[[list[str]], None] | None = None) -> None:
        if not os.path.isdir(directory):
            raise BadRequest(f"--policy-dir {directory!r} is not a directory", param="policy_dir")
        self.directory = directory
        self.on_reload = on_reload
        self.seen: dict[str, FileKey] = {}
        self.names: dict[str, list[str]] = {}  # file -> policy names it registered
        self.errors: dict[str, str] = {}  # file -> why its latest version failed to load
        self._outside: set[str] = set()  # links to files elsewhere, skipped (warned once)
        self._task: asyncio.Task[None] | None = None

    def resolve(self, name: str) -> str:
        """The policy file `name` names inside this directory (a file name, or a path that
        resolves inside it) — never a file elsewhere or a module: PUT /admin/policy
        {"file": ...} loads only from here."""
        if not name.endswith(".py") or "\x00" in name:
            raise Forbidden("'file' must name a *.py file in the router's --policy-dir",
                            param="file", code="policy_file_not_allowed")
        path = name if os.path.isabs(name) else os.path.join(self.directory, name)
        inside = os.path.realpath(self.directory) + os.sep
        # realpath follows symlinks and `..`: a ConfigMap's files (symlinks into a hidden
        # subdirectory) stay inside, a link or path to anywhere else does not.
        if not os.path.realpath(path).startswith(inside):
            raise Forbidden(f"policy file {name!r} is outside --policy-dir", param="file",
                            code="policy_file_not_allowed")
        if not os.path.isfile(path):
            raise NotFound(f"no policy file {name!r} in --policy-dir", param="file",
                           code="policy_file_not_found")
        return path

    def load_one(self, name: str) -> list[str]:
        """Load (or reload) one file of the directory now; the names it registered."""
        path = self.resolve(name)
        names = load_policy_file(path)
        key = _file_key(path)
        if key is not None:
            self.seen[path] = key
        self.names[path] = names
        self.errors.pop(path, None)
        return names

    def files(self) -> list[str]:
        """The directory's *.py files that resolve inside it: a link to a file elsewhere is
        skipped at start and on change, as PUT /admin/policy refuses it."""
        inside = os.path.realpath(self.directory) + os.sep
        found = []
        for path in sorted(glob.glob(os.path.join(self.directory, "*.py"))):
            if os.path.realpath(path).startswith(inside):
                found.append(path)
            elif path not in self._outside:
                self._outside.add(path)
                log.warning("policy file %s points outside --policy-dir; not loaded", path)
        return found

    def load_all(self) -> list[str]:
        """Load every file now (at start); a broken file is an error: the router would start
        without a policy the operator shipped."""
        for path in self.files():
            key = _file_key(path)
            if key is None:
                continue
            self.names[path] = load_policy_file(path)
            self.seen[path] = key
        return [n for names in self.names.values() for n in names]

    def poll(self) -> list[str]:
        """Reload changed or new files; returns the policy names (re)registered."""
        reloaded: list[str] = []
        current = set(self.files())
        for path in sorted(set(self.seen) - current):
            log.warning("policy file %s was removed; its policies %s stay registered", path,
                        self.names.get(path, []))
            self.seen.pop(path)
        for path in sorted(current):
            key = _file_key(path)
            if key is None or self.seen.get(path) == key:
                continue
            self.seen[path] = key
            try:
                names = load_policy_file(path)
            except BadRequest as exc:
                self.errors[path] = exc.message
                log.error("policy file %s not reloaded: %s", path, exc.message)
                continue
            self.errors.pop(path, None)
            self.names[path] = names
            reloaded += names
            log.info("policy file %s (re)loaded: %s", path, names)
        if reloaded and self.on_reload is not None:
            self.on_reload(reloaded)
        return reloaded

    async def _run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.poll()
            except Exception:  # never let one odd file end the watcher
                log.exception("policy directory %s: poll failed", self.directory)

    def start(self, interval_s: float = 2.0) -> None:
        if interval_s <= 0:
            raise ValueError("policy directory poll interval must be > 0")
        if self._task is None:
            self._task = asyncio.create_task(self._run(interval_s))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
