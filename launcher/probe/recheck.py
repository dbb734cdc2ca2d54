"""`probe --recheck PROFILE`: are the kernels a profile steers to still the fastest here? The verdict per chain,
its JSON, and the exit code the probe run ends with."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import ExitCode, NotReady
from launcher.probe.run import ProbeReport
from launcher.profiles.profile import ServingProfile


@dataclass(frozen=True)
class RecheckRow:
    chain: str
    profile_gets: str
    probe_recommends: str | None
    still_best: bool  # the same kernel, within MARGIN of the fastest, or tied with it

    def to_json(self) -> dict[str, object]:
        return {
            "chain": self.chain,
            "profile_gets": self.profile_gets,
            "probe_recommends": self.probe_recommends,
            "still_best": self.still_best,
        }


@dataclass(frozen=True)
class Recheck:
    profile: str
    rows: list[RecheckRow]

    @property
    def still_best(self) -> bool:
        return all(r.still_best for r in self.rows)


def recheck(profile: ServingProfile, report: ProbeReport) -> Recheck:
    """Each chain the profile steers against what this probe measured (nothing without a GPU: nothing ran)."""
    from launcher.profiles.write import recheck as compare

    rows = [RecheckRow(*row) for row in compare(profile, report.to_json())] if report.gpu else []
    return Recheck(profile.name, rows)


def exit_code(report: ProbeReport, checked: Recheck | None) -> tuple[ExitCode, str | None]:
    """How a probe run ends, and the one line that says why when it is not OK. No GPU raises NotReady."""
    if report.gpu is None:
        raise NotReady(
            "probes need an NVIDIA GPU (the chains above were read, nothing was run)",
            "run nemolaunch probe on the GPU host",
        )
    if report.interrupted:
        return ExitCode.INTERRUPTED, None
    if checked and not checked.still_best:
        return (
            ExitCode.PROBLEM,
            f"profile {checked.profile} no longer picks the fastest kernel everywhere; "
            "fix: nemolaunch profile write from this probe's --json",
        )
    return ExitCode.OK, None
