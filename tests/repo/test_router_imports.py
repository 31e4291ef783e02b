"""The router never imports the engine's package: what both sides need lives in switchyard_engine_api
(wire protocol, sampling rules and their errors) and switchyard_tokenizer. Only the commands that
start engines (`switchyard serve` and its supervisor, and the `switchyard engine` flags the
command line registers) reach into engine/, and only for its launcher."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The launcher commands, and the engine modules each may import.
LAUNCHERS = {
    "pyrouter/cli.py": {"engine.server.args"},
    "pyrouter/serve.py": {"engine.server.cpu_affinity", "engine.server.launcher"},
    "pyrouter/supervisor/supervise.py": {"engine.server.launcher"},
    "pyrouter/supervisor/engine_child.py": {"engine.server.launcher"},
    "pyrouter/supervisor/router_child.py": {"engine.server.launcher"},
}


def _engine_imports(path: Path) -> set[str]:
    """Every module of the `engine` package `path` imports, at top level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name == "engine" or name.startswith("engine.")}


def test_router_modules_do_not_import_the_engine():
    wrong = []
    sources = sorted((ROOT / "pyrouter").rglob("*.py"))
    assert len(sources) > 50, "pyrouter's modules were not found"
    for source in sources:
        rel = source.relative_to(ROOT).as_posix()
        extra = _engine_imports(source) - LAUNCHERS.get(rel, set())
        if extra:
            wrong.append(f"{rel} imports {sorted(extra)}")
    assert not wrong, "the router imports the engine's package:\n" + "\n".join(wrong)


def test_the_launcher_exceptions_are_still_needed():
    """An exception no longer used goes, so the list says what is true."""
    unused = [rel for rel, allowed in LAUNCHERS.items()
              if not allowed <= _engine_imports(ROOT / rel)]
    assert not unused, f"LAUNCHERS allows imports these files no longer make: {unused}"


def test_the_shared_packages_import_neither_side():
    wrong = []
    for package in ("switchyard_engine_api", "switchyard_tokenizer"):
        for source in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(source.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module
                         else [])
                wrong += [f"{source.relative_to(ROOT)} imports {n}" for n in names
                          if n.split(".")[0] in {"engine", "pyrouter", "switchyard_bench"}]
    assert not wrong, "\n".join(wrong)
