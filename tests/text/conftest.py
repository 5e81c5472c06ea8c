import pytest

from psattn.textdata import tokens as token_cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every text test gets an empty token cache of its own (and no entry opened by another test)."""
    monkeypatch.setenv("PSATTN_CACHE", str(tmp_path / "cache"))
    token_cache._open.cache_clear()
    yield tmp_path / "cache"
    token_cache._open.cache_clear()
