"""Several models behind one router, without processes: the --model values, the engines divided
among the models, an engine's group from its ModelInfo, and the view a model's policies get."""
from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest

from pyrouter.errors import NotFound
from pyrouter.model_groups import (
    ModelEngines,
    ModelSpec,
    engine_group,
    group_for,
    parse_model_args,
    split_engines,
)
from pyrouter.router_command import initial_policy
from pyrouter.serve import engine_specs, model_roles
from pyrouter.tokenizer import model_display_id


def test_one_model_keeps_its_file_name_and_several_take_their_names() -> None:
    assert parse_model_args(None) == [ModelSpec(model_display_id(None), None)]
    assert parse_model_args([]) == [ModelSpec(model_display_id(None), None)]
    assert parse_model_args("/m/tiny.gguf") == [ModelSpec("tiny", "/m/tiny.gguf")]
    assert parse_model_args(["/m/tiny.gguf"]) == [ModelSpec("tiny", "/m/tiny.gguf")]
    assert parse_model_args(["a=default", "b=/m/x.gguf"]) == [
        ModelSpec("a", None), ModelSpec("b", "/m/x.gguf")]
    # One named model is served under its name.
    assert parse_model_args(["chat=default"]) == [ModelSpec("chat", None)]


@pytest.mark.parametrize("values, problem", [
    (["a=default", "/m/x.gguf"], "each is NAME=PATH"),
    (["a=default", "a=/m/x.gguf"], "given twice"),
    (["default=default", "b=default"], "reserved"),
    (["a=default", "b="], "each is NAME=PATH"),
])
def test_bad_model_values_are_refused(values: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_model_args(values)


def test_engines_are_divided_among_models() -> None:
    assert split_engines(2, 2) == [1, 1]
    assert split_engines(5, 2) == [3, 2]
    assert split_engines(3, 1) == [3]
    with pytest.raises(ValueError, match="cannot serve 3 models"):
        split_engines(2, 3)


def _serve_args(*models: str, engines: int = 2) -> argparse.Namespace:
    return argparse.Namespace(model=list(models) or None, engines=engines, device="cpu",
                              mode=None, dtype=None, kv_memory=None, num_pages=None,
                              page_size=16, chunk_size=None, latency_profile=None,
                              mock_engines=False)


def test_serve_gives_each_model_its_share_with_its_policys_roles() -> None:
    args = _serve_args("a=default", "b=/m/x.gguf", engines=3)
    roles, served = model_roles(args, initial_policy("round_robin", None))
    assert roles == ["any"] * 3
    assert [m.name for m in served] == ["a", "a", "b"]
    specs = engine_specs(args, roles, None, served)
    assert [(s.model, s.served_model) for s in specs] == [
        (None, "a"), (None, "a"), ("/m/x.gguf", "b")]
    assert "--served-model-name" in specs[2].argv(1) and "b" in specs[2].argv(1)
    # pd needs a prefill and a decode engine per model.
    roles, served = model_roles(_serve_args("a=default", "b=default"), initial_policy("pd", None))
    assert roles == ["prefill", "decode", "prefill", "decode"]


def test_one_model_serves_as_before_models_were_grouped() -> None:
    args = _serve_args("/m/x.gguf")
    roles, served = model_roles(args, initial_policy("round_robin", None))
    specs = engine_specs(args, roles, None, served)
    assert [(s.model, s.served_model) for s in specs] == [("/m/x.gguf", None)] * 2
    assert all("--served-model-name" not in s.argv(1) for s in specs)


def test_an_engine_joins_the_model_its_model_info_names() -> None:
    assert engine_group(["only"], "anything") == "only"
    assert engine_group(["a", "b"], "b") == "b"
    assert engine_group(["a", "b"], "") == "a"  # an engine that names none: the first model
    assert engine_group(["a", "b"], "c") is None  # a model this router does not serve


class _Members:
    """The parts of EngineMembership a model's view reads."""

    def __init__(self, handles: list[Any]) -> None:
        self.engines = {h.id: h for h in handles}
        self.core = object()
        self.marked: list[str] = []

    def healthy(self) -> list[Any]:
        return [h for h in self.engines.values() if h.healthy]

    def mark_unhealthy(self, engine_id: str) -> None:
        self.marked.append(engine_id)


def test_a_models_view_offers_its_own_engines_only() -> None:
    handles = [SimpleNamespace(id=f"e{i}", model=m, healthy=h)
               for i, (m, h) in enumerate([("a", True), ("b", True), ("a", False), (None, True)])]
    members = _Members(handles)
    view = ModelEngines(members, "a")  # type: ignore[arg-type]
    assert sorted(view.engines) == ["e0", "e2"]
    assert [h.id for h in view.healthy()] == ["e0"]
    assert view.core is members.core
    view.mark_unhealthy("e0")
    assert members.marked == ["e0"]


def test_an_admin_call_names_a_served_model_or_none() -> None:
    groups: dict[str, Any] = {"a": "group a", "b": "group b"}
    assert group_for(groups, None, groups["a"]) == "group a"
    assert group_for(groups, "default", groups["a"]) == "group a"
    assert group_for(groups, "b", groups["a"]) == "group b"
    with pytest.raises(NotFound) as err:
        group_for(groups, "c", groups["a"])
    assert (err.value.status, err.value.code, err.value.param) == (404, "model_not_found",
                                                                    "model")
