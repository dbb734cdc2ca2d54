"""The diagnose tests build message indexes (launcher/child/message_index.py): into a cache of this run, not the
user's (~/.cache/nemolaunch/diagnose)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    saved = os.environ.get("XDG_CACHE_HOME")
    # the workers of one pytest-xdist run share it (each worker's folder is in the run's): the index is built once
    root = tmp_path_factory.getbasetemp()
    cache = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "diagnose-cache"
    cache.mkdir(exist_ok=True)
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved
