"""How the demo's acts speak: one line each, and threads that report errors as one line."""

from __future__ import annotations

import threading
from collections.abc import Callable


def say(msg: str = "") -> None:
    print(msg, flush=True)


def thread(target: Callable[[], None], errors: list[str]) -> threading.Thread:
    """A thread whose unexpected error the act reports as one line (no traceback on stderr)."""
    def run() -> None:
        try:
            target()
        except Exception as e:  # noqa: BLE001 - reported by the act that started the thread
            errors.append(f"{type(e).__name__}: {e}")

    return threading.Thread(target=run)
