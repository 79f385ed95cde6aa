"""Progress inside a step: one short-lived ``tqdm.auto`` bar per phase and one for evaluation (not transformers'
``ProgressCallback``, which ``Trainer``'s loop drives: erl_lite does not run that loop).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Callable


class Progress:
    """Makes the bars of the phases; ``enabled``: a bool, or a function read at each bar."""

    def __init__(self, enabled: bool | Callable[[], bool] = True) -> None:
        self.enabled = enabled
        self._bars: list[Any] = []  # bars handed out, so an error cannot leave one on screen

    def on(self) -> bool:
        """Whether bars show now (a setting changed after the trainer was built counts)."""
        return bool(self.enabled() if callable(self.enabled) else self.enabled)

    def bar(self, desc: str, total: int, unit: str = "seq") -> Any:
        """A bar of ``total`` items (a context manager; ``update(n)`` ticks ``n``), gone when its phase ends."""
        from tqdm.auto import tqdm

        if not self.on() or total <= 0:
            return tqdm(total=total, disable=True)  # tqdm's own silent bar: same methods, shows and counts nothing
        self._bars = [b for b in self._bars if not getattr(b, "disable", False)]  # tqdm closed: disable
        self._bars.append(tqdm(desc=desc, total=total, unit=unit, leave=False, dynamic_ncols=True))
        return self._bars[-1]

    @contextlib.contextmanager
    def library_bars(self) -> Iterator[None]:
        """transformers' own (global) bars off while inside when these are off; put back on the way out."""
        from transformers.utils import logging as hf_logging

        was_on = hf_logging.is_progress_bar_enabled()
        if was_on and not self.on():
            hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            if was_on:
                hf_logging.enable_progress_bar()

    def close_all(self) -> None:
        """Close every bar still open (a phase stopped by an error; closing twice is harmless)."""
        bars, self._bars = self._bars, []
        for b in bars:
            b.close()


#: Bars that never show: the default of phase contexts and updaters built outside a trainer.
NO_PROGRESS = Progress(enabled=False)
