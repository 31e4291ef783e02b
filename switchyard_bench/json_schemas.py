"""The JSON schema structured-output benchmarks and tests constrain replies to: bounded strings
and numbers and an enum, so a small model's greedy reply ends within ~60 tokens."""
from __future__ import annotations

from typing import Any

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20},
                   "age": {"type": "integer", "minimum": 0, "maximum": 150},
                   "city": {"type": "string", "enum": ["Paris", "Berlin", "Rome"]}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
