"""The metric definitions of `switchyard bench serve` (docs/benchmarking.md) on hand-computed
examples: TTFT, ITL, TPOT excluding the first token, JCT, throughput, goodput, SLO attainment."""
from __future__ import annotations

import json

import pytest

from switchyard_bench.serve.request_body import Slo, completion_body
from switchyard_bench.serve.stream_record import RequestRecord, StreamObserver
from switchyard_bench.serve.summary import describe_ms, summarize


def _event(text: str = "", usage: dict[str, int] | None = None, finish: str | None = None,
           ) -> bytes:
    body: dict[str, object] = {"choices": [] if usage else [
        {"index": 0, "text": text, "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _observe(chunks: list[tuple[float, bytes]], end: float, status: int = 200,
             sent: float = 10.0) -> RequestRecord:
    """Feed (seconds after send, bytes) pairs; the stream ends `end` s after the send."""
    obs = StreamObserver(sent)
    for t, data in chunks:
        obs.feed(data, sent + t)
    record = RequestRecord(index=0, prompt_len=7, max_tokens=3)
    obs.finish(record, status, sent + end)
    return record


USAGE3 = {"prompt_tokens": 7, "completion_tokens": 3}


def test_ttft_itl_tpot_jct_of_one_stream():
    record = _observe([(0.100, _event("a")), (0.150, _event("b")),
                       (0.250, _event("c", finish="length") + _event(usage=USAGE3)
                        + b"data: [DONE]\n\n")], end=0.300)
    assert record.ok and record.error == ""
    assert record.ttft_ms == pytest.approx(100.0)
    assert record.token_times_ms == pytest.approx([100.0, 150.0, 250.0])
    assert record.itl_ms == pytest.approx([50.0, 100.0])
    assert record.jct_ms == pytest.approx(300.0)
    # TPOT excludes the first token: (JCT - TTFT) / (tokens - 1) = 200 / 2
    assert record.tpot_ms == pytest.approx(100.0)
    assert (record.prompt_tokens, record.completion_tokens) == (7, 3)
    assert record.finish_reason == "length"


def test_tpot_counts_usage_tokens_not_events():
    # 4 tokens, but one token's text was held back and rode on the next event (3 events)
    usage = {"prompt_tokens": 7, "completion_tokens": 4}
    record = _observe([(0.1, _event("a")), (0.2, _event("bc")), (0.4, _event("d")),
                       (0.4, _event(usage=usage) + b"data: [DONE]\n\n")], end=0.4)
    assert record.tpot_ms == pytest.approx((400.0 - 100.0) / 3)
    assert record.itl_ms == pytest.approx([100.0, 200.0])


def test_events_split_across_reads_and_empty_text_is_no_token():
    stream = (_event("") + _event("x") + _event("y") + _event(usage=USAGE3)
              + b"data: [DONE]\n\n")
    pieces = [stream[i:i + 7] for i in range(0, len(stream), 7)]
    record = _observe([(0.01 * (i + 1), p) for i, p in enumerate(pieces)], end=1.0)
    assert record.ok
    assert len(record.token_times_ms) == 2  # the empty-text event is not a token


def test_one_token_output_has_no_tpot():
    usage = {"prompt_tokens": 7, "completion_tokens": 1}
    record = _observe([(0.1, _event("a") + _event(usage=usage) + b"data: [DONE]\n\n")], end=0.1)
    assert record.ok and record.tpot_ms is None and record.itl_ms == []


@pytest.mark.parametrize("chunks,status,error", [
    ([(0.1, _event("a"))], 200, "stream ended without data: [DONE]"),
    ([(0.1, _event("a") + b'data: {"error": {"message": "engine e1 died"}}\n\n'
      + b"data: [DONE]\n\n")], 200, "engine e1 died"),
    ([(0.1, b"data: [DONE]\n\n")], 200, "stream carried no tokens"),
    ([(0.1, _event("a") + b"data: [DONE]\n\n")], 503, ""),
])
def test_failed_streams_are_failures(chunks, status, error):
    record = _observe(chunks, end=0.2, status=status)
    assert not record.ok
    assert record.error == error


def _done(ttft: float, tpot: float | None, jct: float, itl: list[float], out: int,
          slo: Slo | None = None) -> RequestRecord:
    r = RequestRecord(index=0, prompt_len=10, max_tokens=out, ok=True, status=200,
                      ttft_ms=ttft, tpot_ms=tpot, jct_ms=jct, itl_ms=itl, prompt_tokens=10,
                      completion_tokens=out)
    r.slo_met = slo.met_by(r) if slo else None
    return r


def test_summary_statistics_throughput_goodput_attainment():
    slo = Slo(ttft_ms=150.0, tpot_ms=30.0)
    a = _done(100.0, 20.0, 300.0, [20.0, 20.0], 3, slo)      # meets both
    b = _done(200.0, 10.0, 400.0, [10.0, 10.0], 3, slo)      # TTFT miss
    c = _done(120.0, 40.0, 520.0, [40.0] * 10, 11, slo)      # TPOT miss
    d = _done(90.0, None, 90.0, [], 1, slo)                  # one token: meets
    failed = RequestRecord(index=4, prompt_len=10, max_tokens=3, error="HTTP 503: busy",
                           status=503)
    failed.slo_met = slo.met_by(failed)
    cut = RequestRecord(index=5, prompt_len=10, max_tokens=3, interrupted=True,
                        error="interrupted")
    s = summarize([a, b, c, d, failed, cut], duration_s=2.0, slo_given=True)
    assert (s["requests"], s["completed"], s["failed"], s["interrupted"]) == (5, 4, 1, 1)
    assert s["mean_ttft_ms"] == pytest.approx((100 + 200 + 120 + 90) / 4)
    assert s["median_ttft_ms"] == pytest.approx(110.0)
    # linear interpolation between order statistics, as numpy and vLLM: p90 of 90,100,120,200
    assert s["p90_ttft_ms"] == pytest.approx(120 + 0.7 * 80)
    assert s["mean_tpot_ms"] == pytest.approx((20 + 10 + 40) / 3)  # d has no TPOT
    assert s["mean_itl_ms"] == pytest.approx((40 + 20 + 400) / 14)  # pooled gaps
    assert s["mean_jct_ms"] == pytest.approx((300 + 400 + 520 + 90) / 4)
    assert s["request_throughput"] == pytest.approx(4 / 2.0)
    assert s["output_throughput"] == pytest.approx((3 + 3 + 11 + 1) / 2.0)
    assert s["goodput"] == pytest.approx(2 / 2.0)  # a and d, per second
    assert s["slo_attainment"] == pytest.approx(2 / 5)  # the failed request is a miss
    assert s["errors"] == {"HTTP 503: busy": 1}


def test_requests_the_admission_gate_refused_are_counted_with_their_answer_times():
    refused = [_observe([], end=end, status=503) for end in (0.001, 0.003)]
    for record in refused:
        record.route = "none admitted=shed"
    other = _observe([], end=0.5, status=503)  # a 503 of another kind
    s = summarize([*refused, other], duration_s=1.0, slo_given=True)
    assert s["refused"] == 2 and s["failed"] == 3
    assert s["p99_refused_ms"] == pytest.approx(2.98)
    assert summarize([other], duration_s=1.0, slo_given=True)["p99_refused_ms"] is None


def test_summary_without_slo_or_records():
    s = summarize([], duration_s=1.0, slo_given=False)
    assert s["goodput"] is None and s["slo_attainment"] is None
    assert s["mean_ttft_ms"] is None and s["completed"] == 0
    assert describe_ms([5.0]) == {"mean": 5.0, "median": 5.0, "p90": 5.0, "p99": 5.0}


def test_slo_checks_and_request_body():
    slo = Slo(ttft_ms=100.0)
    ok = _done(100.0, 500.0, 900.0, [], 3)
    assert slo.met_by(ok)  # <= is a meet; no TPOT objective given
    assert Slo(tpot_ms=499.0).miss(ok) == "TPOT > 499 ms"
    with pytest.raises(ValueError):
        Slo(ttft_ms=0.0)
    body = completion_body([1, 2, 3], 5, slo=Slo(ttft_ms=100.0, tpot_ms=20.0))
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 5 and body["ignore_eos"]
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["slo"] == {"ttft_ms": 100.0, "tpot_ms": 20.0}
    assert "slo" not in completion_body([1], 1)
