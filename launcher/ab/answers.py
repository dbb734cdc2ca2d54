"""Do two configurations give the same answers? Greedy completions of fixed prompts, compared token by token."""

from __future__ import annotations

import json
import urllib.request

from checks.secrets import bearer
from launcher.ab.document import AgreementDoc, AnswersDoc
from launcher.ab.sides import dummy_weights

# fixed prompts for the same-answers check (greedy, temperature 0)
ANSWER_PROMPTS = (
    "def fibonacci(n):",
    "The capital of France is",
    "import json\n\ndef load(path):",
    "Once upon a time",
    "SELECT name FROM users WHERE",
    "class Stack:\n    def __init__(self):",
    "1, 2, 3, 5, 8,",
    "The GPU kernel launched",
)
ANSWER_TOKENS = 32


def greedy_answers(url: str, model: str, key: str | None = None) -> list[list[int]]:
    """The token ids of a greedy completion of each fixed prompt (one at a time: batch composition stays fixed).
    A fourth HTTP client beside bench's: one blocking request at a time needs nothing more than urllib."""
    headers = {"Content-Type": "application/json", **bearer(key)}
    out = []
    for prompt in ANSWER_PROMPTS:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": ANSWER_TOKENS,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(), headers=headers)
        with urllib.request.urlopen(req, timeout=120) as resp:
            choice = json.loads(resp.read())["choices"][0]
        out.append([int(t) for t in choice.get("token_ids") or []])
    return out


def agreement(base: list[list[int]], other: list[list[int]]) -> AgreementDoc:
    """Token agreement: positions where both completions hold the same token, and where each first diverges."""
    same = total = 0
    first: list[int | None] = []
    for a, b in zip(base, other, strict=True):
        length = max(len(a), len(b))
        total += length
        same += sum(1 for x, y in zip(a, b, strict=False) if x == y)
        diverge = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if diverge is None and len(a) != len(b):
            diverge = min(len(a), len(b))
        first.append(diverge)
    return {
        "prompts": len(first),
        "identical": sum(1 for d in first if d is None),
        "agreement": round(same / total, 4) if total else None,
        "first_divergence": first,
        "error": None,
    }


Answers = tuple[list[list[int]] | None, str | None]  # a side's greedy tokens, or why it has none


def compare_answers(
    base_argv: list[str], asked: bool, base: Answers, others: dict[str, Answers], fixed_routing: bool = False
) -> AnswersDoc:
    """Each side's answers against the baseline's, or why they are not compared. `fixed_routing`: the model's MoE
    router sends every token to the same experts on dummy weights (launcher.model.nemotron.biased_router)."""
    doc: AnswersDoc = {"applies": False, "note": None, "prompts": list(ANSWER_PROMPTS), "max_tokens": ANSWER_TOKENS,
                       "sides": {}}  # fmt: skip
    if dummy_weights(base_argv):
        doc["note"] = (
            "the model is served with --load-format dummy (random weights): greedy answers carry no meaning, so "
            "they are not compared"
        ) + (
            "; and its MoE router, on random weights, sends every token to the same experts (NemotronH's "
            "correction bias ranks them), so MoE kernel differences measured here do not carry over to real weights"
            if fixed_routing
            else ""
        )
        return doc
    if not asked:
        doc["note"] = "not asked for (--no-same-answers)"
        return doc
    doc["applies"] = True
    for name, (tokens, error) in others.items():
        why = error or base[1]
        if why:
            doc["sides"][name] = {"prompts": 0, "identical": 0, "agreement": None, "first_divergence": [],
                                  "error": why}  # fmt: skip
        elif tokens is not None and base[0] is not None:
            doc["sides"][name] = agreement(base[0], tokens)
    return doc
