"""A run's requests: the workload's first N shapes with their arrival offsets, from an arrival
process or from the trace's own timestamps times a time scale."""
from __future__ import annotations

from switchyard_bench.workloads.arrivals import Arrivals, scaled_trace_offsets
from switchyard_bench.workloads.base import WorkItem, Workload, WorkloadError


def schedule(workload: Workload, count: int, salt: int, arrivals: Arrivals | None,
             time_scale: float = 1.0, seed: int = 0) -> list[WorkItem]:
    if count < 1:
        raise WorkloadError(f"num-prompts must be >= 1, got {count}")
    size = workload.size()
    if size is not None and count > size:
        raise WorkloadError(f"{workload.name} has {size} requests from its start; asked for "
                            f"{count}")
    if arrivals is not None:
        offsets = arrivals.offsets(count, seed)
    else:
        trace = workload.trace_offsets(count)
        if trace is None:
            raise WorkloadError(f"the {workload.name} workload has no timestamps: give a rate")
        offsets = scaled_trace_offsets(trace, time_scale)
    return [WorkItem(t, *workload.shape(i, salt)) for i, t in enumerate(offsets)]
