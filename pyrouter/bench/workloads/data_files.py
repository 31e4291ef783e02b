"""Where the workload data files live: loadtest/data/ in the repository (sources and licences in
its README.md), or any path the user gives."""
from __future__ import annotations

import os

from pyrouter.bench.workloads.base import WorkloadError

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), "loadtest", "data")

SONNET = "sonnet.txt"
MOONCAKE_CONVERSATION = "mooncake_conversation_trace.jsonl"
AZURE_CODE = "azure_llm_2023_code.csv"


def data_path(path_or_name: str) -> str:
    """A path as given if it exists, else the file of that name in loadtest/data/."""
    if os.path.isfile(path_or_name):
        return path_or_name
    bundled = os.path.join(DATA_DIR, path_or_name)
    if os.path.isfile(bundled):
        return bundled
    raise WorkloadError(f"workload data file {path_or_name!r} not found (looked here and in "
                        f"{DATA_DIR})")
