"""How an ab verdict reads: the one place its sentence is rendered from the verdict's numbers (report.md, the
terminal and tune's [why] lines all call `sentence`), and report.md with its plot."""

from __future__ import annotations

from pathlib import Path

from launcher import noise
from launcher.ab.document import AbDocument, AgreementDoc, TrialDoc, VerdictDoc
from launcher.ab.stats import MAX_EQUIVALENCE_MARGIN, MAX_EXTRA_ROUNDS
from launcher.output import atomic_write_text

VERDICT_HEADERS = ["comparison", "conc", "rounds", "output tok/s verdict", "TPOT B/A", "TTFT B/A"]


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def sentence(v: VerdictDoc, b: str) -> str:
    """One verdict in words, naming B and A as the reader knows them."""
    margin = f"{v['margin'] * 100:.1f}%"
    if v["mean"] is None or v["lo"] is None or v["hi"] is None:
        return f"{v['n']} valid round(s): at least 2 are needed"
    mean, span = _pct(v["mean"]), f"[{_pct(v['lo'])}, {_pct(v['hi'])}]"
    up, down = ("faster", "slower") if v["metric"] == "output_tok_s" else ("higher", "lower")
    kind = v["kind"]
    if kind == "noise":
        return (
            f"the A/A that sets this run's noise floor: mean {mean} {span}; differences inside +-{margin} are "
            "noise here"
        )
    if kind in ("better", "worse"):
        word = up if v["lo"] > 1 else down
        return f"{b} {word} by {abs(v['mean'] - 1) * 100:.1f}% {span}, outside the noise (+-{margin})"
    if kind == "equivalent":
        return f"equivalent within +-{margin} (mean {mean} {span})"
    if noise.position(v["lo"], v["hi"], v["margin"]) == "within" and v["margin"] > MAX_EQUIVALENCE_MARGIN:
        return (
            f"too noisy to call equivalent: the noise floor is +-{margin} (mean {mean} {span}); more rounds or "
            "longer passes would narrow it"
        )
    tail = (
        f"about {v['more_rounds']} more round(s) would decide"
        if v["more_rounds"] is not None
        else f"more than {MAX_EXTRA_ROUNDS} more rounds would be needed"
    )
    return f"inconclusive (mean {mean} {span}): {tail}"


def short(v: VerdictDoc) -> str:
    if v["mean"] is None or v["lo"] is None or v["hi"] is None:
        return "-"
    return f"{_pct(v['mean'])} [{_pct(v['lo'])}, {_pct(v['hi'])}] {v['kind']}"


def agreement_text(a: AgreementDoc) -> str:
    if a["error"]:
        return f"not compared: {a['error']}"
    if a["identical"] == a["prompts"]:
        return f"same answers: {a['identical']}/{a['prompts']} greedy completions identical"
    share = f"{a['token_agreement']:.0%}" if a["token_agreement"] is not None else "-"
    return (
        f"different answers: {a['identical']}/{a['prompts']} identical, token agreement {share}, first divergence at "
        f"tokens {[d for d in a['first_divergence'] if d is not None]}"
    )


def verdict_rows(doc: AbDocument) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, per_level in doc["verdicts"].items():
        for c, metrics in per_level.items():
            tput = metrics["output_tok_s"]
            rows.append(
                [
                    f"{name} vs {doc['baseline']}",
                    c,
                    tput["n"],
                    sentence(tput, name),
                    short(metrics["tpot_ms"]),
                    short(metrics["ttft_ms"]),
                ]
            )
    return rows


def write_report(doc: AbDocument, out: Path) -> None:
    from launcher.output import table

    w = doc["workload"]
    lines = [
        "# nemolaunch ab",
        "",
        f"Status: {doc['status']}, {len(doc['rounds'])} round(s) of {w['rounds_asked']}; mode "
        f"{doc['mode']} ({doc['mode_reason']}).",
        f"Workload: {w['input_len']} in / {w['output_len']} out tokens, concurrency {w['concurrency']}, "
        f"{w['warmup_passes']} unmeasured warm-up pass(es) per server start.",
        f"Method: {doc['method']}. Noise floor: {doc['noise_floor']['source']}.",
        "",
        "## Configurations",
        "",
    ]
    for s in doc["sides"]:
        extra = f": {s['diagnosis']}" if s["diagnosis"] else ""
        sets = ", ".join(f"{k}={v}" for k, v in s["overrides"].items())
        lines.append(f"- **{s['name']}**: profile {s['profile']}{' + ' + sets if sets else ''}; {s['status']}{extra}")
    lines += ["", "## Verdicts (ratio B/A per round; TPOT and TTFT: lower is better)", "", "```"]
    lines += [table(VERDICT_HEADERS, verdict_rows(doc)), "```", ""]
    answers = doc["answers"]
    lines.append("## Same answers")
    lines.append("")
    if not answers["applies"]:
        lines.append(f"Not compared: {answers['note']}.")
    else:
        for name, a in answers["sides"].items():
            lines.append(f"- {name} vs {doc['baseline']}: {agreement_text(a)}")
    if doc["invalid_passes"]:
        lines += ["", "## Invalid passes (not averaged in)", ""]
        lines += [
            f"- round {p['round']} {p['side']} c={p['concurrency']}: {p['reason']} ({p['folder']})"
            for p in doc["invalid_passes"]
        ]
    if _plot(doc, out / "ratios.png"):
        lines += ["", "![ratios](ratios.png)"]
    lines += ["", "Every pass is a bench result folder under passes/ (`nemolaunch compare` reads them)."]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")


def _plot(doc: AbDocument, path: Path) -> bool:
    """Output tok/s ratio B/A per level with its interval and the margin band; False when nothing to plot."""
    series = [
        (name, [(int(c), m["output_tok_s"]) for c, m in per_level.items() if m["output_tok_s"]["mean"]])
        for name, per_level in doc["verdicts"].items()
    ]
    series = [(n, pts) for n, pts in series if pts]
    if not series:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    levels = sorted({c for _, pts in series for c, _ in pts})
    for k, (name, pts) in enumerate(series):
        xs = [levels.index(c) + (k - (len(series) - 1) / 2) * 0.15 for c, _ in pts]
        ys = [float(v["mean"] or 1) for _, v in pts]
        err = [
            [float(v["mean"] or 1) - float(v["lo"] or 1) for _, v in pts],
            [float(v["hi"] or 1) - float(v["mean"] or 1) for _, v in pts],
        ]
        ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=4, label=f"{name} / {doc['baseline']}")
        margin = max(v["margin"] for _, v in pts)
        ax.axhspan(1 / (1 + margin), 1 + margin, color="grey", alpha=0.12)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s ratio (95% interval)")
    ax.set_title("ab: ratio to the baseline; grey band: noise margin")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def trial_result(t: TrialDoc) -> str:
    """A screening trial's outcome in words."""
    ratios = ", ".join(f"c={c} x{r:.2f}" for c, r in t["ratios"].items() if r is not None)
    if t["status"] == "infeasible":
        return f"cannot start: {t['diagnosis']}"
    if t["status"] == "dropped":
        return f"clearly worse: {ratios}"
    return ratios or "no valid ratio"
