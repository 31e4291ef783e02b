"""Where GPU checks leave their numbers: `$SWITCHYARD_GPU_RESULTS/<name>.json` (check.sh sets it;
unset, nothing is written)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def record(name: str, data: dict[str, Any]) -> None:
    directory = os.environ.get("SWITCHYARD_GPU_RESULTS")
    if not directory:
        return
    path = Path(directory) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(path.read_text()) if path.exists() else {}
    merged.update(data)
    path.write_text(json.dumps(merged, indent=2, sort_keys=True, default=str))


if __name__ == "__main__":
    # check.sh: `python -m tests.gpu.results STAGE STATUS` records one stage's outcome.
    import sys

    record("stages", {sys.argv[1]: " ".join(sys.argv[2:])})
