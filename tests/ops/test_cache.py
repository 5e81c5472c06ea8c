import pytest
import torch

from psattn.ops.cache import LayerCache


def chunk(T, B=1, H=2, D=4):
    return torch.randn(B, H, T, D)


def test_window_and_crop():
    cache = LayerCache(keep_query=True, keep_key=True, max_rollback=2)
    raws = chunk(6)
    cache.append(chunk(6), chunk(6), raw_k=raws, raw_q=chunk(6))
    assert len(cache) == 6 and cache.shear_state.raw_k.values.shape[2] == 3
    cache.crop(4)
    assert len(cache) == 4
    assert torch.equal(cache.last_raw()[1], raws[:, :, 3:4])
    with pytest.raises(ValueError, match="max_rollback"):
        cache.crop(1)
    cache.crop(0)
    assert len(cache) == 0 and cache.last_raw() == (None, None)


def test_plain_kv_cache_for_gamma_zero_keeps_no_raw_state():
    cache = LayerCache(keep_query=False, keep_key=False)
    cache.append(chunk(5), chunk(5), raw_k=chunk(5))
    assert cache.extra_state_bytes() == 0
    cache.crop(1)  # no raw state: any rollback is exact
    assert len(cache) == 1


def test_missing_raw_query_is_an_error():
    cache = LayerCache(keep_query=True)
    with pytest.raises(ValueError, match="raw_q"):
        cache.append(chunk(2), chunk(2), raw_k=chunk(2))


def test_negative_rollback_rejected():
    with pytest.raises(ValueError, match="max_rollback"):
        LayerCache(keep_query=False, max_rollback=-1)


def test_a_chunk_that_does_not_fit_the_cache_is_refused_before_anything_changes():
    """torch.cat raised 'Sizes of tensors must match except in dimension 2' from inside the cache."""
    cache = LayerCache(keep_query=False)
    k = torch.randn(1, 2, 3, 4)
    cache.append(k, k, raw_k=k)
    with pytest.raises(ValueError, match=r"does not continue the cached \(1, 2, 3, 4\)"):
        cache.append(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4), raw_k=torch.randn(1, 3, 1, 4))
    with pytest.raises(ValueError, match="of one batch, head count and length"):
        cache.append(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 2, 4), raw_k=torch.randn(1, 2, 1, 4))
    assert len(cache) == 3 and cache.shear_state.raw_k.end == 3
