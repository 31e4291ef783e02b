"""docs/policies.md's example policy (`lead_follow`), extracted from the page and registered, so
tests exercise exactly what a user copies (imported by tests; holds no tests)."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from pyrouter.runtime.policy_registry import load_policy_file

DOCS = Path(__file__).resolve().parents[2] / "docs" / "policies.md"


def docs_example_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    return next(b for b in blocks if '@policy("lead_follow"' in b)


def write_docs_example(directory: str | None = None) -> str:
    """The example as a .py file (the path a user would pass to --policy-file)."""
    with tempfile.NamedTemporaryFile("w", suffix="_lead_follow.py", delete=False,
                                     dir=directory) as f:
        f.write(docs_example_source())
    return f.name


def register_docs_example() -> str:
    assert load_policy_file(write_docs_example()) == ["lead_follow"]
    return "lead_follow"


LEAD_FOLLOW = register_docs_example()
