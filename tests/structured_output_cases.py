"""The JSON schema the structured-output tests constrain replies to (engine and router tests):
the benchmarks' own (switchyard_bench/json_schemas.py), so tests and figures check one schema."""
from __future__ import annotations

from switchyard_bench.json_schemas import PERSON

__all__ = ["PERSON"]
