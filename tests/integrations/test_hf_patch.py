"""apply_psa / remove_psa / load_psa_model: reversibility, isolation, and clear errors."""

import pytest
import torch

pytest.importorskip("transformers")

from integrations.hf_tiny import cache_kw, returned_cache, tiny_config, tiny_model
from psattn.integrations.hf import (
    PSADynamicCache,
    PSASpec,
    apply_psa,
    load_psa_model,
    psa_spec,
    remove_psa,
    set_psa_gamma,
)


def logits(model, ids, **kwargs):
    with torch.no_grad():
        return model(ids, use_cache=False, **kwargs).logits


def test_patch_then_unpatch_restores_the_original(prompt):
    model = tiny_model("qwen2")
    before = logits(model, prompt)
    with torch.no_grad():
        before_tokens = model.generate(prompt, max_new_tokens=5, do_sample=False)
    apply_psa(model, "symmetric", 0.8)
    assert psa_spec(model) == PSASpec("symmetric", 0.8)
    assert not torch.allclose(logits(model, prompt), before)
    remove_psa(model)
    assert psa_spec(model) is None and model.config._attn_implementation == "sdpa"
    assert "init_continuous_batching" not in vars(model)  # transformers' continuous batching is the model's again
    assert "_prepare_cache_for_generation" not in vars(model)  # and generate's cache preparation
    assert torch.equal(logits(model, prompt), before)
    with torch.no_grad():
        assert torch.equal(model.generate(prompt, max_new_tokens=5, do_sample=False), before_tokens)
    apply_psa(model, "key_only", 0.3)  # and it can be applied again
    assert psa_spec(model).gamma == 0.3


@pytest.mark.parametrize("applied_to", ["model", "wrapper"])
def test_apply_and_remove_psa_reach_the_model_inside_a_peft_wrapper(applied_to, prompt):
    """``remove_psa(peft_model)`` cleared the state on the wrapper alone: the model inside kept it, so ``psa_spec``
    still named PSA once its hooks were gone and ``apply_psa`` refused it as already patched. ``apply_psa(peft_model)``
    patched the wrapper, whose attributes transformers' ``generate`` never reads, so its checks (here of the mask)
    did not run. Both now reach the transformers model inside and return the wrapper."""
    peft = pytest.importorskip("peft")
    model = tiny_model("llama")
    plain = logits(model, prompt)
    lora = peft.LoraConfig(r=2, target_modules=["q_proj"])  # B starts at 0: the wrapper's logits are the model's
    if applied_to == "model":
        wrapped = peft.get_peft_model(apply_psa(model, "key_only", 0.8), lora)
    else:
        wrapped = peft.get_peft_model(model, lora)
        assert apply_psa(wrapped, "key_only", 0.8) is wrapped
    assert psa_spec(model) == psa_spec(wrapped) == PSASpec("key_only", 0.8)
    mask = torch.ones_like(prompt, dtype=torch.float64)
    mask[0, 0] = 0.5
    with pytest.raises(ValueError, match="attention_mask must hold 1 at real tokens and 0 at padding"), torch.no_grad():
        wrapped.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=2, do_sample=False)
    assert remove_psa(wrapped) is wrapped
    assert psa_spec(model) is None and psa_spec(wrapped) is None
    assert not {"_prepare_cache_for_generation", "init_continuous_batching"} & set(vars(model))
    torch.testing.assert_close(logits(wrapped, prompt), plain, atol=0, rtol=0)
    assert psa_spec(apply_psa(model, "key_only", 0.3)).gamma == 0.3  # and it can be applied again


def test_what_is_no_module_has_no_psa_and_no_gamma_to_set():
    """set_psa_gamma(None, ...) failed with "'NoneType' object has no attribute 'modules'": a TypeError names what it
    takes. psa_spec of anything that is no module (a pipeline, None) is None, as for a plain model."""
    with pytest.raises(TypeError, match=r"^set_psa_gamma needs a model patched by apply_psa \(a torch module\), got "
                                        r"NoneType$"):
        set_psa_gamma(None, 0.5)
    assert psa_spec(None) is None and psa_spec("model") is None
    with pytest.raises(RuntimeError, match="PSA is not applied to this model"):
        remove_psa(None)


def test_two_models_with_different_gamma_coexist(prompt):
    a, b, ref = tiny_model("llama"), tiny_model("llama"), tiny_model("llama")
    apply_psa(a, "key_only", 0.8)
    apply_psa(b, "key_only", 0.2)
    apply_psa(ref, "key_only", 0.2)
    out_b = logits(b, prompt)
    assert not torch.allclose(logits(a, prompt), out_b)
    torch.testing.assert_close(out_b, logits(ref, prompt), atol=0, rtol=0)
    remove_psa(a)  # the other model keeps its PSA
    torch.testing.assert_close(logits(b, prompt), out_b, atol=0, rtol=0)


def test_loader_passes_the_options_through_from_config(prompt):
    torch.manual_seed(0)
    model = load_psa_model(tiny_config("llama"), "symmetric", 0.5, dtype=torch.float64).eval()
    assert psa_spec(model) == PSASpec("symmetric", 0.5) and model.dtype == torch.float64
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=2, do_sample=False)


def test_loader_builds_a_concrete_model_class_from_a_config(prompt):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = load_psa_model(tiny_config("llama"), "key_only", 0.5, model_class=LlamaForCausalLM,
                           dtype=torch.float64).eval()
    assert isinstance(model, LlamaForCausalLM) and psa_spec(model) == PSASpec("key_only", 0.5)
    torch.manual_seed(0)
    expected = apply_psa(LlamaForCausalLM._from_config(tiny_config("llama"), dtype=torch.float64).eval(), "key_only", 0.5)
    torch.testing.assert_close(logits(model, prompt), logits(expected, prompt), atol=0, rtol=0)


def test_loader_from_pretrained_directory(tmp_path, prompt):
    saved = tiny_model("qwen3")
    saved.save_pretrained(tmp_path)
    model = load_psa_model(str(tmp_path), "key_only", 0.8, dtype=torch.float64).eval()
    expected = apply_psa(saved, "key_only", 0.8)
    torch.testing.assert_close(logits(model, prompt), logits(expected, prompt), atol=1e-12, rtol=0)


@pytest.mark.parametrize("source,named", [
    (None, "NoneType"), (123, "int"), ("model", r"LlamaForCausalLM; apply_psa\(model, \.\.\.\) patches a model already built")])
def test_loader_refuses_a_source_that_is_no_name_path_or_config(source, named, monkeypatch):
    """None or 123 was looked up on the Hugging Face Hub as a repository named "None" (retried for about 20 s
    offline, then an OSError about the connection), and a model object got os.stat's "path should be string,
    bytes, os.PathLike or integer, not LlamaForCausalLM": each is a
    TypeError naming what load_psa_model takes, before anything is looked up."""
    import transformers

    looked_up = []
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", lambda *args, **kwargs: looked_up.append(args))
    with pytest.raises(TypeError, match=r"^load_psa_model's source must be a model name or folder \(str or os.PathLike\) "
                                        rf"or a PretrainedConfig, got {named}$"):
        load_psa_model(tiny_model("llama") if source == "model" else source)
    assert not looked_up


@pytest.mark.parametrize("model_class", ["LlamaForCausalLM", torch.nn.Linear])
def test_loader_refuses_a_model_class_that_is_no_transformers_class(model_class):
    """A class name given as a string, or a torch module class, failed after the config was read with
    "'str' object has no attribute '_from_config'": a TypeError now names model_class and what it takes."""
    with pytest.raises(TypeError, match=r"^load_psa_model's model_class must be a transformers model class "
                                        r"\(AutoModelForCausalLM, LlamaForCausalLM, \.\.\.\), got "):
        load_psa_model(tiny_config("llama"), model_class=model_class)


def test_unsupported_architecture_raises():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=61, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    with pytest.raises(NotImplementedError, match="rotary position embeddings"):
        apply_psa(gpt2)
    with pytest.raises(TypeError, match="PreTrainedModel"):
        apply_psa(torch.nn.Linear(2, 2))


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(placement="pre_rope"), NotImplementedError, "post-RoPE"),
        (dict(attn_implementation="flash_attention_2"), ValueError, "flash"),
        (dict(attn_implementation="flex_attention"), ValueError, "flex"),
        (dict(variant="sideways"), ValueError, "unknown PSA variant"),
        (dict(gamma=float("nan")), ValueError, "finite"),
        (dict(boundary="wrap"), ValueError, "boundary"),
        (dict(max_rollback=-1), ValueError, "max_rollback"),
        # a type mistake is a TypeError (they were ValueErrors, and the list an "unhashable type" TypeError)
        (dict(max_rollback=1.5), TypeError, r"max_rollback must be an int >= 0, got 1\.5"),
        (dict(keep_last_call=1), TypeError, "keep_last_call must be True or False, got 1"),
        (dict(attn_implementation=1), TypeError, r"attn_implementation must be the name of one of .*'eager'\), got int 1"),
        (dict(attn_implementation=["sdpa"]), TypeError, "attn_implementation must be the name"),
        (dict(variant=None), TypeError, r"PSA variant must be one of \['baseline', .*\], got None"),
        (dict(boundary=0), TypeError, "PSA boundary must be one of"),
    ],
)
def test_unsupported_options_raise(kwargs, error, match):
    model = tiny_model("llama")
    with pytest.raises(error, match=match):
        apply_psa(model, **kwargs)
    assert psa_spec(model) is None and model.config._attn_implementation == "sdpa"


def test_a_window_that_hides_the_predecessor_raises():
    with pytest.raises(NotImplementedError, match="sliding_window=1"):
        apply_psa(tiny_model("mistral", sliding_window=1))


def test_by_default_psa_keeps_the_kernel_the_model_runs_on(prompt):
    """A model on the eager kernel stays on it: at γ = 0 its logits and its attention weights are unchanged."""
    model = tiny_model("llama", attn_implementation="eager").float()
    with torch.no_grad():
        before = model(prompt, use_cache=False, output_attentions=True)
        apply_psa(model, "key_only", 0.0)
        after = model(prompt, use_cache=False, output_attentions=True)
    assert model.config._attn_implementation == "psa_eager"
    assert torch.equal(after.logits, before.logits)
    assert len(after.attentions) == len(before.attentions) == 2
    assert torch.equal(after.attentions[0], before.attentions[0])


def test_a_model_transformers_runs_only_eagerly_gets_the_eager_kernel_by_default(prompt):
    """Gemma 2 (logit soft-capping) on a kernel PSA does not take gets the eager one, as transformers would give
    it: at γ = 0 the eager model's logits; SDPA is refused and the model left as it was."""
    model = tiny_model("gemma2", attn_implementation="flex_attention")
    with pytest.raises(NotImplementedError, match="only with eager attention"):
        apply_psa(model, attn_implementation="sdpa")
    assert psa_spec(model) is None and model.config._attn_implementation == "flex_attention"
    apply_psa(model, "key_only", 0.0)
    assert model.config._attn_implementation == "psa_eager"
    assert torch.equal(logits(model, prompt), logits(tiny_model("gemma2", attn_implementation="eager"), prompt))


def test_applying_twice_or_removing_unpatched_raises():
    model = apply_psa(tiny_model("llama"))
    with pytest.raises(RuntimeError, match="already applied"):
        apply_psa(model)
    remove_psa(model)
    with pytest.raises(RuntimeError, match="not applied"):
        remove_psa(model)


def test_switching_the_attention_implementation_under_psa_raises(prompt):
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    model.set_attn_implementation("sdpa")
    with pytest.raises(RuntimeError, match="remove_psa"):
        logits(model, prompt)


def _generate_with(cache_implementation, **kwargs):
    return lambda model, ids: model.generate(ids, max_new_tokens=2, do_sample=False,
                                             cache_implementation=cache_implementation, **kwargs)


def _generate_into(make_cache):
    return lambda model, ids: model.generate(ids, max_new_tokens=2, do_sample=False, **cache_kw(make_cache(model.config)))


def _compiled_forward_into_a_static_cache(model, ids):
    from transformers import StaticCache

    forward = torch.compile(model.forward, backend="eager")  # fullgraph=True would wrap any error in Dynamo's own
    return forward(ids, use_cache=True, **cache_kw(StaticCache(config=model.config, max_cache_len=32)))


def _unusable_caches():
    from transformers.cache_utils import DynamicCache, QuantizedCache, StaticCache

    return {
        "generate-static": _generate_with("static"),
        "generate-offloaded-static": _generate_with("offloaded_static"),
        "generate-offloaded": _generate_with("offloaded"),
        "generate-quantized": _generate_with("quantized", cache_config={"backend": "fp8"}),  # the backend torch has
        "StaticCache": _generate_into(lambda config: StaticCache(config=config, max_cache_len=32)),
        "offloaded-DynamicCache": _generate_into(lambda config: DynamicCache(config=config, offloading=True)),
        "QuantizedCache": _generate_into(lambda config: QuantizedCache(backend="fp8", config=config)),
        "torch.compile-StaticCache": _compiled_forward_into_a_static_cache,
        "generate-paged": _generate_with("paged"),  # continuous batching: transformers would switch the attention
        "generate_batch": lambda model, ids: model.generate_batch(ids.tolist()),
        "init_continuous_batching": lambda model, ids: model.init_continuous_batching(),
    }


@pytest.mark.parametrize("path", list(_unusable_caches()))
def test_a_cache_that_stores_raw_keys_is_refused_before_any_work_saying_what_to_use(path, prompt):
    """Every way a user asks for a static, offloaded, quantized or paged cache (generate's cache_implementation, a
    cache object, a compiled forward, continuous batching: generate_batch and init_continuous_batching, which
    docs/huggingface.md names and no test called) is refused in one line naming the cache to use instead,
    before the model's embedding runs, and changes nothing: the model then generates as before."""
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=4, do_sample=False)
    weights = {name: p.clone() for name, p in model.state_dict().items()}
    embedded = []
    model.model.embed_tokens.register_forward_pre_hook(lambda *args: embedded.append(1))
    instead = r'use the dynamic cache \(generate\(\.\.\., cache_implementation="dynamic"\), the default\) or pass PSADynamicCache'
    with pytest.raises(TypeError, match=rf"^PSA cannot use .*; {instead}") as refused, torch.no_grad():
        _unusable_caches()[path](model, prompt)
    assert "\n" not in str(refused.value) and not embedded
    assert psa_spec(model) == PSASpec("key_only", 0.8) and model.config._attn_implementation == "psa_sdpa"
    assert all(torch.equal(p, weights[name]) for name, p in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model.generate(prompt, max_new_tokens=4, do_sample=False), want)
        assert torch.equal(model.generate(prompt, max_new_tokens=4, do_sample=False, cache_implementation="dynamic"), want)


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("compile_model", ["torch.compile(model)", "model.compile()"])
@pytest.mark.parametrize("offloaded", [False, True], ids=["StaticCache", "offloaded-DynamicCache"])
def test_a_compiled_model_refuses_a_cache_naming_it_on_the_first_line(compile_model, fullgraph, offloaded, prompt):
    """A compiled model refuses a static or offloaded cache before its forward is traced. Without ``fullgraph`` the
    refusal is the one line; with ``fullgraph=True`` Dynamo wraps whatever the code it traces raises (PSA's hooks are
    traced with the model, and a check kept out of the trace would break the graph of every compiled call), and the
    first line of what it prints holds the refusal, word for word (Dynamo's own explanation follows). Nothing is done
    either way."""
    import traceback

    from transformers import DynamicCache, StaticCache

    from psattn.integrations.hf.cache import check_cache

    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    cache = DynamicCache(config=model.config, offloading=True) if offloaded else StaticCache(config=model.config,
                                                                                               max_cache_len=32)
    with pytest.raises(TypeError) as eager:
        check_cache(cache)
    embedded = []
    model.model.embed_tokens.register_forward_pre_hook(lambda *args: embedded.append(1))
    torch._dynamo.reset()
    if compile_model == "model.compile()":
        model.compile(fullgraph=fullgraph, backend="eager")
        forward = model
    else:
        forward = torch.compile(model, fullgraph=fullgraph, backend="eager")
    with pytest.raises(Exception) as refused, torch.no_grad():  # Dynamo's own type with fullgraph
        forward(prompt, use_cache=True, **cache_kw(cache))
    if fullgraph:  # Dynamo's error, caused by the refusal, which is printed first
        first = "".join(traceback.format_exception(refused.value)).splitlines()[0]
        assert str(eager.value) in first, first
    else:
        assert type(refused.value) is TypeError and str(refused.value) == str(eager.value)
    assert "\n" not in str(eager.value) and not embedded


@pytest.mark.parametrize("cache_implementation", ["static", "offloaded"])
def test_generate_of_a_model_compiled_whole_refuses_a_cache_in_one_line_and_returns_a_psa_cache(cache_implementation,
                                                                                                prompt):
    """``model.compile(fullgraph=True)`` traces PSA's hooks with the forward pass: generate's static or offloaded cache
    was refused inside Dynamo's ``Unsupported: Observed exception`` error, and the cache its generate made stayed a plain
    ``DynamicCache``, without ``kv_bytes`` and ``extra_state_bytes``. generate now checks its cache, and makes it a
    ``PSADynamicCache``, before the first (compiled) forward pass."""
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=3, do_sample=False)
    torch._dynamo.reset()
    model.compile(fullgraph=True, backend="eager")
    with pytest.raises(TypeError, match="^PSA cannot use an? (StaticCache|offloaded cache)") as refused, torch.no_grad():
        model.generate(prompt, max_new_tokens=3, do_sample=False, cache_implementation=cache_implementation)
    assert "\n" not in str(refused.value)
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
    cache = returned_cache(out)
    assert torch.equal(out.sequences, want) and type(cache) is PSADynamicCache
    assert cache.kv_bytes() == sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert 0 < cache.extra_state_bytes() < cache.kv_bytes()


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(max_rollback=-1), ValueError, r"^max_rollback must be an int >= 0, got -1$"),
    (dict(max_rollback=1.5), TypeError, r"^max_rollback must be an int >= 0, got 1.5$"),
    (dict(keep_last_call="no"), TypeError, r"^keep_last_call must be True or False, got 'no'$"),
    (dict(config="llama"), TypeError, r"^PSADynamicCache's config must be a transformers PretrainedConfig \(model.config\) "
                                      r"or None, got str$"),
])
def test_a_psa_cache_refuses_bad_settings_as_it_is_built(kwargs, error, match):
    """Without a config, PSADynamicCache(max_rollback=-1) was built and refused only inside the first forward pass, as
    it added a layer; keep_last_call="no" was kept as a true value; a config of the wrong type failed in transformers
    ("'str' object has no attribute 'get_text_config'"). Each is refused as the cache is built."""
    with pytest.raises(error, match=match):
        PSADynamicCache(**kwargs)


def test_a_cache_filled_without_psa_is_refused(prompt):
    """A cache filled by a model without PSA holds raw keys: refused, not silently mixed."""
    from transformers import DynamicCache

    model, plain = apply_psa(tiny_model("llama"), "key_only", 0.8), tiny_model("llama")
    with torch.no_grad():
        raw_cache = returned_cache(plain(prompt, **cache_kw(DynamicCache(config=plain.config)), use_cache=True))
        with pytest.raises(RuntimeError, match="raw"):
            model(prompt[:, :1], **cache_kw(raw_cache), use_cache=True)


def test_psa_cache_refuses_a_model_without_psa(prompt):
    model = apply_psa(tiny_model("llama"), "key_only", 0.8)
    cache = PSADynamicCache(model.config)
    with torch.no_grad():
        model(prompt, **cache_kw(cache), use_cache=True)
    remove_psa(model)
    with pytest.raises(RuntimeError, match="apply_psa"), torch.no_grad():
        model(prompt[:, :1], **cache_kw(cache), use_cache=True)


def test_one_cache_cannot_serve_two_gammas_until_it_is_emptied(prompt):
    """A cache holding keys sheared with one γ refuses another; after ``reset`` (or a crop to nothing) it holds no
    sheared key, so any γ may fill it again (it was refused still)."""
    a = apply_psa(tiny_model("llama"), "key_only", 0.8)
    b = apply_psa(tiny_model("llama"), "key_only", 0.4)
    cache = PSADynamicCache(a.config)
    with torch.no_grad():
        a(prompt, **cache_kw(cache), use_cache=True)
        with pytest.raises(RuntimeError, match="one cache per PSA model"):
            b(prompt[:, :1], **cache_kw(cache), use_cache=True)
        cache.reset()
        torch.testing.assert_close(b(prompt, **cache_kw(cache), use_cache=True).logits, logits(b, prompt), atol=1e-12, rtol=0)
        cache.crop(-prompt.shape[1])
        torch.testing.assert_close(a(prompt, **cache_kw(cache), use_cache=True).logits, logits(a, prompt), atol=1e-12, rtol=0)


@pytest.mark.parametrize("psa_first", [False, True])
def test_models_built_from_one_config_stay_apart(tmp_path, prompt, psa_first):
    """transformers' from_config shares the config object; apply_psa must patch only its own model."""
    from transformers import AutoModelForCausalLM

    cfg = tiny_config("llama")
    torch.manual_seed(0)
    first = AutoModelForCausalLM.from_config(cfg).double().eval()
    if psa_first:
        apply_psa(first, "key_only", 0.8)
    second = AutoModelForCausalLM.from_config(cfg).double().eval()  # built after the first was patched
    plain, psa = (second, first) if psa_first else (first, second)
    if not psa_first:
        apply_psa(psa, "key_only", 0.8)
    assert cfg.model_type == "llama" and not hasattr(cfg, "psa") and cfg._attn_implementation == "sdpa"
    assert psa_spec(plain) is None and type(plain).__name__ == "LlamaForCausalLM"
    assert psa_spec(psa) == PSASpec("key_only", 0.8)
    reference = AutoModelForCausalLM.from_config(tiny_config("llama")).double().eval()
    reference.load_state_dict(plain.state_dict())
    torch.testing.assert_close(logits(plain, prompt), logits(reference, prompt), atol=0, rtol=0)
    assert not torch.allclose(logits(psa, prompt), logits(plain, prompt))
    for name, model in (("plain", plain), ("psa", psa)):  # each saves and reloads as what it is
        model.save_pretrained(tmp_path / name)
        again = AutoModelForCausalLM.from_pretrained(tmp_path / name, dtype=torch.float64).eval()
        assert psa_spec(again) == psa_spec(model)
        torch.testing.assert_close(logits(again, prompt), logits(model, prompt))
    remove_psa(psa)  # the original object comes back, still plain
    assert psa.config is cfg and not hasattr(cfg, "psa")
    reference.load_state_dict(psa.state_dict())
    torch.testing.assert_close(logits(psa, prompt), logits(reference, prompt), atol=0, rtol=0)


def test_psa_settings_are_the_library_attention_config_plus_cache_options():
    from psattn.models.config import AttentionConfig

    spec = PSASpec("symmetric", 0.5, max_rollback=3)
    assert spec.attention == AttentionConfig("symmetric", 0.5)
    assert (spec.gamma_q, spec.gamma_k) == spec.attention.gammas
    assert set(spec.to_dict()) == {"variant", "gamma", "placement", "boundary", "max_rollback", "keep_last_call"}
    for bad in (dict(variant="baseline", gamma=0.5), dict(variant="key_only", gamma=float("nan"))):
        with pytest.raises(ValueError) as theirs:
            PSASpec(**bad)
        with pytest.raises(ValueError) as ours:
            AttentionConfig(**bad)
        assert str(theirs.value) == str(ours.value)  # one check, stated once
    with pytest.raises(ValueError, match="max_rollback"):
        PSASpec(max_rollback=-1)
    with pytest.raises(ValueError, match="malformed PSA settings: PSA variant must be one of"):
        PSASpec.from_dict(PSASpec().to_dict() | {"variant": None})  # read from a saved config: a ValueError


def test_psa_settings_pickled_without_their_variant_gammas_get_them_back():
    """A model pickled before ``gamma_q`` and ``gamma_k`` were fields (they were cached on first read) holds a
    spec without them; unpickled, its first forward pass read them and failed with an AttributeError."""
    import pickle

    old = PSASpec("symmetric", 0.5)
    for name in ("gamma_q", "gamma_k"):  # such a spec, as pickled
        del vars(old)[name]
    spec = pickle.loads(pickle.dumps(old))
    assert spec == PSASpec("symmetric", 0.5) and (spec.gamma_q, spec.gamma_k) == (0.5, 0.5)


@pytest.mark.parametrize("compile_model", ["torch.compile(model)", "model.compile()"])
def test_a_compiled_model_is_checked_eagerly_and_then_runs_compiled_with_psa(prompt, compile_model):
    """``apply_psa(torch.compile(model))`` (or of a model after ``model.compile()``) ran its dry run through Dynamo:
    seconds of tracing, graph-break warnings at the recording of the rotary embedding, and graphs of the probe in the
    compiled model's cache. Now the dry run runs the module eagerly; the compiled forward then compiles with PSA (its
    guards see the patched attention), and again without it after ``remove_psa``."""
    graphs = []

    def counting(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    plain = tiny_model("llama")
    want = logits(apply_psa(tiny_model("llama"), "key_only", 0.8), prompt)
    if compile_model == "model.compile()":
        compiled = tiny_model("llama")
        compiled.compile(backend=counting)
    else:
        compiled = torch.compile(tiny_model("llama"), backend=counting)
    assert apply_psa(compiled, "key_only", 0.8) is compiled and not graphs  # nothing traced by the dry run
    assert torch.allclose(logits(compiled, prompt), want, atol=1e-10) and graphs  # compiled, with PSA
    remove_psa(compiled)
    assert torch.allclose(logits(compiled, prompt), logits(plain, prompt), atol=1e-10)
    assert not torch.allclose(want, logits(plain, prompt))
    torch._dynamo.reset()
