"""Progress bars for long work (tqdm), switched off by --quiet or when not wanted."""

from __future__ import annotations

import contextlib
from typing import Iterator


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass


@contextlib.contextmanager
def bar(total: int | None, desc: str, unit: str = "it", enabled: bool = True) -> Iterator[object]:
    """A tqdm bar with rate and ETA, or a no-op object when disabled."""
    if not enabled:
        yield _NullBar()
        return
    from tqdm import tqdm

    # disable=False explicitly: --quiet sets TQDM_DISABLE for the libraries' bars, and tqdm
    # bakes that variable into its defaults when it is first imported; ours follow `enabled`.
    with tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, leave=True, disable=False) as pb:
        yield pb
