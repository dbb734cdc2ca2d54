"""`nemolaunch lock`: verify the engine's stack and this host against a lock, capture a working stack as one,
bundle a lock's wheels for offline hosts. The format, its parser and the comparisons are in checks/lockfile.py
(shared with `doctor --lock`)."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from checks.facts import nvml_facts, stack_facts
from checks.gpu_family import family_from_capability
from checks.lockfile import Lock, LockError, Mismatch, compare_layers, compare_packages, load
from checks.proc import run_child
from launcher.engine import Interpreter, resolve_python
from launcher.errors import BadInput, ExitCode, NemolaunchError
from launcher.output import atomic_write_text


def load_or_bad_input(path: Path) -> Lock:
    try:
        return load(path)
    except LockError as e:
        raise BadInput(e.message, e.fix) from None


@dataclass(frozen=True)
class Verification:
    """`lock verify`'s answer: the lock, the interpreter whose stack was compared, and what differs."""

    path: Path
    lock: Lock
    interpreter: Interpreter
    mismatches: list[Mismatch]

    @property
    def failed(self) -> list[Mismatch]:
        return [m for m in self.mismatches if m.severity == "fail"]

    def exit_code(self) -> ExitCode:
        return ExitCode.PROBLEM if self.failed else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "lock": str(self.path),
            "python": str(self.interpreter.path),
            "pins": len(self.lock.pins),
            "ok": not self.failed,
            "mismatches": [m.to_json() for m in self.mismatches],
        }


def verify(lock_path: Path, python: Path) -> tuple[Lock, list[Mismatch]]:
    lock = load_or_bad_input(lock_path)
    stack = stack_facts(python)
    if not stack.get("ok"):
        raise NemolaunchError(f"cannot read the packages of {python}: {stack.get('error')}")
    nvml = nvml_facts()
    return lock, compare_packages(lock, stack["all_packages"]) + compare_layers(lock, stack, nvml)


def verify_engine(lock_path: Path, python: Path | None) -> Verification:
    """The engine's interpreter (--python, $NEMOLAUNCH_PYTHON, ...) and this host against the lock."""
    interpreter = resolve_python(python)
    lock, mismatches = verify(lock_path, interpreter.path)
    return Verification(lock_path, lock, interpreter, mismatches)


def _uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def capture(python: Path, out: Path, name: str, validated: str | None) -> list[str]:
    """Write out.in (exact pins of what is installed), out.txt (hashed by uv, when it can resolve them) and
    out.toml (the layers below Python). Returns notes for the user."""
    stack = stack_facts(python)
    if not stack.get("ok"):
        raise NemolaunchError(f"cannot read the packages of {python}: {stack.get('error')}")
    nvml = nvml_facts()
    base = out.with_suffix("")
    pins = {k: v for k, v in stack["all_packages"].items() if k not in ("pip", "setuptools", "wheel")}
    atomic_write_text(base.with_suffix(".in"), "".join(f"{k}=={v}\n" for k, v in sorted(pins.items())))
    notes = []
    uv = _uv()
    txt = base.with_suffix(".txt")
    markers = stack["markers"]
    if uv:
        r = run_child(
            [
                uv,
                "pip",
                "compile",
                "-q",
                "--generate-hashes",
                "--no-deps",
                "--python-version",
                markers["python_version"],
                "--python-platform",
                f"{markers['platform_machine']}-manylinux_2_28",
                "--custom-compile-command",
                "nemolaunch lock capture",
                "-o",
                str(txt),
                str(base.with_suffix(".in")),
            ],
            timeout=600,
        )
        if not r.ok:
            notes.append(
                f"uv could not hash every pin ({(r.stderr.strip().splitlines() or ['?'])[-1]}); "
                f"{txt.name} has exact pins without hashes"
            )
    else:
        notes.append(f"uv is not installed: {txt.name} has exact pins without hashes")
    if not txt.is_file() or notes:
        shutil.copyfile(base.with_suffix(".in"), txt)
    gpus = nvml.get("gpus", []) if nvml.get("ok") else []
    families = sorted({family_from_capability(*g["capability"]) for g in gpus if g.get("capability")})
    host: dict[str, Any] = {"gpu": bool(gpus)}
    if gpus:
        host.update(driver_min=nvml["driver"], cuda=nvml["cuda_driver"], gpu_families=families)
    validated_by: dict[str, str] = {"on": time.strftime("%Y-%m-%d")}
    if validated:
        validated_by["bench"] = validated
    manifest = {
        "schema": 1,
        "name": name,
        "requirements": txt.name,
        "python": {
            "version": markers["python_version"],
            "platform": f"{markers['sys_platform']}_{markers['platform_machine']}",
        },
        "host": host,
        "validated": validated_by,
    }
    header = "# nemolaunch lock manifest, written by nemolaunch lock capture\n"
    atomic_write_text(base.with_suffix(".toml"), header + tomli_w.dumps(manifest))
    return notes


def bundle(lock_path: Path, out: Path) -> str:
    """Download every pinned wheel for the lock's Python and platform; returns the offline install command."""
    lock = load_or_bad_input(lock_path)
    py = (lock.manifest.get("python") or {}).get("version") or ".".join(map(str, sys.version_info[:2]))
    machine = ((lock.manifest.get("python") or {}).get("platform") or "linux_x86_64").split("_", 1)[1]
    out.mkdir(parents=True, exist_ok=True)
    platforms = [f"manylinux_2_{n}_{machine}" for n in (17, 24, 27, 28, 31, 34, 35)]
    platforms += [f"manylinux2014_{machine}", f"linux_{machine}"]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "--python-version",
        py,
        "--implementation",
        "cp",
        "-d",
        str(out),
        "-r",
        str(lock.requirements),
    ]
    for p in platforms:
        cmd += ["--platform", p]
    r = run_child(cmd, timeout=6 * 3600)  # its own process group: Ctrl-C or SIGTERM here stops pip too
    if not r.ok:
        last = (r.stderr.strip().splitlines() or ["pip download failed"])[-1]
        raise NemolaunchError(f"downloading the pinned wheels failed: {last}", "check the index is reachable")
    shutil.copyfile(lock.requirements, out / lock.requirements.name)
    install = f"pip install --no-index --find-links {out} --require-hashes --no-deps -r {out / lock.requirements.name}"
    atomic_write_text(out / "INSTALL.txt", install + "\n")
    return install
