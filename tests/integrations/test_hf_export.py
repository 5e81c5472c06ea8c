"""psattn export --format hf: a trained DecoderLM as a transformers model, reloaded, generating, in a pipeline."""

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from helpers import tiny_config  # noqa: E402
from psattn.cli import main  # noqa: E402
from psattn.models.generate import generate  # noqa: E402
from psattn.training.config import RunConfig, apply_overrides  # noqa: E402
from psattn.training.run_dir import load_trained  # noqa: E402
from psattn.training.trainer import train  # noqa: E402


def text_run(tmp_path, monkeypatch, tokenizer):
    monkeypatch.setenv("PSATTN_CACHE", str(tmp_path / "cache"))
    (tmp_path / "code.txt").write_text("def f(x):\n    return x + 1\n\nclass A:\n    pass\n\n" * 100)
    vocab = 300 if tokenizer == "bpe" else 256
    config = RunConfig.from_dict({"task": {"name": "text", "corpus": str(tmp_path / "code.txt"), "seq_len": 32,
                                           "tokenizer": tokenizer, "vocab_size": vocab}, "model": {"vocab_size": vocab}})
    config = apply_overrides(config, ["model.d_model=32", "model.n_heads=2", "model.attention.variant=symmetric",
                                      "model.attention.gamma=0.5", "train.steps=30", "train.batch_size=8",
                                      "train.eval_every=30", "train.eval_size=8", "train.threads=1"])
    train(config, tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_a_text_run_exported_to_hf_reloads_generates_and_runs_in_a_pipeline(tmp_path, monkeypatch, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    from psattn.textdata.tokenizer import load_tokenizer

    run = text_run(tmp_path, monkeypatch, tokenizer)
    assert main(["export", "--format", "hf", "--run-dir", str(run), "--out", str(tmp_path / "hf")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ours = load_trained(run)
    assert type(model).__name__ == "PsattnForCausalLM" and model.config.psattn_model["attention"]["variant"] == "symmetric"
    ids = torch.randint(0, model.config.vocab_size, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ours(ids), atol=1e-6, rtol=0)
        torch.testing.assert_close(model(ids, attention_mask=mask).logits, ours(ids, attention_mask=mask), atol=1e-6, rtol=0)
        hf_tokens = model.generate(ids[:1, :10], max_new_tokens=8, do_sample=False)
    assert torch.equal(hf_tokens, generate(ours, ids[:1, :10], 8).sequences)  # greedy, with psattn's cache
    text = "def f(x):\n    return"
    assert AutoTokenizer.from_pretrained(tmp_path / "hf")(text).input_ids == load_tokenizer(run / "tokenizer.json").encode(text)
    out = pipeline("text-generation", model=str(tmp_path / "hf"))(text, max_new_tokens=5, do_sample=False)
    assert out[0]["generated_text"].startswith(text)


def test_an_induction_run_exports_without_a_tokenizer_and_the_diagnostics_and_peft_see_it(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from psattn.models.heads import head_scores

    train(tiny_config(4), tmp_path / "run")
    assert main(["export", "--format", "hf", "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    scores = head_scores(model, vocab_size=16)
    assert scores.induction.shape == (1, 2)
    from psattn.integrations.hf import load_psa_model

    with pytest.raises(ValueError, match="psattn export"):  # its attention settings are its own
        load_psa_model(tmp_path / "hf", gamma=0.5)
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert lora.get_nb_trainable_parameters()[0] > 0
    with pytest.raises(SystemExit):
        main(["export", "--format", "hf", "--int8", "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "x")])


def test_a_quiet_export_draws_no_bar_of_transformers(tmp_path, capsys, monkeypatch):
    """-q is results and errors only, and psattn draws bars on a terminal only: transformers' "Writing model
    shards" bar stays off in save_pretrained, and transformers' own switch is left as it was."""
    from transformers.utils import logging as hf_logging

    monkeypatch.setenv("TQDM_DISABLE", "")  # -q sets it; restored after the test
    train(tiny_config(4), tmp_path / "run")
    capsys.readouterr()
    enabled = hf_logging.is_progress_bar_enabled()
    assert main(["-q", "export", "--format", "hf", "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    assert capsys.readouterr().err == "" and hf_logging.is_progress_bar_enabled() == enabled


@pytest.mark.slow  # a fresh process imports transformers (shared with test_hf_families.py): about 12 s
def test_an_export_loads_in_a_new_process_after_the_import_its_hint_names(loaded_in_a_new_process):
    """The export's hint names the import; a fresh process that does just that import loads the folder with
    AutoModelForCausalLM and with load_psa_model, and gets psattn's logits (conftest.py's fixture)."""
    assert loaded_in_a_new_process["module"].startswith("psattn")
    want, got = loaded_in_a_new_process["export"]
    assert len(got) == 2
    for logits in got:
        torch.testing.assert_close(logits, want, atol=1e-6, rtol=0)


def test_the_exported_model_generates_the_same_tokens_with_use_cache_on():
    """It keeps no transformers cache: generate(use_cache=True) must still feed it the whole sequence."""
    from helpers import random_model
    from psattn.integrations.hf.decoder_model import to_hf

    ours = random_model("key_only", gamma=0.9)
    model = to_hf(ours, 64)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    expected = generate(ours, ids, 8).sequences
    assert len(set(expected[0, 6:].tolist())) > 2  # tokens that a wrong context would change
    with torch.no_grad():
        for use_cache in (False, True):
            assert torch.equal(model.generate(ids, max_new_tokens=8, do_sample=False, use_cache=use_cache), expected)


def test_the_exported_model_returns_a_tuple_when_asked_as_transformers_models_do():
    """``return_dict=False`` gives ``(loss, logits)``: unpacking the output object gave the field names instead."""
    from helpers import random_model
    from psattn.integrations.hf.decoder_model import to_hf

    model = to_hf(random_model("key_only", gamma=0.9), 64)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        want = model(ids, labels=ids)
        loss, logits = model(ids, labels=ids, return_dict=False)
        (alone,) = model(ids, return_dict=False)
    assert torch.equal(loss, want.loss) and torch.equal(logits, want.logits) and torch.equal(alone, want.logits)


def test_the_exported_model_gives_its_hidden_states_as_transformers_models_do():
    """``output_hidden_states=True`` gave None: the embeddings, each block's output and, last, the final norm's
    (the LM head's input), as a Llama gives them."""
    from helpers import random_model
    from psattn.integrations.hf.decoder_model import to_hf
    from psattn.models.context import build_context

    decoder = random_model("symmetric", gamma=0.5, n_layers=3)
    model = to_hf(decoder, 64)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 8, 7, 6, 5, 4]])
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        logits, hidden = model(ids, output_hidden_states=True, return_dict=False)
        h = decoder.embed(ids)
        expected = [h]
        context = build_context(*ids.shape, ids.device)
        context.tables = {}
        for block in decoder.blocks:
            h = block(h, context)
            expected.append(h)
        expected[-1] = decoder.norm_final(h)
    assert len(out.hidden_states) == 4 and all(a.shape == (2, 6, decoder.config.d_model) for a in out.hidden_states)
    for got, want in zip(out.hidden_states, expected, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(decoder.lm_head(out.hidden_states[-1]), out.logits)
    assert torch.equal(logits, out.logits) and all(map(torch.equal, hidden, out.hidden_states))
    assert model(ids).hidden_states is None  # not asked for: nothing kept
