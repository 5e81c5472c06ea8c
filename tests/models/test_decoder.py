import sys

import pytest
import torch

from helpers import ALL_VARIANTS, random_model
from psattn.models import PRESETS, AttentionConfig, DecoderLM, ModelConfig, preset, preset_parameter_count
from psattn.models.attention import PhaseSpaceAttention
from psattn.models.keylag import KEY_LAG
from psattn.ops.attention import psa_attention_reference, score_terms
from psattn.ops.hooks import capture
from psattn.ops.rope import apply_rope
from psattn.ops.shear import shear


def test_gamma_zero_variants_equal_baseline():
    base = random_model("baseline", gamma=0.0, seed=3)
    x = torch.randint(0, 37, (2, 11))
    for variant in ("symmetric", "key_only", "query_only"):
        model = random_model(variant, gamma=0.0, seed=3)
        assert torch.equal(model(x), base(x))


@pytest.mark.parametrize("variant, gammas", [
    ("baseline", (0.0, 0.0)), ("symmetric", (0.8, 0.8)), ("key_only", (0.0, 0.8)), ("query_only", (0.8, 0.0)),
])
def test_a_layer_is_the_operator_on_its_rotated_streams_with_its_variants_gammas(variant, gammas):
    """The layer's attention is ``psa_attention_reference`` on the rotated q, k (GQA here) with the variant's
    (gamma_q, gamma_k): key-only shears the keys alone, query-only the queries alone. A key-only layer that
    sheared its queries too learned as the symmetric one does (not the single-answer task within its budget)."""
    attn = random_model(variant, gamma=0.8).blocks[0].attn
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    q, k, v = attn._project(x)  # (B, H, T, D), before RoPE
    cos, sin = attn.rope(torch.arange(9)[None].expand(2, 9), torch.float64)
    out = psa_attention_reference(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, gamma_q=gammas[0],
                                  gamma_k=gammas[1], is_causal=True)  # (B, Hq, T, D)
    for grad in (True, False):  # training and evaluation take different paths through RoPE and the shear
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(attn(x), attn.o_proj(out.transpose(1, 2).reshape(2, 9, 32)), atol=1e-10, rtol=0)


OUTPUT_MASK_CASES = [  # (variant, placement, model fields): MHA and GQA, one and two layers, key-lag baselines
    ("key_only", "post_rope", {}), ("symmetric", "post_rope", {"mlp": False}), ("query_only", "post_rope", {}),
    ("symmetric", "pre_rope", {"n_layers": 1}), ("baseline", "post_rope", {"n_kv_heads": 4}),
    ("canon", "post_rope", {}), ("primer_dconv", "post_rope", {"n_layers": 1}), ("kv_shift", "post_rope", {}),
    ("smeared_keys", "post_rope", {}), ("key_only", "pre_rope", {"n_layers": 1}),
    ("symmetric", "post_rope", {"boundary": "zero"}), ("query_only", "pre_rope", {"boundary": "zero"}),
]


@pytest.mark.parametrize("variant, placement, fields", OUTPUT_MASK_CASES)
@pytest.mark.parametrize("inputs", ["plain", "left_padded", "packed"])
def test_scored_gives_the_logits_and_gradients_of_the_marked_positions(variant, placement, fields, inputs):
    """Only the marked positions of the last block attend; logits and every gradient equal those of
    the full forward pass at those positions, for plain, left-padded and packed batches."""
    gamma = 0.0 if variant in ("canon", "primer_dconv", "kv_shift", "smeared_keys") else 0.8
    model = random_model(variant, placement, gamma, **fields)
    x = torch.randint(0, 37, (3, 9))
    kwargs = {}
    if inputs == "left_padded":
        kwargs["attention_mask"] = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [1] * 9, [0] + [1] * 8])
    if inputs == "packed":
        kwargs["position_ids"] = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4], list(range(9)), [0, 1, 0, 1, 2, 3, 4, 5, 6]])
    keep = torch.rand(3, 9, generator=torch.Generator().manual_seed(1)) < 0.4
    keep[0, -1] = True
    keep[0, 4] = keep[2, :3] = True  # queries at sequence starts: t = 0, after padding, in a pack
    keep[1] = False  # a row with nothing to score
    weights = torch.randn(int(keep.sum()), 37, dtype=torch.float64)

    def logits_and_grads(masked: bool):
        model.zero_grad()
        logits = model(x, scored=keep, **kwargs) if masked else model(x, **kwargs)[keep]  # (N, V)
        (logits * weights).sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    (masked, masked_grads), (full, full_grads) = logits_and_grads(True), logits_and_grads(False)
    assert masked.shape == (int(keep.sum()), 37)
    assert torch.allclose(masked, full, atol=1e-10)
    for a, b in zip(masked_grads, full_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-9)


@pytest.mark.parametrize("variant, marked, rows", [
    ("key_only", 4, 4), ("baseline", 4, 4), ("smeared_keys", 4, 4), ("kv_shift", 4, 4), ("symmetric", 4, 8),
    ("query_only", 4, 8), ("canon", 4, 17), ("primer_dconv", 4, 17), ("key_only", 9, 17), ("symmetric", 5, 17),
])
def test_scored_computes_only_the_queries_of_the_marked_positions(variant, marked, rows):
    """Unless a key-lag module mixes queries, q̂_t depends on x_t and x_{t-1} alone, so the last layer
    projects the queries of the marked positions only (the most in a row), and with a query shear
    those of their predecessors too, as long as that is at most half the row; otherwise every position."""
    model = random_model(variant, gamma=0.0 if variant in KEY_LAG else 0.8)
    keep = torch.zeros(2, 17, dtype=torch.bool)
    keep[0, torch.randperm(17, generator=torch.Generator().manual_seed(0))[:marked]] = True
    keep[1, 3] = True
    seen = []
    model.blocks[-1].attn.q_proj.register_forward_hook(lambda module, args, out: seen.append(args[0].shape))
    x = torch.randint(0, 37, (2, 17))
    assert torch.allclose(model(x, scored=keep), model(x)[keep], atol=1e-10)
    assert seen[0] == (2, rows, model.config.d_model)


@pytest.mark.parametrize("variant, placement", [("symmetric", "post_rope"), ("symmetric", "pre_rope"), ("key_only", "pre_rope")])
@pytest.mark.parametrize("inputs", ["left_padded", "packed"])
def test_scored_queries_computed_apart_restart_at_sequence_starts_and_keep_the_placement(variant, placement, inputs):
    """When the last layer computes the marked queries alone (few marked positions in a long row), its logits are
    the full forward's on left-padded and packed rows (marked queries at sequence starts among them), and pre-RoPE
    keys are sheared before they are rotated. The tests that reached that path had plain rows and post-RoPE shears
    only, so keys rotated first, then sheared, passed."""
    model = random_model(variant, placement, 0.8)
    x = torch.randint(0, 37, (2, 17), generator=torch.Generator().manual_seed(2))
    if inputs == "left_padded":
        kwargs = {"attention_mask": torch.tensor([[0] * 5 + [1] * 12, [1] * 17])}
        marked = [(0, 5), (0, 9), (0, 16), (1, 0), (1, 7), (1, 12)]  # (0, 5): the first real token
    else:
        kwargs = {"position_ids": torch.tensor([list(range(8)) + list(range(9)), list(range(3)) + list(range(14))])}
        marked = [(0, 8), (0, 3), (0, 16), (1, 3), (1, 4), (1, 10)]  # (0, 8), (1, 3): documents' first tokens
    keep = torch.zeros(2, 17, dtype=torch.bool)
    keep[tuple(zip(*marked, strict=True))] = True
    seen = []
    model.blocks[-1].attn.q_proj.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    torch.testing.assert_close(model(x, scored=keep, **kwargs), model(x, **kwargs)[keep], atol=1e-10, rtol=0)
    assert seen[0] == 3 * (1 + (variant == "symmetric"))  # the marked queries (and their predecessors) alone


@pytest.mark.parametrize("backend", ["sdpa", "reference"])
def test_a_layer_that_hands_its_streams_to_psa_attention_restarts_them_at_sequence_starts(backend):
    """With backend "sdpa" or "reference" a layer lets psa_attention shear q and k; on left-padded and packed
    batches it must pass the sequence starts along. Its tests used plain batches, so a layer that dropped the
    starts (a shear across padding and documents) passed."""
    model = random_model("symmetric", gamma=0.8)
    inside = random_model("symmetric", gamma=0.8)
    for block in inside.blocks:
        block.attn.backend = backend
    x = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(3))
    for kwargs in ({"attention_mask": torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [1] * 9])},
                   {"position_ids": torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4], [0, 1, 0, 1, 2, 3, 4, 5, 6]])}):
        torch.testing.assert_close(inside(x, **kwargs), model(x, **kwargs), atol=1e-10, rtol=0)


def test_scored_with_a_hooked_last_layer_computes_every_row():
    """A listener on the last layer sees every position, and the logits are still those of the mask."""
    model = random_model("key_only")
    x = torch.randint(0, 37, (2, 9))
    keep = torch.zeros(2, 9, dtype=torch.bool)
    keep[:, -1] = True
    with capture(model, "blocks.1.attn.hook_pattern") as seen:
        logits = model(x, scored=keep)
    assert seen["blocks.1.attn.hook_pattern"].shape == (2, 4, 9, 9)
    assert torch.allclose(logits, model(x)[keep], atol=1e-10)
    assert model(x, scored=torch.zeros_like(keep)).shape == (0, 37)
    with pytest.raises(ValueError, match="scored must be"):
        model(x, scored=keep[:, :4])


def test_output_mask_is_the_former_name_of_scored():
    model = random_model("key_only")
    x = torch.randint(0, 37, (2, 9))
    keep = torch.zeros(2, 9, dtype=torch.bool)
    keep[:, [3, 8]] = True
    with pytest.warns(DeprecationWarning, match="now called scored"):
        assert torch.equal(model(x, output_mask=keep), model(x, scored=keep))
    with pytest.raises(ValueError, match="scored alone"):
        model(x, scored=keep, output_mask=keep)


@pytest.mark.parametrize("init, std", [("scaled", (3 * 64) ** -0.5), (0.1, 0.1), ("torch", None)])
def test_init_sets_the_scale_of_every_matrix(init, std):
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(d_model=64, init=init))
    embed, q, down = model.embed.weight, model.blocks[0].attn.q_proj.weight, model.blocks[0].mlp.down.weight
    if std is None:  # PyTorch's own: N(0, 1) embeddings, uniform(±1/sqrt(fan_in)) linear layers
        assert embed.std().item() == pytest.approx(1.0, rel=0.05)
        assert q.abs().max().item() <= 64 ** -0.5 and down.abs().max().item() <= 256 ** -0.5
    else:
        for weight in (embed, q, down):
            assert weight.std().item() == pytest.approx(std, rel=0.05)
    assert ModelConfig(d_model=768).init_std == pytest.approx(0.0208, abs=1e-4)  # GPT-2's 0.02 at its width
    for bad in (0.0, -1.0, float("inf"), "0.1", "xavier"):
        with pytest.raises(ValueError, match="init must be"):
            ModelConfig(init=bad)
    for bad in (True, None):  # neither a name nor a number: a TypeError (True was a ValueError)
        with pytest.raises(TypeError, match="init must be"):
            ModelConfig(init=bad)


@pytest.mark.parametrize("variant,placement", ALL_VARIANTS)
def test_causality(variant, placement):
    model = random_model(variant, placement)
    x = torch.randint(0, 37, (2, 12))
    y = x.clone()
    y[:, 7] = (y[:, 7] + 1) % 37
    a, b = model(x), model(y)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-3)


@pytest.mark.parametrize("variant,placement", ALL_VARIANTS)
def test_left_padded_batch_equals_sequences_alone(variant, placement):
    model = random_model(variant, placement)
    a, b = torch.randint(0, 37, (1, 5)), torch.randint(0, 37, (1, 9))
    batch = torch.cat([torch.cat([torch.full((1, 4), 36), a], 1), b])
    mask = torch.tensor([[0] * 4 + [1] * 5, [1] * 9])
    out = model(batch, attention_mask=mask)
    assert torch.allclose(out[0, 4:], model(a)[0], atol=1e-5)
    assert torch.allclose(out[1], model(b)[0], atol=1e-5)


@pytest.mark.parametrize("variant,placement", ALL_VARIANTS)
def test_packed_batch_equals_documents_alone(variant, placement):
    model = random_model(variant, placement)
    docs = [torch.randint(0, 37, (1, n)) for n in (4, 1, 6)]
    packed = torch.cat(docs, 1)
    positions = torch.cat([torch.arange(d.shape[1]) for d in docs])[None]
    out = model(packed, position_ids=positions)
    start = 0
    for d in docs:
        assert torch.allclose(out[0, start : start + d.shape[1]], model(d)[0], atol=1e-5)
        start += d.shape[1]


@pytest.mark.parametrize("placement", ["post_rope", "pre_rope"])
def test_hook_points_expose_streams_terms_and_pattern(placement):
    model = random_model("symmetric", placement, gamma=0.7, n_kv_heads=4)
    x = torch.randint(0, 37, (2, 8))
    with capture(model, "blocks.0.attn.*") as seen:
        model(x)
    attn = "blocks.0.attn."
    q, k = seen[attn + "hook_q"], seen[attn + "hook_k"]
    q_hat, k_hat = seen[attn + "hook_q_sheared"], seen[attn + "hook_k_sheared"]
    terms = seen[attn + "hook_score_terms"]
    assert torch.allclose(terms.total(), q_hat @ k_hat.transpose(-2, -1), atol=1e-4)
    pattern = seen[attn + "hook_pattern"]
    assert pattern.shape == (2, 4, 8, 8)
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 4, 8, dtype=pattern.dtype), atol=1e-10)
    assert torch.equal(pattern.triu(1), torch.zeros_like(pattern))
    if placement == "post_rope":
        assert torch.allclose(q_hat, shear(q, 0.7), atol=1e-6)
        assert torch.allclose(terms.t4, score_terms(q, k, gamma_q=0.7, gamma_k=0.7).t4, atol=1e-5)
    else:  # the Coriolis error: pre-RoPE shear differs from post-RoPE shear
        assert not torch.allclose(q_hat, shear(q, 0.7), atol=1e-3)


def test_capture_rejects_unknown_names():
    with pytest.raises(ValueError, match="no hook point"):
        with capture(random_model(), "nothing.here"):
            pass


def test_capture_and_build_context_name_arguments_of_the_wrong_kind():
    """capture(model, 3) raised fnmatch's 'expected str, bytes or os.PathLike object'; a negative length or
    batch raised torch.arange's 'upper bound and lower bound inconsistent with step sign'."""
    from psattn.models import build_context

    with pytest.raises(TypeError, match=r"patterns must be hook point names or shell-style patterns, got \[3\]"):
        with capture(random_model(), 3):
            pass
    for kwargs, name, error in ((dict(batch=1, length=-1), "length", ValueError), (dict(batch=-1, length=3), "batch", ValueError),
                                (dict(batch=1, length=2.0), "length", TypeError)):  # 2.0: a ValueError before
        with pytest.raises(error, match=f"{name} must be an integer >= 0"):
            build_context(device=torch.device("cpu"), **kwargs)


def test_attention_only_and_per_layer_configs():
    layers = [AttentionConfig("key_only", 1.0), AttentionConfig("baseline")]
    config = ModelConfig(n_layers=2, mlp=False, attention=layers)
    model = DecoderLM(config)
    assert model.blocks[0].mlp is None
    assert (model.blocks[0].attn.gamma_k, model.blocks[1].attn.gamma_k) == (1.0, 0.0)
    assert model(torch.randint(0, 64, (1, 5))).shape == (1, 5, 64)


def test_an_mlp_per_layer():
    config = ModelConfig(n_layers=3, mlp=[False, True, False], d_model=32, n_heads=2)
    model = DecoderLM(config)
    assert [block.mlp is not None for block in model.blocks] == [False, True, False]
    assert [block.norm_mlp is not None for block in model.blocks] == [False, True, False]
    assert model.num_parameters() == preset_parameter_count(config)
    assert ModelConfig.from_dict(config.to_dict()) == config
    assert ModelConfig(n_layers=2, mlp=[True, True]).layer_mlps() == ModelConfig(n_layers=2).layer_mlps()
    x = torch.randint(0, 64, (2, 6))
    cache = model.new_cache()
    steps = torch.cat([model(x[:, t : t + 1], cache=cache) for t in range(6)], dim=1)
    assert torch.allclose(steps, model(x), atol=1e-5)


def test_config_round_trip_and_errors():
    config = ModelConfig(attention=AttentionConfig("symmetric", 0.8))
    assert ModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown model config fields"):
        ModelConfig.from_dict({"d_modle": 3})
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="even"):
        ModelConfig(d_model=12, n_heads=4)
    with pytest.raises(ValueError, match="unknown attention variant"):
        AttentionConfig("sym")
    with pytest.raises(TypeError, match=r"attention variant must be one of \['baseline', .*\], got None"):
        AttentionConfig(None)  # type: ignore[arg-type]  # a ValueError before, as if None were a misspelt name
    with pytest.raises(ValueError, match="malformed model config: attention variant must be one of"):
        ModelConfig.from_dict({"attention": {"variant": None}})  # read from a file: still a ValueError
    with pytest.raises(ValueError, match="placement"):
        AttentionConfig("symmetric", 1.0, placement="mid_rope")
    with pytest.raises(ValueError, match="finite"):
        AttentionConfig("symmetric", float("inf"))
    with pytest.raises(ValueError, match="attention configs"):
        ModelConfig(n_layers=2, attention=[AttentionConfig()])


def test_an_explicit_head_width_decouples_d_k_from_d_model():
    config = ModelConfig(d_model=32, n_heads=4, d_head=16, attention=AttentionConfig("symmetric", 0.8))
    assert config.head_dim == 16 and ModelConfig.from_dict(config.to_dict()) == config
    model = DecoderLM(config)
    assert model.blocks[0].attn.q_proj.out_features == 64
    assert sum(p.numel() for p in model.parameters()) == preset_parameter_count(config)
    x = torch.randint(0, 64, (2, 7))
    cache = model.new_cache()
    steps = torch.cat([model(x[:, t : t + 1], cache=cache) for t in range(7)], dim=1)
    assert torch.allclose(steps, model(x), atol=1e-5)
    assert "d_head" not in ModelConfig(d_model=32, n_heads=4, d_head=8).to_dict()  # the default, canonical
    assert ModelConfig(d_model=30, n_heads=4, d_head=8).head_dim == 8  # no divisibility needed then
    with pytest.raises(ValueError, match="d_head must be a positive integer"):
        ModelConfig(d_head=0)


@pytest.mark.parametrize("fields,message", [
    ({"n_kv_heads": 2.0}, "n_kv_heads must be a positive integer"),
    ({"d_mlp": 0}, "d_mlp must be a positive integer"),
    ({"d_mlp": -4}, "d_mlp must be a positive integer"),
    ({"rope_base": float("nan")}, "rope_base"),
    ({"mlp": "yes"}, "mlp must be true, false or one true/false per layer"),
    ({"mlp": [True, False]}, r"one true/false per layer \(1\)"),
    ({"n_layers": 2, "mlp": [True, 1]}, "one true/false per layer"),
    ({"attention": {"variant": "key_only", "gama": 1}}, "unknown attention config fields"),
    ({"attention": {"variant": "smeared_keys", "placement": "pre_rope"}}, "acts at its own site"),
    ({"rotary_fraction": "0.5"}, "rotary_fraction must be a number"),  # '<' not supported between ...
    ({"rotary_fraction": None}, "rotary_fraction must be a number"),
    ({"rotary_fraction": True}, "rotary_fraction must be a number"),  # was read as 1.0
])
def test_malformed_model_configs_are_refused_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict(fields)


@pytest.mark.parametrize("fields,message", [
    ({"n_kv_heads": 2.0}, "n_kv_heads must be a positive integer, got 2.0"),
    ({"d_head": 8.0}, "d_head must be a positive integer or unset, got 8.0"),
    ({"mlp": "yes"}, "mlp must be true, false or one true/false per layer"),
    ({"n_layers": 2, "mlp": [True, 1]}, "one true/false per layer"),
    ({"tie_embeddings": 1}, "tie_embeddings must be true or false, got 1"),
    ({"rope_base": "1e4"}, "rope_base must be a finite number > 1, got '1e4'"),
    ({"rotary_fraction": None}, "rotary_fraction must be a number"),
])
def test_a_model_config_built_with_a_value_of_the_wrong_type_is_a_type_error(fields, message):
    """Built in Python, ModelConfig refused these type mistakes as ValueErrors; from a file they still are (above)."""
    with pytest.raises(TypeError, match=message):
        ModelConfig(**fields)


def test_numpy_integers_are_integer_sizes():
    """np.int64(64) was refused as 'vocab_size must be a positive integer, got np.int64(64)' (the task configs
    take NumPy's ints); they are stored as Python ints, so the config still writes as JSON."""
    import json

    import numpy as np

    config = ModelConfig(vocab_size=np.int64(64), d_model=np.int32(32), n_heads=np.int64(4), n_kv_heads=np.int64(2),
                         d_mlp=np.int64(64), n_layers=np.int64(2), dropout=np.float32(0.25), rope_base=np.float32(500))
    assert config == ModelConfig(vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, d_mlp=64, n_layers=2, dropout=0.25,
                                 rope_base=500.0)  # np.float32(0.25) was refused: 'dropout must lie in [0, 1)'
    assert type(config.vocab_size) is int and type(config.dropout) is float
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()


def test_numpy_numbers_are_training_settings():
    """np.float32(0.5) was refused as 'train.threshold must lie in (0, 1], got 0.5', and NumPy ints as steps."""
    import json

    import numpy as np

    from psattn.training.config import RunConfig, TrainConfig
    train = TrainConfig(threshold=np.float32(0.5), lr=np.float32(0.001), steps=np.int64(10), batch_size=np.int32(4),
                        grad_clip=np.float16(2))
    assert (train.threshold, train.steps, train.batch_size, train.grad_clip) == (0.5, 10, 4, 2.0)
    assert train.lr == pytest.approx(0.001) and type(train.lr) is float and type(train.steps) is int
    json.dumps(RunConfig(train=train).to_dict())  # writes as a run's config.json
    with pytest.raises(ValueError, match="train.lr"):
        TrainConfig(lr=np.float32("nan"))


def test_bad_model_inputs():
    model = random_model()
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model(torch.randint(0, 37, (5,)))
    with pytest.raises(TypeError, match="integer"):
        model(torch.rand(1, 5))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.randint(0, 37, (1, 5)), attention_mask=torch.ones(1, 4))


@pytest.mark.parametrize("ids", [[[1, 2, 37]], [[-1, 2, 3]]])
def test_token_ids_outside_the_vocabulary_are_one_line_naming_the_range(ids):
    """The embedding's 'IndexError: index out of range in self' named neither the argument nor the range."""
    with pytest.raises(ValueError, match=r"input_ids must be token ids in \[0, 37\).*got ids from -?\d+ to \d+"):
        random_model()(torch.tensor(ids))


def test_fractional_position_ids_are_refused_rather_than_truncated():
    """.long() made 0.5 a 0: every token a sequence start, so no token saw another and the logits were wrong."""
    model = random_model("symmetric")
    with pytest.raises(TypeError, match="position_ids must be an integer tensor, got torch.float32"):
        model(torch.randint(0, 37, (1, 5)), position_ids=torch.arange(5)[None] + 0.5)
    ids, positions = torch.randint(0, 37, (1, 5)), torch.arange(5)[None]
    torch.testing.assert_close(model(ids, position_ids=positions.int()), model(ids))  # any integer dtype still reads


def test_negative_position_ids_of_real_tokens_are_refused():
    """[-3, -2, -1, 0, 1] ran: a negative rotation, and a document 'starting' at the 0 in the middle."""
    model, ids = random_model("symmetric"), torch.randint(0, 37, (2, 5))
    with pytest.raises(ValueError, match="position_ids must be >= 0 at every real token.*got -3"):
        model(ids, position_ids=torch.arange(-3, 2).expand(2, 5))
    cache = model.new_cache()
    model(ids, cache=cache)
    with pytest.raises(ValueError, match="got -1"):  # also after cached tokens, which the cache keeps
        model(ids[:, :1], position_ids=torch.full((2, 1), -1), cache=cache)
    assert len(cache) == 5
    mask = torch.tensor([[1] * 5, [0, 0, 1, 1, 1]])  # padding's positions are never read: -1 or 1 there is fine
    for pad in (-1, 1):
        positions = torch.tensor([[0, 1, 2, 3, 4], [pad, pad, 0, 1, 2]])
        torch.testing.assert_close(model(ids, position_ids=positions, attention_mask=mask)[1, 2:],
                                   model(ids, attention_mask=mask)[1, 2:])


class _DeviceEmbedding(torch.nn.Embedding):
    """An embedding that fails on an unknown id as CUDA's does: a device-side assert, no IndexError to catch."""

    def forward(self, ids):
        if bool(((ids < 0) | (ids >= self.num_embeddings)).any()):
            raise RuntimeError("CUDA error: device-side assert triggered")
        return super().forward(ids)


@pytest.mark.parametrize("bad", [37, -1])
def test_unknown_token_ids_are_refused_before_the_embedding_where_the_context_reads_the_device(bad):
    """On CUDA an id outside the vocabulary stops the device in the embedding; with a mask, positions or a cache
    (generation, padded batches) the context's one read of the device refuses it first, and the cache is kept."""
    model, ids = random_model("symmetric"), torch.randint(0, 37, (2, 5))
    embed = _DeviceEmbedding(37, model.config.d_model)
    embed.weight = model.embed.weight
    model.embed = embed
    cache = model.new_cache()
    model(ids, cache=cache)
    wrong = ids.clone()
    wrong[1, 2] = bad
    message = r"token ids in \[0, 37\) \(the model's vocab_size\), got ids from " + ("-1 to " if bad < 0 else r"\d+ to 37")
    for kwargs in (dict(attention_mask=torch.ones(2, 5, dtype=torch.long)), dict(position_ids=torch.arange(5).expand(2, 5)),
                   dict(cache=cache)):
        with pytest.raises(ValueError, match=message):
            model(wrong, **kwargs)
    assert len(cache) == 5
    torch.testing.assert_close(model(ids[:, :1], cache=cache), model(torch.cat([ids, ids[:, :1]], 1))[:, -1:])


@pytest.mark.parametrize("call,error,message", [
    (lambda m: DecoderLM({"vocab_size": 37}), TypeError, "config must be a ModelConfig"),
    (lambda m: m([[1, 2]]), TypeError, "input_ids must be a torch.Tensor"),
    (lambda m: m(torch.ones(1, 2, dtype=torch.long), attention_mask=[[1, 1]]), TypeError, "attention_mask must be a torch"),
    (lambda m: m(torch.ones(1, 2, dtype=torch.long), position_ids=[[0, 1]]), TypeError, "position_ids must be a torch"),
    (lambda m: m(torch.ones(1, 2, dtype=torch.long), cache="cache"), TypeError, "cache must be a PSACache"),
])
def test_arguments_of_another_type_are_refused_by_name(call, error, message):
    """Each raised an AttributeError ('list' object has no attribute 'dim' / 'shape', 'dict' ... 'vocab_size')."""
    with pytest.raises(error, match=message):
        call(random_model())


@pytest.mark.parametrize("backend,hooked", [("auto", False), ("sdpa", False), ("reference", False), ("auto", True)])
def test_an_empty_chunk_gives_empty_logits_and_leaves_the_cache_as_it_was(backend, hooked):
    """T = 0 with a mask, positions or a cache gives (B, 0, V), as the plain call does, on every backend and
    with a hook on the attention pattern; decoding on from the cache then equals the full forward."""
    import contextlib

    model = random_model("symmetric")
    for block in model.blocks:
        block.attn.backend = backend
    ids = torch.randint(0, 37, (2, 6))
    empty = ids[:, :0]
    for kwargs in ({}, {"attention_mask": torch.ones(2, 0, dtype=torch.long)},
                   {"position_ids": torch.zeros(2, 0, dtype=torch.long)}, {"cache": model.new_cache()}):
        assert model(empty, **kwargs).shape == (2, 0, 37)
    assert model(empty, scored=torch.zeros(2, 0, dtype=torch.bool)).shape == (0, 37)
    cache = model.new_cache()
    first = model(ids[:, :4], cache=cache)
    with capture(model, "*.hook_pattern") if hooked else contextlib.nullcontext():
        assert model(empty, cache=cache, attention_mask=torch.ones(2, 0, dtype=torch.long)).shape == (2, 0, 37)
        assert model(empty, cache=cache).shape == (2, 0, 37)
    assert len(cache) == 4
    rest = model(ids[:, 4:], cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], 1), model(ids))
    with pytest.raises(ValueError, match="attention_mask must be"):
        model(empty, attention_mask=torch.ones(2, 1))


@pytest.mark.parametrize("kwargs,error,message", [
    ({"n_kv_heads": 0}, ValueError, "n_kv_heads must be a positive integer, got 0"),  # was MHA, silently
    ({"n_kv_heads": -2}, ValueError, "n_kv_heads must be a positive integer"),
    ({"n_heads": 0}, ValueError, "n_heads must be a positive integer"),
    ({"n_heads": 3}, ValueError, r"d_model \(32\) must be divisible by n_heads \(3\), or give head_dim"),
    ({"head_dim": 0}, ValueError, "head_dim must be a positive integer"),
    ({"dropout": 2.0}, ValueError, r"dropout must lie in \[0, 1\)"),
    # type mistakes are TypeErrors (they were ValueErrors)
    ({"n_heads": 2.0}, TypeError, "n_heads must be a positive integer, got 2.0"),
    ({"head_dim": 8.0}, TypeError, "head_dim must be a positive integer or unset, got 8.0"),
    ({"dropout": "0.1"}, TypeError, r"dropout must be a number in \[0, 1\), got '0.1'"),
    ({"attention": "symmetric"}, TypeError, "attention must be an AttentionConfig or None, got str"),
])
def test_an_attention_layer_refuses_what_model_config_refuses(kwargs, error, message):
    with pytest.raises(error, match=message):
        PhaseSpaceAttention(**{"d_model": 32, "n_heads": 4, **kwargs})


def test_an_attention_layer_names_a_malformed_input_or_scored_mask():
    layer = PhaseSpaceAttention(32, 4, attention=AttentionConfig("symmetric", 0.5))
    x = torch.randn(1, 3, 32)
    for bad, error, message in ((torch.randn(3, 32), ValueError, r"x must be \(B, T, d_model=32\)"),
                                (torch.randn(1, 3, 16), ValueError, r"got shape \(1, 3, 16\)"),
                                (torch.ones(1, 3, 32, dtype=torch.long), TypeError, "floating-point")):
        with pytest.raises(error, match=message):
            layer(bad)
    with pytest.raises(ValueError, match=r"scored must be \(B, T\) = \(1, 3\), got \(1, 4\)"):
        layer(x, scored=torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="scored must be a bool tensor"):
        layer(x, scored=torch.ones(1, 3, dtype=torch.long))


def test_a_scored_mask_of_integers_is_refused_rather_than_read_as_row_indices():
    model = random_model()
    ids = torch.randint(0, 37, (2, 4))
    scored = torch.tensor([[False, True, False, True], [False, False, False, True]])
    assert model(ids, scored=scored).shape == (3, 37)
    with pytest.raises(TypeError, match="scored must be a bool tensor"):
        model(ids, scored=scored.long())


@pytest.mark.parametrize("name,exact", [("psa-4m", 4_463_872), ("psa-20m", 19_947_008), ("psa-92m", 91_310_592)])
def test_presets_report_exact_counts(name, exact):
    config = preset(name)
    count = preset_parameter_count(config)
    assert count == exact  # the counts the README quotes
    if name != "psa-92m":  # building the 92M model is cheap too, but keep the test light
        assert DecoderLM(config).num_parameters() == count
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("psa-1b")
    with pytest.raises(TypeError, match=r"takes a ModelConfig \(preset\(name\) makes one\), got str"):
        preset_parameter_count(name)  # 'str' object has no attribute 'd_model'
    assert set(PRESETS) == {"psa-4m", "psa-20m", "psa-92m"}


def test_preset_count_formula_for_gqa_untied_rmsnorm():
    config = ModelConfig(vocab_size=50, d_model=64, n_layers=2, n_heads=8, n_kv_heads=2,
                         tie_embeddings=False, norm="rmsnorm", d_mlp=100)
    assert DecoderLM(config).num_parameters() == preset_parameter_count(config)


def test_choice_fields_are_literal_types_checked_by_one_helper():
    import typing

    from psattn.fields import literal_fields
    from psattn.models.config import KEY_LAG
    from psattn.ops.variants import VARIANTS
    from psattn.training.config import TrainConfig

    assert set(literal_fields(AttentionConfig)["variant"]) == set(VARIANTS) | set(KEY_LAG)
    assert set(literal_fields(AttentionConfig)) == {"variant", "placement", "boundary"}
    assert literal_fields(ModelConfig) == {"norm": ("layernorm", "rmsnorm")}
    assert literal_fields(TrainConfig) == {"precision": ("fp32", "bf16")}
    for make, message in ((lambda: AttentionConfig("symmetric", 1.0, boundary="wrap"), "unknown attention boundary 'wrap'"),
                          (lambda: ModelConfig(norm="batchnorm"), "unknown model norm 'batchnorm'"),
                          (lambda: TrainConfig(precision="fp16"), "unknown train precision 'fp16'; expected one of")):
        with pytest.raises(ValueError, match=message):
            make()
    assert typing.get_type_hints(AttentionConfig)["placement"] == typing.Literal["post_rope", "pre_rope"]


@pytest.mark.parametrize("variant", ["symmetric", "key_only"])
def test_the_one_pass_rotation_and_shear_equals_shearing_in_psa_attention_and_apart_under_fp32_and_bf16_autocast(variant):
    """By default a layer rotates and shears q and k in one pass and calls SDPA; with ``backend="sdpa"``
    it rotates and ``psa_attention`` shears; with a hook on the rotated keys the shear runs apart. The
    three give the same logits, also under bf16 autocast (where the shear computes in fp32)."""
    config = ModelConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                         attention=AttentionConfig(variant, 0.8))
    model = DecoderLM(config).eval()
    in_psa_attention = DecoderLM(config, backend="sdpa").eval()
    in_psa_attention.load_state_dict(model.state_dict())
    ids = torch.randint(0, 32, (2, 24))
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            one_pass = model(ids)
            with capture(model, "*.hook_k"):  # a listener between the rotation and the shear
                apart = model(ids)
            inside = in_psa_attention(ids)
        assert one_pass.dtype == (torch.bfloat16 if autocast else torch.float32)
        torch.testing.assert_close(one_pass, apart, atol=0, rtol=0)
        torch.testing.assert_close(one_pass, inside, atol=0, rtol=0)
    with pytest.raises(ValueError, match="unknown attention backend 'flash'"):
        DecoderLM(config, backend="flash")


def test_a_model_on_the_fused_backend_with_a_head_width_the_kernel_lacks_is_refused_when_built(monkeypatch):
    """``backend="fused"`` with heads of width 24 built a model that failed at its first forward (and only where the
    kernel could run at all); it is refused when built now, naming the widths, without importing Triton."""
    for module in ("triton", "psattn.ops.fused_attention"):  # importing either now raises ImportError
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ValueError, match=r"backend='fused' takes a head width of 16, 32, 64, 128 .*got 24"):
        DecoderLM(ModelConfig(vocab_size=32, d_model=48, n_heads=2), backend="fused")
    with pytest.raises(ValueError, match="got 8"):
        DecoderLM(ModelConfig(vocab_size=32, d_model=32, n_heads=2, d_head=8), backend="fused")
    with pytest.raises(ValueError, match="got 24"):
        PhaseSpaceAttention(48, 2, backend="fused")
    DecoderLM(ModelConfig(vocab_size=32, d_model=64, n_heads=2), backend="fused")  # width 32: built


def test_a_model_on_the_reference_backend_runs_under_bf16_autocast_as_the_default_one_does():
    """Under autocast the projections leave q and k in float32 beside bf16 values; the reference
    backend takes them (as a trainer with precision="bf16" gives them) and agrees with the default."""
    config = ModelConfig(vocab_size=32, d_model=32, n_heads=2, attention=AttentionConfig("symmetric", 0.7))
    model = DecoderLM(config).eval()
    reference = DecoderLM(config, backend="reference").eval()
    reference.load_state_dict(model.state_dict())
    ids = torch.randint(0, 32, (2, 8))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(reference(ids), model(ids), atol=0.05, rtol=0.05)


def test_a_bf16_model_gives_the_same_logits_with_a_listener_and_on_its_scored_positions():
    """In a bf16 model every path of the standard shear rotates and shears in float32 and rounds once: a
    read-only hook between the rotation and the shear, and the few-scored-queries path, change nothing."""
    config = ModelConfig(vocab_size=32, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                         attention=AttentionConfig("symmetric", 0.8))
    model = DecoderLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 32, (2, 24))
    scored = torch.zeros(2, 24, dtype=torch.bool)
    scored[:, -3:] = True
    with torch.no_grad():
        plain = model(ids)
        with capture(model, "*.hook_k"):
            listened = model(ids)
        assert torch.equal(plain, listened)
        assert torch.equal(model(ids, scored=scored), plain[scored])



@pytest.mark.parametrize("dtype,autocast", [(torch.bfloat16, False), (torch.float16, False), (torch.float32, True)])
def test_cached_decoding_shears_against_the_rows_the_full_forward_used_in_16_bit(dtype, autocast):
    """A 16-bit layer shears in float32 and keeps float32 raw rows in its cache, so a prefill followed by
    one-token steps gives the very q̂ and k̂ of the full forward, bit for bit."""
    from psattn.models.context import build_context
    from psattn.ops.cache import PSACache

    torch.manual_seed(0)
    layer = PhaseSpaceAttention(64, 4, 2, AttentionConfig("symmetric", 0.8)).to(dtype).eval()
    x = torch.randn(2, 12, 64).to(dtype)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        with capture(layer, "hook_*_sheared") as full:
            layer(x)
        cache = PSACache([layer.new_cache()])
        seen = {"hook_q_sheared": [], "hook_k_sheared": []}
        for start, end in [(0, 5), *((t, t + 1) for t in range(5, 12))]:  # a prefill, then one token a step
            context = build_context(2, end - start, x.device, cache=cache)
            with capture(layer, "hook_*_sheared") as step:
                layer(x[:, start:end], context, cache.layers[0])
            cache.record(context.chunk)
            for name in seen:
                seen[name].append(step[name])
    assert cache.layers[0].shear_state.raw_k.values.dtype == torch.float32
    for name, chunks in seen.items():
        assert torch.equal(torch.cat(chunks, dim=2), full[name]), name


@pytest.mark.parametrize("variant", ["baseline", "symmetric", "query_only"])
def test_a_layer_decoding_from_its_own_cache_without_a_context_equals_its_full_forward(variant):
    """Without a context the layer took a chunk after cached tokens for positions 0..T-1 with is_causal (aligned
    top-left: a decoded query saw the first cached key alone): differences of order 1."""
    torch.manual_seed(0)
    layer = PhaseSpaceAttention(32, 4, attention=AttentionConfig(variant, 0.0 if variant == "baseline" else 0.8))
    layer = layer.double().eval()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x)
        cache = layer.new_cache()
        parts = [layer(x[:, a:b], cache=cache) for a, b in ((0, 4), (4, 5), (5, 5), (5, 6), (6, 9))]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-12, rtol=0)


@pytest.mark.parametrize("variant", ["symmetric", "key_only"])
def test_a_layer_decoding_from_a_cache_of_another_batch_refuses_it_and_keeps_the_cache(variant):
    """The layer shears its own streams without their checks, but a cached raw row of another batch (which a lerp
    would broadcast over the new row) is refused, naming both shapes, and the cache is left as it was."""
    from psattn.models.context import build_context
    from psattn.ops.cache import PSACache

    torch.manual_seed(0)
    layer = PhaseSpaceAttention(32, 4, attention=AttentionConfig(variant, 0.8))
    cache = PSACache([layer.new_cache()])
    with torch.no_grad():
        context = build_context(2, 5, torch.device("cpu"), cache=cache)
        layer(torch.randn(2, 5, 32), context, cache.layers[0])
        cache.record(context.chunk)
        kept = cache.layers[0].keys.clone()
        with pytest.raises(ValueError, match=r"prev must be \(B, H, 1, D\) = \(1, 4, 1, 8\), got \(2, 4, 1, 8\)"):
            layer(torch.randn(1, 1, 32), None, cache.layers[0])
    assert len(cache.layers[0]) == 5 and torch.equal(cache.layers[0].keys, kept)


def test_a_layer_given_a_context_of_another_length_refuses_it():
    """A caller's ``AttentionContext`` whose tables or sequence starts do not fit the input is refused with the
    checks' own messages (the layer shears without them where a few comparisons find everything fits)."""
    from psattn.models.context import build_context

    layer = PhaseSpaceAttention(32, 4, attention=AttentionConfig("symmetric", 0.8))
    x = torch.randn(2, 5, 32)
    for mode in ("train", "eval"):
        layer.train(mode == "train")
        with pytest.raises(ValueError, match="RoPE tables of shape .* do not fit a stream of shape"):
            layer(x, build_context(2, 1, torch.device("cpu")))
        with pytest.raises(ValueError, match=r"starts must be \(B, T\) = \(2, 5\)"):
            packed = torch.tensor([[0, 0], [0, 1]])  # a second document starts at t = 1 of row 0
            layer(x, build_context(2, 2, torch.device("cpu"), position_ids=packed))
