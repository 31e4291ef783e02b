"""The policy-hook API: `@policy(name)` registers an async `route(req, cluster)` function.

A policy decides where a request goes from the cluster view and returns a typed placement —
`Dp(engine)`, `Pd(prefill, decode)`, `Split(lead, follow, at, lead_tokens)`, `Segment(engine,
max_tokens)` — or composes the verbs (`prep_recv`, `remote_send`) itself and returns what
`start_generate` returns; written as an async generator, it yields one placement per segment
(pyrouter/runtime/policy_run.py). router_core carries the placement out. The data-parallel
built-ins run in Rust (`builtin(name)`: a spec with no Python route). Built-ins live one per file
in `pyrouter/policies/` and are imported on first use; user policies load from a file or module.
docs/policies.md is the user's guide.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyrouter.errors import BadRequest

if TYPE_CHECKING:
    from pyrouter.cluster import ClusterView
    from pyrouter.request import RouterRequest
    from pyrouter.runtime.policy_run import Placement

# A coroutine returning one placement, or an async generator yielding one per segment.
RouteFn = Callable[["RouterRequest", "ClusterView"],
                   Awaitable["Placement"] | AsyncIterator["Placement"]]

# The built-in policies' names (docs/policies.md); each is the module pyrouter.policies.<name>.
BUILTIN_NAMES = ("round_robin", "least_load", "cache_aware", "pd", "balanced_pd", "tandem",
                 "slo_mux", "adaptive")


@dataclass(frozen=True, slots=True)
class Param:
    """One policy parameter: its default and what a value must be, checked when
    PUT /admin/policy sets it (a 400 naming it), so a value that would break every request
    never reaches one. `kind` defaults to the default's type (a float takes an int too; None:
    any); `ge`/`gt`/`le` bound a number; `choices` lists the values allowed; `nullable` lets
    None through; `check(value)` returns what is wrong with a value, or None."""

    default: Any
    kind: type | tuple[type, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    check: Callable[[Any], str | None] | None = None

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` for this parameter (None: nothing)."""
        if value is None:
            return None if self.nullable or self.default is None else "must not be null"
        kind = self.kind if self.kind is not None else (
            None if self.default is None else type(self.default))
        if kind is not None:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            if float in kinds:
                kinds = (*kinds, int)
            # bool is an int to Python, never to a parameter (and an int is never a bool).
            if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
                return "must be " + " or ".join(k.__name__ for k in kinds if k is not int
                                                or float not in kinds)
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.ge is not None and not value >= self.ge:
                return f"must be >= {self.ge:g}"
            if self.gt is not None and not value > self.gt:
                return f"must be > {self.gt:g}"
            if self.le is not None and not value <= self.le:
                return f"must be <= {self.le:g}"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {list(self.choices)}"
        return self.check(value) if self.check is not None else None


def comma_names(allowed: tuple[str, ...]) -> Callable[[Any], str | None]:
    """A Param check: a comma-separated list of some of `allowed` (e.g. "dp,pd")."""
    def problem(value: Any) -> str | None:
        names = {n.strip() for n in str(value).split(",") if n.strip()}
        if names and names <= set(allowed):
            return None
        return f"must name some of {','.join(allowed)} (comma-separated)"

    return problem


@dataclass(slots=True)
class PolicySpec:
    name: str
    route: RouteFn
    # Engine roles `switchyard serve` should start for this policy (cycled to --engines N).
    roles: tuple[str, ...] = ("any",)
    # Accepted parameters with defaults; PUT /admin/policy may override any of them.
    defaults: dict[str, Any] = field(default_factory=dict)
    doc: str = ""
    segmented: bool = False  # an async generator: one yielded stream per segment
    # What each parameter may be (a plain default declares its type only).
    schema: dict[str, Param] = field(default_factory=dict)
    # A built-in router_core runs itself (round_robin, least_load, cache_aware): `route` is
    # never called.
    in_rust: bool = False

    def __post_init__(self) -> None:
        self.segmented = inspect.isasyncgenfunction(self.route)
        for key, value in self.defaults.items():
            if isinstance(value, Param):
                self.schema[key] = value
            else:
                self.schema.setdefault(key, Param(value))
        self.defaults = {key: p.default for key, p in self.schema.items()}
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"policy name must be a simple identifier, got {self.name!r}")
        bad = [r for r in self.roles if r not in ("any", "prefill", "decode")]
        if bad or not self.roles:
            raise ValueError(f"policy {self.name!r}: roles must be any|prefill|decode, got {bad}")

    def engine_roles(self, n: int) -> list[str]:
        return list(itertools.islice(itertools.cycle(self.roles), max(n, len(self.roles))))

    def check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise BadRequest(f"policy {self.name!r} has no parameter(s) {unknown}; accepted: "
                             f"{sorted(self.defaults)}", param="params")
        merged = dict(self.defaults)
        for key, value in params.items():
            problem = self.schema[key].problem(value)
            if problem is not None:
                raise BadRequest(f"policy {self.name!r} parameter {key!r} {problem}, got "
                                 f"{value!r}"[:300], param=f"params.{key}",
                                 code="invalid_policy_param")
            merged[key] = value
        return merged


@dataclass(slots=True)
class ActivePolicy:
    """A policy with its parameters and private state; replaced wholesale on every switch."""

    spec: PolicySpec
    params: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def retire(self) -> None:
        """This policy is being replaced: any of its state that changed the engines (a
        `retire()` method, as pyrouter/planning/chunk_control.py's ChunkController has) puts
        them back, so the next policy starts from the engines as configured."""
        for value in self.state.values():
            retire = getattr(value, "retire", None)
            if callable(retire):
                retire()


_REGISTRY: dict[str, PolicySpec] = {}


def policy(name: str, *, roles: tuple[str, ...] = ("any",),
           params: dict[str, Any] | None = None) -> Callable[[RouteFn], RouteFn]:
    """Register `route(req, cluster)` under `name` (re-registering replaces: files reload).
    `params`: name -> default, or name -> Param(default, ...) to declare its range."""

    def register(fn: RouteFn) -> RouteFn:
        _REGISTRY[name] = PolicySpec(name, fn, roles, dict(params or {}), (fn.__doc__ or "").strip())
        return fn

    return register


async def _runs_in_rust(req: RouterRequest, cluster: ClusterView) -> Placement:
    raise RuntimeError("a Rust built-in is decided by router_core, never in Python")


def builtin(name: str, doc: str, params: dict[str, Any] | None = None) -> PolicySpec:
    """Register the Rust built-in `name` (router_core/src/front/fast_path.rs) with its
    parameters."""
    spec = PolicySpec(name, _runs_in_rust, ("any",), dict(params or {}), doc.strip(),
                      in_rust=True)
    _REGISTRY[name] = spec
    return spec


def get_policy(name: str) -> PolicySpec:
    if name not in _REGISTRY and name in BUILTIN_NAMES:
        try:
            importlib.import_module(f"pyrouter.policies.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"pyrouter.policies.{name}":
                raise
    try:
        return _REGISTRY[name]
    except KeyError:
        raise BadRequest(f"unknown policy {name!r}; available: {available()}",
                         param="policy") from None


def available() -> list[str]:
    builtin = [n for n in BUILTIN_NAMES
               if n in _REGISTRY or importlib.util.find_spec(f"pyrouter.policies.{n}")]
    return builtin + sorted(n for n in _REGISTRY if n not in BUILTIN_NAMES)


_file_counter = itertools.count()


def _register_from(label: str, action: Callable[[], object]) -> list[str]:
    """Run `action` (exec a file / import a module); the names it registered, or a 400."""
    before = dict(_REGISTRY)
    try:
        action()
    except FileNotFoundError:
        raise BadRequest(f"{label} does not exist", param="policy_file") from None
    except ImportError as exc:
        raise BadRequest(f"cannot import {label}: {exc}", param="policy_file") from exc
    except Exception as exc:  # user code: any error is a load failure, reported, not raised
        raise BadRequest(f"{label} failed to load: {exc!r}", param="policy_file") from exc
    new = [n for n, s in _REGISTRY.items() if before.get(n) is not s]
    if not new:
        raise BadRequest(f"{label} registers no @policy", param="policy_file")
    return new


def load_policy_file(path: str) -> list[str]:
    """Execute a policy file; returns the names it registered (in registration order)."""
    module_name = f"switchyard_user_policy_{next(_file_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise BadRequest(f"cannot load policy file {path!r}", param="policy_file")
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    return _register_from(f"policy file {path!r}", lambda: loader.exec_module(module))


def load_policy_module(module: str) -> list[str]:
    """Import a module of @policy functions (reloading it if it was imported before)."""
    def load() -> object:
        if module in sys.modules:
            return importlib.reload(sys.modules[module])
        return importlib.import_module(module)

    return _register_from(f"policy module {module!r}", load)


def load_policy_source(source: str) -> list[str]:
    """A path to a .py file, or a dotted module name (`mypkg.policies`)."""
    if source.endswith(".py") or "/" in source or os.path.exists(source):
        return load_policy_file(source)
    return load_policy_module(source)
