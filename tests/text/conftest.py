import pytest


@pytest.fixture(autouse=True)
def cache_dir(fresh_token_cache):
    """Every test here gets an empty token cache of its own (``fresh_token_cache`` in tests/conftest.py)."""
    return fresh_token_cache
