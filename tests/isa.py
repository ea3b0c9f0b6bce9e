"""The instruction sets the CPU kernels' direct loops can be switched to here (tests of both paths)."""
from __future__ import annotations

from shardwise import _core


def isa_available(name: str) -> bool:
    """Whether _core.conv_isa(name) is accepted on this CPU (the setting is put back to "auto")."""
    try:
        _core.conv_isa(name)
    except ValueError:
        return False
    finally:
        _core.conv_isa("auto")
    return True
