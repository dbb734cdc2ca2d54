"""What every check returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["pass", "warn", "fail", "skip", "crash"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "skip", "crash")


@dataclass(frozen=True)
class CheckResult:
    id: str
    category: str
    status: Status
    observed: str
    expected: str = ""
    fix: str = ""  # for every warn/fail: the command or setting that fixes it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
