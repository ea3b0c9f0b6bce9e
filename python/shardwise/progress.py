"""Progress of long calls: a tqdm bar with an ETA on a terminal or in a notebook, one line per
stage where stderr is a log file.

Every call that can run for more than about a second (``sw.search``, ``Trainer.fit``,
``sw.profile``, ``sw.tune_minibatch``) takes ``progress``:

* ``"auto"`` (the default): nothing for a call that ends within :data:`SHOW_AFTER` seconds;
  past that, a bar (terminals, notebooks) or stage lines (logs) appear;
* ``True``: stage lines and bars from the start (the command line's default);
* ``False``: silent.

    with ProgressReport("search", progress) as report:
        report.stage("enumerate configurations", seconds)      # a stage that ended
        report.advance(done, total, "elimination search")       # counted work: bar with an ETA

A terminal is a stderr that ``isatty()``; a notebook is a running IPython kernel.  tqdm draws
the bars (its notebook widget where ipywidgets is installed, text otherwise).
"""
from __future__ import annotations

import importlib.util
import sys
import time
from typing import Any, Callable, TextIO, Union

SHOW_AFTER = 1.0   # seconds before "auto" shows anything

ProgressArg = Union[bool, str, Callable[[str, float], None]]


def check_progress(progress: Any, what: str = "progress") -> None:
    """ConfigError unless ``progress`` is True, False, "auto" (or, where allowed, a callable)."""
    from shardwise.errors import ConfigError

    if progress is True or progress is False or progress == "auto" or callable(progress):
        return
    raise ConfigError(f"{what} must be True, False or 'auto', got {progress!r}")


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (its output goes to a notebook, not a terminal)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()   # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an IPython that cannot tell: not a notebook
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def _tqdm_class() -> Any:
    """tqdm's notebook bar in a notebook with ipywidgets, its text bar otherwise."""
    if in_notebook() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
        return tqdm
    from tqdm import tqdm
    return tqdm


class ProgressReport:
    """The progress of one call: stages that end, and counted work in between.

    ``progress``: True, False or "auto" (module docstring), or a callable ``(stage, seconds)``
    that gets every finished stage and nothing else (``sw.search``'s older form).
    ``stream``: where it goes (default sys.stderr, looked up when the report is made)."""

    def __init__(self, what: str, progress: ProgressArg = "auto", stream: TextIO | None = None,
                 unit: str = "it") -> None:
        self.what = what
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.callback = progress if callable(progress) and progress not in (True, False) else None
        self.enabled = progress is True or progress == "auto"
        self.always = progress is True
        self.start = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self.bars = self.enabled and (in_notebook() or bool(isatty and isatty()))
        self._held: list[str] = []    # "auto" in a log: stage lines kept until SHOW_AFTER has passed
        self._bar: Any = None
        self._bar_label: str | None = None

    # ---- stages
    def stage(self, name: str, seconds: float) -> None:
        """A stage of the call ended after ``seconds``."""
        if self.callback is not None:
            self.callback(name, seconds)
            return
        if not self.enabled:
            return
        self._close_bar()
        line = f"  [shardwise] {name:<44} {_seconds(seconds)}"
        if self.always or time.perf_counter() - self.start >= SHOW_AFTER:
            for held in self._held:
                self._write(held)
            self._held.clear()
            self._write(line)
        else:
            self._held.append(line)

    __call__ = stage   # a ProgressReport is also the (stage, seconds) callable the planners take

    def stage_since(self, name: str, start: float) -> float:
        """The stage ``name`` that began at ``start`` (time.perf_counter()) ended now; returns now,
        the next stage's start."""
        now = time.perf_counter()
        self.stage(name, now - start)
        return now

    # ---- counted work
    def advance(self, done: float, total: float | None, label: str, **postfix: Any) -> None:
        """``done`` of ``total`` units of the work named ``label`` are done (total None: unknown).
        A bar with an ETA where bars are drawn; in a log, nothing until the stage ends."""
        if not self.enabled or not self.bars or self.callback is not None:
            return
        if self._bar is None or self._bar_label != label:
            self._close_bar()
            delay = 0.0 if self.always else max(0.0, SHOW_AFTER - (time.perf_counter() - self.start))
            self._bar = _tqdm_class()(total=total, desc=f"[shardwise] {label}", unit=self.unit, file=self.stream,
                                      delay=delay, leave=False, dynamic_ncols=True)
            self._bar_label = label
        bar = self._bar
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)
        if postfix:
            bar.set_postfix(postfix, refresh=False)

    def line(self, text: str) -> None:
        """A line of its own (an epoch's summary), where lines are shown."""
        if not self.enabled or self.callback is not None:
            return
        if self.always or time.perf_counter() - self.start >= SHOW_AFTER:
            self._write(f"  [shardwise] {self.what}: {text}")

    # ---- the end
    def close(self) -> None:
        self._close_bar()

    def __enter__(self) -> "ProgressReport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar, self._bar_label = None, None

    def _write(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)


def _seconds(s: float) -> str:
    return f"{s * 1e3:9.1f} ms" if s < 10 else f"{s:9.1f} s "
