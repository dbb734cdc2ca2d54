"""Everything a server start would otherwise find out, checked before any server starts: serve, bench --profile,
ab and tune call `preflight` for each configuration first, so a usage or environment error is one line and exit 2
or 3, never a failed start counted as a result. It lives in bench/ because it judges a bench workload against the
server (serve/ sits below bench and does not know what a workload is)."""

from __future__ import annotations

from pathlib import Path

from checks.model_config import ConfigError, read_model_config, size
from launcher.bench.config import BenchConfig, validate
from launcher.errors import BadInput
from launcher.profiles.profile import ServingProfile
from launcher.serve.plan import Say, ServePlan, check_model, make_plan


def preflight(
    profile_ref: str | ServingProfile,
    model: str,
    python: Path | None,
    workload: BenchConfig | None = None,
    port: int = 0,
    say: Say | None = None,
) -> ServePlan:
    """The plan for serving `model` on loopback, after checking: the workload's values, the model folder (and a
    shape folder's flags), the engine's interpreter and its vLLM (NotReady when vLLM is missing), the profile's flags
    for that vLLM, and the workload's longest prompt plus output against the context the server will have. Raises
    BadInput or NotReady. Without a port, the plan is for checking only (ab picks each server's port when it starts
    it)."""
    if workload is not None:
        validate(workload)  # its own values first: no file or interpreter needed to refuse them
    check_model(model)
    plan = make_plan(profile_ref, model, python, "127.0.0.1", port, say=say)
    if workload is not None:
        check_context(workload, plan, Path(model).expanduser())
    return plan


def context_of(plan: ServePlan, model: Path) -> int | None:
    """The context the server will have: the profile's max_model_len, else the model's max_position_embeddings."""
    configured = plan.profile.settings.get("max_model_len")
    if isinstance(configured, int):
        return configured
    try:
        return size(read_model_config(model), "max_position_embeddings", model / "config.json")
    except ConfigError as e:
        raise BadInput(str(e), "give the model's folder with its config.json unedited") from None


def check_context(workload: BenchConfig, plan: ServePlan, model: Path) -> None:
    if workload.dataset is not None:
        return  # a dataset's prompts are measured by the server's tokenizer (bench checks them as it reads them)
    longest = max(workload.context_lens or (workload.input_len,))
    limit = context_of(plan, model)
    if limit is not None and longest + workload.output_len > limit:
        raise BadInput(
            f"prompt {longest} + output {workload.output_len} tokens is beyond the context of {limit} tokens that "
            f"profile {plan.profile.name} serves {model.name} with",
            f"give {'--context-lens' if workload.context_lens else '--input-len'} up to "
            f"{limit - workload.output_len}, or a larger max_model_len",
        )
