"""A run's lifecycle, the same for RL (``TrainerBase``) and the SFT warm start: its folder (new, replaced or
resumed, by ``run_folder.py``'s rules), its record (config.json), its metrics log and printed table, the
progress bar with its phases, writing into the folder without losing work to a full disk, and its end (the
plot, the logger closed). Every rank checks; only rank 0 writes.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

from ragen_envs.agent import progress
from ragen_envs.agent.outputs import check_writable, save_or_keep
from trainers import run_folder
from trainers.distributed import all_reduce, broadcast
from trainers.metrics import MetricsLogger, plot_run

PROGRESS_EVERY_S = 0.5  # inside a long phase, the bar moves at most this often


def resolve_folder(output_dir: str | None, resume_from: str | None, algorithm: str, envs: list[str],
                   world: int = 1) -> Path:
    """The run folder: ``output_dir``; else a resumed checkpoint's parent; else a new folder (rank 0's name)."""
    if output_dir:
        return Path(output_dir)
    if resume_from == "latest":
        raise ValueError("resume_from_checkpoint='latest' needs output_dir, the run folder to resume")
    if resume_from:
        return Path(resume_from).parent
    return Path(broadcast(str(run_folder.new_folder(algorithm, envs)), world))


class Run:
    """One run in ``folder``. ``record``: what its config.json holds (None: no config.json is written, as in
    a model folder, whose config.json is the model's). ``what``: the run as error messages name it."""

    def __init__(self, folder: str | Path, record: dict | None = None, rank: int = 0, world: int = 1,
                 what: str = "the run"):
        self.folder = Path(folder)
        self.record = record
        self.rank, self.world, self.what = rank, world, what
        self.logger: MetricsLogger | None = None  # rank 0's, once open_log is called
        self.bar = None  # rank 0's progress bar, once start_bar is called
        self.plot_path: Path | None = None
        self._made = False  # whether this run makes the folder (then a failed start removes it)
        # the long phase the bar shows steps of, when it began and when the bar last showed it
        self._progress_of = ("", 0.0, 0.0)

    # == the folder ================================================================================
    def start(self, overwrite: bool) -> None:
        """A new run: a folder holding another run is refused, or with ``overwrite`` cleared (by rank 0, once
        every rank has checked)."""
        old = run_folder.check(self.folder, overwrite)
        all_reduce([0], self.world)
        if self.rank == 0:
            run_folder.clear(old)
        self.check_writable()

    def resume(self, iteration: int, allow_changes: bool, flag) -> None:
        """A run resumed at ``iteration``: its record keeps the old one's history, and a changed setting is
        refused unless ``allow_changes`` (``run_folder.resumed_record``)."""
        self.record = run_folder.resumed_record(run_folder.read_record(self.folder), self.record, iteration,
                                                allow_changes, flag)
        self.check_writable()

    def check_writable(self) -> None:
        """A ValueError unless rank 0 can write in the folder (made when missing)."""
        self._made = not self.folder.exists()
        if self.rank == 0:
            check_writable(self.folder, self.what)

    @contextmanager
    def removed_on_error(self):
        """Around loading the model: when it fails, a folder this run made and left empty is removed, so
        a model that would not load leaves no trace."""
        try:
            yield
        except BaseException:
            if self._made and self.rank == 0:
                run_folder.remove_if_empty(self.folder)
            raise

    # == the record and the metrics =================================================================
    def open_log(self, keep_iterations: int = 0, report_to: str | None = "auto") -> None:
        """Rank 0 opens the metrics log (on resume, records after ``keep_iterations`` are set aside:
        ``MetricsLogger``) and writes the record."""
        if self.rank != 0:
            return
        self.logger = MetricsLogger(self.folder, keep_iterations=keep_iterations, report_to=report_to,
                                    run_config=self.record)
        if self.record is not None:
            self.write_record()

    def write_record(self) -> Path:
        """``config.json`` next to the metrics: every field resolved, plus env and model, so
        ``ragen train --config`` repeats the run."""
        path = self.folder / "config.json"
        path.write_text(json.dumps(self.record, indent=2) + "\n")
        return path

    def log(self, metrics: dict, print_row: bool = True) -> dict:
        """Rank 0 writes ``metrics`` (and prints its table row); every rank returns them."""
        if self.logger is not None:
            self.logger.log(metrics)
            if print_row:
                (self.bar.print if self.bar is not None else print)(self.logger.table_row(metrics))
        return metrics

    # == progress ===================================================================================
    def start_bar(self, total: int, unit: str, desc: str) -> None:
        self.bar = progress.bar(total, unit, desc) if self.rank == 0 else None

    def show(self, position: int, **postfix) -> None:
        """The bar at ``position`` (iterations, steps) with ``postfix`` (a phase, a loss) beside it."""
        if self.bar is not None:
            self.bar(position, **postfix)

    def progress(self, position: int, phase: str, done: int, total: int) -> None:
        """Progress inside a long phase (``done`` of ``total`` steps; 0 starts its clock), with an estimate
        of the time it has left, so a bar that stands still for minutes still moves."""
        now = time.perf_counter()
        if done == 0 or self._progress_of[0] != phase:
            self._progress_of = (phase, now, 0.0)
        name, began, shown = self._progress_of
        if done and now - shown < PROGRESS_EVERY_S:  # fast steps: a line per step would flood a log file
            return
        self._progress_of = (name, began, now)
        left = {"left": f"{(now - began) / done * (total - done):.0f}s"} if done else {}
        self.show(position, phase=phase, step=f"{done}/{total}", **left)

    # == writing and the end ========================================================================
    def save(self, write, what: str, message: str, note=None) -> None:
        """``write(folder)`` under the status line ``message``; where the disk refuses, the work is written
        to the temp folder instead (``save_or_keep``: a ValueError naming both). ``note()``: what the status
        line adds once written (a size)."""
        with progress.step(message) as shown:
            save_or_keep(write, self.folder, what)
            if note is not None:
                shown.append(note())

    def close(self, plot: bool) -> None:
        """The end: the metrics' plot (rank 0, where ``plot``), the logger closed."""
        if self.rank == 0 and plot:
            self.plot_path = plot_run(self.folder)
        if self.logger is not None:
            self.logger.close()
