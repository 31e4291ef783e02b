"""`switchyard bench router-core` runs end to end on a small workload and reports every case."""
from __future__ import annotations

import pytest

from pyrouter.cli import main


@pytest.mark.timeout(120)
def test_bench_router_core_small(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "router-core", "--engines", "2,64", "--blocks", "3000",
                 "--requests", "100", "--detok-tokens", "200", "--synthetic-vocab"])
    out = capsys.readouterr().out
    assert code == 0
    for expected in ("floor: pass the prompt in", "2 engines: score()", "64 engines: score()",
                     "pure-Python baseline", "KV event ingestion", "ns/token", "p99/target"):
        assert expected in out, expected


def test_bench_router_core_rejects_bad_options() -> None:
    with pytest.raises(ValueError):
        main(["bench", "router-core", "--engines", "0"])
    with pytest.raises(SystemExit):
        main(["bench", "router-core", "--blocks", "many"])
