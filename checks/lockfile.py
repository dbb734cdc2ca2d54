"""Lockfiles: parse them (requirements pinned with hashes, and the TOML manifest of the layers below Python),
and compare them with what is installed and with this host. `doctor --lock` and `lock verify` both use this.

    lockfiles/NAME.in     what was asked for (input to `make lock`)
    lockfiles/NAME.txt    every package pinned with its hashes (uv pip compile --generate-hashes)
    lockfiles/NAME.toml   the manifest: schema, requirements = "NAME.txt", [python], [host], [validated]
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from checks.child.dists import VLLM_DISTRIBUTIONS
from checks.facts import Facts
from checks.gpu_family import family_from_capability
from checks.result import CheckResult


class LockError(ValueError):
    """A lock that does not parse: the message names the file and line; `fix` says what to do."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix

    def __str__(self) -> str:
        return f"{self.message}; {self.fix}" if self.fix else self.message


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;]+)\s*(;.*)?$")
# installed but not in the lock, these change what runs: a stray one is a finding
MATTERS = (
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "flashinfer-python",
    "torch",
    "torchvision",
    "torchaudio",
    "triton",
    *VLLM_DISTRIBUTIONS,
    "xformers",
    "deep-gemm",
)


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    line: int
    hashes: tuple[str, ...]


@dataclass
class Lock:
    path: Path  # the manifest, or the requirements file when there is no manifest
    requirements: Path
    pins: dict[str, Pin]
    manifest: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """What doctor --json keeps of a lock: enough to judge it again (Lock.from_json), not a repr."""
        return {
            "path": str(self.path),
            "requirements": str(self.requirements),
            "pins": {n: {"version": p.version, "line": p.line, "hashes": list(p.hashes)} for n, p in self.pins.items()},
            "manifest": self.manifest,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Lock:
        pins = {n: Pin(n, p["version"], p["line"], tuple(p["hashes"])) for n, p in doc["pins"].items()}
        return cls(Path(doc["path"]), Path(doc["requirements"]), pins, doc.get("manifest") or {})


def parse_requirements(path: Path) -> dict[str, Pin]:
    """name==version pins with their --hash options; anything looser, or a name given twice, is an error
    naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LockError(f"cannot read {path}: {e}") from None
    pins: dict[str, Pin] = {}
    logical, start = "", 0
    for number, raw in enumerate([*text.splitlines(), ""], 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not logical:
            start = number
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical = (logical + line).strip()
        if not logical or logical.startswith("-"):  # options such as --index-url or --find-links
            logical = ""
            continue
        parts = logical.split()
        m = _PIN.match(" ".join(p for p in parts if not p.startswith("--hash")))
        if not m:
            raise LockError(
                f"{path}:{start}: {parts[0]!r} is not pinned exactly (name==version)",
                "regenerate the lock with make lock",
            )
        name = canonicalize_name(m.group(1))
        if name in pins:
            raise LockError(
                f"{path}:{start}: {name} is pinned twice (first on line {pins[name].line})", "keep one pin per package"
            )
        hashes = tuple(p.split("=", 1)[1] for p in parts if p.startswith("--hash="))
        pins[name] = Pin(name, m.group(3), start, hashes)
        logical = ""
    return pins


def load(path: Path) -> Lock:
    if path.suffix == ".toml":
        try:
            manifest = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise LockError(f"cannot read {path}: {e}") from None
        except tomllib.TOMLDecodeError as e:
            raise LockError(f"{path}: not valid TOML: {e}") from None
        if manifest.get("schema") != 1 or "requirements" not in manifest:
            raise LockError(f"{path}: not a nemolaunch lock manifest (schema = 1, requirements = ...)")
        requirements = path.parent / manifest["requirements"]
        return Lock(path, requirements, parse_requirements(requirements), manifest)
    return Lock(path, path, parse_requirements(path))


@dataclass(frozen=True)
class Mismatch:
    kind: str  # missing, version, local-label, stray, python, platform, driver, cuda, gpu-family
    what: str
    fix: str
    severity: str = "fail"  # or "warn"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "what": self.what, "fix": self.fix, "severity": self.severity}


def _split(version: str) -> tuple[str, str]:
    public, _, label = version.partition("+")
    return public, label


def compare_packages(lock: Lock, installed: dict[str, str]) -> list[Mismatch]:
    hashed = all(p.hashes for p in lock.pins.values())
    reinstall = f"pip install {'--require-hashes ' if hashed else ''}--no-deps -r {lock.requirements}"
    out = []
    for name, pin in lock.pins.items():
        have = installed.get(name)
        if have is None:
            out.append(Mismatch("missing", f"{name} {pin.version} is not installed", reinstall))
        elif have != pin.version:
            (lp, ll), (hp, hl) = _split(pin.version), _split(have)
            if lp == hp:
                out.append(
                    Mismatch(
                        "local-label",
                        f"{name} {have}: local label +{hl or '(none)'}, the lock has "
                        f"+{ll or '(none)'} (a build for another CUDA)",
                        reinstall,
                    )
                )
            else:
                out.append(Mismatch("version", f"{name} {have}, the lock has {pin.version}", reinstall))
    for name in MATTERS:
        if name in installed and name not in lock.pins:
            out.append(
                Mismatch(
                    "stray", f"{name} {installed[name]} is installed but not in the lock", f"pip uninstall -y {name}"
                )
            )
    return out


def compare_layers(lock: Lock, stack: dict[str, Any], nvml: dict[str, Any]) -> list[Mismatch]:
    m = lock.manifest
    out: list[Mismatch] = []
    want_py = (m.get("python") or {}).get("version")
    have_py = ".".join(str(stack.get("python_version", "")).split(".")[:2])
    if want_py and have_py != want_py:
        out.append(
            Mismatch(
                "python",
                f"Python {have_py}, the lock was made for {want_py}",
                f"make a Python {want_py} venv for the engine",
            )
        )
    host = m.get("host") or {}
    if host.get("gpu") is False:
        return out
    if host.get("driver_min") or host.get("cuda"):
        if not nvml.get("ok"):
            out.append(
                Mismatch("driver", "no NVIDIA driver on this host; the lock needs one", "install the NVIDIA driver")
            )
            return out
        if host.get("driver_min") and _older(nvml["driver"], host["driver_min"]):
            out.append(
                Mismatch(
                    "driver",
                    f"driver {nvml['driver']}, the lock needs >= {host['driver_min']}",
                    f"upgrade the NVIDIA driver to >= {host['driver_min']}",
                )
            )
        if host.get("cuda") and _older(nvml["cuda_driver"], host["cuda"]):
            out.append(
                Mismatch(
                    "cuda",
                    f"the driver supports CUDA {nvml['cuda_driver']}, the lock needs {host['cuda']}",
                    "upgrade the NVIDIA driver",
                )
            )
    families = host.get("gpu_families") or []
    if families and nvml.get("ok"):
        here = {family_from_capability(*g["capability"]) for g in nvml.get("gpus", []) if g.get("capability")}
        if not here & set(families):
            out.append(
                Mismatch(
                    "gpu-family",
                    f"this GPU is {', '.join(sorted(here))}; the lock was validated on {', '.join(families)}",
                    "run nemolaunch probe and bench here before trusting it",
                    severity="warn",
                )
            )
    return out


def _older(have: str, want: str) -> bool:
    try:
        return Version(have) < Version(want)
    except InvalidVersion:
        return have != want


def check(facts: Facts) -> list[CheckResult]:
    doc: dict[str, Any] | None = facts.get("lock")
    if doc is None:
        return [CheckResult("lock", "lock", "skip", "no --lock given")]
    lock = Lock.from_json(doc)
    mismatches = compare_packages(lock, facts["stack"].get("all_packages") or {})
    mismatches += compare_layers(lock, facts["stack"], facts["nvml"])
    failed = [m for m in mismatches if m.severity == "fail"]
    if not mismatches:
        return [CheckResult("lock", "lock", "pass", f"all {len(lock.pins)} pins of {lock.path} match")]
    listed = "; ".join(m.what for m in mismatches[:10]) + (" ..." if len(mismatches) > 10 else "")
    fixes = "; ".join(dict.fromkeys(m.fix for m in mismatches[:10]))
    return [
        CheckResult(
            "lock",
            "lock",
            "fail" if failed else "warn",
            f"{len(mismatches)} mismatch(es) with {lock.path}: {listed}",
            f"every pin and layer of {lock.path}",
            fixes,
        )
    ]
