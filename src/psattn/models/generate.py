"""Decoding with the PSA cache: prefill (optionally in chunks), then one token per step.

``speculative_generate`` drafts tokens with a small model, scores them with the target model in
one step and rolls both caches back to the accepted length; its output equals the target's greedy
decoding. ``continue_text`` writes text after a prompt with a tokenizer's ids (a text run's own,
``psattn.training.run_dir.run_tokenizer``), within the context the model was trained on.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import torch
from torch import Tensor

from psattn.models.context import mask_values_error, token_range_error
from psattn.models.decoder import DecoderLM
from psattn.models.device import model_device
from psattn.ops.cache import PSACache
from psattn.ops.shear import check_mask_dtype

#: the most new tokens a generation makes room for at its prompt; a longer one grows its cache as it goes
#: (an early end of sequence would leave the room unused)
RESERVED_NEW_TOKENS = 4096


@dataclass
class GenerationOutput:
    """What ``generate`` returns: the sequences and the logits each new token was chosen from."""
    sequences: Tensor  # (B, T_prompt + n): prompt followed by the new tokens
    logits: Tensor  # (B, n, V): the logits each new token was chosen from


@torch.no_grad()
def prefill(
    model: DecoderLM,
    input_ids: Tensor,
    cache: PSACache,
    *,
    attention_mask: Tensor | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Run the prompt (B, T) through the model into ``cache``, ``chunk_size`` tokens at a time;
    returns the logits at the last position (B, V). The whole prompt's ids and mask are checked before
    its first chunk, so a refused prompt leaves ``cache`` as it was."""
    _check_request(input_ids, 0)
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt must hold at least one token")
    if chunk_size is not None:
        _check_positive_int("chunk_size", chunk_size)
    if isinstance(attention_mask, Tensor) and attention_mask.shape != input_ids.shape:  # each chunk takes its columns
        raise ValueError(f"attention_mask must be (B, T) = {tuple(input_ids.shape)}, got {tuple(attention_mask.shape)}")
    T = input_ids.shape[1]
    step = chunk_size or T
    if step < T:  # each chunk checks its own ids and mask: one refused after the first would leave the cache filled
        _check_prompt(model, input_ids, attention_mask)
    for start in range(0, T, step):
        chunk = slice(start, start + step)
        mask = None if attention_mask is None else attention_mask[:, chunk]
        logits = model(input_ids[:, chunk], attention_mask=mask, cache=cache)
    return logits[:, -1]


def _check_prompt(model: DecoderLM, input_ids: Tensor, attention_mask: Tensor | None) -> None:
    """ValueError for a token id outside the model's vocabulary or a mask value other than 0 and 1 anywhere in
    the prompt (B, T), read in one wait for the device, before any chunk of it reaches the cache."""
    vocab_size = model.config.vocab_size
    unknown = ((input_ids < 0) | (input_ids >= vocab_size)).any()
    odd = unknown.new_zeros(())
    if isinstance(attention_mask, Tensor):
        check_mask_dtype(attention_mask)
        odd = ((attention_mask != 0) & (attention_mask != 1)).any().to(unknown.device)
    bad_id, bad_mask = torch.stack([unknown, odd]).tolist()
    if bad_mask:
        raise mask_values_error(attention_mask)  # type: ignore[arg-type]  # odd is set: a mask was given
    if bad_id:
        raise token_range_error(input_ids, vocab_size)


class NonFiniteLogits(ValueError):
    """Decoding met logits that are NaN or infinite."""


def _choose(logits: Tensor, do_sample: bool, temperature: float, top_k: int | None, generator,
            top_p: float | None = None, vocab_limit: int | None = None) -> Tensor:
    """Next token (B,) from logits (B, V), among ids below ``vocab_limit`` when given; non-finite logits
    are an error, not a token."""
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteLogits("the model gave NaN or infinite logits; its weights or activations overflow, "
                              "so no token can be chosen")
    logits = logits[:, :vocab_limit]  # (B, V'): a prefix, so an index is still the token id
    if not do_sample:
        return logits.argmax(dim=-1)
    if logits.dtype in (torch.float16, torch.bfloat16):  # a half-precision running sum stalls short of top_p
        logits = logits.float()
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature  # <= 0: no overflow at tiny temperatures
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:  # nucleus sampling (Holtzman et al., 2020): the likeliest tokens holding top_p
        ranked, order = logits.sort(dim=-1, descending=True)  # (B, V)
        ranked_probs = ranked.softmax(dim=-1)
        drop = ranked_probs.cumsum(dim=-1) - ranked_probs >= top_p  # (B, V): the more likely tokens already hold top_p
        # (at top_p = 1 a float32 cumsum reaches 1.0 early and would drop thousands of the least likely tokens)
        logits = logits.scatter(-1, order, ranked.masked_fill(drop, float("-inf")))
    probs = logits.softmax(dim=-1)  # (B, V)
    if generator is not None and generator.device != probs.device:  # draw where the generator lives
        return torch.multinomial(probs.to(generator.device), 1, generator=generator)[:, 0].to(probs.device)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.no_grad()
def generate(
    model: DecoderLM,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    attention_mask: Tensor | None = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    prefill_chunk_size: int | None = None,
    cache: PSACache | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    vocab_limit: int | None = None,
) -> GenerationOutput:
    """Greedy (default) or sampled continuation of a left-padded prompt batch (B, T).

    Sampling draws from ``generator`` so a seeded generator gives reproducible output; ``temperature``,
    ``top_k`` (the k most likely tokens) and ``top_p`` (the fewest most likely tokens holding that much
    probability: nucleus sampling) apply to sampling only (a warning says so when they are given without it). With
    ``eos_token_id``, a row that produced it is finished: its later positions hold ``pad_token_id``
    (default: the EOS token), and decoding stops once every row is finished, so the result may be
    shorter than ``max_new_tokens``. With ``vocab_limit``, only ids below it are chosen (a tokenizer with
    fewer ids than the model has outputs cannot decode the rest). A given ``cache`` (for instance a fork of a shared
    prefix) is continued and extended; the cache makes room at the prompt for up to ``RESERVED_NEW_TOKENS`` new
    tokens. The prompt is moved to the model's device, and so is the result; a ``generator`` on another device
    draws there. A model without cache support (a learned key-lag baseline, see
    ``supports_cache``) runs the whole sequence again per token, so a ``prefill_chunk_size`` does not apply
    to it (a warning says so).

    Args:
        model: the ``DecoderLM`` to decode with.
        input_ids: the prompts (B, T), left-padded when their lengths differ.
        max_new_tokens: tokens to add to each row.
        attention_mask: (B, T), bool or integer: 1 at real tokens, 0 at left padding; each row marks at least one
            real token.
        do_sample: sample instead of taking the most likely token.
        temperature: divides the logits before sampling.
        top_k: sample among the k most likely tokens.
        top_p: sample among the fewest most likely tokens holding this much probability.
        generator: the random generator sampling draws from.
        prefill_chunk_size: run the prompt through in chunks of this many tokens.
        cache: a ``PSACache`` to continue (default: a new one).
        eos_token_id: the token that finishes a row.
        pad_token_id: what a finished row holds (default: the EOS token).
        vocab_limit: choose only ids below this (default: any of the model's ``vocab_size`` ids).

    Returns:
        A ``GenerationOutput``: ``sequences`` (B, T + n), the prompts and their continuations, and
        ``logits`` (B, n, V), what each new token was chosen from.

    Examples:
        >>> import torch
        >>> from psattn import AttentionConfig, DecoderLM, ModelConfig, generate
        >>> _ = torch.manual_seed(0)
        >>> model = DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
        >>> out = generate(model.eval(), torch.tensor([[1, 2, 3, 4]]), 5)
        >>> out.sequences.shape, out.logits.shape
        (torch.Size([1, 9]), torch.Size([1, 5, 32]))
        >>> bool((out.logits.argmax(-1) == out.sequences[:, 4:]).all())  # greedy: the most likely token each step
        True
    """
    _check_request(input_ids, max_new_tokens)
    if input_ids.shape[1] == 0:  # the cached path's prefill says so too; the uncached one raised an IndexError
        raise ValueError("the prompt must hold at least one token")
    if do_sample and not _is_number(temperature):
        raise TypeError(f"temperature must be a finite number > 0, got {temperature!r}")
    if do_sample and not 0 < temperature < math.inf:  # inf: every token alike
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    if top_k is not None:
        _check_positive_int("top_k", top_k)
    if top_p is not None and not _is_number(top_p):
        raise TypeError(f"top_p must be a number in (0, 1], got {top_p!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p!r}")
    if generator is not None and not isinstance(generator, torch.Generator):  # an AttributeError at the first draw
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if cache is not None and not isinstance(cache, PSACache):  # an AttributeError as it made room
        raise TypeError(f"cache must be a PSACache (model.new_cache()) or None, got {type(cache).__name__}")
    if prefill_chunk_size is not None:  # checked by prefill too, after the cache made room
        _check_positive_int("prefill_chunk_size", prefill_chunk_size)
    if attention_mask is not None:  # before a row of 0.0 is called empty; the model checks its values (0 and 1)
        if not isinstance(attention_mask, Tensor):
            raise TypeError(f"attention_mask must be a torch.Tensor (B, T) or None, got {type(attention_mask).__name__}")
        check_mask_dtype(attention_mask)
    if not do_sample and (temperature != 1.0 or top_k is not None or top_p is not None):
        warnings.warn("temperature, top_k and top_p apply only when do_sample=True; decoding greedily",
                      stacklevel=3)  # the caller's line (2 is torch.no_grad's wrapper)
    device = model_device(model)  # the prompt moves to the model; a sampling generator may stay elsewhere
    input_ids = input_ids.to(device)
    attention_mask = None if attention_mask is None else attention_mask.to(device)
    if attention_mask is not None and (cache is None or len(cache) == 0):  # a row of padding alone has no context
        empty = (attention_mask == 0).all(dim=1).nonzero().flatten().tolist()  # the rows of (B, T) with no real token
        if empty:
            raise ValueError(f"row {empty[0]} of attention_mask marks no real token: a prompt needs at least one")
    V = model.config.vocab_size
    if vocab_limit is not None and not (_is_integer(vocab_limit) and 1 <= vocab_limit <= V):
        error = ValueError if _is_integer(vocab_limit) else TypeError
        raise error(f"vocab_limit must be an integer in [1, {V}] (the model's vocab_size), got {vocab_limit!r}")
    for name, value in (("eos_token_id", eos_token_id), ("pad_token_id", pad_token_id)):
        if value is not None and not (_is_integer(value) and 0 <= value < V):
            error = ValueError if _is_integer(value) else TypeError
            raise error(f"{name} must be a token id in [0, {V}), got {value!r}")
    # NumPy integers are taken as Python ints
    max_new_tokens = int(max_new_tokens)
    vocab_limit, eos_token_id, pad_token_id = (None if v is None else int(v) for v in (vocab_limit, eos_token_id, pad_token_id))
    pad = eos_token_id if pad_token_id is None else pad_token_id
    if cache is None and not model.supports_cache:
        if prefill_chunk_size is not None:  # chunks need a cache to carry the earlier ones' keys and values
            warnings.warn("prefill_chunk_size does not apply to a model without a cache (a learned key-lag baseline): "
                          "each step runs the whole sequence", stacklevel=3)  # the caller's line
        seq, mask = input_ids, attention_mask

        def step_logits(token: Tensor | None) -> Tensor:  # the whole sequence again: (B, T) -> (B, V)
            nonlocal seq, mask
            if token is not None:
                seq = torch.cat([seq, token[:, None]], dim=1)  # (B, T + 1)
                mask = None if mask is None else torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            return model(seq, attention_mask=mask)[:, -1]
    else:
        cache = model.new_cache() if cache is None else cache
        cache.reserve(len(cache) + input_ids.shape[1] + min(max_new_tokens, RESERVED_NEW_TOKENS))  # no step copies the cache

        def step_logits(token: Tensor | None) -> Tensor:
            if token is None:
                return prefill(model, input_ids, cache, attention_mask=attention_mask, chunk_size=prefill_chunk_size)
            return model(token[:, None], cache=cache)[:, -1]  # (B, 1) -> (B, V)
    logits = step_logits(None)
    B = input_ids.shape[0]
    finished = torch.zeros(B, dtype=torch.bool, device=input_ids.device)
    tokens, all_logits = [], []
    for step in range(max_new_tokens):
        token = _choose(logits, do_sample, temperature, top_k, generator, top_p, vocab_limit)  # (B,)
        if eos_token_id is not None:
            assert pad is not None  # pad_token_id, or else the EOS token
            token = token.masked_fill(finished, pad)
            finished |= token == eos_token_id
        tokens.append(token)
        all_logits.append(logits)
        ended = eos_token_id is not None and bool(finished.all())  # every row has given its EOS token
        if step + 1 < max_new_tokens and not ended:
            logits = step_logits(token)
        elif step + 1 < max_new_tokens:
            break
    new = torch.stack(tokens, dim=1) if tokens else input_ids.new_zeros(B, 0)  # (B, N): N new tokens
    scores = torch.stack(all_logits, dim=1) if all_logits else logits.new_zeros(B, 0, V)  # (B, N, V)
    return GenerationOutput(torch.cat([input_ids, new], dim=1), scores)  # sequences (B, T + N)


def _is_integer(value: object) -> bool:
    """Whether ``value`` is an integer, a NumPy one included (not a bool)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """Whether ``value`` is a real number (not a bool)."""
    return isinstance(value, Real) and not isinstance(value, bool)


def _check_positive_int(name: str, value: object) -> None:
    """Refuse ``value`` unless it is an integer >= 1 (not a bool): a TypeError naming ``name`` for another type,
    a ValueError for a smaller integer."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_request(input_ids: Tensor, max_new_tokens: int) -> None:
    """Refuse ``input_ids`` unless it is a (batch, length) tensor of token ids and ``max_new_tokens`` unless it is an
    integer >= 0: a TypeError for an argument of another type, a ValueError otherwise."""
    if not isinstance(input_ids, Tensor):
        raise TypeError(f"input_ids must be a (batch, length) tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a (batch, length) tensor of token ids, got {tuple(input_ids.shape)}; "
                         "for one prompt pass input_ids[None]")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if not _is_integer(max_new_tokens):
        raise TypeError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")


@torch.no_grad()
def speculative_generate(
    target: DecoderLM,
    draft: DecoderLM,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    num_draft: int = 4,
) -> tuple[Tensor, dict[str, int]]:
    """Greedy speculative decoding of one prompt (1, T): the draft proposes ``num_draft`` tokens,
    the target scores them all in one forward step, and both caches roll back to the accepted
    prefix. Returns the sequence (1, T + max_new_tokens) and counts of drafted/accepted tokens."""
    _check_request(input_ids, max_new_tokens)
    if input_ids.shape[0] != 1:
        raise ValueError("speculative_generate decodes one sequence at a time (batch size 1)")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt must hold at least one token")
    _check_positive_int("num_draft", num_draft)
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError("target and draft models must share a vocabulary")
    if bool(((input_ids < 0) | (input_ids >= target.config.vocab_size)).any()):  # the whole prompt, not the part fed first
        raise token_range_error(input_ids, target.config.vocab_size)
    target_cache = target.new_cache(max_rollback=num_draft)
    draft_cache = draft.new_cache(max_rollback=num_draft)
    for cache in (target_cache, draft_cache):  # room for every token and the last round's drafts
        cache.reserve(input_ids.shape[1] + min(max_new_tokens, RESERVED_NEW_TOKENS) + num_draft)
    if input_ids.shape[1] > 1:
        prefill(target, input_ids[:, :-1], target_cache)
        prefill(draft, input_ids[:, :-1], draft_cache)
    device = model_device(target)
    out = input_ids[0].tolist()
    pending = out[-1]  # last committed token, not yet in either cache
    stats = {"drafted": 0, "accepted": 0, "target_steps": 0}
    while len(out) - input_ids.shape[1] < max_new_tokens:
        base = len(target_cache)
        # Draft num_draft tokens one by one, then feed the last one too so both caches match.
        proposal: list[int] = []
        token = pending
        for _ in range(num_draft + 1):
            logits = draft(torch.tensor([[token]], device=device), cache=draft_cache)[0, -1]
            if len(proposal) == num_draft:
                break
            token = int(logits.argmax())
            proposal.append(token)
        # Score [pending, d_1..d_k] in one target step: row i predicts the token after it.
        scored = target(torch.tensor([[pending, *proposal]], device=device), cache=target_cache)[0]  # (k + 1, V)
        choice = scored.argmax(dim=-1).tolist()
        accepted = 0
        while accepted < num_draft and proposal[accepted] == choice[accepted]:
            accepted += 1
        stats["drafted"] += num_draft
        stats["accepted"] += accepted
        stats["target_steps"] += 1
        keep = base + 1 + accepted  # pending + accepted drafts
        target_cache.crop(keep)
        draft_cache.crop(keep)
        out.extend(proposal[:accepted])
        pending = choice[accepted]  # the target's own next token
        out.append(pending)
    sequence = torch.tensor(out[: input_ids.shape[1] + max_new_tokens], device=device)[None]
    return sequence, stats


def continue_text(model, tokenizer, prompt: str, max_new_tokens: int = 200, *, temperature: float = 0.8,
                  top_k: int | None = None, top_p: float | None = None, seed: int = 0, context: int | None = None) -> str:
    """The text ``model`` writes after ``prompt``: sampled at ``temperature`` (greedy at 0; ``top_k`` and
    ``top_p`` as in ``generate``) from a generator seeded with ``seed``, so the same call
    gives the same text, among the tokenizer's ids only (a model may have more outputs than its
    tokenizer has ids); ``context``: see ``continue_ids``.

    Args:
        model (DecoderLM): a text run's model (``load_trained(run_dir)``).
        tokenizer (ByteTokenizer | BPETokenizer): its tokenizer (``psattn.training.run_dir.run_tokenizer(run_dir)``).
        prompt: the text to continue.
        max_new_tokens: tokens to write.
        temperature: sampling temperature; 0 is greedy.
        top_k: sample among the k most likely tokens.
        top_p: sample among the fewest most likely tokens holding this much probability.
        seed: the sampling seed.
        context: the window the model was trained on (the run's ``task.seq_len``).

    Returns:
        The continuation, without the prompt.

    Examples:
        >>> from psattn import DecoderLM, ModelConfig
        >>> from psattn.models.generate import continue_text
        >>> from psattn.textdata import ByteTokenizer
        >>> model = DecoderLM(ModelConfig(vocab_size=256, d_model=32, n_heads=2)).eval()
        >>> text = continue_text(model, ByteTokenizer(), "Hello", 8, seed=1)
        >>> text == continue_text(model, ByteTokenizer(), "Hello", 8, seed=1)  # seeded: the same text
        True
    """
    if not _is_number(temperature):
        raise TypeError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
    if not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
    if not isinstance(prompt, str):  # the tokenizer's AttributeError
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, Integral):  # manual_seed's "expected a long, but got str"
        raise TypeError(f"seed must be an integer, got {seed!r}")
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt must not be empty")
    new = continue_ids(model, ids, max_new_tokens, context=context, do_sample=temperature > 0,
                       temperature=temperature or 1.0, top_k=top_k, top_p=top_p, generator=torch.Generator().manual_seed(seed),
                       vocab_limit=min(tokenizer.vocab_size, model.config.vocab_size))
    return tokenizer.decode(new)


def continue_ids(model, ids: list[int], max_new_tokens: int, *, context: int | None = None, **sampling) -> list[int]:
    """``max_new_tokens`` token ids after ``ids``. ``context`` is the window the model was trained on:
    generation stays within it, as nanoGPT's sampler does. Once prompt and continuation fill it, each
    further token is predicted from the last ``context - 1`` tokens alone (a fresh forward pass per
    token, positions restarting at 0), never from positions the model has not seen; a longer prompt
    keeps its last ``context - 1`` tokens. ``sampling`` goes to ``generate``; with its ``eos_token_id`` the ids end
    at the first end of sequence, which may be before ``max_new_tokens``."""
    if context is not None and (isinstance(context, bool) or not isinstance(context, Integral)):
        raise TypeError(f"context must be an integer of at least 2 tokens, got {context!r}")
    if context is not None and context < 2:
        raise ValueError(f"context must be an integer of at least 2 tokens, got {context!r}")
    window = list(ids[-(context - 1):]) if context is not None else list(ids)
    room = max_new_tokens if context is None else min(max_new_tokens, context - len(window))
    device = model_device(model)
    new = generate(model, torch.tensor([window], device=device), room, **sampling).sequences[0, len(window):].tolist()
    eos = sampling.get("eos_token_id")
    while len(new) < max_new_tokens and not (new and new[-1] == eos):  # past the window: slide it, one token at a time
        assert context is not None  # without a window the first call asked for them all (or ended at the EOS token)
        recent = (window + new)[-(context - 1):]
        new += generate(model, torch.tensor([recent], device=device), 1, **sampling).sequences[0, -1:].tolist()
    return new
