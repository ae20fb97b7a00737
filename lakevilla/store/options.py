"""Reading delta-rs' ``storage_options`` (one dict serves lakevilla and deltalake alike).

delta-rs accepts each setting under several names, in any case (``AWS_REGION`` or
``region``; ``azure_storage_account_key`` or ``account_key``): every store looks its settings
up here, by the same aliases.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidArgumentError


def opt(options: Mapping[str, str], *names: str) -> str | None:
    """The first of ``names`` set (not empty) in ``options``, compared without case."""
    lowered = {k.lower(): v for k, v in options.items()}
    for n in names:
        v = lowered.get(n.lower())
        if v is not None and v != "":
            return str(v)
    return None


def flag(options: Mapping[str, str], *names: str) -> bool:
    """A boolean setting as delta-rs reads it ("true", "1", "yes", "on")."""
    raw = opt(options, *names)
    return raw is not None and raw.strip().lower() in ("true", "1", "yes", "on")


def seconds(raw: str | None, default: float) -> float:
    """A duration as delta-rs writes it ("5s", "300ms", "2 seconds") or a number of seconds."""
    if raw is None:
        return default
    text = raw.strip().lower()
    for suffix, scale in (("ms", 0.001), ("milliseconds", 0.001), ("seconds", 1.0), ("second", 1.0),
                          ("secs", 1.0), ("sec", 1.0), ("s", 1.0)):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)].strip()) * scale
            except ValueError:
                break
    try:
        return float(text)
    except ValueError:
        raise InvalidArgumentError(f"not a duration: {raw!r} (use seconds, e.g. "
                                   "'5s' or '300ms')") from None
