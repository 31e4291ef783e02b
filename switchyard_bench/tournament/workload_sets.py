"""Which workloads a tournament runs, and which set each belongs to: the tuning set a change to
a policy may be fitted on, or the check set it is judged on out of sample.

`--workloads` takes the named workloads, `gen-N` (the generated workload of generator seed N,
switchyard_bench/workloads/synthetic.py) and `random:K`, which expands to K generated workloads
from the seeds `--split` selects, in increasing order: `tune` the even seeds 0, 2, 4, ...,
`check` the odd seeds 1, 3, 5, ..., `all` every seed 0, 1, 2, ....

The rule: a generated workload of an even seed is in the tuning set, of an odd seed in the check
set. The named workloads are in the tuning set, as every change to adaptive so far was fitted on
them. Fixed by the seed alone, so a workload never changes set between runs or sessions.
"""
from __future__ import annotations

from collections.abc import Sequence

from switchyard_bench.workloads import WorkloadError

GENERATED_PREFIX = "gen-"
RANDOM_PREFIX = "random:"
SPLITS = ("all", "tune", "check")
TUNE, CHECK = "tune", "check"


def generator_seed(name: str) -> int | None:
    """N for `gen-N`, None for any other name."""
    if not name.startswith(GENERATED_PREFIX):
        return None
    digits = name[len(GENERATED_PREFIX):]
    if not digits.isdigit():
        raise WorkloadError(f"{name!r}: a generated workload is gen-N, N a seed >= 0")
    return int(digits)


def workload_set(name: str) -> str:
    """TUNE or CHECK (the rule in the module's docstring)."""
    seed = generator_seed(name)
    return CHECK if seed is not None and seed % 2 == 1 else TUNE


def split_seeds(split: str, count: int) -> list[int]:
    """The first `count` generator seeds of a split."""
    if split == "all":
        return list(range(count))
    if split in (TUNE, CHECK):
        first = 0 if split == TUNE else 1
        return list(range(first, first + 2 * count, 2))
    raise WorkloadError(f"--split {split!r}: choose from {', '.join(SPLITS)}")


def expand(names: Sequence[str], split: str, named: Sequence[str]) -> list[str]:
    """`--workloads` with each `random:K` replaced by its K generated workloads, every name
    checked (`named`: the workloads that are not generated), duplicates dropped."""
    out: list[str] = []
    for name in names:
        if name.startswith(RANDOM_PREFIX):
            count = name[len(RANDOM_PREFIX):]
            if not count.isdigit() or int(count) < 1:
                raise WorkloadError(f"{name!r}: expected random:K, K >= 1 generated workloads")
            out += [f"{GENERATED_PREFIX}{seed}" for seed in split_seeds(split, int(count))]
        elif generator_seed(name) is not None or name in named:
            out.append(name)
        else:
            raise WorkloadError(f"unknown workload {name!r}; choose from {', '.join(named)}, "
                                f"gen-N (generator seed N) or random:K")
    return list(dict.fromkeys(out))
