"""Where the workload data files live: switchyard_bench/data/, shipped inside the package (sources
and licences in its README.md) and found through importlib.resources, so an installed
`switchyard bench` finds them as a checkout does; or any path the user gives."""
from __future__ import annotations

import os
from importlib.resources import files

from switchyard_bench.workloads.base import WorkloadError

# A wheel installs the package as plain files, so the folder is a real path.
DATA_DIR = str(files("switchyard_bench").joinpath("data"))

SONNET = "sonnet.txt"
MOONCAKE_CONVERSATION = "mooncake_conversation_trace.jsonl"
AZURE_CODE = "azure_llm_2023_code.csv"


def data_path(path_or_name: str) -> str:
    """A path as given if it exists, else the file of that name in switchyard_bench/data/."""
    if os.path.isfile(path_or_name):
        return path_or_name
    bundled = os.path.join(DATA_DIR, path_or_name)
    if os.path.isfile(bundled):
        return bundled
    raise WorkloadError(f"workload data file {path_or_name!r} not found (looked here and in "
                        f"{DATA_DIR})")
