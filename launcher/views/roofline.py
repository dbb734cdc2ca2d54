"""`nemolaunch roofline`: each level's share of the memory-bandwidth limit."""

from __future__ import annotations

from launcher.bench.roofline import Roofline
from launcher.output import table


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}%"


def render(r: Roofline) -> str:
    if not r.applies:
        return f"roofline does not apply: {r.reason}"
    assert r.bandwidth is not None and r.ceiling_per_user_tok_s is not None
    lines = [f"roofline: {r.reason}"]
    if r.bandwidth.nvml_bytes_per_s and r.bandwidth.datasheet_bytes_per_s:
        lines.append(
            f"bandwidth: NVML {r.bandwidth.nvml_bytes_per_s / 1e12:.2f} TB/s, datasheet "
            f"{r.bandwidth.datasheet_bytes_per_s / 1e12:.2f} TB/s ({r.bandwidth.datasheet_source})"
        )
    lines.append(f"physical ceiling per user at c=1: {r.ceiling_per_user_tok_s:.0f} tok/s")
    rows = [
        [
            lv.concurrency,
            None if lv.distinct_experts is None else f"{lv.distinct_experts:.1f}",
            f"{lv.weight_bytes / 1e9:.2f}",
            f"{lv.kv_bytes / 1e9:.3f}",
            f"{lv.ceiling_tok_s:.0f}",
            lv.measured_tok_s,
            _pct(lv.percent_of_limit),
            _pct(lv.percent_of_limit_decode),
        ]
        for lv in r.levels
    ]
    headers = ["c", "experts/layer", "weights GB", "KV GB", "ceiling tok/s", "measured", "% of limit", "% (TPOT)"]
    return "\n".join([*lines, "", table(headers, rows)])
