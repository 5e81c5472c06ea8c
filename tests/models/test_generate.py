import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ALL_VARIANTS, random_model
from psattn.models import AttentionConfig, DecoderLM, ModelConfig, generate, prefill, speculative_generate


@pytest.mark.parametrize("variant,placement", ALL_VARIANTS)
@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_token_by_token_equals_full_forward(variant, placement, boundary):
    model = random_model(variant, placement)
    for blk in model.blocks:
        blk.attn.boundary = boundary
    x = torch.randint(0, 37, (2, 10))
    full = model(x)
    cache = model.new_cache()
    steps = torch.cat([model(x[:, t : t + 1], cache=cache) for t in range(10)], dim=1)
    assert torch.allclose(steps, full, atol=1e-5)


@pytest.mark.parametrize("variant,placement", ALL_VARIANTS)
@pytest.mark.parametrize("prompt_len", [1, 2, 5])
def test_generate_logits_equal_full_forward(variant, placement, prompt_len):
    model = random_model(variant, placement)
    prompt = torch.randint(0, 37, (2, prompt_len))
    out = generate(model, prompt, 6)
    full = model(out.sequences)  # (B, T, V)
    assert torch.allclose(out.logits, full[:, prompt_len - 1 : -1], atol=1e-5)
    # greedy: each new token is the argmax of the full forward at the previous position
    assert torch.equal(out.sequences[:, prompt_len:], full[:, prompt_len - 1 : -1].argmax(-1))


@pytest.mark.parametrize("variant", ["symmetric", "key_only", "query_only"])
@pytest.mark.parametrize("chunk", [1, 3, 4, 11])
def test_chunked_prefill(variant, chunk):
    model = random_model(variant)
    x = torch.randint(0, 37, (2, 11))
    cache = model.new_cache()
    last = prefill(model, x, cache, chunk_size=chunk)
    assert torch.allclose(last, model(x)[:, -1], atol=1e-5)
    nxt = torch.randint(0, 37, (2, 1))
    assert torch.allclose(model(nxt, cache=cache)[:, -1], model(torch.cat([x, nxt], 1))[:, -1], atol=1e-5)


@pytest.mark.parametrize("variant,placement", ALL_VARIANTS)
def test_left_padded_generation_equals_sequences_alone(variant, placement):
    model = random_model(variant, placement)
    a, b = torch.randint(0, 37, (1, 3)), torch.randint(0, 37, (1, 7))
    batch = torch.cat([torch.cat([torch.zeros(1, 4, dtype=torch.long), a], 1), b])
    mask = torch.tensor([[0] * 4 + [1] * 3, [1] * 7])
    together = generate(model, batch, 8, attention_mask=mask, prefill_chunk_size=3)
    alone_a, alone_b = generate(model, a, 8), generate(model, b, 8)
    assert torch.equal(together.sequences[0, 4:], alone_a.sequences[0])
    assert torch.equal(together.sequences[1], alone_b.sequences[0])
    assert torch.allclose(together.logits[0], alone_a.logits[0], atol=1e-5)


@pytest.mark.parametrize("variant,gamma,placement,boundary,n_kv_heads,rotary_fraction,dtype", [
    ("symmetric", -0.6, "post_rope", "zero", 1, 0.5, torch.float32),
    ("query_only", 5.0, "pre_rope", "replicate", 4, 0.5, torch.float64),
    ("key_only", 0.05, "post_rope", "replicate", 1, 1.0, torch.float64),
    ("baseline", 0.0, "post_rope", "zero", 2, 0.5, torch.float32),
])
def test_packed_and_left_padded_batches_fed_through_the_cache_in_chunks_equal_their_sequences_alone(
        variant, gamma, placement, boundary, n_kv_heads, rotary_fraction, dtype):
    """Chunks that do not divide the prompt, documents that restart inside a cached chunk, and a row that is padding
    but for its last token, under GQA down to one key head, partial RoPE, either boundary rule and float32 or
    float64: the cache continues each sequence as if it ran alone."""
    model = random_model(variant, placement, gamma, boundary=boundary, n_kv_heads=n_kv_heads,
                         rotary_fraction=rotary_fraction).to(dtype)
    atol = 1e-9 if dtype == torch.float64 else 1e-4
    g = torch.Generator().manual_seed(0)
    docs = [torch.randint(0, 37, (1, n), generator=g) for n in (3, 1, 4)]
    positions = torch.cat([torch.arange(d.shape[1]) for d in docs])[None]  # (1, 8): restarts at 3 and 4
    packed, cache, pieces = torch.cat(docs, 1), model.new_cache(), []
    for start in range(0, 8, 3):
        pieces.append(model(packed[:, start:start + 3], position_ids=positions[:, start:start + 3], cache=cache))
    got, start = torch.cat(pieces, 1), 0
    for d in docs:
        torch.testing.assert_close(got[0, start:start + d.shape[1]], model(d)[0], atol=atol, rtol=0)
        start += d.shape[1]
    rows = [torch.randint(0, 37, (1, n), generator=g) for n in (5, 1, 3)]
    batch = torch.stack([torch.cat([torch.full((5 - r.shape[1],), 7), r[0]]) for r in rows])  # (3, 5), left-padded
    mask = torch.tensor([[1] * 5, [0] * 4 + [1], [0, 0, 1, 1, 1]])
    together = generate(model, batch, 3, attention_mask=mask, prefill_chunk_size=2)
    for i, r in enumerate(rows):
        torch.testing.assert_close(together.logits[i], generate(model, r, 3).logits[0], atol=atol, rtol=0)


@pytest.mark.parametrize("boundary", ["replicate", "zero"])
def test_padding_that_ends_at_a_chunk_boundary_starts_the_next_real_token_as_in_the_full_forward(boundary):
    """A row whose padding fills the cached chunk: its first real token in the next chunk starts its sequence, as
    in the full forward, whatever position_ids it is given. The cache continued the padding's shear into it when
    its position was not 0 (logits off by about 3)."""
    model = random_model("symmetric", gamma=0.8, boundary=boundary)
    ids, mask = torch.tensor([[7, 7, 3, 5, 9], [2, 4, 3, 5, 9]]), torch.tensor([[0, 0, 1, 1, 1], [1] * 5])
    positions = torch.tensor([[0, 0, 5, 6, 7], [0, 1, 2, 3, 4]])  # row 0: a document continued from position 5
    full = model(ids, attention_mask=mask, position_ids=positions)
    cache = model.new_cache()
    pieces = [model(ids[:, cols], attention_mask=mask[:, cols], position_ids=positions[:, cols], cache=cache)
              for cols in (slice(0, 2), slice(2, 5))]
    torch.testing.assert_close(torch.cat(pieces, 1)[0, 2:], full[0, 2:], atol=1e-9, rtol=0)
    torch.testing.assert_close(torch.cat(pieces, 1)[1], full[1], atol=1e-9, rtol=0)
    torch.testing.assert_close(full[0, 2:], model(ids[:1, 2:], position_ids=positions[:1, 2:])[0], atol=1e-9, rtol=0)


@pytest.mark.parametrize("variant", ["symmetric", "key_only"])
def test_forked_prefix_continues_two_suffixes(variant):
    model = random_model(variant)
    prefix, s1, s2 = (torch.randint(0, 37, (1, n)) for n in (6, 3, 4))
    cache = model.new_cache()
    prefill(model, prefix, cache)
    twin = cache.fork()
    out1 = model(s1, cache=cache)
    out2 = model(s2, cache=twin)
    assert len(cache) == 9 and len(twin) == 10
    assert torch.allclose(out1, model(torch.cat([prefix, s1], 1))[:, 6:], atol=1e-5)
    assert torch.allclose(out2, model(torch.cat([prefix, s2], 1))[:, 6:], atol=1e-5)


@pytest.mark.parametrize("variant", ["symmetric", "key_only", "baseline"])
def test_forks_decoded_in_turns_each_equal_their_full_forward(variant):
    """A cache and its fork share one buffer with room to grow: the first to write extends it in place, the
    other copies, and neither reads the other's tokens."""
    model = random_model(variant)
    prefix, a, b = (torch.randint(0, 37, (1, n)) for n in (5, 4, 4))
    cache = model.new_cache()
    cache.reserve(12)
    prefill(model, prefix, cache)
    twin = cache.fork()
    steps_a, steps_b = [], []
    with torch.no_grad():  # under autograd a cache copies, as torch.cat did
        for t in range(4):
            steps_a.append(model(a[:, t : t + 1], cache=cache))
            steps_b.append(model(b[:, t : t + 1], cache=twin))
    assert cache.layers[0].buffer.capacity == 12 and twin.layers[0].buffer is not cache.layers[0].buffer
    assert torch.allclose(torch.cat(steps_a, 1), model(torch.cat([prefix, a], 1))[:, 5:], atol=1e-5)
    assert torch.allclose(torch.cat(steps_b, 1), model(torch.cat([prefix, b], 1))[:, 5:], atol=1e-5)


def test_generation_reserves_room_for_every_token_at_the_prompt():
    model = random_model("symmetric")
    cache = model.new_cache()
    out = generate(model, torch.randint(0, 37, (2, 6)), 5, cache=cache)
    assert out.sequences.shape == (2, 11) and len(cache) == 10
    assert all(layer.buffer.capacity == 11 for layer in cache.layers)  # one buffer from the prompt on, never copied
    with pytest.raises(ValueError, match="reserve takes a number of tokens"):
        cache.reserve(-1)
    with pytest.raises(TypeError, match="reserve takes a number of tokens >= 0, got 2.5"):  # a ValueError before
        cache.reserve(2.5)


@pytest.mark.parametrize("variant,placement", ALL_VARIANTS)
def test_speculative_rollback_to_any_accepted_length(variant, placement):
    model = random_model(variant, placement)
    prompt, draft = torch.randint(0, 37, (1, 5)), torch.randint(0, 37, (1, 4))
    for accepted in range(5):
        cache = model.new_cache(max_rollback=4)
        prefill(model, prompt, cache)
        model(draft, cache=cache)  # score all drafts in one step
        cache.crop(5 + accepted)
        nxt = torch.randint(0, 37, (1, 2))
        got = model(nxt, cache=cache)
        want = model(torch.cat([prompt, draft[:, :accepted], nxt], 1))[:, -2:]
        assert torch.allclose(got, want, atol=1e-5)


def test_rollback_beyond_the_window_is_refused():
    model = random_model("symmetric")
    cache = model.new_cache(max_rollback=2)
    prefill(model, torch.randint(0, 37, (1, 8)), cache)
    with pytest.raises(ValueError, match="max_rollback"):
        cache.crop(4)


def test_crop_takes_a_length_not_a_count_to_remove():
    """docs/concepts.md: ``crop(n)`` keeps the first n tokens, so ``crop(-1)`` (transformers' "remove one") and a
    length past the end are ValueErrors that leave the cache as it was; no test held the page to that."""
    model = random_model("symmetric")
    x = torch.randint(0, 37, (1, 7), generator=torch.Generator().manual_seed(3))
    cache = model.new_cache(max_rollback=3)
    prefill(model, x[:, :6], cache)
    for length in (-1, 7):
        with pytest.raises(ValueError, match=f"cannot crop a cache of length 6 to {length}$"):
            cache.crop(length)
    assert len(cache) == 6
    torch.testing.assert_close(model(x[:, 6:], cache=cache), model(x)[:, 6:])
    cache.crop(5)  # a length: the first 5 tokens stay
    assert len(cache) == 5


@pytest.mark.parametrize("variant", ["baseline", "symmetric", "key_only"])
def test_speculative_decoding_equals_target_greedy(variant):
    target = random_model(variant, seed=1)
    draft = random_model(variant, seed=2, n_layers=1, d_model=16, n_heads=2, n_kv_heads=1)
    prompt = torch.randint(0, 37, (1, 4))
    seq, stats = speculative_generate(target, draft, prompt, 15, num_draft=3)
    assert torch.equal(seq, generate(target, prompt, 15).sequences)
    assert stats["accepted"] < stats["drafted"]  # the draft disagrees sometimes: rollbacks happened
    seq, stats = speculative_generate(target, target, prompt, 15, num_draft=3)
    assert torch.equal(seq, generate(target, prompt, 15).sequences)
    assert stats["accepted"] == stats["drafted"]


@pytest.mark.parametrize("variant,extra", [("baseline", 0), ("key_only", 1), ("symmetric", 2), ("query_only", 1)])
def test_extra_cache_state_does_not_grow(variant, extra):
    model = random_model(variant, n_kv_heads=4)
    cache = model.new_cache()
    sizes = []
    prefill(model, torch.randint(0, 37, (1, 3)), cache)
    for _ in range(20):
        model(torch.randint(0, 37, (1, 1)), cache=cache)
        sizes.append((cache.extra_state_bytes(), cache.kv_bytes()))
    heads, head_dim, layers, nbytes = 4, 8, 2, 8  # float64
    vector = heads * head_dim * nbytes
    assert {s[0] for s in sizes} == {extra * vector * layers}  # one raw vector per sheared stream
    per_token = [b[1] - a[1] for a, b in itertools.pairwise(sizes)]
    assert set(per_token) == {2 * vector * layers}  # exactly a plain KV cache's k and v


def test_seeded_sampling_is_reproducible():
    model = random_model("key_only")
    prompt = torch.randint(0, 37, (3, 4))
    runs = [generate(model, prompt, 10, do_sample=True, top_k=5, temperature=0.9,
                     generator=torch.Generator().manual_seed(s)).sequences for s in (7, 7, 8)]
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])


def test_a_tiny_temperature_samples_the_greedy_token():
    model = random_model("key_only")
    prompt = torch.randint(0, 37, (3, 4))
    cold = generate(model, prompt, 6, do_sample=True, temperature=1e-45, generator=torch.Generator().manual_seed(0))
    assert torch.equal(cold.sequences, generate(model, prompt, 6).sequences)


def test_bad_generation_arguments():
    model = random_model()
    prompt = torch.randint(0, 37, (1, 3))
    with pytest.raises(ValueError, match="temperature"):
        generate(model, prompt, 3, do_sample=True, temperature=0.0)
    with pytest.raises(ValueError, match="chunk_size"):
        generate(model, prompt, 3, prefill_chunk_size=0)
    with pytest.raises(ValueError, match="at least one token"):
        generate(model, prompt[:, :0], 3)
    with pytest.raises(ValueError, match="batch size 1"):
        speculative_generate(model, model, prompt.expand(2, 3), 3)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 0, got -2"):
        speculative_generate(model, model, prompt, -2)  # it returned the prompt cut short
    with pytest.raises(ValueError, match="at least one token"):
        speculative_generate(model, model, prompt[:, :0], 3)  # an IndexError
    with pytest.raises(ValueError, match=r"\(batch, length\).*input_ids\[None\]"):
        generate(model, prompt[0], 3)
    with pytest.raises(ValueError, match="integer token ids"):
        generate(model, prompt.float(), 3)
    with pytest.raises(TypeError, match="max_new_tokens must be an integer >= 0, got 2.5"):  # a ValueError before
        generate(model, prompt, 2.5)
    with pytest.raises(TypeError, match="input_ids must be a .batch, length. tensor of token ids, got list"):
        generate(model, [[1, 2]], 3)  # a ValueError before
    with pytest.raises(ValueError, match="eos_token_id"):
        generate(model, prompt, 3, eos_token_id=37)
    with pytest.warns(UserWarning, match="only when do_sample=True") as caught:
        greedy = generate(model, prompt, 3, temperature=5.0, top_k=3)
    assert caught[0].filename == __file__  # the caller's line, not torch.no_grad's wrapper
    assert torch.equal(greedy.sequences, generate(model, prompt, 3).sequences)


@pytest.mark.parametrize("kwargs,error,match", [  # the type mistakes are TypeErrors (they were ValueErrors)
    (dict(do_sample=True, top_k=2.5), TypeError, r"top_k must be an integer >= 1, got 2.5"),  # topk()'s 'must be int'
    (dict(do_sample=True, top_k=True), TypeError, "top_k must be an integer >= 1, got True"),  # read as 1
    (dict(do_sample=True, top_k="2"), TypeError, "top_k must be an integer >= 1"),  # '<=' not supported
    (dict(do_sample=True, top_k=0), ValueError, "top_k must be an integer >= 1, got 0"),
    (dict(do_sample=True, temperature=float("inf")), ValueError, "temperature must be a finite number > 0"),  # uniform
    (dict(do_sample=True, temperature="1"), TypeError, "temperature must be a finite number > 0"),  # '>' not supported
    (dict(do_sample=True, top_p="0.5"), TypeError, "top_p must be a number in"),  # '<' not supported
    (dict(do_sample=True, top_p=1.5), ValueError, "top_p must lie in"),
    (dict(prefill_chunk_size=2.5), TypeError, "chunk_size must be an integer >= 1, got 2.5"),  # range()'s TypeError
    (dict(prefill_chunk_size=True), TypeError, "chunk_size must be an integer >= 1, got True"),  # read as 1
    (dict(eos_token_id="3"), TypeError, r"eos_token_id must be a token id in \[0, 37\), got '3'"),
    (dict(eos_token_id=37), ValueError, r"eos_token_id must be a token id in \[0, 37\), got 37"),
])
def test_sampling_and_chunk_arguments_of_another_type_are_one_line(kwargs, error, match):
    with pytest.raises(error, match=match):
        generate(random_model(), torch.randint(0, 37, (1, 3)), 3, **kwargs)


def test_a_cache_of_another_kind_and_a_bad_prefill_chunk_size_are_named_as_generate_s_arguments():
    model, prompt = random_model(), torch.randint(0, 37, (1, 3))
    with pytest.raises(TypeError, match=r"cache must be a PSACache \(model.new_cache\(\)\) or None, got list"):
        generate(model, prompt, 3, cache=[])  # an AttributeError: 'list' object has no attribute 'reserve'
    cache = model.new_cache()
    with pytest.raises(ValueError, match="^prefill_chunk_size must be an integer >= 1, got 0$"):
        generate(model, prompt, 3, prefill_chunk_size=0, cache=cache)  # prefill's own name, chunk_size
    assert cache.layers[0].reserved == 0  # refused before it made room


def test_continue_text_names_a_prompt_or_seed_of_the_wrong_kind():
    """None raised the tokenizer's "'NoneType' object has no attribute 'encode'"; seed '1' manual_seed's
    RuntimeError 'expected a long, but got str'."""
    from psattn.models.generate import continue_text
    from psattn.textdata import ByteTokenizer

    model = DecoderLM(ModelConfig(vocab_size=256, d_model=16, n_heads=2)).eval()
    with pytest.raises(TypeError, match="prompt must be a str, got NoneType"):
        continue_text(model, ByteTokenizer(), None, 3)
    with pytest.raises(TypeError, match="seed must be an integer, got '1'"):  # a ValueError before
        continue_text(model, ByteTokenizer(), "Hi", 3, seed="1")


def test_numpy_integers_are_taken_as_counts_and_token_ids():
    """max_new_tokens=np.int64(3) was refused as 'max_new_tokens must be an integer >= 0, got np.int64(3)', and so were
    NumPy eos_token_id, pad_token_id and vocab_limit (top_k and chunk sizes took them)."""
    import numpy as np

    model, prompt = random_model(), torch.randint(0, 37, (2, 3), generator=torch.Generator().manual_seed(0))
    plain = generate(model, prompt, 3, eos_token_id=5, pad_token_id=0, vocab_limit=20)
    numpy = generate(model, prompt, np.int64(3), eos_token_id=np.int64(5), pad_token_id=np.int32(0), vocab_limit=np.int64(20))
    assert torch.equal(numpy.sequences, plain.sequences)
    assert torch.equal(speculative_generate(model, model, prompt[:1], np.int64(3))[0], generate(model, prompt[:1], 3).sequences)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 0, got np.int64"):
        generate(model, prompt, np.int64(-1))


def test_a_generator_that_is_no_torch_generator_is_named():
    """A seed passed as the generator raised "'int' object has no attribute 'device'" at the first draw."""
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got int"):
        generate(random_model(), torch.randint(0, 37, (1, 3)), 3, do_sample=True, generator=0)


def test_malformed_requests_to_the_other_decoders_are_one_line():
    model, prompt = random_model(), torch.randint(0, 37, (1, 3))
    with pytest.raises(ValueError, match="at least one token"):
        generate(random_model("canon", gamma=0.0), prompt[:, :0], 3)  # the uncached path: IndexError at [:, -1]
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        prefill(model, prompt[0], model.new_cache())  # IndexError: tuple index out of range
    with pytest.raises(TypeError, match="num_draft must be an integer >= 1, got 2.5"):  # a ValueError before
        speculative_generate(model, model, prompt, 3, num_draft=2.5)  # named max_rollback instead
    with pytest.raises(ValueError, match="num_draft must be an integer >= 1, got 0"):
        speculative_generate(model, model, prompt, 3, num_draft=0)
    from psattn.models.generate import continue_ids

    with pytest.raises(TypeError, match="context must be an integer of at least 2 tokens, got 2.5"):  # a ValueError before
        continue_ids(model, [1, 2], 3, context=2.5)  # slice indices must be integers
    with pytest.raises(ValueError, match="context must be an integer of at least 2 tokens, got 1"):
        continue_ids(model, [1, 2], 3, context=1)


def test_continue_ids_ends_at_the_eos_token():
    """With eos_token_id, continue_ids raised a bare AssertionError without a context, and with one went on sampling
    past the EOS token once the window slid ([25, 25, 34, 22, 36, 0] for EOS 25)."""
    from psattn.models.generate import continue_ids

    model, prompt = random_model(), [3, 4, 5]
    for context in (None, 5):  # 5: two tokens fill the window, the rest slide it
        free = continue_ids(model, prompt, 8, context=context)
        eos = next(t for i, t in enumerate(free) if i >= 3 and t not in free[:i])  # first seen at step 3 or later
        stop = free.index(eos) + 1
        assert continue_ids(model, prompt, 8, context=context, eos_token_id=eos) == free[:stop]


@pytest.mark.parametrize("width,chunk", [(6, None), (3, 2), (6, 3)])
def test_a_mask_of_another_shape_than_the_prompt_is_refused(width, chunk):
    """prefill cut the mask to each chunk: a (1, 6) mask for a (1, 4) prompt was taken as its first four columns (so
    [0, 0, 1, 1, 1, 1] masked two real tokens and gave another continuation), and chunks named their own shapes."""
    model, prompt = random_model(), torch.tensor([[1, 2, 3, 4]])
    mask = torch.ones(1, width, dtype=torch.long)
    mask[0, : width - 4] = 0
    with pytest.raises(ValueError, match=rf"attention_mask must be \(B, T\) = \(1, 4\), got \(1, {width}\)"):
        generate(model, prompt, 3, attention_mask=mask, prefill_chunk_size=chunk)


def test_generation_stops_each_row_at_eos():
    model = random_model("key_only")
    prompt = torch.randint(0, 37, (4, 5), generator=torch.Generator().manual_seed(1))
    free = generate(model, prompt, 12).sequences[:, 5:]  # (4, 12) without EOS
    eos = int(free[0, 2])  # row 0 emits it at step 2; other rows whenever they happen to
    out = generate(model, prompt, 12, eos_token_id=eos, pad_token_id=0).sequences[:, 5:]
    for row, new in zip(free, out, strict=True):
        hits = (row == eos).nonzero()
        stop = int(hits[0]) if len(hits) else None
        kept = len(new) if stop is None else stop + 1
        assert torch.equal(new[:kept], row[:kept])  # identical up to and including the first EOS
        assert (new[kept:] == 0).all()  # padding after it
    if all((row == eos).any() for row in free):
        assert out.shape[1] == max(int((row == eos).nonzero()[0]) for row in free) + 1  # stops when all are done
    assert (free[0] == eos).nonzero()[0] == 2


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    gamma=st.floats(-0.9, 2.5),
    variant=st.sampled_from(["symmetric", "key_only", "query_only"]),
    placement=st.sampled_from(["post_rope", "pre_rope"]),
    seed=st.integers(0, 1000),
)
def test_property_any_chunking_equals_full_forward(lengths, gamma, variant, placement, seed):
    model = random_model(variant, placement, gamma=gamma, seed=seed)
    x = torch.randint(0, 37, (2, sum(lengths)), generator=torch.Generator().manual_seed(seed))
    cache = model.new_cache()
    pieces, start = [], 0
    for n in lengths:
        pieces.append(model(x[:, start : start + n], cache=cache))
        start += n
    assert torch.allclose(torch.cat(pieces, 1), model(x), atol=1e-4)


def test_a_failed_forward_leaves_the_cache_as_it_was(monkeypatch):
    model = random_model("symmetric")
    x = torch.randint(0, 37, (2, 7))
    cache = model.new_cache()
    model(x[:, :5], cache=cache)
    with pytest.raises(ValueError, match=r"token ids in \[0, 37\)"):
        model(torch.full((2, 1), 99), cache=cache)  # out of the vocabulary: fails after the bookkeeping
    assert len(cache) == 5 and all(len(layer) == 5 for layer in cache.layers)

    def fail(*args):
        raise RuntimeError("out of memory")

    with monkeypatch.context() as patch:  # fails in the last block, after every layer cache took the token
        patch.setattr(model.blocks[-1].mlp, "forward", fail)
        with pytest.raises(RuntimeError, match="out of memory"):
            model(x[:, 5:6], cache=cache)
    assert len(cache) == 5 and all(len(layer) == 5 for layer in cache.layers)
    steps = torch.cat([model(x[:, t : t + 1], cache=cache) for t in (5, 6)], dim=1)
    assert torch.allclose(steps, model(x)[:, 5:], atol=1e-6)


def test_a_refused_crop_changes_no_layer():
    config = ModelConfig(vocab_size=37, d_model=32, n_layers=2, n_heads=4,
                         attention=[AttentionConfig("baseline"), AttentionConfig("key_only", 0.8)])
    model = DecoderLM(config).double().eval()
    x = torch.randint(0, 37, (1, 8))
    cache = model.new_cache()  # max_rollback 0: only the key-only layer limits the crop
    model(x[:, :6], cache=cache)
    with pytest.raises(ValueError, match="max_rollback"):
        cache.crop(3)
    assert len(cache) == 6 and [len(layer) for layer in cache.layers] == [6, 6]
    steps = torch.cat([model(x[:, t : t + 1], cache=cache) for t in (6, 7)], dim=1)
    assert torch.allclose(steps, model(x)[:, 6:], atol=1e-6)


def test_right_padding_and_row_mismatch_with_a_cache_are_refused():
    model = random_model()
    cache = model.new_cache()
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    with pytest.raises(ValueError, match="left padding"):
        model(torch.randint(0, 37, (2, 4)), attention_mask=mask, cache=cache)
    assert len(cache) == 0
    model(torch.randint(0, 37, (2, 4)), attention_mask=mask.flip(1), cache=cache)  # left padding works
    with pytest.raises(ValueError, match="left padding"):
        model(torch.randint(0, 37, (2, 1)), attention_mask=torch.tensor([[0], [1]]), cache=cache)
    with pytest.raises(ValueError, match="the cache holds 2 rows, the input 3"):
        model(torch.randint(0, 37, (3, 1)), cache=cache)
    empty = model.new_cache()
    empty.reorder(torch.tensor([0, 0]))  # nothing to reorder yet
    assert len(empty) == 0


def test_top_k_samples_only_among_the_k_most_likely():
    model = random_model("key_only")
    prompt = torch.randint(0, 37, (4, 5), generator=torch.Generator().manual_seed(3))
    out = generate(model, prompt, 12, do_sample=True, top_k=3, temperature=2.0, generator=torch.Generator().manual_seed(0))
    chosen = out.sequences[:, 5:]  # (4, 12)
    top = out.logits.topk(3, dim=-1).indices  # (4, 12, 3)
    assert (top == chosen[..., None]).any(-1).all()
    assert (chosen != out.logits.argmax(-1)).any()  # it really sampled


def test_top_p_samples_only_among_the_fewest_tokens_holding_that_mass():
    model = random_model("key_only")
    prompt = torch.randint(0, 37, (4, 5), generator=torch.Generator().manual_seed(3))
    out = generate(model, prompt, 12, do_sample=True, top_p=0.5, temperature=2.0, generator=torch.Generator().manual_seed(0))
    chosen = out.sequences[:, 5:]  # (4, 12)
    probs = (out.logits / 2.0).softmax(-1)  # (4, 12, V) at the sampling temperature
    before = (probs * (probs > probs.gather(-1, chosen[..., None]))).sum(-1)  # mass of the more likely tokens
    assert (before < 0.5).all()  # each chosen token is inside the nucleus
    assert (chosen != out.logits.argmax(-1)).any()  # it really sampled
    seeded = {"do_sample": True, "temperature": 2.0}
    everything = generate(model, prompt, 12, top_p=1.0, generator=torch.Generator().manual_seed(0), **seeded)
    assert torch.equal(everything.sequences, generate(model, prompt, 12, generator=torch.Generator().manual_seed(0),
                                                      **seeded).sequences)  # top_p = 1 keeps every token
    with pytest.raises(ValueError, match="top_p"):
        generate(model, prompt, 2, do_sample=True, top_p=0.0)


def test_top_p_of_one_keeps_every_token(monkeypatch):
    """At top_p = 1 the float32 running sum of 50,257 sorted probabilities reached 1.0 early, and about 3,000 of the
    least likely tokens were dropped; now every token keeps its probability."""
    import importlib

    decoding = importlib.import_module("psattn.models.generate")
    drawn = []
    monkeypatch.setattr(decoding.torch, "multinomial", lambda probs, n, generator=None: drawn.append(probs) or
                        probs.argmax(-1, keepdim=True))
    logits = 3.0 * torch.randn(2, 50257, generator=torch.Generator().manual_seed(0))  # (B, V)
    decoding._choose(logits, True, 1.0, None, None, top_p=1.0)
    assert (drawn[0] > 0).all()
    torch.testing.assert_close(drawn[0], logits.softmax(-1))


def test_half_precision_logits_sample_from_a_nucleus_holding_top_p(monkeypatch):
    """A bfloat16 model's logits were filtered and normalised in bfloat16: the running sum stalled, and the nucleus of
    top_p = 0.9 held 0.896 of the probability; now they are sampled in float32."""
    import importlib

    decoding = importlib.import_module("psattn.models.generate")
    drawn = []
    monkeypatch.setattr(decoding.torch, "multinomial", lambda probs, n, generator=None: drawn.append(probs) or
                        probs.argmax(-1, keepdim=True))
    logits = (2.0 * torch.randn(2, 50257, generator=torch.Generator().manual_seed(0))).bfloat16()  # (B, V)
    decoding._choose(logits, True, 1.0, None, None, top_p=0.9)
    kept = drawn[0] > 0  # (B, V)
    assert ((logits.double().softmax(-1) * kept).sum(-1) >= 0.9).all()
    assert drawn[0].dtype == torch.float32


def test_reordering_a_filled_cache_continues_the_chosen_rows():
    model = random_model("symmetric")
    x = torch.randint(0, 37, (3, 7), generator=torch.Generator().manual_seed(4))
    cache = model.new_cache()
    prefill(model, x[:, :6], cache)
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    step = model(x[index, 6:], cache=cache)[:, -1]
    torch.testing.assert_close(step, model(x[index])[:, -1])


def test_a_cache_refuses_fractional_crops_and_row_indices_that_are_no_rows():
    """crop(2.5) was refused as a rollback 'to 2.5' with a raw value 'at position 1.5'; reorder raised
    index_select's IndexError / RuntimeError / TypeError. The cache is left as it was."""
    model = random_model("symmetric")
    x = torch.randint(0, 37, (2, 6), generator=torch.Generator().manual_seed(5))
    cache = model.new_cache(max_rollback=3)
    prefill(model, x, cache)
    for length in (4.0, True, "4"):  # a type mistake: a TypeError (it was a ValueError)
        with pytest.raises(TypeError, match="cropped to a whole number of tokens"):
            cache.crop(length)
    for index, match in ((torch.tensor([0, 2]), r"batch rows in \[0, 2\), got 0 to 2"),
                         (torch.tensor([-1]), r"batch rows in \[0, 2\), got -1 to -1"),
                         (torch.tensor([0.0]), "1-D int64 or int32 tensor of batch rows, got a torch.float32"),
                         (torch.tensor([[0, 1]]), "of shape \\(1, 2\\)")):
        with pytest.raises(ValueError, match=match):
            cache.reorder(index)
    with pytest.raises(TypeError, match="got a list"):  # a type mistake (it was a ValueError)
        cache.reorder([0, 1])
    assert len(cache) == 6 and all(layer.keys.shape[0] == 2 for layer in cache.layers)
    torch.testing.assert_close(model(x[:, :1], cache=cache), model(torch.cat([x, x[:, :1]], 1))[:, -1:])


@pytest.mark.parametrize("do_sample", [False, True])
def test_non_finite_logits_are_an_error_not_a_token(do_sample):
    from psattn.models.generate import NonFiniteLogits

    model = DecoderLM(ModelConfig(vocab_size=16, d_model=32, n_heads=2)).eval()
    with torch.no_grad():
        model.lm_head.weight[3, 0] = float("nan")  # tied: the embedding of token 3 too
    with pytest.raises(NonFiniteLogits, match="NaN or infinite logits"):
        generate(model, torch.tensor([[1, 2, 3]]), 4, do_sample=do_sample)


@pytest.mark.parametrize("do_sample", [False, True])
def test_vocab_limit_chooses_only_ids_below_it(do_sample):
    model = random_model("key_only")
    prompt = torch.randint(0, 37, (4, 5), generator=torch.Generator().manual_seed(3))
    out = generate(model, prompt, 12, do_sample=do_sample, vocab_limit=5, generator=torch.Generator().manual_seed(0))
    chosen = out.sequences[:, 5:]  # (4, 12)
    assert (chosen < 5).all() and (out.logits.argmax(-1) >= 5).any()  # the model prefers ids it may not choose
    if not do_sample:
        assert torch.equal(chosen, out.logits[..., :5].argmax(-1))
    for bad, error in ((0, ValueError), (model.config.vocab_size + 1, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(error, match=r"vocab_limit must be an integer in \[1, "):  # the TypeErrors were ValueErrors
            generate(model, prompt, 1, vocab_limit=bad)


def test_speculative_decoding_grows_no_cache_after_its_prompt(monkeypatch):
    """Each forward pass guards its cache with a snapshot; as a fork it pinned the draft's tokens, so every
    round's rollback left the next draft step to copy the whole cache."""
    from psattn.ops import cache as cache_module

    made = []
    holding = cache_module.KVBuffer.holding.__func__
    monkeypatch.setattr(cache_module.KVBuffer, "holding",
                        classmethod(lambda cls, *args: made.append(args[2].shape[2]) or holding(cls, *args)))
    target, draft = random_model("symmetric", seed=0), random_model("symmetric", seed=1)
    prompt = torch.randint(0, 37, (1, 5))
    out, _ = speculative_generate(target, draft, prompt, 24, num_draft=4)
    assert torch.equal(out, generate(target, prompt, 24).sequences)
    assert made[:4] == [4, 4, 4, 4]  # one buffer per layer of each model at the prompt ...
    assert len(made) == 4 + 2  # ... and generate's two


def test_restoring_twice_from_one_snapshot_gives_the_same_cache():
    model = random_model("symmetric")
    x = torch.randint(0, 37, (1, 6))
    cache = model.new_cache()
    with torch.no_grad():
        prefill(model, x[:, :4], cache)
        saved = cache.fork()
        for _ in range(2):
            model(x[:, 4:5], cache=cache)
            cache.restore(saved)
        out = model(x[:, 4:6], cache=cache)
    assert torch.allclose(out, model(x)[:, 4:6], atol=1e-6)


def test_a_prompt_row_of_padding_alone_is_refused():
    """A row whose mask marked no token was continued from nothing: it came back with tokens chosen from the logits
    of padding."""
    model, prompt = random_model(), torch.tensor([[1, 2, 3], [4, 5, 6]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    for m in (model, DecoderLM(ModelConfig(vocab_size=37, d_model=16, n_heads=2, attention=AttentionConfig("kv_shift")))):
        with pytest.raises(ValueError, match="row 1 of attention_mask marks no real token"):
            generate(m.eval(), prompt, 3, attention_mask=mask)
    assert generate(model, prompt, 3, attention_mask=torch.tensor([[1, 1, 1], [0, 0, 1]])).sequences.shape == (2, 6)


def test_an_attention_mask_of_floats_or_of_values_other_than_0_and_1_is_refused_in_one_line():
    """A float mask (0.5 as much as 1.0) and an integer one holding 2 or -1 were read as real tokens; a float row of
    0.0 was called a row of padding. Masks of int64 (what Hugging Face tokenizers give), int32 and bool pass."""
    model = random_model("key_only")
    ids = torch.randint(0, 37, (2, 4))
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    want, sequences = model(ids, attention_mask=mask), generate(model, ids, 3, attention_mask=mask).sequences
    for ok in (mask.int(), mask.bool()):
        torch.testing.assert_close(model(ids, attention_mask=ok), want, rtol=0, atol=0)
        assert torch.equal(generate(model, ids, 3, attention_mask=ok, prefill_chunk_size=2).sequences, sequences)
    calls = (lambda m: model(ids, attention_mask=m), lambda m: model(ids, attention_mask=m, cache=model.new_cache()),
             lambda m: generate(model, ids, 3, attention_mask=m), lambda m: generate(model, ids, 3, attention_mask=m,
                                                                                  prefill_chunk_size=2))
    for bad in (mask.float(), mask * 0.5, torch.zeros(2, 4, dtype=torch.float64)):
        for call in calls:
            with pytest.raises(TypeError, match=rf"^attention_mask must be bool or integer, 1 at real tokens and 0 at "
                                                rf"padding, got {bad.dtype}$"):
                call(bad)
    for value in (2, -1):
        for call in calls:
            with pytest.raises(ValueError, match=rf"^attention_mask must hold 1 at real tokens and 0 at padding, got {value}$"):
                call(mask.masked_fill(mask == 0, value))
    cache = model.new_cache()
    model(ids[:, :2], attention_mask=mask[:, :2], cache=cache)
    with pytest.raises(ValueError, match="got 2$"):
        model(ids[:, 2:], attention_mask=mask[:, 2:] * 2, cache=cache)
    assert len(cache) == 2  # the cache is as it was
    hf = pytest.importorskip("psattn.integrations.hf.decoder_model")
    with pytest.raises(TypeError, match="attention_mask must be bool or integer"):  # the exported model shares the check
        hf.to_hf(model, 16)(ids, attention_mask=mask.float())


def test_a_chunked_prefill_refused_in_a_later_chunk_leaves_the_cache_as_it_was():
    """Each chunk checked its own ids and mask: a bad value in the second chunk was refused only after the
    first had been cached, and the error named that chunk's ids alone."""
    model = random_model("key_only")
    ids = torch.randint(0, 37, (2, 4))
    mask = torch.ones(2, 4, dtype=torch.long)
    bad_ids = ids.clone()
    bad_ids[0, 3] = 99
    for prompt, m, match in ((ids, mask.masked_fill(torch.arange(4) == 3, 2), "got 2$"),
                             (bad_ids, None, rf"got ids from {int(bad_ids.min())} to 99$")):
        cache = model.new_cache()
        with pytest.raises(ValueError, match=match):
            prefill(model, prompt, cache, attention_mask=m, chunk_size=2)
        assert len(cache) == 0
    cache = model.new_cache()
    want = prefill(model, ids, cache, attention_mask=mask.bool(), chunk_size=2)
    torch.testing.assert_close(want, model(ids)[:, -1])  # a good prompt is prefilled as before
    assert len(cache) == 4


@pytest.mark.parametrize("ids", [[3, 4, -1], [3, 99, 4]])
def test_speculative_decoding_names_the_whole_prompts_token_range(ids):
    """A bad last token was refused as "got ids from -1 to -1": only the token fed to the draft, not the prompt."""
    model = random_model()
    with pytest.raises(ValueError, match=rf"got ids from {min(ids)} to {max(ids)}"):
        speculative_generate(model, model, torch.tensor([ids]), 4)


def test_an_empty_batch_gets_every_new_position_as_the_exported_graphs_give_it():
    """A batch of no rows stopped after one new token (no row left unfinished), so (0, T + 1) where
    ``OnnxLM.generate`` gives (0, T + n); only an EOS token ends decoding early."""
    model = random_model("key_only")
    out = generate(model, torch.zeros(0, 5, dtype=torch.long), 3)
    assert out.sequences.shape == (0, 8) and out.logits.shape == (0, 3, 37)
    assert generate(model, torch.zeros(0, 5, dtype=torch.long), 3, eos_token_id=1).sequences.shape == (0, 6)
