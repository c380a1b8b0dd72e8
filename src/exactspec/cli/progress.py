"""Progress of a long command wherever its output goes, and what Ctrl-C leaves behind.

On a terminal (stderr) a rich progress bar, gone when the command ends. Anywhere else (CI, `| tee`, a log file)
one plain line per finished unit on stderr, with the time elapsed and an estimate of what remains, e.g.
``bench: 3/24 prompt 2 x exactspec token (γ=auto) 0.41 s | 12.3 s elapsed, ~85 s left``. With a log file
(`--out`), the same plain lines are appended to it too, terminal or not.

Ctrl-C: a command keeps what it finished (see each command), says so on stderr and exits with
:data:`INTERRUPTED` (128 + SIGINT, as a shell reports a process ended by Ctrl-C).
"""
from __future__ import annotations

import datetime
import sys
import time

INTERRUPTED = 130


class Progress:
    """Units of work of the command `name` (bench, plan, profile): :meth:`phase` as a stage begins, :meth:`start`
    when the counted units begin, :meth:`unit` as each ends."""

    def __init__(self, name: str, log: str | None = None, stream=None):
        self.name, self.stream = name, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.t_units, self.total, self.done = None, None, 0
        self.log = None
        if log is not None:
            self.log = open(log, "a", encoding="utf-8")  # noqa: SIM115 (closed in __exit__)
            stamp = datetime.datetime.now().isoformat(timespec="seconds")
            self._write_log(f"--- {stamp} exactspec {' '.join(sys.argv[1:]) or self.name}")
        self.bar = self.task = None

    def __enter__(self) -> "Progress":
        if self.tty:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TimeRemainingColumn(),
                           console=Console(file=self.stream), transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.name, total=None)
        return self

    def __exit__(self, *exc) -> None:
        self.stop_bar(*exc)
        if self.log is not None:
            self.log.close()
            self.log = None

    def stop_bar(self, *exc) -> None:
        """Take the terminal's bar away (before printing a report); plain lines and the log go on."""
        if self.bar is not None:
            self.bar.__exit__(*(exc or (None, None, None)))
            self.bar = None

    # ------------------------------------------------------------------------------------------ lines
    def _elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _write_log(self, line: str) -> None:
        if self.log is not None:
            self.log.write(line + "\n")
            self.log.flush()

    def _line(self, text: str) -> None:
        line = f"{self.name}: {text}"
        self._write_log(line)
        if not self.tty:
            print(line, file=self.stream, flush=True)

    def phase(self, text: str) -> None:
        """A stage begins (loading, measuring a cost model, warm-up): the bar's caption, or a line."""
        if self.bar is not None:
            self.bar.update(self.task, description=f"{self.name}: {text}")
        self._line(f"{text} ({self._elapsed():.1f} s elapsed)")

    def start(self, total: int, text: str | None = None) -> None:
        """The counted units begin: `total` of them; the estimate of what remains is timed from here."""
        self.total, self.done, self.t_units = total, 0, time.perf_counter()
        if self.bar is not None:
            self.bar.update(self.task, total=total, completed=0,
                            description=f"{self.name}: {text}" if text else self.name)
        if text:
            self._line(f"{text}: {total} to do ({self._elapsed():.1f} s elapsed)")

    def unit(self, what: str, done: int | None = None) -> None:
        """A unit ended (`done` of the total, default one more than before); `what` names it."""
        self.done = self.done + 1 if done is None else done
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
        left = ""
        if self.total and self.t_units is not None and self.done < self.total:
            rate = (time.perf_counter() - self.t_units) / max(self.done, 1)
            left = f", ~{_dur(rate * (self.total - self.done))} left"
        of = f"/{self.total}" if self.total else ""
        self._line(f"{self.done}{of} {what} | {_dur(self._elapsed())} elapsed{left}")

    def log_only(self, text: str) -> None:
        """A line for the log file alone (stderr has its own, :func:`interrupted`)."""
        self._write_log(f"{self.name}: {text}")


def _dur(seconds: float) -> str:
    """12.3 s, 4 min 05 s, 1 h 02 min."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def interrupted(command: str, text: str, progress: Progress | None = None) -> int:
    """Say on stderr (and in the command's log) what a Ctrl-C kept, one line ``exactspec CMD: interrupted:
    ...``; return the exit status, 130."""
    if progress is not None:
        progress.log_only(f"interrupted: {text}")
    print(f"exactspec {command}: interrupted: {text}", file=sys.stderr, flush=True)
    return INTERRUPTED
