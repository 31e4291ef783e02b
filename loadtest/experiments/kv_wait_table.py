"""Predicted against measured TTFT from `bench serve` result dirs whose policy notes its
prediction in the route header (adaptive: `ttft_ms=`): per dir, the requests, the median
measured / predicted ratio over all of them and over the slower half (where the queue is), and
the median |measured / predicted - 1|. Used by kv_wait_real.sh."""
from __future__ import annotations

import glob
import json
import re
import statistics
import sys

_PREDICTED = re.compile(r"\bttft_ms=([0-9.]+)")


def ratios(result_dir: str) -> list[tuple[float, float]]:
    """(measured ms, measured / predicted) of every request that ended well."""
    out = []
    for path in glob.glob(f"{result_dir}/*.jsonl"):
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                found = _PREDICTED.search(rec.get("route") or "")
                if rec.get("ok") and rec.get("ttft_ms") and found and float(found.group(1)) > 0:
                    out.append((rec["ttft_ms"], rec["ttft_ms"] / float(found.group(1))))
    return out


def main(dirs: list[str]) -> None:
    print("run  requests  measured/predicted (all, slower half)  |error| median  ttft p50/max ms")
    for d in dirs:
        rows = sorted(ratios(d))
        if not rows:
            print(f"{d}: no request with a predicted TTFT")
            continue
        slow = rows[len(rows) // 2:]
        print(f"{d.rsplit('/', 1)[-1]:4} {len(rows):8}  "
              f"{statistics.median(r for _, r in rows):6.2f} {statistics.median(r for _, r in slow):6.2f}"
              f"{statistics.median(abs(r - 1) for _, r in rows):26.2f}  "
              f"{rows[len(rows) // 2][0]:7.0f} {rows[-1][0]:7.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
