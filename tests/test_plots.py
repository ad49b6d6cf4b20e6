"""Figures: titles fit inside the image."""

from __future__ import annotations

import pytest

from posrnn_cli.analysis import plots


@pytest.mark.parametrize("n_bars", [1, 2, 3, 6])
def test_bar_titles_are_not_clipped(tmp_path, monkeypatch, n_bars):
    kept = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.append(fig))
    rows = [{"pe": pe, "token_accuracy": 0.5, "token_accuracy_ci_low": 0.4, "token_accuracy_ci_high": 0.6,
             "n_seeds": 1} for pe in ["none", "sinusoidal", "random", "learnable", "dummy", "phase"][:n_bars]]
    plots.fig_bars(rows, tmp_path / "f.png",
                   "Vocabulary extension: accuracy on sequences of new ids only (frozen trained weights)")
    fig = kept[0]
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1


def test_matplotlibs_font_warnings_stay_off_the_commands_stderr():
    """A fresh font cache makes matplotlib log every missing font family (STIX, …) as a warning;
    the console entry point keeps those off stderr, where a failing command's one line goes."""
    import logging

    from posrnn_cli.cli import run

    logging.getLogger("matplotlib").setLevel(logging.NOTSET)
    with pytest.raises(SystemExit):
        run(["--version"])
    assert logging.getLogger("matplotlib.font_manager").getEffectiveLevel() == logging.ERROR
