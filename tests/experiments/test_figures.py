"""Every figure passes a reader's check, programmatically: a title, labelled axes, a legend entry (or a
colour bar) for every drawn series, markers so one-point series show."""

import pytest

from psattn.experiments import plots, text_plots


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plotting functions save, captured instead of written."""
    figures = []

    def capture(fig, path, dpi=120):
        figures.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", capture)
    monkeypatch.setattr(text_plots, "save_figure", capture)
    return figures


def check_axes(ax, *, legend=True):
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), (ax.get_title(), ax.get_xlabel(), ax.get_ylabel())
    if legend:
        assert ax.get_legend() is not None or ax.figure.legends, ax.get_title()


def history(steps, acc, **extra):
    return [{"step": s, "eval_accuracy": a, "eval_loss": 1 - a, **{k: v[i] for k, v in extra.items()}}
            for i, (s, a) in enumerate(zip(steps, acc, strict=True))]


def test_training_curves_label_the_threshold_and_mark_every_point(drawn):
    plots.plot_training_curves({"a": history([0, 50], [0.1, 0.9]), "b": history([50], [0.2])}, "x.png", 0.8)
    ax = drawn[0].axes[0]
    check_axes(ax)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["a", "b", "success threshold (0.8)"]
    assert all(line.get_marker() not in (None, "None", "") for line in ax.get_lines()[:2])  # a one-point run shows


def test_plot_runs_draws_one_panel_per_metric(drawn):
    runs = {"r1": history([0, 10], [0.1, 0.5]), "r2": history([0, 10], [0.1, 0.6])}
    plots.plot_runs(runs, "x.png", ("eval_accuracy", "eval_loss"))
    axes = drawn[0].axes
    assert [ax.get_ylabel() for ax in axes] == ["held-out accuracy", "held-out loss (nats per scored token)"]
    for ax in axes:
        check_axes(ax, legend=False)
        assert len(ax.get_lines()) == 2
    assert [t.get_text() for t in axes[-1].get_legend().get_texts()] == ["r1", "r2"]


def test_plot_runs_draws_per_head_and_per_position_columns(drawn):
    heads = [[[0.1, 0.2], [0.3, 0.05]], [[0.1, 0.4], [0.6, 0.05]]]  # two evaluations of (layers, heads)
    runs = {"r1": history([0, 10], [0.1, 0.5], induction_score=heads, position_loss=[[3, 2, 1], [2.5, 2, 1.5]])}
    plots.plot_runs(runs, "x.png", ("induction_score", "position_loss"))
    per_head, per_position = drawn[0].axes
    assert [line.get_ydata().tolist() for line in per_head.get_lines()] == [[0.2, 0.4], [0.3, 0.6]]  # best head per layer
    assert [line.get_label() for line in per_head.get_lines()] == ["r1, layer 1", "r1, layer 2"]
    assert per_position.get_xlabel() == "position in the context" and len(per_position.get_lines()) == 1
    last = per_position.get_lines()[0]
    assert last.get_ydata().tolist() == [2.5, 2, 1.5] and "step 10" in last.get_label()
    for ax in (per_head, per_position):
        check_axes(ax, legend=False)


def test_phase_change_figure(drawn):
    from psattn.experiments.phase_change import PhaseChange

    rows = [{"step": s, "tokens": s * 100, "icl_score": -s / 100, "prefix_matching_score": [[0.01, 0.0], [p, 0.0]],
             "previous_token_score": [[0.2, 0.1], [0.3, 0.1]]} for s, p in ((0, 0.0), (10, 0.01), (20, 0.2), (30, 0.3))]
    change = PhaseChange(20, 2000, 1.0, 0.2, -0.1, -0.2)
    plots.plot_phase_change({"a": rows, "b": rows}, "x.png", context=256, threshold=0.1, changes={"a": change, "b": None})
    prefix, previous, icl = drawn[0].axes
    for ax in (prefix, previous, icl):
        check_axes(ax, legend=False)
    assert prefix.get_yscale() == "log" and len(previous.get_lines()) == 4  # two runs, two layers
    assert prefix.get_legend() is not None and icl.get_legend() is not None
    uniform = [line for line in prefix.get_lines() if line.get_label().startswith("uniform attention")]
    assert [line.get_ydata()[0] for line in uniform] == [pytest.approx(0.0054, abs=1e-4)]  # (ln 2) / 128, not 2 / 256


def test_the_uniform_level_is_what_uniform_attention_scores():
    """A model whose queries are zero attends uniformly; its prefix-matching score is ``uniform_score``."""
    import torch

    from psattn.experiments.phase_change import uniform_score
    from psattn.models import DecoderLM, ModelConfig
    from psattn.models.heads import repeat_scores

    model = DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_heads=2))
    with torch.no_grad():
        model.blocks[0].attn.q_proj.weight.zero_()
    for context in (16, 64):
        rows = torch.randint(0, 64, (2, context // 2), generator=torch.Generator().manual_seed(0)).repeat(1, 2)
        score = repeat_scores(model, rows, context // 2).induction  # (layers, heads)
        torch.testing.assert_close(score, torch.full_like(score, uniform_score(context)))


def test_text_figures(drawn):
    rows = history([0, 50, 100], [0.1, 0.2, 0.3], bits_per_byte=[8, 3, 2], icl_score=[0, -0.1, -0.2],
                   passage_first_loss=[4, 4, 4], passage_second_loss=[4, 3.8, 3.6])
    text_plots.plot_text_curves({"one": rows, "two": rows}, "x.png")
    axes = drawn[0].axes
    assert len(axes) == 3
    for ax in axes:
        check_axes(ax, legend=False)
    assert axes[0].get_lines()[0].get_xdata()[0] == 50  # bits per byte from the first trained evaluation
    assert [t.get_text() for t in axes[2].get_legend().get_texts()] == ["one", "two"]
    text_plots.plot_position_loss({"one": [5.0] * 32, "two": [4.0] * 32}, "x.png")
    check_axes(drawn[1].axes[0])
    grids = {"induction_score": [[0.1, 0.2]], "prefix_matching_score": [[0.0, 0.05]]}
    text_plots.plot_head_heatmaps({"one": grids, "two": grids}, "x.png")
    panels, colorbar = drawn[2].axes[:-1], drawn[2].axes[-1]
    assert len(panels) == 4 and colorbar.get_ylabel()  # one labelled colour bar for all panels
    assert {im.get_clim() for ax in panels for im in ax.get_images()} == {(0.0, 0.2)}  # one shared scale
    assert {tuple(t.get_text() for t in ax.get_yticklabels()) for ax in panels} == {("1",)}  # layers from 1


def test_gamma_sweep_head_scores_and_attention_patterns(drawn):
    import numpy as np

    rows = [{"gamma": g, "success_rate": s, "mean_emergence_step": e} for g, s, e in ((0.0, 0.0, None), (1.0, 1.0, 200))]
    plots.plot_gamma_sweep(rows, "x.png")
    ax, twin = drawn[0].axes
    check_axes(ax)
    assert twin.get_ylabel() == "mean emergence step" and len(ax.get_legend().get_texts()) == 2
    scores = {v: {"previous_token": [[0.1, 0.9]], "induction": [[0.2, 0.3]]} for v in ("baseline", "key_only")}
    plots.plot_head_scores(scores, "x.png")
    for ax in drawn[1].axes:
        assert ax.get_title() and ax.get_xlabel() == "variant"
    assert drawn[1].axes[0].get_ylabel() and [t.get_text() for t in drawn[1].axes[0].get_legend().get_texts()] == [
        "head 0", "head 1"]
    plots.plot_attention_patterns({"baseline": np.full((2, 5, 5), 0.2), "key_only": np.eye(5)[None].repeat(2, 0)},
                                  "x.png")
    fig = drawn[2]
    assert fig.get_suptitle().startswith("layer 1 attention")  # layers counted from 1, as in every message
    assert any(ax.get_ylabel().startswith("attention weight") for ax in fig.axes)  # colour bar


def test_a_figure_save_cut_short_keeps_the_earlier_figure_whole(tmp_path):
    from matplotlib.figure import Figure

    from helpers import file_size_limit
    from psattn.figures import save_figure

    small, large = Figure(figsize=(1, 1)), Figure(figsize=(8, 8), dpi=200)
    large.add_subplot().imshow([[i * j % 7 for i in range(200)] for j in range(200)])
    path = save_figure(small, tmp_path / "curves.png")
    before = path.read_bytes()
    with file_size_limit(len(before) + 1000), pytest.raises(OSError, match="writing .*curves.png failed"):
        save_figure(large, path)  # savefig wrote the first bytes of the new figure over the old one
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["curves.png"]
