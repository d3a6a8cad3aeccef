"""Numbers in operator log lines: sizes in binary units beside the raw count."""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(count: int) -> str:
    """``104.2 MiB (109,264,512 bytes)``; below 1 KiB just ``512 bytes``."""
    if abs(count) < 1024:
        return f"{count:,} bytes"
    value = float(count)
    unit = "bytes"
    for unit in _UNITS:
        value /= 1024
        if abs(value) < 1024:
            break
    return f"{value:.1f} {unit} ({count:,} bytes)"
