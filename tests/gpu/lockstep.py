"""Drive two ModelRunners through the same steps and compare every greedy choice.

Sequences join one step apart, prefill in chunks (so steps mix chunks and decodes), then decode;
both runners see identical chunks and page tables, teacher-forced on the reference's tokens. At
each sampled row the two argmaxes must agree, except at a near-tie of the reference (top two
logits within `tie_tol`), where the logits must instead agree within `tie_tol`: a matmul over
another batch shape may change a logit's last bits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.batch import ScheduledChunk
from engine.model.runner import ModelRunner


@dataclass
class LockstepReport:
    rows: int = 0
    near_ties: int = 0
    mismatches: list[str] = field(default_factory=list)
    max_logit_diff: float = 0.0
    tokens: dict[str, list[int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"rows": self.rows, "near_ties": self.near_ties,
                "mismatches": self.mismatches[:10], "max_logit_diff": self.max_logit_diff}


def greedy_lockstep(reference: ModelRunner, candidate: ModelRunner, prompts: list[list[int]],
                    new_tokens: int, chunk: int, tie_tol: float) -> LockstepReport:
    page_size = reference.kv.page_size
    report = LockstepReport()
    tables: dict[str, list[int]] = {}
    next_page = 0
    for i, prompt in enumerate(prompts):
        pages = -(-(len(prompt) + new_tokens) // page_size)
        tables[f"s{i}"] = list(range(next_page, next_page + pages))
        next_page += pages
    if next_page > min(reference.kv.num_pages, candidate.kv.num_pages):
        raise ValueError(f"{next_page} pages needed")
    tokens = {f"s{i}": list(p) for i, p in enumerate(prompts)}
    done = {key: 0 for key in tokens}  # positions whose K/V is computed
    prompt_len = {f"s{i}": len(p) for i, p in enumerate(prompts)}
    step = 0
    while any(len(tokens[k]) < prompt_len[k] + new_tokens for k in tokens):
        chunks = []
        for i, key in enumerate(tokens):
            if i > step or len(tokens[key]) >= prompt_len[key] + new_tokens:
                continue  # not joined yet, or finished
            start = done[key]
            end = min(len(tokens[key]), start + chunk)
            chunks.append(ScheduledChunk(key, tokens[key][start:end], start, tables[key],
                                         need_logits=end == len(tokens[key])))
        step += 1
        if not chunks:
            continue
        ref_logits = reference.run(chunks).float().cpu()
        cand_logits = candidate.run(chunks).float().cpu()
        row = 0
        for c in chunks:
            done[c.seq_key] = c.start_pos + len(c.token_ids)
            if not c.need_logits:
                continue
            ref, cand = ref_logits[row], cand_logits[row]
            row += 1
            report.rows += 1
            report.max_logit_diff = max(report.max_logit_diff, (ref - cand).abs().max().item())
            top2 = ref.topk(2)
            choice = int(top2.indices[0])
            if int(cand.argmax()) != choice:
                gap = float(top2.values[0] - top2.values[1])
                if gap <= tie_tol:
                    report.near_ties += 1
                    if (ref - cand).abs().max().item() > tie_tol:
                        report.mismatches.append(f"{c.seq_key}@{c.start_pos}: near-tie logits "
                                                 f"differ by more than {tie_tol}")
                else:
                    report.mismatches.append(f"{c.seq_key}@{c.start_pos}: {choice} vs "
                                             f"{int(cand.argmax())}, gap {gap:.4g}")
            tokens[c.seq_key].append(choice)
    report.tokens = {k: v[prompt_len[k]:] for k, v in tokens.items()}
    return report


def random_prompts(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]
