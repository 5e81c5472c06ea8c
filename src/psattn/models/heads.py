"""Head diagnostics from the interpretability literature, read from the model's hook points.

On a row [BOS] + R + R, with R a run of n random tokens, position t of the second copy (t > n)
holds the token of position t - n; an induction head attends to the token after that occurrence,
position t - n + 1 (Olsson et al. 2022). A previous-token head attends to t - 1.

- previous-token score: mean attention mass on t - 1, over positions t >= 1;
- induction score: mean attention mass on t - n + 1, over the positions of the second copy.

Where R repeats a token, its most recent earlier occurrence is not t - n, and a head that follows
the most recent occurrence scores below 1 there: R drawn from few ids (a byte vocabulary), or a real
passage (``psattn.models.lm_eval``'s prefix-matching score), leaves fewer positions unambiguous (R of
32 bytes of the shipped Austen novels: such a head scores 0.68 on random bytes, 0.28 on passages).

BOS is the model's own start token: its config's ``bos_token_id`` (GPT-2's and Qwen's <|endoftext|>,
Llama's <s>), else its ``decoder_start_token_id``, else 0, which starts every row of psattn's tasks
(psattn's own models and their exports name no start token). R is drawn from ordinary ids: not the
config's bos/eos/pad/unk/decoder-start ids, and, given the tokenizer, neither its special ids nor the
ids at or past its length (the never-trained rows a vocabulary is padded with).

Any model with ``hook_pattern`` hook points works: psattn's own models, and transformers models
patched with ``psattn.integrations.hf.apply_psa``. The scores have one row per attention layer, in the
order the layers run, and ``layers`` names each row's module: a hybrid's convolution or linear-attention
layers have no hook points and no row (Qwen3.5's four tiny layers give one row, ``model.layers.3.self_attn``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

import torch
from torch import Tensor

from psattn.models.device import model_device
from psattn.ops.hooks import capture


@dataclass
class HeadScores:
    """Previous-token and induction score of every head, and the mean attention patterns; one row per
    attention layer, ``layers`` naming its module."""
    previous_token: Tensor  # (layers, heads)
    induction: Tensor  # (layers, heads)
    patterns: Tensor  # (layers, heads, T, T): mean pattern over the batch
    layers: tuple[str, ...] = field(default=(), kw_only=True)  # each row's attention module ("blocks.0.attn", ...)

    def as_dict(self) -> dict[str, list[list[float]]]:
        """The two scores as nested lists (layers x heads), for JSON."""
        return {"previous_token": self.previous_token.tolist(), "induction": self.induction.tolist()}


#: the start token where a model's config names none: id 0 starts every row of psattn's tasks
DEFAULT_BOS = 0
_START_IDS = ("bos_token_id", "decoder_start_token_id")  # the model's start token: the first one set
_SPECIAL_IDS = (*_START_IDS, "eos_token_id", "pad_token_id", "unk_token_id")  # never drawn into R


def repeated_tokens(batch: int, half: int, vocab_size: int, generator: torch.Generator, bos: int = 0, *,
                    ids: Tensor | None = None) -> Tensor:
    """[BOS] + R + R rows (B, 1 + 2 * half), R drawn uniformly from ``ids`` (default: the tokens below
    ``vocab_size`` other than 0)."""
    if ids is None:
        body = torch.randint(1, vocab_size, (batch, half), generator=generator, device=generator.device)
    else:  # the same draws as randint(1, vocab_size) where ids are 1..vocab_size-1
        ids = ids.to(generator.device)
        body = ids[torch.randint(0, len(ids), (batch, half), generator=generator, device=generator.device)]
    return torch.cat([torch.full((batch, 1), bos, device=body.device), body, body], dim=1)  # (B, 1 + 2 * half)


def _token_ids(value) -> list[int]:
    """A config's token id setting as a list: none, one id, or several (Llama 3's three eos ids)."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return [int(v) for v in values if isinstance(v, Integral) and not isinstance(v, bool)]


def probe_tokens(model, vocab_size: int, tokenizer=None) -> tuple[int, Tensor]:
    """The start token of ``model`` and the ordinary ids below ``vocab_size`` that R is drawn from (see the
    module's docstring): the config's special ids and the ``tokenizer``'s (a transformers tokenizer) are left out."""
    config: Any = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else None  # a multimodal model's language model
    configs = [c for c in (text, config, getattr(model, "generation_config", None)) if c is not None]
    special = {i for c in configs for name in _SPECIAL_IDS for i in _token_ids(getattr(c, name, None))}
    starts = [i for name in _START_IDS for c in configs for i in _token_ids(getattr(c, name, None))]
    bos = starts[0] if starts else DEFAULT_BOS
    if not 0 <= bos < vocab_size:  # the embedding raised "index out of range in self"
        raise ValueError(f"the model's start token {bos} (its config's bos_token_id or decoder_start_token_id) is "
                         f"outside its vocabulary of {vocab_size}: set the config's start token to an id below it")
    if tokenizer is not None:
        if not hasattr(tokenizer, "all_special_ids"):
            raise TypeError(f"tokenizer must be a transformers tokenizer (with all_special_ids), got "
                            f"{type(tokenizer).__name__}")
        special.update(tokenizer.all_special_ids)
        vocab_size = min(vocab_size, len(tokenizer))  # ids past the tokenizer's are never trained
    keep = torch.ones(vocab_size, dtype=torch.bool, device="cpu")  # (V,); the generator is a CPU one
    keep[[i for i in {bos, *special} if 0 <= i < vocab_size]] = False
    ordinary = keep.nonzero().squeeze(1)  # (ordinary ids,)
    if len(ordinary) == 0:
        raise ValueError(f"no ordinary token below vocab_size={vocab_size} to draw the repeated run from "
                         f"(start token {bos}, special ids {sorted(special)})")
    return bos, ordinary


def _check_integer(name: str, value, minimum: int) -> None:
    """Refuse ``value`` unless it is an integer (not a bool) >= ``minimum``: a TypeError naming ``name`` for
    another type (2.5, None), a ValueError for a smaller integer."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass
class RepeatScores(HeadScores):
    """``HeadScores`` plus the next-token loss in each copy of the repeated rows."""
    first_copy_loss: float  # mean next-token loss (nats) inside the first copy
    second_copy_loss: float  # ... inside the second copy: low when the model copies in context


@torch.no_grad()
def repeat_scores(model, rows: Tensor, half: int, offset: int = 0) -> RepeatScores:
    """Head scores and per-copy losses on ``rows`` (B, T) that hold a run of ``half`` tokens at
    ``offset`` and its exact repeat right after it (T >= offset + 2 * half)."""
    if not isinstance(rows, Tensor):
        raise TypeError(f"rows must be a (B, T) tensor of token ids, got {type(rows).__name__}")
    if rows.dim() != 2:  # a 1-D row raised "tuple index out of range"
        raise ValueError(f"rows must be a (B, T) tensor of token ids, got {tuple(rows.shape)}")
    _check_integer("half", half, 2)  # a float raised an indexing error deep inside
    _check_integer("offset", offset, 0)  # a negative offset indexed from the end and returned scores
    if rows.shape[1] < offset + 2 * half:
        raise ValueError(f"rows of length {rows.shape[1]} cannot hold two copies of {half} tokens after {offset}")
    rows = rows.to(model_device(model))  # rows come from a generator's device; the model may sit elsewhere
    was_training = model.training
    model.eval()
    try:
        with capture(model, "*.hook_pattern") as seen:
            out = model(rows)
    finally:  # a forward pass that raises leaves a training model in training mode too
        model.train(was_training)
    logits = getattr(out, "logits", out)  # (B, T, V); transformers models return an output object
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # a half-precision loss is off by 0.4%
    patterns = torch.stack(list(seen.values()))  # (L, B, H, T, T), in the order the layers ran
    exact = torch.promote_types(patterns.dtype, torch.float32)  # a bfloat16 mean is off by up to 0.2%: 0.09998 read 0.1001
    t = torch.arange(1, rows.shape[1], device=rows.device)
    prev = patterns[..., t, t - 1].mean(dim=(1, 3), dtype=exact)  # (L, H)
    second = torch.arange(offset + half, offset + 2 * half, device=rows.device)  # positions of the second copy
    ind = patterns[..., second, second - half + 1].mean(dim=(1, 3), dtype=exact)  # (L, H)
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), rows[:, 1:].long(), reduction="none").mean(0)  # (T-1,): loss predicting t+1 at t
    first = losses[offset : offset + half - 1].mean()  # predictions of tokens 1..half-1 of the first copy
    second_loss = losses[offset + half : offset + 2 * half - 1].mean()  # ... of the second copy
    layers = tuple(name.removesuffix(".hook_pattern") for name in seen)  # a hybrid's other layers have no row
    return RepeatScores(prev, ind, patterns.mean(dim=1, dtype=exact), float(first), float(second_loss), layers=layers)


def head_scores(model, *, batch: int = 32, half: int = 24, seed: int = 0, vocab_size: int | None = None,
                tokenizer=None) -> HeadScores:
    """Previous-token and induction scores of every head of ``model`` on [BOS] + R + R rows, BOS the model's
    start token and R ordinary tokens below ``vocab_size`` (default: the model's vocabulary).

    Args:
        model (torch.nn.Module): a psattn ``DecoderLM``, or a transformers model patched by ``apply_psa`` or exported by psattn.
        batch: rows scored.
        half: length of the random half R each row repeats.
        seed: seed of the rows.
        vocab_size: tokens are drawn below it (default: the model's vocabulary).
        tokenizer (transformers.PreTrainedTokenizerBase): the model's tokenizer, if any: R leaves out its special
            ids and the ids past its length.

    Returns:
        ``HeadScores``: ``previous_token`` and ``induction`` (layers, heads), the mean attention mass
        on t - 1 (positions t >= 1) and on the token after the current token's occurrence in the first
        copy (the second copy's positions), the mean ``patterns`` (layers, heads, T, T), and ``layers``, the
        attention module of each row (a hybrid model's attention layers only).

    Examples:
        >>> from psattn import AttentionConfig, DecoderLM, ModelConfig
        >>> from psattn.models.heads import head_scores
        >>> model = DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2))
        >>> head_scores(model).induction.shape  # (layers, heads)
        torch.Size([2, 2])
    """
    config: Any = model.config if vocab_size is None else getattr(model, "config", None)
    if hasattr(config, "get_text_config"):  # transformers: a multimodal model's vocabulary is its language model's
        config = config.get_text_config()
    model_vocab = config.vocab_size if vocab_size is None else getattr(config, "vocab_size", None)
    vocab_size = model_vocab if vocab_size is None else vocab_size
    _check_integer("batch", batch, 1)  # 0 rows gave NaN scores
    _check_integer("half", half, 2)  # -3 raised torch's "negative dimension", 2.5 randint's TypeError
    takes = (f"vocab_size must be an integer in [2, {model_vocab or 'the vocabulary'}] (BOS and one more token, at "
             f"most the model's), got {vocab_size!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, Integral):
        raise TypeError(takes)
    if vocab_size < 2 or (model_vocab is not None and vocab_size > model_vocab):
        raise ValueError(takes)
    vocab_size = int(vocab_size)  # a NumPy integer too
    bos, ids = probe_tokens(model, vocab_size, tokenizer)
    g = torch.Generator().manual_seed(seed)
    return repeat_scores(model, repeated_tokens(batch, half, vocab_size, g, bos, ids=ids), half, offset=1)
