"""`nemolaunch probe` on a terminal: per chain, every kernel's verdict, then its times at every weight shape
measured (one table per (N, K); a table holds at most MAX_M_COLUMNS token counts and says how many it left out),
the recommendation, the chains left out and why, and the recheck of a profile."""

from __future__ import annotations

from typing import Any

from launcher.output import table
from launcher.probe.run import KernelResult, ProbeReport
from launcher.profiles.write import MARGIN

MAX_M_COLUMNS = 6
DECLARED = {True: "yes", False: "no", None: "?"}


def weight_shapes(members: list[KernelResult]) -> dict[tuple[int, int], list[int]]:
    """(N, K) -> the token counts M measured there, in the order the probe ran them."""
    found: dict[tuple[int, int], list[int]] = {}
    for k in members:
        for s in k.shapes:
            ms = found.setdefault((s["n"], s["k"]), [])
            if s["m"] not in ms:
                ms.append(s["m"])
    return {nk: sorted(ms) for nk, ms in found.items()}


def _cell(shape: dict[str, Any] | None) -> str | None:
    if shape is None:
        return None
    relative = shape.get("relative")
    return f"{shape['us']:.1f} x{relative:.2f}" if relative else f"{shape['us']:.1f}"


def _timings(chain: str, members: list[KernelResult]) -> list[str]:
    out = []
    measured = [k for k in members if k.shapes]
    for (n, k_dim), ms in weight_shapes(members).items():
        shown, hidden = ms[:MAX_M_COLUMNS], len(ms) - MAX_M_COLUMNS
        what = "sequences x new tokens N, context K" if chain == "attention" else "weights N x K"
        title = f"  N={n} K={k_dim} ({what}), us and x the fastest" + (
            f"; {hidden} more token counts measured (in --json)" if hidden > 0 else ""
        )
        rows = []
        for kernel in measured:
            at = {s["m"]: s for s in kernel.shapes if (s["n"], s["k"]) == (n, k_dim)}
            if at:
                rows.append([kernel.kernel, *(_cell(at.get(m)) for m in shown)])
        out += [title, table(["kernel", *(f"M={m}" for m in shown)], rows)]
    return out


def render(report: ProbeReport, recheck: list[tuple[str, str, str | None, bool]] | None, profile: str | None) -> str:
    gpu = report.gpu
    where = f"{gpu['name']} (sm_{gpu['capability'][0]}{gpu['capability'][1]})" if gpu else "no GPU"
    lines = [f"{where}; vLLM {report.vllm_version or 'not installed'} in {report.interpreter.describe()}"]
    for chain in dict.fromkeys(k.chain for k in report.kernels):
        members = [k for k in report.kernels if k.chain == chain]
        lines.append(f"\n{chain} ({report.sources[chain]}): {report.selection.chains.get(chain, '')}")
        rows = [
            [
                "-" if k.position is None else k.position + 1,
                k.kernel,
                DECLARED[k.declared],
                k.status,
                None if k.setup_s is None else f"{k.setup_s:.0f}",
                (k.error or "")[:90],
            ]
            for k in members
        ]
        lines.append(table(["#", "kernel", "declared", "status", "set-up s", "error"], rows))
        lines += _timings(chain, members)
        if gpu:
            pick, top = report.recommended.get(chain), report.fastest.get(chain)
            extra = f" (fastest measured: {top}, which vLLM declares unsupported here)" if top != pick else ""
            lines.append(f"recommended: {pick or 'none measured'}{extra}")
    if report.selection.left_out:
        lines.append("\nleft out (--all probes every chain):")
        lines += [f"  {chain}: {why}" for chain, why in report.selection.left_out.items()]
    if profile and recheck:
        lines.append(f"\nrecheck of profile {profile} (within {MARGIN - 1:.0%} of the fastest counts as still best)")
        verdicts = [(c, got, pick or "-", "yes" if ok else "NO") for c, got, pick, ok in recheck]
        lines.append(table(["chain", "profile gets", "probe recommends", "still best"], verdicts))
    lines.append(f"\n{report.seconds:.0f} s")
    return "\n".join(lines)
