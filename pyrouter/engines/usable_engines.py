"""UsableEngines: one directory's engines as a policy chooses among them — healthy and not
draining, by role, in id order, and every engine by its router_core number — rebuilt only when
the roster moved (pyrouter/engines/roster.py), so that a request's view of a 1,024-engine fleet
costs a lookup, not a pass over the fleet."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyrouter.degrade import serves
from pyrouter.engines.handle import EngineHandle
from pyrouter.engines.roster import roster_version

if TYPE_CHECKING:
    from pyrouter.cluster import EngineDirectory


class UsableEngines:
    """The listing of one directory, as of a roster version."""

    # It holds no reference to its directory (the directory holds it): each call names it.
    def __init__(self) -> None:
        self._version = -1
        self._by_role: dict[str, tuple[EngineHandle, ...]] = {}
        self._by_num: dict[int, EngineHandle] = {}
        self._nums_by_role: dict[str, tuple[int, ...]] = {}

    def _fresh(self, directory: EngineDirectory) -> None:
        version = roster_version()
        if version != self._version:
            self._by_role = {}
            self._nums_by_role = {}
            self._by_num = {e.num: e for e in directory.engines.values()}
            self._version = version

    def of_role(self, directory: EngineDirectory, role: str) -> tuple[EngineHandle, ...]:
        """Healthy, non-draining engines that can take `role` work, in id order."""
        self._fresh(directory)
        listed = self._by_role.get(role)
        if listed is None:
            listed = tuple(sorted((e for e in directory.healthy() if serves(e.role, role)),
                                  key=lambda e: e.num))
            self._by_role[role] = listed
        return listed

    def nums_of_role(self, directory: EngineDirectory, role: str) -> tuple[int, ...]:
        """The router_core numbers of `of_role`'s engines."""
        self._fresh(directory)
        nums = self._nums_by_role.get(role)
        if nums is None:
            nums = tuple(e.num for e in self.of_role(directory, role))
            self._nums_by_role[role] = nums
        return nums

    def by_num(self, directory: EngineDirectory) -> dict[int, EngineHandle]:
        """Every engine of the directory, healthy or not, by its router_core number (read only)."""
        self._fresh(directory)
        return self._by_num


# One per directory, kept on the directory itself so that it lives exactly as long. (A module
# map keyed weakly by directory kept every directory alive for ever: its listing holds the
# directory's handles, and a handle reaches its directory (a simulated engine's client calls
# back into its cluster), so the key never died: a tournament process grew by a whole
# simulated cluster per run.)
_ATTRIBUTE = "_usable_engines"


def _of(directory: EngineDirectory) -> UsableEngines:
    usable = getattr(directory, _ATTRIBUTE, None)
    if usable is None:
        usable = UsableEngines()
        setattr(directory, _ATTRIBUTE, usable)
    return usable


def usable_of_role(directory: EngineDirectory, role: str) -> tuple[EngineHandle, ...]:
    """`directory`'s healthy, non-draining engines that can take `role` work, in id order."""
    return _of(directory).of_role(directory, role)


def usable_nums(directory: EngineDirectory, role: str) -> tuple[int, ...]:
    """The router_core numbers of `usable_of_role(directory, role)`."""
    return _of(directory).nums_of_role(directory, role)


def engines_by_num(directory: EngineDirectory) -> dict[int, EngineHandle]:
    """Every engine of `directory` by its router_core number (read only)."""
    return _of(directory).by_num(directory)
