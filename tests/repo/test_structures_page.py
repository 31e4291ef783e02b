"""docs/structures.md stays true: every path it names exists, every package imports only what its
row allows, and the request-path picture names files that exist and was drawn from its source."""
from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "structures.md"
SKIP_DIRS = {".git", ".venv", "target", "node_modules", "__pycache__", ".gpu-bundle"}
OUR_PACKAGES = {"pyrouter", "engine", "router_core", "switchyard_rpc", "switchyard_engine_api",
                "switchyard_tokenizer", "switchyard_telemetry", "loadtest", "switchyard_bench",
                "switchyard_sim"}
GENERATED = {"switchyard_rpc/"}  # written by `make proto`, git-ignored


def _repo_files() -> list[str]:
    found = []
    for directory, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = os.path.relpath(directory, ROOT)
        found += [os.path.normpath(os.path.join(rel, name)) for name in files]
    return found


def _named_paths(text: str) -> set[str]:
    """Backticked words that are paths: a slash or a file ending, nothing to expand."""
    words = set(re.findall(r"`([^`\s]+)`", text))
    return {w for w in words if re.fullmatch(r"[\w./-]+", w) and not w.startswith((".", "-"))
            and ("/" in w or re.search(r"\.(py|rs|md|toml|sh|svg|proto|pyi)$", w))}


def test_every_path_the_page_names_exists():
    files = _repo_files()
    dirs = {os.path.dirname(f) for f in files}
    dirs |= {d.rsplit("/", i)[0] for d in dirs for i in range(d.count("/") + 1)}
    missing = []
    for name in sorted(_named_paths(PAGE.read_text(encoding="utf-8"))):
        if name in GENERATED:
            continue
        path = name.rstrip("/")
        if name.split("/")[0] in {*OUR_PACKAGES, "docs", "tests", "deploy", "proto"}:
            ok = (ROOT / path).exists()  # from the repository's root
        else:  # a name relative to the section's package: some file or folder ends with it
            ok = any(f == path or f.endswith("/" + path) for f in files) or any(
                d.endswith("/" + path) for d in dirs)
        if not ok:
            missing.append(name)
    assert not missing, f"docs/structures.md names paths that do not exist: {missing}"


def _table_rows() -> list[tuple[list[str], str]]:
    """(the row's package paths, its may-import cell) for each row of the package table."""
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[2]))
    return rows


def _row_of(path: str, rows: list[tuple[list[str], str]]) -> int | None:
    """The row whose package holds `path` (the longest package path that does)."""
    best, length = None, -1
    for index, (packages, _) in enumerate(rows):
        for package in packages:
            stem = package.rstrip("/")
            if (path == stem or path.startswith(stem + "/")) and len(stem) > length:
                best, length = index, len(stem)
    return best


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return [n for n in names if n.split(".")[0] in OUR_PACKAGES]


def _module_path(module: str) -> str | None:
    """A module's path in the repository (a file or a package folder), or None if not ours."""
    base = module.replace(".", "/")
    for candidate in (base + ".py", base + "/__init__.py", base + ".pyi"):
        if (ROOT / candidate).exists():
            return candidate.removesuffix("/__init__.py")
    return base if (ROOT / base).is_dir() else None


def test_each_package_imports_only_what_its_row_allows():
    rows = _table_rows()
    assert len(rows) >= 8, "the package table did not parse"
    allowed_by_row = [re.findall(r"`([^`]+)`", cell) for _, cell in rows]
    wrong = set()
    for packages, _ in rows:
        for package in packages:
            if not package.endswith("/") or package.split("/")[0] not in OUR_PACKAGES:
                continue
            for source in (ROOT / package).rglob("*.py"):
                rel = str(source.relative_to(ROOT))
                home = _row_of(rel, rows)
                if home is None or "everything" in rows[home][1]:
                    continue
                for module in _imports(source):
                    target = _module_path(module)
                    if target is None or _row_of(target, rows) == home:
                        continue
                    allowed = [a.rstrip("/").removesuffix(".py") for a in allowed_by_row[home]]
                    stem = target.removesuffix(".py")
                    if not any(stem == a or stem.startswith(a + "/") for a in allowed):
                        wrong.add(f"{rel} imports {module}")
    assert not wrong, "imports docs/structures.md does not allow:\n" + "\n".join(sorted(wrong))


def test_the_request_path_picture_is_drawn_from_its_source():
    script = ROOT / "docs" / "diagrams" / "request_path.py"
    spec = importlib.util.spec_from_file_location("request_path", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [p for p in module.named_paths() if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, f"the request-path picture names paths that do not exist: {missing}"
    svg = (ROOT / "docs" / "diagrams" / "request_path.svg").read_text(encoding="utf-8")
    for _, _, _, _, text in module.NODES.values():
        # text is kept as text (svg.fonttype none): a box missing here means a stale picture
        assert text.split("\n")[0] in svg, f"request_path.svg is stale: rerun {script.name}"
    assert "diagrams/request_path.svg" in PAGE.read_text(encoding="utf-8")
