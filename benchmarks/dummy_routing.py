"""Distinct routed experts per decode step when vLLM serves a model with --load-format dummy: vLLM's own router
(grouped_topk) on weights drawn as vLLM's dummy loader draws them (every float parameter uniform in +-1e-3), for
the Nemotron 3 shapes (sigmoid scores + e_score_correction_bias, as vLLM's NemotronH builds its router) and for a
softmax router without a bias (Qwen3-30B-A3B's). The router's input is the block's RMSNorm output: a unit-RMS
residual drawn per token times the norm's dummy weight. Prints, per concurrency, the mean distinct experts of one
layer over LAYERS draws, against uniform routing's expectation E x (1 - (1 - k/E)^c).

    PYTHONPATH=. <engine python> benchmarks/dummy_routing.py [LAYERS]

Needs torch and vLLM (the CPU engine's interpreter has both); no GPU. launcher/bench/traffic.py's routed_experts
quotes what it printed.
"""

from __future__ import annotations

import sys

import torch
from vllm.model_executor.layers.fused_moe.router.grouped_topk_router import grouped_topk

from launcher.model import nemotron

LEVELS = (1, 2, 4, 8, 16, 32, 64)


def distinct(hidden: int, experts: int, k: int, groups: int, topk_groups: int, c: int, biased: bool) -> int:
    w = torch.empty(experts, hidden).uniform_(-1e-3, 1e-3)  # GateLinear's weight
    norm = torch.empty(hidden).uniform_(-1e-3, 1e-3)  # the block's RMSNorm weight
    bias = torch.empty(experts).uniform_(-1e-3, 1e-3) if biased else None
    x = torch.randn(c, hidden)
    h = x / x.pow(2).mean(-1, keepdim=True).sqrt() * norm
    scoring = "sigmoid" if biased else "softmax"
    _, ids = grouped_topk(h, h @ w.T, k, True, groups, topk_groups, scoring, 1.0, bias)
    return int(ids.unique().numel())


def main() -> None:
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    torch.manual_seed(0)
    rows = []
    for name, cfg in (("nemotron-3-super", nemotron.SUPER_CONFIG), ("nemotron-3-nano", nemotron.NANO_CONFIG)):
        shape = (cfg["hidden_size"], cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["n_group"],
                 cfg["topk_group"])  # fmt: skip
        rows.append((f"{name} (sigmoid + bias)", shape, True))
    rows.append(("qwen3-30b-a3b-like (softmax)", (2048, 128, 8, 1, 1), False))
    print(f"distinct routed experts per layer, vLLM dummy weights, mean of {layers} draws (uniform routing's)")
    print("router".ljust(34) + "".join(f"c={c}".rjust(14) for c in LEVELS))
    for label, (hidden, experts, k, groups, topk_groups), biased in rows:
        cells = []
        for c in LEVELS:
            mean = sum(distinct(hidden, experts, k, groups, topk_groups, c, biased) for _ in range(layers)) / layers
            uniform = experts * (1 - (1 - k / experts) ** c)
            cells.append(f"{mean:.1f} ({uniform:.0f})".rjust(14))
        print(label.ljust(34) + "".join(cells))


if __name__ == "__main__":
    main()
