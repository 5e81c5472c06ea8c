"""The ``psattn hf-demo`` command and the README example of the transformers integration."""

import argparse
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from psattn.integrations.hf.demo import register

README = Path(__file__).resolve().parents[2] / "README.md"

# The README's example (kept here too, so that it is tested before and after it lands in the README).
EXAMPLE = '''
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from psattn.integrations.hf import apply_psa, remove_psa

# A tiny random Llama built from a config (offline); AutoModelForCausalLM.from_pretrained(...) works the same.
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
model = AutoModelForCausalLM.from_config(config).eval()

apply_psa(model, variant="key_only", gamma=0.8)  # post-RoPE half-lift; no new parameters
prompt = torch.randint(1, 128, (1, 8))
with torch.no_grad():
    tokens = model.generate(prompt, max_new_tokens=8, do_sample=False)  # the KV cache holds sheared keys
    full = model(tokens, use_cache=False).logits                         # same model, no cache
assert torch.equal(full[:, 7:-1].argmax(-1), tokens[:, 8:])              # greedy tokens agree

remove_psa(model)  # back to the original attention
'''


def _parser():
    parser = argparse.ArgumentParser(prog="psattn")
    register(parser.add_subparsers(dest="command"))
    return parser


@pytest.mark.parametrize("arch,variant", [("llama", "key_only"), ("smollm3", "symmetric")])
def test_hf_demo_runs_and_its_checks_pass(arch, variant, capsys):
    args = _parser().parse_args(["hf-demo", "--arch", arch, "--variant", variant, "--new-tokens", "5",
                                 "--prompt-length", "8"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.count("[ok]") == 3 and "FAIL" not in out


def test_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S) if README.exists() else []
    examples = [b for b in blocks if "apply_psa" in b] or [EXAMPLE]
    for block in examples:
        exec(compile(block, "README.md", "exec"), {})
