"""GGUF metadata access without torch: the router reads the tokenizer through this, so a router
process never imports the model stack."""
from __future__ import annotations

from typing import Any

from gguf import GGUFReader, GGUFValueType


class GGUFFormatError(ValueError):
    """The GGUF file is not a Llama-family model this engine can load."""


def field_value(reader: GGUFReader, key: str, default: Any = None) -> Any:
    """A metadata value as a Python scalar, str or list (None/default when absent)."""
    field = reader.fields.get(key)
    if field is None:
        return default
    if field.types and field.types[0] == GGUFValueType.ARRAY:
        if len(field.types) > 1 and field.types[1] == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if field.types and field.types[0] == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


def open_gguf(path: str) -> GGUFReader:
    try:
        return GGUFReader(path, "r")
    except (ValueError, OSError) as err:
        raise GGUFFormatError(f"cannot read GGUF file {path}: {err}") from err
