"""The accuracy-vs-eps figure tells every (model, gradient mode) apart, even where two curves coincide (the
issue: every mode of a model drawn in one colour, so the bpda curve hid under the worst-case curve)."""

from __future__ import annotations

import pandas as pd

from robustbench_wave.reporting.plots import accuracy_figure, line_colors


def _curves() -> pd.DataFrame:
    rows = []
    for model in ("ext-jpeg", "undefended"):
        for mode in ("exact", "bpda", "worst"):
            acc = {"exact": 0.8, "bpda": 0.4, "worst": 0.4}[mode]  # bpda equals the worst case
            for eps in (0.0, 0.1):
                value = 0.9 if eps == 0 else acc
                rows.append(dict(model=model, grad_mode=mode, threat="Linf", eps=eps, robust_accuracy=value,
                                 ci_low=value - 0.05, ci_high=value + 0.05))  # fmt: skip
    return pd.DataFrame(rows)


def test_every_model_and_mode_has_its_own_colour_and_marker() -> None:
    curves = _curves()
    lines = accuracy_figure(curves, "Linf", line_colors(curves)).axes[0].get_lines()
    looks = {(line.get_color(), line.get_marker()) for line in lines}
    assert len(lines) == 6 and len(looks) == 6
    assert len({line.get_color() for line in lines}) == 6  # colour alone tells them apart


def test_the_worst_case_is_drawn_underneath_the_mode_it_equals() -> None:
    curves = _curves()
    lines = {
        line.get_label(): line
        for line in accuracy_figure(curves, "Linf", line_colors(curves)).axes[0].get_lines()
    }
    worst, bpda = lines["ext-jpeg / worst"], lines["ext-jpeg / bpda"]
    assert list(worst.get_ydata()) == list(bpda.get_ydata())  # the case that hid one curve under the other
    assert worst.get_zorder() < bpda.get_zorder() and worst.get_linewidth() > bpda.get_linewidth()
    assert worst.get_marker() != bpda.get_marker() and worst.get_linestyle() != bpda.get_linestyle()


def test_colours_are_the_same_in_every_threats_figure() -> None:
    curves = pd.concat([_curves(), _curves().assign(threat="L2")])
    colors = line_colors(curves)
    by_threat = [
        {line.get_label(): line.get_color() for line in accuracy_figure(g, t, colors).axes[0].get_lines()}
        for t, g in curves.groupby("threat")
    ]
    assert by_threat[0] == by_threat[1]
