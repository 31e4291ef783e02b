"""Several models behind one router: the `--model` values, and each model's group.

`--model PATH` (once) serves one model named after its file, as always. `--model NAME=PATH`
(repeatable; PATH a GGUF file, a Hugging Face directory, or `default` for SmolLM2) serves each
under NAME: a request's `model` picks the group, and each group has its own tokenizer in the
Rust front, its own engines and its own policy. An engine's group is the model its ModelInfo
names (`served_model`, set by `switchyard engine --served-model-name`); an engine naming none
belongs to the first model, one naming a model this router does not serve to none.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyrouter.cluster import EngineDirectory
from pyrouter.engines.handle import EngineHandle
from pyrouter.errors import NotFound
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.tokenizer import model_display_id
from router_core import RouterCore
from switchyard_tokenizer.tokenizer import EngineTokenizer

if TYPE_CHECKING:
    from pyrouter.engines.membership import EngineMembership

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
DEFAULT_PATH = "default"  # NAME=default: the default model (SmolLM2)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One served model: the id requests name and /v1/models lists, and where it is read from
    (None: the default model)."""

    name: str
    path: str | None


def _named(value: str) -> tuple[str, str] | None:
    name, sep, path = value.partition("=")
    return (name, path) if sep and path and _NAME.fullmatch(name) else None


def parse_model_args(values: str | Sequence[str] | None) -> list[ModelSpec]:
    """The `--model` values as the served models, the default first. ValueError for names
    given twice, several values not all NAME=PATH, or "default" as a name."""
    if values is None or isinstance(values, str):
        values = [] if values is None else [values]
    if not values:
        return [ModelSpec(model_display_id(None), None)]
    if len(values) == 1 and _named(values[0]) is None:
        return [ModelSpec(model_display_id(values[0]), values[0])]
    specs: list[ModelSpec] = []
    for value in values:
        named = _named(value)
        if named is None:
            raise ValueError(f"--model {value!r}: with several models each is NAME=PATH "
                             "(PATH a GGUF file, a model directory or 'default')")
        name, path = named
        if name == DEFAULT_PATH or any(s.name == name for s in specs):
            raise ValueError(f"--model {value!r}: the name {name!r} is "
                             + ("reserved" if name == DEFAULT_PATH else "given twice"))
        specs.append(ModelSpec(name, None if path == DEFAULT_PATH else path))
    return specs


def split_engines(engines: int, models: int) -> list[int]:
    """`--engines` divided among the models as evenly as it goes (the first ones get the rest).
    ValueError when there are fewer engines than models."""
    if engines < models:
        raise ValueError(f"--engines {engines} cannot serve {models} models (one engine each "
                         "at least)")
    return [engines // models + (1 if i < engines % models else 0) for i in range(models)]


class ModelEngines:
    """One model's engines, as a policy's cluster view sees them (an EngineDirectory): the
    members whose model it is. Scores, predictions and loads come from the shared router core;
    the view offers only these engines, so no policy sends a request to another model's."""

    def __init__(self, members: EngineMembership, model: str) -> None:
        self._members = members
        self.model = model

    @property
    def engines(self) -> dict[str, EngineHandle]:
        return {i: e for i, e in self._members.engines.items() if e.model == self.model}

    @property
    def core(self) -> RouterCore:
        return self._members.core

    def healthy(self) -> list[EngineHandle]:
        return [e for e in self._members.healthy() if e.model == self.model]

    def mark_unhealthy(self, engine_id: str) -> None:
        self._members.mark_unhealthy(engine_id)


@dataclass(slots=True)
class ModelGroup:
    """A served model's share of the router: its engines, its policy and its dispatcher."""

    spec: ModelSpec
    engines: EngineDirectory
    slot: PolicySlot
    dispatcher: Dispatcher
    # How its prompts read (the Rust front holds its own copy); None: the router's first.
    tokenizer: EngineTokenizer | None = None

    @property
    def name(self) -> str:
        return self.spec.name


def group_for(groups: dict[str, ModelGroup], model: str | None,
              default: ModelGroup) -> ModelGroup:
    """The group a name picks (None or "default": `default`); 404 `model_not_found` for
    others."""
    if model is None or model == DEFAULT_PATH:
        return default
    if not isinstance(model, str) or model not in groups:
        raise NotFound(f"model {model!r} is not served here; use one of {sorted(groups)}",
                       param="model", code="model_not_found")
    return groups[model]


def engine_group(names: Sequence[str], served_model: str) -> str | None:
    """The group of an engine whose ModelInfo names `served_model` ("" = none), among the
    router's models `names` (the default first): with one model, always that one."""
    if len(names) <= 1:
        return names[0] if names else None
    if not served_model:
        return names[0]
    return served_model if served_model in names else None

