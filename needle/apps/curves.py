"""Training curves: the per-epoch CSV log of needle-train, its figure, and `needle-plot`.

    needle-train --epochs 3 --log-csv run.csv --plot run.png
    needle-plot run.csv -o run.svg          # the same figure from a log, later

matplotlib is optional (`pip install needle[plot]`) and imported only to draw.
"""

from __future__ import annotations

import argparse
import csv
import errno
import io
import math
import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matplotlib is optional and imported only to draw
    from matplotlib.figure import Figure

IMAGE_COLUMNS = ("epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy", "lr",
                 "seconds")
LM_COLUMNS = ("epoch", "train_loss", "train_perplexity", "test_loss", "test_perplexity", "lr",
              "seconds")
FIGURE_FORMATS = (".png", ".svg", ".pdf")
# the largest magnitude a figure draws: matplotlib's axis arithmetic overflows near 1.8e308
DRAWABLE = 1e300
PLOT_HINT = "pip install needle[plot] (or: pip install matplotlib)"

Row = dict[str, float]


def perplexity(loss: float) -> float:
    """exp(`loss`), inf where that overflows a float (a diverging run's loss above ~709.8)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --log-csv, --plot and --plot-every-epoch to needle-train's command line."""
    add = parser.add_argument
    add("--log-csv", type=Path, metavar="FILE",
        help="write one row per epoch to FILE (CSV: epoch, train and test loss and accuracy or "
             "perplexity, lr, seconds); with --resume, rows are appended (default: none)")
    add("--plot", type=Path, metavar="FILE",
        help="draw the loss and accuracy (or perplexity) curves to FILE (.png, .svg or .pdf) "
             "at the end; needs matplotlib: pip install needle[plot] (default: none)")
    add("--plot-every-epoch", action="store_true",
        help="redraw the --plot figure after every epoch (default: off)")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors for the curve options, before any data is loaded or training starts."""
    if args.plot_every_epoch and args.plot is None:
        parser.error("--plot-every-epoch needs --plot FILE")
    if args.plot is not None:
        if args.plot.suffix.lower() not in FIGURE_FORMATS:
            parser.error(f"--plot {args.plot}: name a .png, .svg or .pdf file")
        _check_folder(parser, "--plot", args.plot)
        if not matplotlib_available():
            parser.error(f"--plot needs matplotlib, which is not installed: {PLOT_HINT}")
    if args.log_csv is not None:
        _check_folder(parser, "--log-csv", args.log_csv)


def matplotlib_available() -> bool:
    """Whether matplotlib can be imported (it is, when it is: drawing needs it next)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _check_folder(parser: argparse.ArgumentParser, flag: str, path: Path) -> None:
    """A usage error, now rather than after training or drawing, when `path` is a folder or
    its folder does not exist or takes no new files (the file is written through a temporary
    file beside it)."""
    if path.is_dir():
        parser.error(f"{flag} {path}: is a folder; name a file")
    if not path.parent.is_dir():
        what = "is not a folder" if path.parent.exists() else "does not exist"
        parser.error(f"{flag} {path}: cannot write there: {path.parent} {what}")
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        parser.error(f"{flag} {path}: cannot write in the folder {path.parent} "
                     f"({e.strerror or e})")


class EpochLog:
    """The epochs of a run: kept in memory, written to the CSV, drawn as a figure."""

    def __init__(self, language_model: bool, title: str, csv_path: Path | None = None,
                 plot_path: Path | None = None, plot_every_epoch: bool = False,
                 rows: list[Row] | None = None) -> None:
        self.columns = LM_COLUMNS if language_model else IMAGE_COLUMNS
        self.title = title
        self.csv_path, self.plot_path = csv_path, plot_path
        self.plot_every_epoch = plot_every_epoch
        self.rows: list[Row] = list(rows or [])

    @classmethod
    def from_args(cls, parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                  language_model: bool, title: str, start: int,
                  seconds: float = 0.0) -> EpochLog | None:
        """The log of a run that starts after epoch `start`, `seconds` into its training
        (None without --log-csv/--plot).

        A resumed run keeps the rows of the CSV up to epoch `start` and drops later ones
        (their epochs are trained again), so no epoch appears twice; a fresh run starts it anew,
        and so does a resumed run whose CSV does not exist yet (from epoch `start` + 1). The
        CSV must be this run's: consecutive epochs up to `start` (from 1, or from where a
        resumed run started it), the row of `start` at `seconds` (the checkpoint's time,
        which needle-train writes to both).
        """
        if args.log_csv is None and args.plot is None:
            return None
        log = cls(language_model, title, args.log_csv, args.plot, args.plot_every_epoch)
        if args.log_csv is not None and start > 0 and args.log_csv.exists():
            try:
                columns, rows = read_csv(args.log_csv)
            except (OSError, ValueError) as e:
                parser.error(f"--log-csv: {e}")
            if columns != log.columns:
                parser.error(f"--log-csv {args.log_csv}: its columns ({', '.join(columns)}) "
                             f"are not this run's ({', '.join(log.columns)})")
            log.rows = [row for row in rows if row["epoch"] <= start]
            problem = _other_run(log.rows, start, seconds)
            if problem:
                parser.error(f"--log-csv {args.log_csv}: {problem}, so it logs another run "
                             f"than {args.resume} (epoch {start}, {seconds!r} s); name "
                             "another file")
        return log

    def record(self, epoch: int, metrics: dict[str, Any], lr: float) -> None:
        """Add the row of `epoch` (from needle-train's metrics), write the CSV, maybe draw."""
        lm = self.columns is LM_COLUMNS
        score = (lambda loss, err: perplexity(loss)) if lm else (lambda loss, err: 1.0 - err)
        row = dict(zip(self.columns, (
            epoch, metrics["train_loss"], score(metrics["train_loss"], metrics["train_err"]),
            metrics["test_loss"], score(metrics["test_loss"], metrics["test_err"]), lr,
            metrics["seconds"])))
        self.rows = [r for r in self.rows if r["epoch"] < epoch] + [row]
        if self.csv_path is not None:
            write_csv(self.csv_path, self.columns, self.rows)
        if self.plot_every_epoch:
            self.draw()

    def draw(self) -> None:
        """Draw the rows to the --plot file (nothing without one, or without rows)."""
        if self.plot_path is not None and self.rows:
            save_figure(self.rows, self.columns, self.title, self.plot_path)


def _other_run(rows: list[Row], start: int, seconds: float) -> str | None:
    """Why `rows` (a CSV's rows up to epoch `start`) are not those of the checkpoint after
    epoch `start` at `seconds` of training, or None when they are.

    They are when they number consecutive epochs up to `start`, from 1 or, for a log first
    given to a resumed run, from that run's first epoch, and the row of `start` is at
    `seconds`: the checkpoint's training time, which ties the log to its run."""
    epochs = [int(r["epoch"]) for r in rows]
    if not epochs:
        return f"it holds no epochs up to {start}"
    if epochs[0] < 1 or epochs != list(range(epochs[0], epochs[0] + len(epochs))):
        return f"its epochs are {_span(epochs)}, not consecutive numbers from 1 or later"
    if epochs[-1] < start:
        return f"it ends at epoch {epochs[-1]}, before epoch {start}"
    if rows[-1]["seconds"] != seconds:
        return f"its epoch {start} ended at {rows[-1]['seconds']!r} s of training"
    return None


def _span(epochs: list[int]) -> str:
    """Epoch numbers in words, shortened when many."""
    text = ", ".join(map(str, epochs[:6]))
    return text + (", ..." if len(epochs) > 6 else "")


def write_csv(path: Path, columns: tuple[str, ...], rows: list[Row]) -> None:
    """Write the header and `rows` to `path` atomically (a reader never sees half a file)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([int(row["epoch"])] + [repr(float(row[c])) for c in columns[1:]])
    _write_atomically(path, out.getvalue().encode())


def read_csv(path: Path) -> tuple[tuple[str, ...], list[Row]]:
    """The columns and rows of a needle-train log; ValueError naming the file and line."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")  # as write_csv writes it, whatever the locale
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a needle-train log: it is not UTF-8 text (byte "
                         f"0x{data[e.start]:02x} at offset {e.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        lines = list(reader)
    except csv.Error as e:  # a field over csv's size limit
        raise ValueError(f"{path}, line {reader.line_num}: malformed CSV ({e})") from None
    if not lines:
        raise ValueError(f"{path} is empty, not a needle-train log")
    columns = tuple(lines[0])
    if columns not in (IMAGE_COLUMNS, LM_COLUMNS):
        raise ValueError(f"{path} is not a needle-train log: its header is {','.join(columns)}"
                         f" (expected {','.join(IMAGE_COLUMNS)} or {','.join(LM_COLUMNS)})")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            if len(line) != len(columns):
                raise ValueError(f"{len(line)} fields, not {len(columns)}")
            row = {c: float(v) for c, v in zip(columns, line)}
            row["epoch"] = int(line[0])
        except ValueError as e:
            raise ValueError(f"{path}, line {number}: malformed row ({e})") from None
        rows.append(row)
    return columns, rows


def _curves(columns: tuple[str, ...]) -> list[tuple[str, float]]:
    """The drawn columns and the factor each is drawn at (accuracy in %)."""
    scale = 1.0 if columns == LM_COLUMNS else 100.0
    return [(c, scale if c.endswith(("accuracy", "perplexity")) else 1.0)
            for c in columns[1:5]]


def _drawn(value: float) -> float:
    """`value` as drawn: nan (left out of its curve) when not finite or beyond DRAWABLE."""
    return value if math.isfinite(value) and abs(value) <= DRAWABLE else math.nan


def left_out(rows: list[Row], columns: tuple[str, ...]) -> list[str]:
    """The values a figure of `rows` leaves out (not finite, or too large to draw), in words."""
    return [f"{column} of epoch {int(r['epoch'])} ({r[column]!r})" for r in rows
            for column, k in _curves(columns) if math.isnan(_drawn(k * r[column]))]


def figure(rows: list[Row], columns: tuple[str, ...], title: str) -> Figure:
    """A matplotlib Figure: loss on the left axes, accuracy (or perplexity) on the right.

    Values that are not finite or beyond +-DRAWABLE are left out of their curves (gaps)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    lm = columns == LM_COLUMNS
    score, unit = ("perplexity", "perplexity") if lm else ("accuracy", "accuracy (%)")
    scale = dict(_curves(columns))
    test = "held-out" if lm else "test"
    epochs = [r["epoch"] for r in rows]
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    loss_ax, score_ax = fig.subplots(1, 2)
    for ax, key, label in ((loss_ax, "loss", "loss (cross-entropy)"), (score_ax, score, unit)):
        for split, style, name in (("train", "o-", "train"), ("test", "s--", test)):
            k = scale[f"{split}_{key}"]
            ax.plot(epochs, [_drawn(k * r[f"{split}_{key}"]) for r in rows], style, label=name)
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    return fig


def save_figure(rows: list[Row], columns: tuple[str, ...], title: str, path: Path) -> None:
    """Draw `rows` and write the figure to `path` (its format from the suffix), atomically."""
    from matplotlib import rc_context

    out = io.BytesIO()
    with rc_context({"svg.hashsalt": "needle"}):  # fixed ids in SVG files
        figure(rows, columns, title).savefig(out, format=path.suffix.lower().lstrip("."),
                                             metadata=_fixed_metadata(path))
    _write_atomically(path, out.getvalue())


def _fixed_metadata(path: Path) -> dict[str, Any]:
    """No creation date or software version in the file: the same log gives the same bytes."""
    fmt = path.suffix.lower()
    if fmt == ".svg":
        return {"Date": None, "Creator": None}
    if fmt == ".pdf":
        return {"CreationDate": None, "Creator": None, "Producer": None}
    return {"Software": None}


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file beside it (mode 0o666 less the umask).

    An OSError names `path`, never the temporary file."""
    try:
        for _ in range(100):
            tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary file name beside it")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as e:
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def main(argv: list[str] | None = None) -> int:
    """Entry point of `needle-plot`: draw a needle-train CSV log; the exit status."""
    parser = argparse.ArgumentParser(
        prog="needle-plot", description="Draw the training curves of a needle-train "
                                        "--log-csv file (needs matplotlib: pip install "
                                        "needle[plot]).")
    parser.add_argument("csv", type=Path, metavar="FILE.csv", help="the log to draw")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="the figure, .png, .svg or .pdf (default: FILE.png beside the log)")
    parser.add_argument("--title", help="the figure's title (default: the log's file name)")
    args = parser.parse_args(argv)
    out = args.output or args.csv.with_suffix(".png")
    if out.suffix.lower() not in FIGURE_FORMATS:
        parser.error(f"-o {out}: name a .png, .svg or .pdf file")
    if out.resolve() == args.csv.resolve() or (out.exists() and args.csv.exists()
                                               and os.path.samefile(out, args.csv)):
        parser.error(f"-o {out}: is the log itself (a log named .png would be overwritten by "
                     "its figure); name another file with -o")
    _check_folder(parser, "-o", out)
    if not matplotlib_available():
        parser.error(f"needs matplotlib, which is not installed: {PLOT_HINT}")
    try:
        columns, rows = read_csv(args.csv)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    if not rows:
        parser.error(f"{args.csv} has no epochs to draw")
    skipped = left_out(rows, columns)
    if skipped:
        print(f"needle-plot: left out {_plural(len(skipped), 'value')} not finite or beyond "
              f"+-{DRAWABLE:g}: {', '.join(skipped[:5])}{', ...' if len(skipped) > 5 else ''}",
              file=sys.stderr)
    try:
        save_figure(rows, columns, args.title or args.csv.name, out)
    except OSError as e:
        parser.error(f"cannot write {out} ({e.strerror or e})")
    print(f"needle-plot: {_plural(len(rows), 'epoch')} drawn to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
