"""Held under load: thousands of cached decode steps keep memory flat beyond the cache itself, and a
sweep of many small runs on worker processes accounts for every run."""

import dataclasses

import pytest
import torch

psutil = pytest.importorskip("psutil")

from helpers import random_model, tiny_config  # noqa: E402
from psattn.experiments.sweep import run_sweep  # noqa: E402
from psattn.models import prefill  # noqa: E402

STEPS, EVERY = 4000, 500


@torch.no_grad()
def test_long_cached_decoding_keeps_memory_flat_beyond_the_cache():
    model = random_model("symmetric", n_layers=1).float()
    cache = model.new_cache()
    logits = prefill(model, torch.randint(0, 37, (1, 8)), cache)[:, None]
    process = psutil.Process()
    samples = []  # (rss, kv bytes, extra state bytes) every EVERY steps
    for step in range(1, STEPS + 1):
        token = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        logits = model(token, cache=cache)
        if step % EVERY == 0:
            samples.append((process.memory_info().rss, cache.kv_bytes(), cache.extra_state_bytes()))
    assert len(cache) == 8 + STEPS
    assert len({extra for _, _, extra in samples}) == 1  # O(1) extra state
    (rss0, kv0, _), (rss1, kv1, _) = samples[0], samples[-1]
    beyond_cache = (rss1 - rss0) - (kv1 - kv0)
    assert beyond_cache < 16 * 2**20, f"{beyond_cache / 2**20:.1f} MiB growth beyond the cache's {(kv1 - kv0) / 2**20:.2f} MiB"


def test_sweep_of_many_small_runs_accounts_for_every_run(tmp_path):
    configs = [dataclasses.replace(tiny_config(4, eval_every=2, checkpoint_every=2, seed=i), name=f"r{i:02d}")
               for i in range(24)]
    results = run_sweep(configs, tmp_path, workers=2, progress=False)
    assert sorted(results) == [c.name for c in configs]
    assert all(r is not None and r["steps"] == 4 for r in results.values())
    assert len({r["history"][-1]["eval_loss"] for r in results.values()}) > 1  # distinct seeds really ran
