"""Packages that depend on each other one way only: the lower never imports the upper, neither at
top level nor inside a function (where an import hides a cycle from the import system but not
from a reader), nor by a module path in a string (a lazy command table like pyrouter/cli.py's).

- switchyard_bench drives the simulator (`switchyard bench simulate`, the tournament), so
  switchyard_sim, the simulated cluster and FakeCluster, imports nothing of the bench.
- engine.core (the scheduler and EngineCore) drives the model runner and the attention backends;
  what they share of a step is engine/batch.py, below all three.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (upper, lower): the upper may import the lower, never the other way.
ONE_WAY = [
    ("switchyard_bench", "switchyard_sim"),
    ("engine.core", "engine.model"),
    ("engine.core", "engine.attention"),
]
_MODULE_STRING = re.compile(r"[A-Za-z_]\w*(\.\w+)+(:\w+)?")


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, path: Path, root: Path) -> str:
    """`from ..x import y` in `path` as the absolute module it names."""
    if node.level == 0:
        return node.module or ""
    package = _module_of(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` names for import: import statements anywhere in the file (function
    bodies and TYPE_CHECKING blocks included) and "pkg.module[:attr]" strings."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, path, root)
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _MODULE_STRING.fullmatch(node.value)):
            found.add(node.value.split(":")[0])
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _sources(package: str) -> list[Path]:
    folder = ROOT / package.replace(".", "/")
    sources = sorted(folder.rglob("*.py"))
    assert sources, f"no modules found under {folder}"
    return sources


def test_each_lower_package_imports_nothing_of_its_upper():
    wrong = []
    for upper, lower in ONE_WAY:
        for source in _sources(lower):
            back = {m for m in imported_modules(source) if _within(m, upper)}
            back = {m for m in back if not any(m.startswith(other + ".") for other in back)}
            if back:
                wrong.append(f"{source.relative_to(ROOT)} ({lower}) imports {sorted(back)} ({upper})")
    assert not wrong, "a package cycle is back:\n" + "\n".join(wrong)


def test_each_upper_package_does_use_its_lower():
    """A pair whose upper no longer imports its lower goes, so the list says what is true."""
    unused = [(upper, lower) for upper, lower in ONE_WAY
              if not any(_within(m, lower) for source in _sources(upper)
                         for m in imported_modules(source))]
    assert not unused, f"ONE_WAY names pairs that no longer depend on each other: {unused}"


def test_function_local_and_relative_imports_are_seen(tmp_path: Path):
    """The scan finds what the import system would only meet at call time."""
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    source = package / "mod.py"
    source.write_text("def f():\n    from ..other import thing\n    import a.b\n"
                      "    return {'cmd': 'c.d:run'}\n")
    found = imported_modules(source, tmp_path)
    assert {"pkg.other", "pkg.other.thing", "a.b", "c.d"} <= found
