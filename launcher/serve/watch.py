"""serve's log watch: the server's log followed line by line as vLLM writes it, and the diagnose knowledge base run
over it live, so a failing start is explained while it happens and named when it ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from launcher.diagnose.run import Matcher, load_rules

# the first line of every server log: nemolaunch's own (what started the server), not vLLM's; not echoed, since
# serve's starting line says the same
LOG_HEADER = "# nemolaunch serve:"

Say = Callable[[str], None]


def follow(path: Path, stop: threading.Event, on_line: Callable[[int, str], None], say: Say | None = None) -> None:
    """Tail the server's log file line by line until `stop` is set (and the file is drained). If it fails (the
    log vanished, a matcher bug), it says so in one line instead of ending live diagnosis silently."""
    number = 0
    try:
        with path.open("r", encoding="utf-8", errors="replace", newline="\n") as f:
            pending = ""
            while True:
                chunk = f.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith("\n"):
                        number += 1
                        on_line(number, pending.rstrip("\n"))
                        pending = ""
                elif stop.is_set():
                    return
                else:
                    time.sleep(0.1)
    except Exception as e:  # a thread's exception is otherwise lost: report it, serving goes on
        if say:
            say(f"nemolaunch: live log diagnosis stopped at log line {number}: {type(e).__name__}: {e}")


class LogWatch:
    """Runs the diagnose knowledge base over the live log and reports findings as they first appear."""

    def __init__(self, say: Say, echo_log: Say | None, gpu_family: str | None) -> None:
        self.matcher = Matcher(load_rules(), gpu_family)
        self.say, self.echo_log = say, echo_log

    def line(self, number: int, text: str) -> None:
        if self.echo_log and not (number == 1 and text.startswith(LOG_HEADER)):
            self.echo_log(text)
        for finding in self.matcher.feed(text.encode() + b"\n"):
            if finding.severity != "info" and not finding.rule.generic:  # catch-alls wait for the root cause
                avoid = f" (profile: {finding.rule.avoid})" if finding.rule.avoid else ""
                self.say(
                    f"nemolaunch: [{finding.severity}] {finding.rule.title} (log line {number}); "
                    f"fix: {finding.fix()}{avoid}"
                )

    def root_cause(self) -> str | None:
        """Why vLLM failed: the first error finding (a rule's, or the root error and stage when none matched)."""
        errors = [f for f in self.matcher.report() if f.severity == "error"]
        if not errors:
            return None
        first = errors[0]
        if first.rule.id == "root-error":
            line, text = first.evidence[0]
            stage = first.stage or "start-up"
            return f"{text} (log line {line}, while {stage}); next: {first.fix()}"
        return f"{first.rule.title}; fix: {first.fix()}"
