"""`nemolaunch model`: the known shapes and what `model shape` wrote."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from launcher.bench.roofline import model_traffic
from launcher.model.shapes import KnownShape
from launcher.output import table


def known_shapes(known: Iterable[KnownShape]) -> str:
    rows = []
    for s in known:
        c = s.config
        t = model_traffic(c)
        experts = f"{t.experts} (top-{t.top_k})" if t.experts else "-"
        rows.append(
            [
                s.name,
                c["architectures"][0],
                f"{t.total_params / 1e9:.1f}B",
                f"{(t.active_params + t.embed_params) / 1e9:.1f}B",
                c["num_hidden_layers"],
                c["hidden_size"],
                experts,
                c["vocab_size"],
            ]
        )
    headers = ["name", "architecture", "params", "active", "layers", "hidden", "experts", "vocab"]
    return table(headers, rows)


def shape_written(info: dict[str, Any]) -> str:
    flags = " ".join(info["serve_args"])
    return (
        f"wrote {info['path']}: {info['name']} ({info['quantization']}), vocab {info['vocab']['vocab_size']}, "
        f"no weights\nserve it with: {flags} (nemolaunch serve and bench --profile add these for this folder)"
    )
