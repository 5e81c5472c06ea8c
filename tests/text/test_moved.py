"""psattn.text, the former home of the LM metrics and of text generation, still answers for one release:
every old name gives the object of its new home, with a DeprecationWarning that names that home."""

import importlib

import pytest

generation = importlib.import_module("psattn.models.generate")  # the module; psattn.models.generate is also a function
lm_eval = importlib.import_module("psattn.models.lm_eval")
run_dir = importlib.import_module("psattn.training.run_dir")

OLD_NAMES = [
    ("psattn.text", "text_metrics", lm_eval), ("psattn.text", "icl_score", lm_eval),
    *[("psattn.text.metrics", name, lm_eval) for name in
      ("icl_window", "icl_score", "token_losses", "bits_per_byte", "random_repeats", "passage_repeats", "text_metrics")],
    ("psattn.text.generate", "continue_text", generation), ("psattn.text.generate", "continue_ids", generation),
    ("psattn.text.generate", "run_tokenizer", run_dir),
]


@pytest.mark.parametrize("old, name, home", OLD_NAMES, ids=lambda x: x if isinstance(x, str) else "")
def test_an_old_name_warns_and_gives_the_object_of_its_new_home(old, name, home):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is now {home.__name__}\.{name}"):
        assert getattr(module, name) is getattr(home, name)


def test_from_imports_of_the_old_modules_warn_at_the_caller():
    with pytest.warns(DeprecationWarning, match="psattn.models.generate.continue_text") as caught:
        from psattn.text.generate import continue_text
    assert continue_text is generation.continue_text
    assert caught[0].filename == __file__  # the warning points at the line that imports the old name
    with pytest.warns(DeprecationWarning, match="psattn.models.lm_eval.text_metrics"):
        from psattn.text import text_metrics
    assert text_metrics is lm_eval.text_metrics


def test_the_old_package_still_reaches_its_submodules_and_refuses_unknown_names():
    import psattn.text

    assert psattn.text.metrics is importlib.import_module("psattn.text.metrics")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        psattn.text.generate.nothing  # noqa: B018
