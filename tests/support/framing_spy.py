"""Which buffers FrameReader handed out for receiving in place (issue 22's tests)."""

from __future__ import annotations


def spy_direct_buffers(monkeypatch) -> list:
    """Patches FrameReader.direct_buffer to record each distinct frame buffer it hands
    out (the object its views are of), in order; returns that list."""
    from broker.protocol.framing import FrameReader

    owners: list = []
    direct_buffer = FrameReader.direct_buffer

    def spy(reader):
        buf = direct_buffer(reader)
        if buf is not None and not any(buf.obj is o for o in owners):
            owners.append(buf.obj)
        return buf

    monkeypatch.setattr(FrameReader, "direct_buffer", spy)
    return owners
