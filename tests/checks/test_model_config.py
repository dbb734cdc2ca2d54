"""The hf_quant_config.json beside a model's config.json, read where config.json is (checks/model_config.py): by
probe's chain selection and bench's roofline alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.model_config import read_hf_quant_config
from tests.helpers import FIXTURES

NANO = FIXTURES / "models" / "nemotron-3-nano-30b-a3b-nvfp4"


def test_the_folder_and_its_config_json_give_the_same_reading() -> None:
    found = read_hf_quant_config(NANO)
    assert found is not None and found["quantization"]["quant_algo"] == "NVFP4"
    assert read_hf_quant_config(NANO / "config.json") == found


@pytest.mark.parametrize(
    "text", [None, "{not json", "[1, 2]", "\udcff"], ids=["absent", "not-json", "not-an-object", "not-utf8"]
)
def test_what_vllm_would_not_read_is_none(tmp_path: Path, text: str | None) -> None:
    (tmp_path / "config.json").write_text("{}")
    if text is not None:
        (tmp_path / "hf_quant_config.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    assert read_hf_quant_config(tmp_path) is None
