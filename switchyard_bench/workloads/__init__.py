"""Benchmark workloads: each yields (arrival offset, prompt token ids, max_tokens) requests.

sonnet (LLMPerf-style prompts of a target token length), mooncake (trace replay with real shared
prefixes), azure-code (trace replay), shifting (prefill-heavy / decode-heavy phases). Used by
`switchyard bench serve` and loadtest/locustfile.py.
"""
from switchyard_bench.workloads.arrivals import ArrivalProcess
from switchyard_bench.workloads.base import RequestShape, WorkItem, Workload, WorkloadError
from switchyard_bench.workloads.options import WORKLOADS, add_workload_arguments, build_workload
from switchyard_bench.workloads.schedule import schedule
from switchyard_bench.workloads.vocabulary import RealVocabulary

__all__ = ["WORKLOADS", "ArrivalProcess", "RealVocabulary", "RequestShape", "WorkItem",
           "Workload", "WorkloadError", "add_workload_arguments", "build_workload", "schedule"]
