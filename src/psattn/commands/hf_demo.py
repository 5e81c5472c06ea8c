"""``psattn hf-demo``: PSA inside a tiny random transformers model, built from a config, offline.

Builds the model, generates greedily from a left-padded batch of two random prompts without PSA and
with it, and prints the continuations next to each other together with the checks that make the
integration trustworthy: cached decoding equals the full forward pass, each padded row equals the
prompt generated alone, and removing PSA restores the original logits.

``register`` does not import transformers, so the CLI starts without the ``[hf]`` extra.
"""

from __future__ import annotations

import argparse

from psattn.arguments import add_command, seed_int

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "smollm3")


def tiny_random_model(arch: str = "llama", seed: int = 0, vocab_size: int = 128):
    """A 2-layer random causal LM of ``arch`` (hidden 64, 4 query heads, 2 KV heads), from a config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    extras = {"qwen3": dict(head_dim=16)}.get(arch, {})
    config = AutoConfig.for_model(
        arch, vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0,
        bos_token_id=None, eos_token_id=None, initializer_range=0.1, **extras,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def cmd_hf_demo(args: argparse.Namespace) -> int:
    if args.prompt_length < 2:
        raise ValueError(f"--prompt-length must be at least 2 (the shorter prompt is half of it), got {args.prompt_length}")
    if args.new_tokens < 1:
        raise ValueError(f"--new-tokens must be at least 1, got {args.new_tokens}")
    import torch
    import transformers

    from psattn.integrations.hf import apply_psa, remove_psa  # an ImportError naming the extra when missing

    model = tiny_random_model(args.arch, args.seed)
    vocab, n = model.config.vocab_size, args.new_tokens
    gen = torch.Generator().manual_seed(args.seed)
    long = torch.randint(1, vocab, (args.prompt_length,), generator=gen)
    short = torch.randint(1, vocab, (args.prompt_length // 2,), generator=gen)
    ids = torch.zeros(2, len(long), dtype=torch.long)  # left-padded with pad_token_id 0
    ids[0], ids[1, len(long) - len(short):] = long, short
    mask = (torch.arange(len(long)) >= torch.tensor([[0], [len(long) - len(short)]])).long()

    def run(m, input_ids, attention_mask=None):
        with torch.no_grad():
            out = m.generate(input_ids, attention_mask=attention_mask, max_new_tokens=n, do_sample=False,
                             output_logits=True, return_dict_in_generate=True)
        return out.sequences[:, -n:], torch.stack(out.logits, dim=1), out

    with torch.no_grad():
        plain_logits = model(ids, attention_mask=mask, use_cache=False).logits
    plain_tokens, _, _ = run(model, ids, mask)
    apply_psa(model, variant=args.variant, gamma=args.gamma)
    psa_tokens, psa_logits, out = run(model, ids, mask)
    with torch.no_grad():
        full = model(out.sequences, attention_mask=torch.cat([mask, mask.new_ones(2, n)], 1), use_cache=False).logits
    cache_gap = (psa_logits - full[:, len(long) - 1 : -1].float()).abs().max().item()
    alone = [run(model, row[None])[0][0] for row in (long, short)]
    rows_match = all(torch.equal(psa_tokens[i], alone[i]) for i in range(2))
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values  # renamed in 5.24
    kv = sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in cache.layers)
    extra = sum(layer.extra_state_bytes() for layer in cache.layers)
    remove_psa(model)
    with torch.no_grad():
        restored = torch.equal(model(ids, attention_mask=mask, use_cache=False).logits, plain_logits)

    n_params = sum(p.numel() for p in model.parameters())
    print(f"psattn hf-demo: random {type(model).__name__} ({n_params / 1e3:.0f}k parameters, transformers "
          f"{transformers.__version__}), PSA {args.variant} gamma={args.gamma:g}, greedy, {n} new tokens")
    print(f"prompts: row 0 has {len(long)} tokens, row 1 has {len(short)} (left-padded)\n")
    print(f"{'row':4s} {'without PSA':40s} with PSA")
    for i in range(2):
        plain_row, psa_row = (" ".join(map(str, t[i].tolist())) for t in (plain_tokens, psa_tokens))
        print(f"{i:<4d} {plain_row:40s} {psa_row}")
    checks = [
        (f"cached generate == full forward (max |logit diff| {cache_gap:.1e})", cache_gap < 1e-4),
        ("each left-padded row == its prompt generated alone", rows_match),
        ("remove_psa restores the original logits exactly", restored),
    ]
    print()
    for text, ok in checks:
        print(f"[{'ok' if ok else 'FAIL'}] {text}")
    streams = {"symmetric": "keys and queries", "key_only": "keys", "query_only": "queries"}[args.variant]
    print(f"cache: {kv} bytes of sheared keys + values, {extra} bytes of extra state "
          f"(the raw {streams} of the last step and the one before it, per layer)")
    return 0 if all(ok for _, ok in checks) else 1


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``hf-demo`` command to a subparsers object."""
    parser = add_command(subparsers, "hf-demo", "PSA in a tiny random Hugging Face model (offline): generate and compare")
    parser.add_argument("--arch", choices=ARCHS, default="llama", help="model family")
    parser.add_argument("--variant", choices=("symmetric", "key_only", "query_only"), default="key_only",
                        help="which streams are sheared")
    parser.add_argument("--gamma", type=float, default=0.8, help="shear coupling")
    parser.add_argument("--new-tokens", type=int, default=10, help="tokens to generate")
    parser.add_argument("--prompt-length", type=int, default=12, help="length of the longer prompt")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the random model and prompts")
    parser.set_defaults(func=cmd_hf_demo)
    return parser
