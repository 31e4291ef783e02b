"""docs/policies.md's example policy, extracted from the page and run as a user would."""
from __future__ import annotations

import pytest

from switchyard_sim.fake import FakeCluster, FakeEngine

PROMPT = list(range(100, 140))


@pytest.mark.parametrize("k", [0, 1, 5])
async def test_lead_follow_matches_one_engine(lead_follow: str, k: int) -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine()])
    run = await cluster.run(lead_follow, PROMPT, params={"k": k}, max_tokens=8)
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(PROMPT, 8) and run.finish_reason == "length"
    verbs = [v for v, _ in run.verbs]
    lead_verbs = ["start_generate"] if k else []
    assert verbs == lead_verbs + ["prep_recv", "remote_send", "start_generate"], verbs
    assert run.segments == (2 if k else 1)
    lead, follow = run.verbs[-2][1], run.verbs[-1][1]
    assert lead != follow and run.route == f"lead_follow lead={lead} follow={follow} k={k}"
    # the follow engine received the KV of the prompt and the lead's k tokens: it computed
    # only the last token itself
    generation = cluster.client(follow).finished[-1]
    assert generation.prefilled == 1 and len(generation.tokens) == len(PROMPT) + k
    cluster.assert_clean()


async def test_docs_testing_snippet_holds(lead_follow: str) -> None:
    """The 'Testing a policy' section's assertions, verbatim in spirit."""
    cluster = FakeCluster([FakeEngine(), FakeEngine(unfinished_tokens=5000)])
    run = await cluster.run(lead_follow, list(range(40)), params={"k": 2})
    assert run.tokens == cluster.reference(list(range(40)), 8)
    assert [v for v, _ in run.verbs] == ["start_generate", "prep_recv", "remote_send",
                                         "start_generate"]
    assert run.verbs[0][1] == "e0"  # the idle engine leads
    cluster.assert_clean()
