"""checks.secrets: redaction by name and by shape, and the API key's sources."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from checks import secrets
from launcher.output import atomic_write_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://bob:hunter2@127.0.0.1:8000/v1", "http://bob:<redacted>@127.0.0.1:8000/v1"),
        ("token hf_abcdefghijklmnopqrstuvwxyz0123 here", "token <redacted> here"),
        ("Authorization: Bearer abc.def-ghi_jkl", "Authorization: <redacted>"),
        ("sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX", "<redacted>"),
        ("ghp_" + "a" * 36, "<redacted>"),
        ("AKIAABCDEFGHIJKLMNOP", "<redacted>"),
        ("http://127.0.0.1:8000 with no secret", "http://127.0.0.1:8000 with no secret"),
    ],
    ids=["url-password", "hf-token", "bearer", "openai", "github", "aws", "plain-url"],
)
def test_redact_text_by_shape(text: str, expected: str) -> None:
    assert secrets.redact_text(text) == expected


def test_redact_env_by_name_and_remembers_the_value() -> None:
    env = {"DB_PASS": "s3cr3t-pw", "MY_PWD": "pw-two", "X_AUTH": "a-u-t-h", "VLLM_KV_CACHE_DTYPE": "fp8", "A": "1"}
    assert secrets.redact_env(env) == {
        "DB_PASS": "<redacted>",
        "MY_PWD": "<redacted>",
        "X_AUTH": "<redacted>",
        "VLLM_KV_CACHE_DTYPE": "fp8",
        "A": "1",
    }
    # the value is now known: masked wherever it appears later
    assert secrets.redact_text("--password s3cr3t-pw") == "--password <redacted>"


def test_redact_obj_masks_secret_keys_and_flag_values() -> None:
    doc = {
        "env": {"HF_TOKEN": "short"},
        "argv": ["vllm", "--api-key", "k-123456", "--hf-token=tok-999999", "--port", "8000"],
        "url": "http://u:p4ss@h/",
    }
    assert secrets.redact_obj(doc) == {
        "env": {"HF_TOKEN": "<redacted>"},
        "argv": ["vllm", "--api-key", "<redacted>", "--hf-token=<redacted>", "--port", "8000"],
        "url": "http://u:<redacted>@h/",
    }


def test_redact_obj_keeps_token_counts_but_not_numeric_secrets() -> None:
    """bench's summary.json on the H200 (2026-12-02) read "mean_prompt_tokens": "<redacted>" (its name says TOKEN)
    and `nemolaunch roofline` died on it: a number under a name that counts tokens is kept; any other value under
    a secret name is still masked, numbers too."""
    doc = {
        "mean_prompt_tokens": 256.0,
        "total_output_tokens": 131072,
        "num_tokens": 8,
        "api_token": 123456789,  # a numeric secret
        "hf_tokens": ["hf_abcdefghijklmnopqrstuvwxyz"],  # not a number: masked
        "session_pin": 1234,
    }
    assert secrets.redact_obj(doc) == {
        "mean_prompt_tokens": 256.0,
        "total_output_tokens": 131072,
        "num_tokens": 8,
        "api_token": "<redacted>",
        "hf_tokens": "<redacted>",
        "session_pin": "<redacted>",
    }


def test_api_key_sources(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-the-file\n")
    assert secrets.api_key(key_file, {"VLLM_API_KEY": "env"}) == "from-the-file"
    assert secrets.api_key(None, {"VLLM_API_KEY": "from-vllm", "NEMOLAUNCH_API_KEY": "ours"}) == "ours"
    assert secrets.api_key(None, {}) is None
    assert "from-the-file" not in secrets.redact_text("key=from-the-file")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        secrets.api_key(tmp_path / "empty")


def test_atomic_write_keeps_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
        os.umask(0o077)
        atomic_write_text(tmp_path / "b.json", "{}")
        assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)
