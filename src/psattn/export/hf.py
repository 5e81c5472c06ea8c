"""A trained run as a transformers checkpoint folder (``psattn export --format hf``): its model as the
registered ``psattn`` model type (``psattn.integrations.hf.decoder_model``) and, for a text run, its
tokenizer as a transformers fast tokenizer with the same ids. Needs the ``hf`` extra."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from psattn.export.staging import staged_folder
from psattn.progress import bars_wanted
from psattn.training.config import RunConfig
from psattn.training.run_dir import CONFIG, TOKENIZER, load_trained


def hf_tokenizer(tokenizer_json: str):
    """A transformers fast tokenizer for a psattn run's tokenizer.json (byte or BPE): the same ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> printable symbol map

    saved = json.loads(tokenizer_json)
    if saved["kind"] == "bpe":
        tok = Tokenizer.from_str(json.dumps(saved["tokenizer"]))
    else:  # byte ids are the byte values: byte-level BPE over the 256 byte symbols, with no merges
        symbols = bytes_to_unicode()
        tok = Tokenizer(models.BPE(vocab={symbols[b]: b for b in range(256)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


@contextmanager
def _hf_bars() -> Iterator[None]:
    """transformers' own progress bars ("Writing model shards") where psattn draws its own only (``bars_wanted``:
    a terminal, no -q); transformers' switch is set back as it was."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    if enabled and not bars_wanted():
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled and not hf_logging.is_progress_bar_enabled():
            hf_logging.enable_progress_bar()


def export_hf(run_dir: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Save a trained run (its last checkpoint) as a transformers checkpoint in the folder ``out``, with
    its tokenizer when it has one (text runs). The folder is written whole beside ``out`` and then put
    in its place, replacing an earlier export there as a whole (``psattn.export.staging``); a folder
    holding files psattn did not write is replaced only with ``force``.

    Args:
        run_dir: the run directory (config.json, checkpoint.pt, and tokenizer.json for a text run).
        out: the folder to write.
        force: replace a folder that holds files psattn did not write.

    Returns:
        The folder, which ``AutoModelForCausalLM.from_pretrained`` loads after ``import psattn.integrations.hf``.

    Examples:
        >>> import tempfile, torch
        >>> from transformers import AutoModelForCausalLM
        >>> from psattn.experiments.configs import small_config
        >>> from psattn.export.hf import export_hf
        >>> from psattn.training import load_trained, train
        >>> run, out = tempfile.mkdtemp(), tempfile.mkdtemp() + "/hf"
        >>> _ = train(small_config("key_only", 1.0, steps=5, early_stop=False, batch_size=8, device="cpu"), run)
        >>> model = AutoModelForCausalLM.from_pretrained(export_hf(run, out))
        >>> ids = torch.randint(0, 64, (1, 12))
        >>> with torch.no_grad():
        ...     torch.allclose(model(ids).logits, load_trained(run)(ids), atol=1e-6)
        True
    """
    run_dir, out = Path(run_dir), Path(out)
    model = load_trained(run_dir)  # a bad run directory is refused before transformers loads (seconds)
    config = RunConfig.from_file(run_dir / CONFIG)
    from psattn.integrations.hf.decoder_model import to_hf

    wrapped = to_hf(model, getattr(config.task, "seq_len", 256))
    tokenizer = (run_dir / TOKENIZER).read_text() if (run_dir / TOKENIZER).exists() else None
    with staged_folder(out, force=force, what="a Hugging Face export", keep=[run_dir]) as staging, _hf_bars():
        wrapped.save_pretrained(staging)
        if tokenizer is not None:
            hf_tokenizer(tokenizer).save_pretrained(staging)
    return out
