"""PSA settings travel with save_pretrained; a saved PSA model never loads silently as a plain one."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, TokenizersBackend, pipeline  # noqa: E402
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING  # noqa: E402

from integrations.hf_tiny import CORE, tiny_model, tiny_tokenizer  # noqa: E402
from psattn.integrations.hf import PSASpec, apply_psa, load_psa_model, psa_spec, remove_psa, set_psa_gamma  # noqa: E402


def assert_same_logits(got, want):
    """Equal up to float64 rounding: transformers (5.24) keeps RoPE's inv_freq in float32 when it loads
    a model in float64, while a model cast with ``.double()`` holds it in float64."""
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def _saved(tmp_path, arch="llama", variant="symmetric", gamma=0.5, **kw):
    model = apply_psa(tiny_model(arch), variant, gamma, **kw)
    model.save_pretrained(tmp_path)
    return model


def _without_tokenizer_class(folder):
    """Drop ``tokenizer_class`` from a saved tokenizer's settings: AutoTokenizer then takes the config's."""
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    del settings["tokenizer_class"]
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))


@pytest.mark.parametrize("arch", CORE)
def test_save_and_reload_gives_back_the_same_psa_model(arch, tmp_path, prompt):
    model = _saved(tmp_path, arch, "query_only", 0.7, boundary="zero")
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == f"psattn_{arch}"
    assert config["psa"]["variant"] == "query_only" and config["psa"]["gamma"] == 0.7
    with torch.no_grad():
        want = model(prompt).logits
        for loaded in (AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64),
                       load_psa_model(tmp_path, dtype=torch.float64)):
            assert psa_spec(loaded) == psa_spec(model)
            saved, reloaded = model.state_dict(), loaded.state_dict()
            assert saved.keys() == reloaded.keys() and all(torch.equal(saved[k], reloaded[k]) for k in saved)
            assert_same_logits(loaded.eval()(prompt).logits, want)
            assert isinstance(loaded, type(model))  # a subclass of the base model class


def test_a_reloaded_psa_model_moves_only_as_the_reloaded_plain_model_does(tmp_path, prompt):
    """Loaded in float64, Gemma's logits move at float32 rounding (transformers rebuilds its embedding scale in
    float32), with or without PSA: the reloaded PSA model is the reloaded plain model patched."""
    tiny_model("gemma").save_pretrained(tmp_path / "plain")
    model = _saved(tmp_path / "psa", "gemma", "key_only", 0.7)
    with torch.no_grad():
        plain = AutoModelForCausalLM.from_pretrained(tmp_path / "plain", dtype=torch.float64)
        want = apply_psa(plain, "key_only", 0.7).eval()(prompt).logits
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "psa", dtype=torch.float64).eval()(prompt).logits
        moved = (got - model(prompt).logits).abs().max()
    assert_same_logits(got, want)
    assert 1e-9 < moved < 1e-5


def test_reload_generates_the_same_tokens(tmp_path, prompt):
    model = _saved(tmp_path, "qwen2", "key_only", 1.0)
    loaded = load_psa_model(tmp_path, dtype=torch.float64).eval()
    kw = dict(max_new_tokens=8, do_sample=False)
    assert torch.equal(loaded.generate(prompt, **kw), model.generate(prompt, **kw))


def test_eager_base_kernel_on_reload(tmp_path, prompt):
    model = _saved(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64, attn_implementation="eager").eval()
    assert loaded.config._attn_implementation == "psa_eager"
    torch.testing.assert_close(loaded(prompt).logits, model(prompt).logits, atol=1e-5, rtol=1e-5)  # eager: fp32 softmax


def test_load_refuses_settings_that_differ_from_the_saved_ones(tmp_path):
    _saved(tmp_path, gamma=0.5)
    with pytest.raises(ValueError, match="saved with"):
        load_psa_model(tmp_path, gamma=0.3)
    assert psa_spec(load_psa_model(tmp_path, variant="symmetric", gamma=0.5)).gamma == 0.5


def test_a_plain_checkpoint_is_converted_with_the_given_settings(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    assert psa_spec(load_psa_model(tmp_path)) == PSASpec("key_only", 0.8)
    assert psa_spec(load_psa_model(tmp_path, "symmetric", 1.5)) == PSASpec("symmetric", 1.5)


def test_remove_psa_before_saving_gives_a_plain_checkpoint(tmp_path, prompt):
    model = remove_psa(_saved(tmp_path / "psa"))
    loaded = remove_psa(AutoModelForCausalLM.from_pretrained(tmp_path / "psa"))
    assert loaded.config.model_type == "llama"  # the loaded config held its own "psattn_llama"
    model.save_pretrained(tmp_path / "plain")
    config = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert config["model_type"] == "llama" and "psa" not in config
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "plain", dtype=torch.float64).eval()
    assert psa_spec(plain) is None
    assert_same_logits(plain(prompt).logits, tiny_model()(prompt).logits)


def test_a_reloaded_psa_model_saved_after_remove_psa_names_the_transformers_class(tmp_path):
    """Tools that pick the model class by ``architectures`` (serving engines) find it in transformers."""
    _saved(tmp_path / "psa")
    loaded = remove_psa(AutoModelForCausalLM.from_pretrained(tmp_path / "psa"))
    assert type(loaded) is LlamaForCausalLM
    loaded.save_pretrained(tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert psa_spec(apply_psa(loaded, "key_only", 0.5)).gamma == 0.5  # and PSA goes on again


@pytest.mark.parametrize("psa,match", [
    ({"variant": "sideways", "gamma": 1.0}, "variant"),
    ({"variant": "key_only", "gamma": "big"}, "gamma"),
    ({"variant": "key_only", "gamma": 1.0, "colour": "red"}, "unknown PSA settings"),
    (None, "no PSA settings"),
])
def test_malformed_saved_settings_are_refused(tmp_path, psa, match):
    _saved(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    config["psa"] = psa
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match):
        load_psa_model(tmp_path)


def test_set_psa_gamma_changes_the_model_and_its_saved_settings(tmp_path, prompt):
    model = apply_psa(tiny_model(), "key_only", 0.0)
    with torch.no_grad():
        at_zero = model(prompt).logits
        set_psa_gamma(model, 1.0)
        at_one = model(prompt).logits
    assert not torch.allclose(at_zero, at_one)
    assert psa_spec(model) == PSASpec("key_only", 1.0) and model.config.psa["gamma"] == 1.0
    model.save_pretrained(tmp_path)
    assert_same_logits(load_psa_model(tmp_path, dtype=torch.float64).eval()(prompt).logits, at_one)
    with pytest.raises(RuntimeError, match="not applied"):
        set_psa_gamma(tiny_model(), 1.0)


NEW_PROCESS = textwrap.dedent("""
    import sys
    import torch, transformers
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
    # a saved PSA model without psattn: refused by the Auto class, flagged by the concrete one
    assert not any(m.startswith("psattn") for m in sys.modules), "psattn was imported"
    try:
        AutoModelForCausalLM.from_pretrained(sys.argv[1])
    except ValueError as err:
        print("AUTO REFUSED:", err)
    transformers.logging.set_verbosity_warning()
    LlamaForCausalLM.from_pretrained(sys.argv[1])
    print("--- unpickle", flush=True)
    print("--- unpickle", file=sys.stderr, flush=True)
    # a whole patched model, unpickled before anything imported psattn
    assert not any(m.startswith("psattn") for m in sys.modules), "psattn was imported"
    model, ids, expected = torch.load(sys.argv[2], weights_only=False)
    with torch.no_grad():
        assert torch.equal(model(ids, use_cache=False).logits, expected)
    print(model.config.model_type, model.config.psa["gamma"])
""")


@pytest.fixture(scope="session")  # not torn down when other modules' tests run between its tests
def new_process(tmp_path_factory):
    """One fresh process without psattn imported (each pays transformers' import, about 6 s): it loads a saved
    PSA model with transformers alone, then unpickles a whole patched model. Returns the patched model, its
    input and logits, and the (stdout, stderr) of each of the two parts."""
    tmp_path = tmp_path_factory.mktemp("new-process")
    _saved(tmp_path / "saved")
    model = apply_psa(tiny_model(), "symmetric", 0.8)
    ids = torch.randint(1, 50, (1, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
    torch.save((model, ids, expected), tmp_path / "model.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", NEW_PROCESS, str(tmp_path / "saved"), str(tmp_path / "model.pt")],
                         capture_output=True, text=True, env=env, timeout=180)
    assert run.returncode == 0, run.stderr
    out, err = (text.split("--- unpickle\n") for text in (run.stdout, run.stderr))
    return model, ids, expected, dict(zip(("without_psattn", "unpickle"), zip(out, err, strict=True), strict=True))


def test_without_psattn_a_saved_psa_model_is_refused_or_flagged(new_process):
    stdout, stderr = new_process[3]["without_psattn"]
    assert "AUTO REFUSED" in stdout and "psattn_llama" in stdout
    assert "psattn_llama" in stderr  # the concrete class warns that the checkpoint is a psattn model


def test_a_patched_model_pickles_whole_and_loads_in_a_new_process(new_process):
    """``torch.save(model)`` / ``copy.deepcopy``: the PSA config class is made at run time, and pickles by its
    base model type."""
    import copy

    model, ids, expected, parts = new_process
    with torch.no_grad():
        assert torch.equal(model(ids, use_cache=False).logits, expected)
        assert torch.equal(copy.deepcopy(model)(ids, use_cache=False).logits, expected)
    assert parts["unpickle"][0].split() == ["psattn_llama", "0.8"]


ON_LOOK_UP = textwrap.dedent("""
    import copy, sys, torch
    import psattn.integrations.hf
    print(sorted(m for m in sys.modules if m.startswith("transformers.models.") and ".modeling_" in m
                 and m != "transformers.models.auto.modeling_auto"), "peft" in sys.modules)
    from psattn.integrations.hf import psa_spec
    from transformers import AutoModel, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING
    loaded = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float64)
    unpickled = torch.load(sys.argv[2], weights_only=False)  # its config class is made, not looked up
    tokenizer = TOKENIZER_MAPPING.get(type(unpickled.config), None)
    built = AutoModel.from_config(copy.deepcopy(unpickled.config))
    print(psa_spec(loaded).gamma, getattr(tokenizer, "__name__", None), type(built).__name__, psa_spec(built).gamma,
          "psattn_olmo2" in CONFIG_MAPPING.keys())
""")


def test_the_import_registers_each_model_type_when_transformers_first_looks_it_up(tmp_path):
    """Registering every supported type at import made their classes, which imported each type's modules
    (over a second); each is now registered when transformers first looks it up, or lists the types."""
    _saved(tmp_path / "llama", "llama", "key_only", 0.6)
    torch.save(apply_psa(tiny_model("qwen2"), "symmetric", 0.4), tmp_path / "qwen2.pt")
    run = subprocess.run([sys.executable, "-c", ON_LOOK_UP, str(tmp_path / "llama"), str(tmp_path / "qwen2.pt")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == ["[] False", "0.6 Qwen2Tokenizer PSAQwen2Model 0.4 True"]


IN_A_PIPELINE = textwrap.dedent("""
    import sys, torch
    import psattn.integrations.hf
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
    from transformers.models.auto.configuration_auto import config_class_to_model_type
    def modeling():
        return {m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("transformers.models.") and ".modeling_" in m}
    before = modeling()
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])  # no tokenizer class named: looked up from the config's
    print(sorted(modeling() - before), type(tokenizer).__name__)
    generator = pipeline("text-generation", model=sys.argv[1], dtype=torch.float64)
    print(sorted(modeling() - before), type(generator.model).__name__)
    config = torch.load(sys.argv[2], weights_only=False).config  # its config class is made, its type not registered
    print(config_class_to_model_type(type(config).__name__),
          [c.__name__ for c in AutoModelForCausalLM._model_mapping._extra_content.values() if "Qwen2" in c.__name__])
""")


def test_a_tokenizer_or_pipeline_registers_only_the_model_types_in_use(tmp_path):
    """AutoTokenizer (given no tokenizer class) lists AutoConfig's table of config classes to find the config's model
    type, and pipeline() the causal-LM table to check the model's class: each registered every supported type
    (importing each one's modeling code: seconds); the tables list the types whose config class exists."""
    _saved(tmp_path / "llama", "llama", "key_only", 0.6)
    tiny_tokenizer().save_pretrained(tmp_path / "llama")
    _without_tokenizer_class(tmp_path / "llama")
    torch.save(apply_psa(tiny_model("qwen2"), "symmetric", 0.4), tmp_path / "qwen2.pt")
    run = subprocess.run([sys.executable, "-c", IN_A_PIPELINE, str(tmp_path / "llama"), str(tmp_path / "qwen2.pt")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    llama_tokenizer = TOKENIZER_MAPPING.get(LlamaConfig, TokenizersBackend).__name__  # TokenizersBackend in 5.25
    assert run.stdout.splitlines() == [f"['modeling_llama'] {llama_tokenizer}", "['modeling_llama'] PSALlamaForCausalLM",
                                       "psattn_qwen2 ['PSAQwen2ForCausalLM']"]


def _letters_tokenizer(arch):
    """``arch``'s own tokenizer class over single letters (no merges)."""
    from transformers import GemmaTokenizer, Qwen2Tokenizer

    letters = "abcdefghijklmnopqrstuvwxyz"
    if arch == "gemma":  # '▁' marks a space; '<bos>' starts each text, padding goes on the left
        special = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4}
        vocab = {**special, **{c: i for i, c in enumerate(letters + "▁", start=len(special))}}
        return GemmaTokenizer(vocab=vocab, merges=[], add_bos_token=True)
    # byte-level: 'Ġ' is a space
    return Qwen2Tokenizer(vocab={"<|endoftext|>": 0, **{c: i for i, c in enumerate(letters + "Ġ", start=1)}}, merges=[])


@pytest.mark.parametrize("arch", ["qwen2", "gemma"])
def test_a_psa_checkpoint_loads_the_tokenizer_of_its_base_model_type(arch, tmp_path):
    """Its tokenizer files naming no class, a saved PSA checkpoint gave the generic TokenizersBackend, where the
    plain checkpoint gives its model type's class (Gemma's pads on the left): both now give the base type's."""
    texts = ["hello world", "a", "ab cd", ""]
    tokenizers = []
    for name, model in (("plain", tiny_model(arch)), ("psa", apply_psa(tiny_model(arch), "key_only", 0.6))):
        model.save_pretrained(tmp_path / name)
        _letters_tokenizer(arch).save_pretrained(tmp_path / name)
        _without_tokenizer_class(tmp_path / name)
        tokenizers.append(AutoTokenizer.from_pretrained(tmp_path / name))
    plain, psa = tokenizers
    assert type(plain) is not TokenizersBackend
    assert type(psa) is type(plain)
    assert psa(texts, padding=True).input_ids == plain(texts, padding=True).input_ids


def test_text_generation_pipeline(tmp_path):
    model, tokenizer = apply_psa(tiny_model(), "key_only", 1.0), tiny_tokenizer()
    prompt = "w3 w5 w7 w3 w5"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    want = tokenizer.decode(model.generate(ids, max_new_tokens=6, do_sample=False)[0, ids.shape[1]:])
    assert len(want.split()) == 6
    kw = dict(max_new_tokens=6, do_sample=False, return_full_text=False)
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    assert generator(prompt, **kw)[0]["generated_text"] == want
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_disk = pipeline("text-generation", model=str(tmp_path), dtype=torch.float64)
    assert psa_spec(from_disk.model) == psa_spec(model)
    assert from_disk(prompt, **kw)[0]["generated_text"] == want


def test_psa_settings_under_a_plain_model_type_warn_and_load_with_psa(tmp_path, prompt):
    """A config that keeps 'psa' but whose model type was edited to 'llama': transformers would build a
    plain model; load_psa_model says so and applies the saved settings."""
    model = _saved(tmp_path, "llama", "symmetric", 0.5)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    config["model_type"] = "llama"
    path.write_text(json.dumps(config))
    with pytest.warns(UserWarning, match="keeps PSA settings .* model type is 'llama'"):
        loaded = load_psa_model(tmp_path)
    assert psa_spec(loaded) == PSASpec("symmetric", 0.5)
    with torch.no_grad():
        assert torch.allclose(loaded(prompt).logits, model(prompt).logits, atol=1e-5)


@pytest.mark.parametrize("head", ["AutoModel", "AutoModelForSequenceClassification", "AutoModelForTokenClassification",
                                  "AutoModelForQuestionAnswering"])
def test_a_psa_model_with_another_head_reloads_through_its_auto_class(head, tmp_path, prompt):
    """A patched LlamaModel or classification model saved fine, but its Auto class refused the saved config
    ('Unrecognized configuration class PSALlamaConfig'), and load_psa_model failed inside the head's own
    AutoModel call; the base model a head builds inside it comes out plain and the head applies PSA once."""
    import transformers

    from integrations.hf_tiny import tiny_config

    auto = getattr(transformers, head)
    torch.manual_seed(0)
    model = apply_psa(auto.from_config(tiny_config("llama", True, num_labels=3, pad_token_id=0)).double().eval(),
                      "symmetric", 0.5)
    model.save_pretrained(tmp_path)
    plain_name = type(model).__name__
    with torch.no_grad():
        want = model(prompt)[0]
        for loaded in (auto.from_pretrained(tmp_path, dtype=torch.float64),
                       load_psa_model(tmp_path, model_class=auto, dtype=torch.float64),
                       load_psa_model(tmp_path, model_class=type(model), dtype=torch.float64)):
            assert psa_spec(loaded) == psa_spec(model) and type(loaded).__name__ == f"PSA{plain_name}"
            inner = [m for m in loaded.modules() if m is not loaded and type(m).__name__.startswith("PSA")]
            assert inner == []  # the head's base model is plain: PSA applied once, by the head
            assert_same_logits(loaded.eval()(prompt)[0], want)
        remove_psa(loaded).save_pretrained(tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "config.json").read_text())["architectures"] == [plain_name]
