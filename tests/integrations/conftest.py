"""Fixtures for the transformers integration tests."""

import pytest
import torch

from integrations.hf_tiny import VOCAB


@pytest.fixture
def prompt():
    torch.manual_seed(7)
    return torch.randint(1, VOCAB, (1, 9))


def pytest_collection_modifyitems(config, items):
    """The full model-type matrix runs only when asked for with ``-m hf_matrix``."""
    if "hf_matrix" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="one of the full transformers model-type matrix: run it with -m hf_matrix")
    for item in items:
        if item.get_closest_marker("hf_matrix") is not None:
            item.add_marker(skip)


NEW_PROCESS = """
import sys, torch
import {module}  # the import the export's hint names
from transformers import AutoModelForCausalLM
from psattn.integrations.hf import load_psa_model  # registers the psattn_<type> model types of every tested type
exported, out = sys.argv[1], sys.argv[2]
ids = torch.arange(12).remainder(16)[None]
with torch.no_grad():
    logits = [m.eval()(ids).logits for m in (AutoModelForCausalLM.from_pretrained(exported), load_psa_model(exported))]
saved = []
for path in sys.argv[3:]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    with torch.no_grad():
        saved.append(model(torch.arange(1, 10)[None], use_cache=False).logits)
torch.save((logits, saved), out)
"""


@pytest.fixture(scope="session")
def loaded_in_a_new_process(tmp_path_factory):
    """Saved models loaded in one fresh process (each fresh process pays transformers' import, about 6 s):
    a trained run exported with ``psattn export --format hf``, after the import its hint names, loaded with
    AutoModelForCausalLM and load_psa_model, then PSA models of the newer families (GPT-NeoX's renamed checkpoint
    keys, Gemma 2 on the eager kernel) saved with save_pretrained. Returns the hint's module, and per folder the
    logits in this process and in the new one. Made once per test session (``helpers.shared``)."""
    import contextlib
    import io
    import re
    import subprocess
    import sys

    from helpers import shared, tiny_config
    from integrations.hf_tiny import tiny_model
    from psattn.cli import main
    from psattn.integrations.hf import apply_psa
    from psattn.integrations.hf.support import base_kernel
    from psattn.training.run_dir import load_trained
    from psattn.training.trainer import train

    def make(tmp):
        """Train and export the run, save the two families' models, load all of them in a new process."""
        train(tiny_config(4), tmp / "run")
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            assert main(["export", "--format", "hf", "--run-dir", str(tmp / "run"), "--out", str(tmp / "hf")]) == 0
        module = re.search(r"import (psattn[\w.]*)", printed.getvalue()).group(1)
        with torch.no_grad():
            export_want = load_trained(tmp / "run")(torch.arange(12).remainder(16)[None])
        paths, saved_want = [], []
        for model_type in ("gpt_neox", "gemma2"):
            model = apply_psa(tiny_model(model_type), "key_only", 0.7, attn_implementation=base_kernel(model_type))
            model.save_pretrained(tmp / model_type)
            paths.append(str(tmp / model_type))
            with torch.no_grad():
                saved_want.append(model(torch.arange(1, 10)[None], use_cache=False).logits)
        run = subprocess.run([sys.executable, "-c", NEW_PROCESS.format(module=module), str(tmp / "hf"),
                              str(tmp / "got.pt"), *paths], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        export_got, saved_got = torch.load(tmp / "got.pt")
        torch.save({"module": module, "export": (export_want, export_got),
                    "saved": list(zip(saved_want, saved_got, strict=True))}, tmp / "results.pt")

    tmp = shared(tmp_path_factory, "hf-new-process", make)
    return torch.load(tmp / "results.pt")
