import copy

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


def cat_reference(chunks):
    """The keys a cache of these chunks must hold: their concatenation."""
    return torch.cat(chunks, dim=2)


def plain_cache():
    return LayerCache(keep_query=False, keep_key=False)


@torch.no_grad()  # with gradients on, every append copies
def test_a_decode_step_writes_its_token_in_place():
    """Before, every append copied the whole cache (torch.cat): the storage changed at every step."""
    cache = plain_cache()
    chunks = [chunk(8)] + [chunk(1) for _ in range(4)]
    cache.append(chunks[0], -chunks[0])
    storage = cache.keys.untyped_storage().data_ptr()
    for c in chunks[1:]:
        keys, values = cache.append(c, -c)
    assert keys.untyped_storage().data_ptr() == storage and cache.buffer.capacity >= 12
    assert torch.equal(keys, cat_reference(chunks)) and torch.equal(values, -cat_reference(chunks))


@torch.no_grad()  # with gradients on, every append copies
def test_the_buffer_grows_by_a_quarter_when_full_and_keeps_every_token():
    cache = plain_cache()
    chunks = [chunk(1) for _ in range(100)]
    capacities = set()
    for c in chunks:
        cache.append(c, c)
        capacities.add(cache.buffer.capacity)
    assert torch.equal(cache.keys, cat_reference(chunks)) and len(cache) == 100
    assert len(capacities) <= 8  # 17, 21, 27, 35, 45, 57, 72, 91, 114: a handful of copies, not 100


@torch.no_grad()  # with gradients on, every append copies
def test_two_forks_never_overwrite_each_others_tokens():
    cache = plain_cache()
    prefix = chunk(5)
    cache.append(prefix, prefix)
    left, right = copy.copy(cache), copy.copy(cache)  # as PSACache.fork copies its layers
    a, b = chunk(2), chunk(3)
    left.append(a, a)  # the first to write extends the shared buffer in place
    right.append(b, b)  # the other copies
    assert left.buffer is cache.buffer and right.buffer is not cache.buffer
    assert torch.equal(left.keys, cat_reference([prefix, a])) and torch.equal(right.keys, cat_reference([prefix, b]))
    c = chunk(1)
    cache.append(c, c)  # the parent too must not write over left's tokens
    assert torch.equal(cache.keys, cat_reference([prefix, c])) and torch.equal(left.keys, cat_reference([prefix, a]))


@torch.no_grad()  # with gradients on, every append copies
def test_a_rollback_writes_in_place_again_unless_a_copy_reads_the_tokens():
    cache = plain_cache()
    prefix, draft = chunk(4), chunk(3)
    cache.append(prefix, prefix)
    cache.append(draft, draft)
    cache.crop(5)  # speculative decoding: one draft token kept
    fix = chunk(1)
    cache.append(fix, fix)
    assert cache.buffer.written == 6 and torch.equal(cache.keys, cat_reference([prefix, draft[:, :, :1], fix]))
    snapshot = copy.copy(cache)  # reads 6 tokens
    cache.crop(4)
    other = chunk(2)
    cache.append(other, other)
    assert snapshot.buffer is not cache.buffer  # the snapshot's tokens 4 and 5 stay as they were
    assert torch.equal(snapshot.keys, cat_reference([prefix, draft[:, :, :1], fix]))
    assert torch.equal(cache.keys, cat_reference([prefix, other]))


def test_appends_under_autograd_keep_the_gradient_of_every_step():
    """Writing into a buffer that an earlier step's attention saved would break backward."""
    cache = plain_cache()
    chunks = [chunk(3).requires_grad_()] + [chunk(1).requires_grad_() for _ in range(3)]
    outs = [cache.append(c, c)[0].sum() for c in chunks]
    torch.stack(outs).sum().backward()
    assert [float(c.grad.mean()) for c in chunks] == [4.0, 3.0, 2.0, 1.0]  # chunk i is read by the 4 - i later steps


def test_a_chunk_in_another_dtype_promotes_and_one_on_another_device_is_refused():
    cache = plain_cache()
    cache.append(chunk(2).half(), chunk(2).half())
    keys, _ = cache.append(chunk(1), chunk(1))
    assert keys.dtype == torch.float32  # as torch.cat
    with pytest.raises(ValueError, match="does not continue a cache on cpu"):
        cache.append(chunk(1, B=1).to("meta"), chunk(1).to("meta"))
    assert len(cache) == 3


def test_a_step_under_autograd_is_never_written_over_by_a_later_one():
    """A prompt cached without gradients, then steps with gradients on whose keys need none (only the query
    does, as under LoRA on q_proj): a step written in place broke the earlier steps' backward."""
    cache = plain_cache()
    with torch.no_grad():
        cache.append(chunk(3), chunk(3))
    q = torch.randn(1, 2, 1, 4, requires_grad=True)
    loss = 0
    for _ in range(3):
        k, v = cache.append(chunk(1), chunk(1))
        loss = loss + (q @ k.transpose(-1, -2)).softmax(-1).matmul(v).sum()
    loss.backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_a_rollback_never_writes_into_a_callers_tensor():
    """The first chunk, stored under autograd as the caller's own tensor, was written over by a step after a crop."""
    cache = LayerCache(keep_query=False, keep_key=False, max_rollback=3)
    k = torch.randn(1, 2, 3, 4, requires_grad=True)
    before = k.detach().clone()
    keys, _ = cache.append(k, k)
    loss = (keys**2).sum()
    cache.crop(1)
    with torch.no_grad():
        cache.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
    assert torch.equal(k.detach(), before)
    loss.backward()
    assert torch.equal(k.grad, 2 * before)


def test_a_cache_filled_in_inference_mode_continues_outside_it():
    cache = plain_cache()
    with torch.inference_mode():
        cache.append(chunk(3), chunk(3))
    with torch.no_grad():
        keys, _ = cache.append(chunk(1), chunk(1))
    assert len(cache) == 4 and keys.shape[2] == 4


@torch.no_grad()
def test_restoring_from_a_fork_that_went_on_protects_its_tokens():
    """After adopting a fork's state, a crop gave back tokens the fork still read, and the next append wrote over them."""
    from psattn.ops.cache import ChunkRecord, PSACache

    def append(cache, k):
        B, T, n = k.shape[0], k.shape[2], len(cache)
        for layer in cache.layers:
            layer.append(k, -k)
        cache.record(ChunkRecord(torch.ones(B, T, dtype=torch.bool), torch.zeros(B, T, dtype=torch.long),
                                 torch.arange(n, n + T).expand(B, T), True))

    prefix, branch = chunk(5), chunk(2)
    cache = PSACache([plain_cache()])
    append(cache, prefix)
    fork = cache.fork()
    append(fork, branch)  # extends the shared buffer in place
    cache.restore(fork)
    cache.crop(5)
    append(cache, torch.zeros(1, 2, 2, 4))
    assert torch.equal(fork.layers[0].keys, cat_reference([prefix, branch]))
    assert torch.equal(cache.layers[0].keys, cat_reference([prefix, torch.zeros(1, 2, 2, 4)]))
