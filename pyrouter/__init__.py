"""pyrouter: Switchyard's Python router (HTTP API, policy hooks, admin).

Write a policy with `from pyrouter import policy` (see pyrouter/policy_registry.py).
"""
from __future__ import annotations

from pyrouter.policy_registry import policy

__all__ = ["policy"]
