"""How an ab verdict reads: the one place its sentence is rendered from the verdict's numbers (report.md, the
terminal and tune's [why] lines all call `sentence`), and report.md with its plot."""

from __future__ import annotations

from pathlib import Path

from launcher.ab.document import AbDocument, AgreementDoc, TrialDoc, VerdictDoc


def _pct(ratio: float) -> str:
    """A ratio as a change in percent; beyond 10x as ">+999%" (an interval from one noisy round can reach 1e15)."""
    return f"{(ratio - 1) * 100:+.1f}%" if ratio < 11 else ">+999%"


def _noise(v: VerdictDoc) -> str:
    if v["noise"] is None:
        return "noise not measured"
    return f"noise {v['noise'] * 100:.1f}% per round ({v['noise_source']})"


def sentence(v: VerdictDoc, b: str) -> str:
    """One verdict in words, naming B as the reader knows it (every comparison is against the baseline). It says
    "beyond the threshold" only for an interval that clears it, and "noise not measured" when no A/A measured it."""
    threshold = f"{v['threshold'] * 100:.1f}%"
    if v["mean"] is None or v["lo"] is None or v["hi"] is None:
        return f"{v['n']} valid round(s): not enough to judge"
    mean, span = _pct(v["mean"]), f"[{_pct(v['lo'])}, {_pct(v['hi'])}]"
    how = f"{v['n']} rounds, {100 * (1 - v['level']):.1f}% interval"
    kind = v["kind"]
    if kind == "noise":
        return f"A/A (the baseline against itself): spread {(v['sd'] or 0) * 100:.1f}% per round, mean {mean} {span}"
    if kind in ("better", "worse"):
        up, down = ("faster", "slower") if v["metric"] == "output_tok_s" else ("higher", "lower")
        word = up if v["lo"] > 1 else down
        size = abs(v["mean"] - 1) * 100
        return f"{b} {word} by {size:.1f}% {span}, beyond the {threshold} threshold; {_noise(v)}; {how}"
    if kind == "equivalent":
        return f"equivalent within +-{threshold} (mean {mean} {span}); {_noise(v)}; {how}"
    tail = (
        f"about {v['more_rounds']} more round(s) would decide"
        if v["more_rounds"] is not None
        else f"the difference sits on the {threshold} threshold: no number of rounds would decide"
    )
    return f"inconclusive (mean {mean} {span}): {tail}; {_noise(v)}; {how}"


def short(v: VerdictDoc) -> str:
    if v["mean"] is None or v["lo"] is None or v["hi"] is None:
        return "-"
    return f"{_pct(v['mean'])} [{_pct(v['lo'])}, {_pct(v['hi'])}] {v['kind']}"


def agreement_text(a: AgreementDoc) -> str:
    if a["error"]:
        return f"not compared: {a['error']}"
    if a["identical"] == a["prompts"]:
        return f"same answers: {a['identical']}/{a['prompts']} greedy completions identical"
    share = f"{a['agreement']:.0%}" if a["agreement"] is not None else "-"
    return (
        f"different answers: {a['identical']}/{a['prompts']} identical, token agreement {share}, first divergence at "
        f"tokens {[d for d in a['first_divergence'] if d is not None]}"
    )


def verdict_rows(doc: AbDocument) -> list[list[object]]:
    """The terminal's and report.md's table: every side and level, the headline first in each side's rows."""
    rows: list[list[object]] = []
    for name, per_level in doc["verdicts"].items():
        for c, metrics in per_level.items():
            tput = metrics["output_tok_s"]
            role = "headline" if tput["headline"] else ("A/A" if tput["kind"] == "noise" else "exploratory")
            rows.append([f"{name} vs {doc['baseline']}", c, role, sentence(tput, name), short(metrics["tpot_ms"]),
                         short(metrics["ttft_ms"])])  # fmt: skip
    return rows


VERDICT_HEADERS = ["comparison", "conc", "judged as", "output tok/s verdict", "TPOT B/A", "TTFT B/A"]


def write_report(doc: AbDocument, out: Path) -> None:
    from launcher.output import table, write_text

    w = doc["workload"]
    budget = f", budget {w['budget_min']:g} min" if w["budget_min"] else ""
    lines = [
        "# nemolaunch ab",
        "",
        f"Status: {doc['status']}, {len(doc['rounds'])} round(s) of {doc['planned_rounds'] or w['rounds_asked']} "
        f"planned{budget}; stopped: {doc['stopped_by'] or '-'}. Mode {doc['mode']} ({doc['mode_reason']}).",
        f"Workload: {w['input_len']} in / {w['output_len']} out tokens at concurrency {w['concurrency']}; each pass "
        f"holds the concurrency for a {w['window_s']:g} s steady window (ramp-up and drain recorded, not averaged).",
        f"Headline: output tok/s at c={doc['headline_level']}; the other levels and metrics are exploratory.",
        f"Threshold: {doc['threshold'] * 100:.1f}% (the smallest change worth acting on). Noise: "
        f"{doc['noise']['source']}.",
        f"Method: {doc['method']}.",
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
    for name, per_level in doc["verdicts"].items():
        for c, metrics in per_level.items():
            v = metrics["output_tok_s"]
            lines.append(f"- {name} c={c}: per-round ratios {v['ratios']}" + (
                f"; dropped: {'; '.join(v['dropped'])}" if v["dropped"] else ""))  # fmt: skip
    lines += ["", "## Warm-up per server start", ""]
    lines += [
        f"- {u['side']} start {u['start']} c={u['level']}: {u['passes']} pass(es), "
        + ("settled" if u["settled"] else "still drifting")
        + (f" (last bins' CoV {u['cov'] * 100:.1f}%)" if u["cov"] is not None else "")
        for u in doc["warmups"]
    ] or ["- none (no server was started by this run)"]
    not_reset = sorted({p["prefix_reset"] for r in doc["rounds"] for p in r["passes"] if p["prefix_reset"] != "reset"})
    if not_reset:
        lines += ["", f"Prefix cache before some passes: {', '.join(not_reset)}."]
    answers = doc["answers"]
    lines += ["", "## Same answers", ""]
    if not answers["applies"]:
        lines.append(f"Not compared: {answers['note']}.")
    else:
        lines += [f"- {name} vs {doc['baseline']}: {agreement_text(a)}" for name, a in answers["sides"].items()]
    if _plot(doc, out / "ratios.png"):
        lines += ["", "![ratios](ratios.png)"]
    lines += ["", "Every pass is a bench result folder under passes/ (`nemolaunch compare` reads them)."]
    write_text(out / "report.md", "\n".join(lines) + "\n")


def _plot(doc: AbDocument, path: Path) -> bool:
    """Output tok/s ratio B/A per level with its interval and the threshold band; False when nothing to plot."""
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
    threshold = doc["threshold"]
    ax.axhspan(1 / (1 + threshold), 1 + threshold, color="grey", alpha=0.12)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s ratio (corrected interval)")
    ax.set_title("ab: ratio to the baseline; grey band: the threshold")
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
