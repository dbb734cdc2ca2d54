"""GPU families by compute capability, and from the names people and logs use."""

from __future__ import annotations

import re

# (major, minor) -> family label and the chips in it
FAMILIES: dict[tuple[int, int], tuple[str, str]] = {
    (7, 0): ("SM70", "Volta V100"),
    (7, 5): ("SM75", "Turing T4, RTX 20xx"),
    (8, 0): ("SM80", "Ampere A100, A30"),
    (8, 6): ("SM86", "Ampere RTX 30xx, A10, A40"),
    (8, 7): ("SM87", "Jetson Orin"),
    (8, 9): ("SM89", "Ada L4, L40S, RTX 40xx"),
    (9, 0): ("SM90", "Hopper H100, H200, GH200"),
    (10, 0): ("SM100", "Blackwell datacenter B200, GB200"),
    (10, 3): ("SM103", "Blackwell Ultra B300, GB300"),
    (11, 0): ("SM110", "Jetson Thor"),
    (12, 0): ("SM120", "Blackwell workstation RTX PRO 6000, RTX 50xx"),
    (12, 1): ("SM121", "DGX Spark GB10"),
}

# name fragments -> family, most specific first
_NAMES: tuple[tuple[str, str], ...] = (
    (r"\bGB10\b|DGX Spark", "SM121"),
    (r"RTX PRO \d+ Blackwell|RTX 50\d0|RTX 5090|RTX 5080", "SM120"),
    (r"\bB300\b|\bGB300\b", "SM103"),
    (r"\bB200\b|\bGB200\b|\bB100\b", "SM100"),
    (r"\bH100\b|\bH200\b|\bH800\b|\bGH200\b", "SM90"),
    (r"\bL40S?\b|\bL4\b|RTX 40\d0|RTX \d000 Ada", "SM89"),
    (r"\bA100\b|\bA800\b|\bA30\b", "SM80"),
    (r"\bA10G?\b|\bA40\b|RTX 30\d0", "SM86"),
    (r"\bT4\b", "SM75"),
    (r"\bV100\b", "SM70"),
)


def family_from_capability(major: int, minor: int) -> str:
    return FAMILIES.get((major, minor), (f"SM{major}{minor}", ""))[0]


def family_from_text(text: str) -> str | None:
    """'SM121', 'sm_120a', 'cc 12.0', 'capability 12.1', '12.0', or a GPU name such as 'NVIDIA GB10'."""
    m = re.search(r"\bsm_?(\d{2,3})a?\b", text, re.IGNORECASE)
    if m:
        return f"SM{m.group(1)}"
    m = re.search(r"(?:\bcc|capability)\s*(\d{1,2})\.(\d)\b", text, re.IGNORECASE) or re.fullmatch(
        r"\s*(\d{1,2})\.(\d)\s*", text
    )
    if m:
        return family_from_capability(int(m.group(1)), int(m.group(2)))
    for pattern, family in _NAMES:
        if re.search(pattern, text, re.IGNORECASE):
            return family
    return None
