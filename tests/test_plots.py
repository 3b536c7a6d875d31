"""The PNGs a user looks at: labelled axes, ranges that do not turn noise into swings, every curve visible."""

from __future__ import annotations

import math
import shutil

import pytest

from electra.app.cli import main
from electra.app.compare.run import curve_figure, seed_averages
from electra.app.plot import build_figure


def _columns(steps, **metrics):
    return {"step": list(steps), **{k: list(v) for k, v in metrics.items()}}


def test_run_curves_label_axes_and_keep_the_accuracy_range_readable():
    steps = range(20, 220, 20)
    train = _columns(
        steps,
        loss=[30 - i for i in range(10)],
        generator_accuracy=[0.01 * i for i in range(10)],
        replaced_fraction=[0.1475] * 10,
        discriminator_accuracy=[0.8523 + 0.00006 * (i % 2) for i in range(10)],  # noise around the baseline
        discriminator_auc=[0.55] * 10,
        learning_rate=[1e-3] * 10,
    )
    held_out = _columns([100, 200], loss=[26.0, 22.0])
    figure = build_figure(train, held_out, "run")
    axes = {axis.get_title(): axis for axis in figure.axes}
    assert all(axis.get_ylabel() and axis.get_xlabel() == "step" for axis in axes.values())
    low, high = axes["discriminator accuracy"].get_ylim()
    assert high - low >= 0.05 and low < 1 - 0.1475 < high  # the always-"original" baseline is on the panel
    labels = [line.get_label() for line in axes["discriminator accuracy"].get_lines()]
    assert 'always "original"' in labels
    loss_lines = {line.get_label(): line for line in axes["loss"].get_lines()}
    assert loss_lines["loss (held out)"].get_linestyle() == "--"
    assert axes["loss"].get_yscale() == "log"


def test_electric_runs_get_their_nce_and_energy_panels():
    steps = range(10, 60, 10)
    train = _columns(
        steps,
        loss=[40, 39, 38, 37, 36],
        nce_accuracy=[0.5, 0.55, 0.6, 0.62, 0.64],
        mean_energy_kept=[9.8, 9.6, 9.4, 9.2, 9.0],
        mean_energy_replaced=[9.8, 9.7, 9.7, 9.6, 9.6],
        learning_rate=[1e-3] * 5,
    )
    axes = {axis.get_title(): axis for axis in build_figure(train, {"step": []}, "electric").axes}
    assert "nce accuracy" in [line.get_label() for line in axes["discriminator accuracy"].get_lines()]
    assert {line.get_label() for line in axes["Electric energies"].get_lines()} == {
        "mean energy kept",
        "mean energy replaced",
    }


def test_compare_curve_has_a_log_flops_axis_seed_spread_and_visible_duplicates():
    rows = {"sst2": {"seeds": [0.5, 0.7, 0.6]}, "rte": {"seeds": [0.4, 0.6, 0.5]}}
    assert seed_averages(rows) == pytest.approx([0.45, 0.65, 0.55])
    cell = lambda flops: {"train_flops": flops, "average": 0.55, "average_by_seed": [0.45, 0.65, 0.55]}  # noqa: E731
    results = {
        "size": "tiny",
        "objectives": {
            "electra": {"cells": [cell(1e13), cell(2e13)]},
            "mlm": {"cells": [cell(1e13), cell(2e13)]},
        },
    }
    figure = curve_figure(results)
    axis = figure.axes[0]
    assert axis.get_xscale() == "log" and "seeds" in axis.get_ylabel()
    lines = [c.lines[0] for c in axis.containers if c.get_label() in ("electra", "mlm")]
    xs = [tuple(line.get_xdata()) for line in lines]
    assert len(lines) == 2 and xs[0] != xs[1]  # identical scores, yet two distinct lines
    assert lines[0].get_marker() != lines[1].get_marker()
    assert not math.isclose(xs[0][0], xs[1][0])
    bars = [c for c in axis.containers if c.get_label() == "electra"][0]
    assert bars.has_yerr  # the seed spread is drawn


PNG = b"\x89PNG"


def _run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("step,train/loss,train/learning_rate\n10,5.0,0.001\n20,4.0,0.001\n")
    return run


def test_plot_output_formats_and_folders(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["plot", str(run), "--output", str(tmp_path / "x.md")]) == 2  # was a ValueError traceback
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib cannot write .md files" in err
    assert all(f".{name}," in err for name in ("png", "pdf", "svg"))
    assert main(["plot", str(run), "--output", str(tmp_path / "curves")]) == 2  # matplotlib would add .png
    assert "the name has no image suffix" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert main(["plot", str(run), "--output", str(tmp_path / "x.pdf")]) == 0
    assert (tmp_path / "x.pdf").read_bytes().startswith(b"%PDF")
    # A folder gets curves.png inside it, not FOLDER.png beside it; a new one ending in / is made.
    folder = tmp_path / "pictures"
    folder.mkdir()
    assert main(["plot", str(run), "--output", str(folder)]) == 0
    assert (folder / "curves.png").read_bytes().startswith(PNG) and not (tmp_path / "pictures.png").exists()
    assert main(["plot", str(run), "--output", f"{tmp_path / 'new'}/"]) == 0
    assert (tmp_path / "new" / "curves.png").is_file()
    assert capsys.readouterr().out.splitlines()[-1] == str(tmp_path / "new" / "curves.png")


def test_a_format_needing_missing_software_is_one_line_and_keeps_the_old_file(tmp_path, capsys):
    """.pgf is in matplotlib's list of formats but needs a TeX installation: it was a backend traceback."""
    if shutil.which("xelatex"):
        pytest.skip("this machine has xelatex, so .pgf can be written")
    run = _run(tmp_path)
    mine = tmp_path / "figure.pgf"
    mine.write_text("my figure")
    assert main(["plot", str(run), "--output", str(mine), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib could not write .pgf" in err and "xelatex" in err, err
    assert mine.read_text() == "my figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.pgf", "run"]  # no partial file either


def test_plot_replaces_a_users_file_only_when_asked_but_always_its_own_curves(tmp_path, capsys):
    run = _run(tmp_path)
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"my picture")
    assert main(["plot", str(run), "--output", str(mine)]) == 2
    assert f"{mine} already exists; pass --overwrite" in capsys.readouterr().err
    assert mine.read_bytes() == b"my picture"
    assert main(["plot", str(run), "--output", str(mine), "--overwrite"]) == 0
    assert mine.read_bytes().startswith(PNG)
    # RUN/curves.png is the run's own picture (pretrain redraws it at the end of every run): no --overwrite needed,
    # however it is named.
    for extra in ([], [], ["--output", str(run)], ["--output", str(run / "curves.png")]):
        (run / "curves.png").write_bytes(b"old")
        assert main(["plot", str(run), *extra]) == 0
        assert (run / "curves.png").read_bytes().startswith(PNG)


def test_a_metrics_csv_with_text_in_it_is_one_line(tmp_path, capsys):
    """A hand-edited metrics.csv was a ValueError traceback from float()."""
    run = tmp_path / "run"
    run.mkdir()
    for body, says in (
        ("1,abc\n", "column 'train/loss' holds 'abc', not a number"),
        ("1,2,3\n", "more cells"),
    ):
        (run / "metrics.csv").write_text("step,train/loss\n" + body)
        assert main(["plot", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{run / 'metrics.csv'}:2: {says}" in err, err
        assert not (run / "curves.png").exists()


def test_a_metric_missing_from_some_rows_is_drawn_where_it_was_logged(tmp_path):
    """Before: only the columns every row held were drawn, so the half-written last row of a run in progress (or
    one a kill cut short) took the learning-rate curve, and its panel, out of the picture."""
    from electra.app.plot import read_metrics

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(
        "step,train/loss,train/learning_rate\n10,5.0,0.001\n20,4.0,0.002\n30,3.5"
    )
    train = read_metrics(run)
    assert train["step"] == [10, 20, 30] and train["loss"] == [5.0, 4.0, 3.5]
    assert train["learning_rate"][:2] == [0.001, 0.002] and math.isnan(train["learning_rate"][2])
    axes = {axis.get_title(): axis for axis in build_figure(train, {}, "run").axes}
    (line,) = axes["learning rate"].get_lines()
    assert list(line.get_ydata()[:2]) == [0.001, 0.002]


@pytest.mark.parametrize(
    "body, says",
    [
        (b"step,train/flops\n10,5\n", "none of the metrics electra plot draws"),
        (b"\xff\xfe\x00garbage\n", "is not valid UTF-16"),
        (b"train/loss\n5\n", "no 'step' column"),
    ],
)
def test_a_metrics_csv_plot_cannot_draw_is_one_line(tmp_path, capsys, body, says):
    """Before: a CSV with no metric the panels draw was a ValueError from matplotlib (no panels), one that was not
    UTF-8 text a UnicodeDecodeError, and one without `step` a KeyError."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_bytes(body)
    assert main(["plot", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / "metrics.csv") in err and says in err, err
    assert not (run / "curves.png").exists()


def test_plot_output_in_a_folder_it_cannot_write_is_one_line_before_drawing(tmp_path, capsys):
    """Before: a dangling link as the folder was a FileExistsError traceback after the drawing, and /proc/x.png
    said "matplotlib could not write .png here ...; write .png, .pdf or .svg", as if the format were wrong."""
    run = _run(tmp_path)
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere" / "deeper")
    output = tmp_path / "gone" / "x.png"
    assert main(["plot", str(run), "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {output}: its folder {output.parent}: cannot write here" in err
    assert "Traceback" not in err and not (run / "curves.png").exists()
    assert not (tmp_path / "nowhere").exists()


def test_plot_of_a_file_or_of_held_out_rows_only_names_the_fix(tmp_path, capsys):
    """Before: `electra plot RUN/metrics.csv` said RUN/metrics.csv/metrics.csv did not exist, and a metrics.csv
    holding only eval/ columns said it had "no rows yet"."""
    run = _run(tmp_path)
    assert main(["plot", str(run / "metrics.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / 'metrics.csv'} is a file; give the run directory" in err
    assert err.rstrip().endswith(f": {run}.")
    (run / "metrics.csv").write_text("step,eval/loss\n10,5.0\n20,4.0\n")
    assert main(["plot", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "held-out (eval/) rows only, no training (train/) ones" in err
    assert "no rows yet" not in err and not (run / "curves.png").exists()


def test_a_metrics_csv_saved_by_a_spreadsheet_is_read(tmp_path, capsys):
    """Before: a byte-order mark (a metrics.csv saved as "CSV UTF-8" by a spreadsheet) made the first column
    '\\ufeffstep', so the file "had no 'step' column"; one saved as UTF-16 was "not a text CSV"."""
    from electra.app.plot import read_metrics

    run = tmp_path / "run"
    run.mkdir()
    text = "step,train/loss\r\n10,5.0\r\n20,4.0\r\n"
    (run / "metrics.csv").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert read_metrics(run) == {"step": [10.0, 20.0], "loss": [5.0, 4.0]}
    assert main(["plot", str(run)]) == 0
    assert (run / "curves.png").read_bytes().startswith(PNG)
    (run / "metrics.csv").write_bytes(text.encode("utf-16"))
    with pytest.warns(UserWarning, match="UTF-16"):
        assert read_metrics(run) == {"step": [10.0, 20.0], "loss": [5.0, 4.0]}
    (run / "metrics.csv").write_bytes(b"step,train/loss\n10,5.0\ncaf\xe9,1\n")
    assert main(["plot", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / 'metrics.csv'}:3: not UTF-8 text" in err
