"""One open-loop run: send each request at its arrival offset whatever the responses do, show a
progress bar, and stop cleanly when `stop` is set (Ctrl-C): nothing more is sent, requests in
flight are cancelled and marked interrupted, and the records so far are returned."""
from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from tqdm import tqdm

from switchyard_bench.serve.client import ClientConfig, send_request
from switchyard_bench.serve.stream_record import RequestRecord
from switchyard_bench.workloads import WorkItem


@dataclass(slots=True)
class RunResult:
    records: list[RequestRecord]  # every request sent (unsent ones after a Ctrl-C are absent)
    duration_s: float
    interrupted: bool


def _prompt_len(item: WorkItem) -> int:
    return len(item.prompt) if isinstance(item.prompt, list) else 0


async def _sleep_until(deadline: float, stop: asyncio.Event) -> None:
    delay = deadline - time.perf_counter()
    if delay > 0 and not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except TimeoutError:
            pass


async def run_open_loop(session: aiohttp.ClientSession, cfg: ClientConfig,
                        items: Sequence[WorkItem], stop: asyncio.Event, label: str = "",
                        progress: bool = True) -> RunResult:
    records: list[RequestRecord] = []
    tasks: list[asyncio.Task[None]] = []
    bar = tqdm(total=len(items), desc=label, unit="req", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    start = time.perf_counter()
    finished_at = start

    def _done(_: asyncio.Task[None]) -> None:
        nonlocal finished_at
        finished_at = time.perf_counter()
        bar.update(1)

    for index, item in enumerate(items):
        await _sleep_until(start + item.arrival_s, stop)
        if stop.is_set():
            break
        record = RequestRecord(index=index, prompt_len=_prompt_len(item),
                               max_tokens=item.max_tokens, scheduled_s=item.arrival_s,
                               sent_s=time.perf_counter() - start)
        records.append(record)
        task = asyncio.create_task(send_request(session, cfg, item, record))
        task.add_done_callback(_done)
        tasks.append(task)
    if tasks and not stop.is_set():
        stopper = asyncio.create_task(stop.wait())
        pending: set[asyncio.Task[None] | asyncio.Task[bool]] = set(tasks)
        while pending and not stop.is_set():
            _, pending = await asyncio.wait(pending | {stopper},
                                            return_when=asyncio.FIRST_COMPLETED)
            pending.discard(stopper)
        stopper.cancel()
    interrupted = stop.is_set()
    if interrupted:
        finished_at = time.perf_counter()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for record, task in zip(records, tasks, strict=True):
            if task.cancelled():
                record.interrupted, record.ok, record.error = True, False, "interrupted"
    bar.close()
    return RunResult(records, max(finished_at - start, 1e-9), interrupted)
