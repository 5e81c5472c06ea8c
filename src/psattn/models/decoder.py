"""A small decoder-only transformer whose attention layers are PhaseSpaceAttention.

    h = embed(tokens)
    for each block:  h = h + attn(norm(h));  h = h + mlp(norm(h))   (mlp optional, per layer)
    logits = lm_head(norm(h))
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from psattn.models.attention import PhaseSpaceAttention, ShearFn
from psattn.models.config import ModelConfig
from psattn.models.context import build_context, token_range_error
from psattn.models.scored import Scored, scored_of
from psattn.ops.cache import PSACache
from psattn.ops.shear import shear
from psattn.tasks.batch import check_rows


def _norm(config: ModelConfig) -> nn.Module:
    return nn.RMSNorm(config.d_model) if config.norm == "rmsnorm" else nn.LayerNorm(config.d_model)


class MLP(nn.Module):
    """The block's feed-forward part: Linear, GELU, Linear, dropout."""
    def __init__(self, d_model: int, d_mlp: int, dropout: float):
        super().__init__()
        self.up = nn.Linear(d_model, d_mlp)
        self.down = nn.Linear(d_mlp, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, T, C)."""
        return self.drop(self.down(nn.functional.gelu(self.up(x))))


class Block(nn.Module):
    """One pre-norm transformer block: x + attention(norm(x)), then x + MLP(norm(x)) where it has one."""
    def __init__(self, config: ModelConfig, layer: int, shear_fn: ShearFn = shear, backend: str = "auto"):
        super().__init__()
        self.norm_attn = _norm(config)
        self.attn = PhaseSpaceAttention(
            config.d_model, config.n_heads, config.n_kv_heads, config.layer_attention_configs()[layer],
            rope_base=config.rope_base, rotary_fraction=config.rotary_fraction, dropout=config.dropout,
            head_dim=config.head_dim, shear_fn=shear_fn, backend=backend,
        )
        self.drop = nn.Dropout(config.dropout)
        has_mlp = config.layer_mlps()[layer]
        self.norm_mlp = _norm(config) if has_mlp else None
        assert config.d_mlp is not None  # ModelConfig fills it in
        self.mlp = MLP(config.d_model, config.d_mlp, config.dropout) if has_mlp else None

    def forward(self, h, context, cache=None, scored: Scored | None = None):
        """h (B, T, C) -> (B, T, C); with ``scored``, only the scored positions attend and go on through the
        position-wise MLP: -> (N, C)."""
        if scored is None:
            h = h + self.drop(self.attn(self.norm_attn(h), context, cache))
        else:
            h = scored.take(h) + self.drop(self.attn(self.norm_attn(h), context, cache, scored=scored))  # (N, C)
        if self.mlp is not None and self.norm_mlp is not None:  # set together
            h = h + self.mlp(self.norm_mlp(h))
        return h


class DecoderLM(nn.Module):
    """Token embedding, ``n_layers`` blocks, final norm, LM head (tied to the embedding by default).

    Args:
        config: the model's ``ModelConfig``; its ``attention`` chooses PSA's variant and γ per layer.
        shear_fn: the shear every layer applies, ``(x, gamma, *, starts, prev, boundary) -> x̂``
            (default ``psattn.ops.shear``; ``psattn.theory.operators`` passes others to study them).
        backend: how every layer attends in an uncached, unhooked forward over all positions: ``"auto"``
            (default) rotates and shears q and k in one pass (``psattn.ops.rope_shear``) and calls SDPA;
            ``"fused"``, ``"sdpa"`` or ``"reference"`` rotate and call ``psa_attention`` with that backend,
            which shears itself; another name is a ValueError, and so is ``"fused"`` with a head width other
            than 16, 32, 64 or 128 (the kernel's), when the model is built. Cached decoding, ``scored`` and hooked layers
            always shear as ``"auto"`` does, and so does ``"fused"`` for a left-padded or packed batch (its
            kernel knows the causal mask alone; docs/kernel.md).

    Calling the model on token ids (B, T) gives logits (B, T, V); ``attention_mask`` (left padding),
    ``position_ids`` (packed documents) and ``cache`` (a ``PSACache`` from ``new_cache``) are optional.

    Examples:
        >>> import torch
        >>> from psattn import AttentionConfig, DecoderLM, ModelConfig
        >>> model = DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_heads=2, attention=AttentionConfig("key_only", 1.0)))
        >>> model(torch.zeros(2, 10, dtype=torch.long)).shape
        torch.Size([2, 10, 32])
    """

    blocks: list[Block]  # an nn.ModuleList, typed by what it holds (torch's ModuleList is not generic)

    def __init__(self, config: ModelConfig, *, shear_fn: ShearFn = shear, backend: str = "auto"):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig (ModelConfig.from_dict reads a dict), got {type(config).__name__}")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, i, shear_fn, backend) for i in range(config.n_layers))  # type: ignore[assignment]
        for block in self.blocks[1:]:  # one RoPE for every layer (one config): its tables are computed once a forward pass
            block.attn.rope = self.blocks[0].attn.rope
        self.norm_final = _norm(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        std = config.init_std
        if std is not None:
            self.apply(lambda module: self._init_weights(module, std))
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    @staticmethod
    def _init_weights(module: nn.Module, std: float) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (a tied head counts once)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def supports_cache(self) -> bool:
        """Whether every layer can decode with a cache (the learned key-lag baselines cannot)."""
        return not any(block.attn.config.is_key_lag for block in self.blocks)

    def new_cache(self, max_rollback: int = 0) -> PSACache:
        """An empty cache; ``max_rollback``, an int >= 0, is how many tokens ``PSACache.crop`` may undo."""
        return PSACache([block.attn.new_cache(max_rollback) for block in self.blocks])

    def forward(
        self,
        input_ids: Tensor,
        *,
        position_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: PSACache | None = None,
        scored: Tensor | Scored | None = None,
        output_mask: Tensor | None = None,
    ) -> Tensor:
        """input_ids (B, T) -> logits (B, T, V).

        ``attention_mask`` (B, T), bool or integer, marks real tokens (1) and padding (0) among the new tokens (a
        float mask is a TypeError, another value a ValueError);
        ``position_ids`` (B, T) restarting at 0 packs several documents in a row (a real token's is >= 0: a
        negative one is a ValueError; padding's change nothing); with ``cache``
        the tokens continue the cached ones and the cache is extended (an empty chunk, T = 0, gives
        logits (B, 0, V) and leaves it as it was). With ``scored`` (B, T) bool (a
        ``TaskBatch``'s ``scored``), only the logits of the marked positions are computed, as (N, V) in
        row-major order: in the last block only those positions attend (keys and values still come
        from every position), and everything after that attention is position-wise, so the last
        block's MLP, the final norm and the LM head run there alone (training on a few scored positions
        costs less). The mask is indexed here, which on a GPU waits for it once; a ``Scored`` of it,
        built where the mask was made (``Scored.of`` on the host) and copied without a wait (pinned, as
        ``psattn.training.transfer.to_device`` copies a batch), makes the call wait for nothing.
        ``output_mask`` is its former name, still accepted with a DeprecationWarning.
        """
        check_rows(input_ids, "input_ids")
        if cache is not None and not isinstance(cache, PSACache):
            raise TypeError(f"cache must be a PSACache (model.new_cache()) or None, got {type(cache).__name__}")
        if cache is not None and len(cache.layers) != len(self.blocks):
            raise ValueError(f"cache has {len(cache.layers)} layers, the model {len(self.blocks)}")
        if output_mask is not None:
            if scored is not None:
                raise ValueError("pass scored alone (output_mask is its former name)")
            warnings.warn("DecoderLM's output_mask is now called scored", DeprecationWarning, stacklevel=2)
            scored = output_mask
        if scored is not None:
            scored = scored_of(scored, tuple(input_ids.shape), input_ids.device)  # indexed once for every block
        if cache is None:
            return self._forward(input_ids, position_ids, attention_mask, None, scored)
        before = cache.snapshot()
        try:
            return self._forward(input_ids, position_ids, attention_mask, cache, scored)
        except BaseException:
            cache.restore(before)  # a failed call leaves the cache as it was
            raise

    def _embed(self, input_ids: Tensor) -> Tensor:
        """The token embeddings (B, T, C); an id outside [0, vocab_size) is a ValueError saying so (on the CPU,
        where the embedding raises), at no cost to a valid call. On CUDA the embedding stops the device instead:
        there ``build_context`` refuses such ids first when the chunk comes with a mask, positions or a cache
        (generation, padded batches), in the device read it makes anyway; a plain chunk is not checked."""
        if torch.compiler.is_compiling():  # a traced graph has no exception handling
            return self.embed(input_ids)
        try:
            return self.embed(input_ids)
        except IndexError:
            raise token_range_error(input_ids, self.config.vocab_size) from None

    def _forward(self, input_ids, position_ids, attention_mask, cache, scored) -> Tensor:
        B, T = input_ids.shape
        context = build_context(  # with a mask, positions or a cache it checks the ids too (its one device wait)
            B, T, input_ids.device, position_ids=position_ids, attention_mask=attention_mask, cache=cache,
            input_ids=input_ids, vocab_size=self.config.vocab_size,
        )
        context.tables = {}  # the layers' shared RoPE tables, computed once in this call
        h = self.drop(self._embed(input_ids))  # (B, T, C)
        if T == 0:  # an empty chunk: no position attends, and a cache stays as it was
            return self.lm_head(self.norm_final(h if scored is None else scored.take(h)))  # (B, 0, V), or (0, V) with scored
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            h = block(h, context, None if cache is None else cache.layers[i], scored if i == last else None)
        if cache is not None:
            cache.record(context.chunk)  # the chunk's positions, sequences and padding, beside its keys
        return self.lm_head(self.norm_final(h))  # (B, T, V), or (N, V) with scored
