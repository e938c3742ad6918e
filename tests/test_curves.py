"""Training curves: the CSV log, the figure (two axes, valid PNG/SVG) and `needle-plot`.

The needle-train side (rows against the printed epoch lines, --resume, usage errors) is
tested in test_cli.py, next to the tiny data sets it trains on.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from needle.apps import curves

ROWS = [
    {"epoch": 1, "train_loss": 2.5, "train_accuracy": 0.25, "test_loss": 1.5,
     "test_accuracy": 0.5, "lr": 0.001, "seconds": 1.5},
    {"epoch": 2, "train_loss": 1.25, "train_accuracy": 0.75, "test_loss": 1.0,
     "test_accuracy": 0.625, "lr": 0.0005, "seconds": 3.0},
]
CSV = """\
epoch,train_loss,train_accuracy,test_loss,test_accuracy,lr,seconds
1,2.5,0.25,1.5,0.5,0.001,1.5
2,1.25,0.75,1.0,0.625,0.0005,3.0
"""


def test_a_perplexity_past_floats_is_inf(tmp_path):
    """(An audit.) A diverging language model's finite loss above ~709.8 crashed the run
    in math.exp (no checkpoint, no log row); its perplexity is inf, which the log keeps."""
    assert curves.perplexity(1e6) == math.inf and curves.perplexity(2.0) == math.exp(2.0)
    path = tmp_path / "lm.csv"
    log = curves.EpochLog(True, "lm", path)
    log.record(1, {"train_loss": 1e6, "train_err": 0.0, "test_loss": 3.0, "test_err": 0.0,
                   "seconds": 1.0}, 0.1)
    columns, rows = curves.read_csv(path)
    assert rows[0]["train_perplexity"] == math.inf
    assert rows[0]["test_perplexity"] == pytest.approx(math.exp(3.0))
    from needle.apps.train_models import LANGUAGE
    line = LANGUAGE.epoch_line(1, {"train_loss": 1e6, "test_loss": 3.0})
    assert "train perplexity inf" in line


@pytest.fixture
def matplotlib():
    return pytest.importorskip("matplotlib", reason="matplotlib is not installed "
                                                    f"({curves.PLOT_HINT})")


def test_csv_round_trip(tmp_path):
    path = tmp_path / "log.csv"
    curves.write_csv(path, curves.IMAGE_COLUMNS, ROWS)
    assert path.read_text() == CSV
    assert curves.read_csv(path) == (curves.IMAGE_COLUMNS, ROWS)


@pytest.mark.parametrize("text, message", [
    ("", "is empty, not a needle-train log"),
    ("epoch,loss\n1,2\n", "is not a needle-train log: its header is epoch,loss"),
    (CSV + "3,1.0,0.5\n", ", line 4: malformed row (3 fields, not 7)"),
    (CSV + "3,1.0,0.5,x,1,1,1\n", ", line 4: malformed row (could not convert"),
    (CSV + "3.5,1.0,0.5,1,1,1,1\n", ", line 4: malformed row (invalid literal for int()"),
    # were a UnicodeDecodeError without the file's name, and a csv.Error's traceback
    (CSV.encode() + b"3,\xff\n", " is not a needle-train log: it is not UTF-8 text (byte 0xff "
                                 f"at offset {len(CSV) + 2})"),
    (b"\xff" + CSV.encode(), " is not a needle-train log: it is not UTF-8 text (byte 0xff at "
                             "offset 0)"),
    (CSV + "3," + "1" * 200_000 + "\n", ", line 4: malformed CSV (field larger than field "
                                       "limit"),
])
def test_foreign_or_broken_logs_are_named(text, message, tmp_path):
    path = tmp_path / "log.csv"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ValueError) as info:
        curves.read_csv(path)
    assert str(info.value).startswith(str(path)) and message in str(info.value)


@pytest.mark.parametrize("columns, right", [(curves.IMAGE_COLUMNS, "accuracy (%)"),
                                            (curves.LM_COLUMNS, "perplexity")])
def test_figure_has_loss_and_score_axes(columns, right, matplotlib):
    rows = [dict(zip(columns, r.values())) for r in ROWS]
    fig = curves.figure(rows, columns, "MLPResNet(hidden 8) on MNIST, device cpu")
    loss, score = fig.axes
    assert len(fig.axes) == 2
    assert (loss.get_xlabel(), loss.get_ylabel()) == ("epoch", "loss (cross-entropy)")
    assert (score.get_xlabel(), score.get_ylabel()) == ("epoch", right)
    assert fig.get_suptitle() == "MLPResNet(hidden 8) on MNIST, device cpu"
    train, test = loss.get_lines()
    assert list(train.get_ydata()) == [2.5, 1.25] and list(test.get_ydata()) == [1.5, 1.0]
    assert train.get_linestyle() != test.get_linestyle()  # train and test styled apart
    legend = [t.get_text() for t in score.get_legend().get_texts()]
    assert legend == (["train", "held-out"] if columns == curves.LM_COLUMNS else
                      ["train", "test"])
    if columns == curves.IMAGE_COLUMNS:  # in percent
        assert list(score.get_lines()[1].get_ydata()) == [50.0, 62.5]


def test_png_is_valid_and_svg_has_two_axes(tmp_path, matplotlib):
    from matplotlib.image import imread

    png, svg = tmp_path / "c.png", tmp_path / "c.svg"
    curves.save_figure(ROWS, curves.IMAGE_COLUMNS, "a title", png)
    curves.save_figure(ROWS, curves.IMAGE_COLUMNS, "a title", svg)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = imread(png).shape
    assert (width, height) == (900, 360)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert text.count('<g id="axes_') == 2
    # no date in the file: the same log draws the same bytes
    curves.save_figure(ROWS, curves.IMAGE_COLUMNS, "a title", tmp_path / "d.svg")
    assert (tmp_path / "d.svg").read_text() == text


def test_needle_plot_draws_a_log(tmp_path, matplotlib, capsys):
    log = tmp_path / "run.csv"
    log.write_text(CSV)
    assert curves.main([str(log)]) == 0  # default: run.png beside the log
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"
    assert curves.main([str(log), "-o", str(tmp_path / "run.svg"), "--title", "T"]) == 0
    assert (tmp_path / "run.svg").read_text().count('<g id="axes_') == 2
    assert f"2 epochs drawn to {tmp_path / 'run.svg'}" in capsys.readouterr().err


@pytest.mark.parametrize("setup, argv, message", [
    (None, ["{tmp}/none.csv"], "No such file or directory"),
    ("epoch,loss\n", ["{tmp}/log.csv"], "is not a needle-train log"),
    (CSV.splitlines()[0] + "\n", ["{tmp}/log.csv"], "has no epochs to draw"),
    (CSV, ["{tmp}/log.csv", "-o", "{tmp}/log.jpg"], "name a .png, .svg or .pdf file"),
    (CSV, ["{tmp}/log.csv", "-o", "{tmp}/no/log.png"], "{tmp}/no does not exist"),
    (CSV, ["{tmp}/log.csv", "-o", "{tmp}/log.csv/log.png"], "{tmp}/log.csv is not a folder"),
    (CSV.encode() + b"\xff", ["{tmp}/log.csv"], "{tmp}/log.csv is not a needle-train log: it "
                                                "is not UTF-8 text (byte 0xff at offset "),
])
def test_needle_plot_usage_errors(setup, argv, message, tmp_path, capsys, matplotlib):
    if isinstance(setup, bytes):
        (tmp_path / "log.csv").write_bytes(setup)
    elif setup is not None:
        (tmp_path / "log.csv").write_text(setup)
    with pytest.raises(SystemExit) as info:
        curves.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: needle-plot" in err and message.replace("{tmp}", str(tmp_path)) in err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc: a folder that exists "
                                                          "and cannot take new files")
def test_needle_plot_to_a_folder_that_takes_no_files_is_a_usage_error(tmp_path, capsys,
                                                                     matplotlib):
    (tmp_path / "log.csv").write_text(CSV)
    with pytest.raises(SystemExit) as info:  # was a FileNotFoundError's traceback
        curves.main([str(tmp_path / "log.csv"), "-o", "/proc/x.png"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "needle-plot: error: -o /proc/x.png: cannot write in the folder /proc (")


def test_needle_plot_write_failure_names_the_figure(tmp_path, capsys, monkeypatch, matplotlib):
    (tmp_path / "log.csv").write_text(CSV)

    def full_disk(src, dst):  # the disk fills up after the check
        raise OSError(28, "No space left on device", str(src), None, str(dst))

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(SystemExit) as info:
        curves.main([str(tmp_path / "log.csv"), "-o", str(tmp_path / "run.png")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ".tmp" not in err
    assert err.splitlines()[-1] == (f"needle-plot: error: cannot write {tmp_path / 'run.png'} "
                                    "(No space left on device)")
    assert sorted(os.listdir(tmp_path)) == ["log.csv"]


def test_needle_plot_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "log.csv").write_text(CSV)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    with pytest.raises(SystemExit):
        curves.main([str(tmp_path / "log.csv")])
    assert "needs matplotlib, which is not installed: pip install needle[plot]" in \
        capsys.readouterr().err
    assert not (tmp_path / "log.png").exists()


def test_needle_plot_runs_as_a_module(tmp_path):
    out = subprocess.run([sys.executable, "-m", "needle.apps.curves", "--help"], check=True,
                         capture_output=True, text=True, cwd=tmp_path)
    assert "usage: needle-plot" in out.stdout and "--title" in out.stdout


def test_needle_plot_leaves_out_values_it_cannot_draw(tmp_path, matplotlib, capsys, monkeypatch):
    import matplotlib.axes

    log = tmp_path / "run.csv"
    log.write_text(CSV.replace("1,2.5,0.25,1.5,0.5", "1,1e308,0.25,-inf,0.5")
                   + "3,-1e308,nan,0.5,0.75,0.0001,4.5\n")
    drawn = []
    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda self, x, y, *a, **k: drawn.append(list(y)) or plot(self, x, y,
                                                                                  *a, **k))
    assert curves.main([str(log), "-o", str(tmp_path / "run.png")]) == 0
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("left out 4 values not finite or beyond +-1e+300: train_loss of epoch 1 (1e+308), "
            "test_loss of epoch 1 (-inf), train_loss of epoch 3 (-1e+308), train_accuracy of "
            "epoch 3 (nan)") in err
    # the curves: train loss, test loss, train accuracy (%), test accuracy (%); None: a gap
    assert [[None if math.isnan(v) else v for v in curve] for curve in drawn] == [
        [None, 1.25, None], [None, 1.0, 0.5], [25.0, 75.0, None], [50.0, 62.5, 75.0]]


def test_needle_plot_never_draws_over_its_log(tmp_path, capsys, matplotlib):
    """A log named run.png (needle-train takes any name) was overwritten by its own figure,
    the default output: the log was lost."""
    log = tmp_path / "run.png"
    log.write_text(CSV)
    for argv in ([str(log)], [str(log), "-o", str(tmp_path / "." / "run.png")]):
        with pytest.raises(SystemExit) as info:
            curves.main(argv)
        assert info.value.code == 2 and "is the log itself" in capsys.readouterr().err
    assert log.read_text() == CSV
