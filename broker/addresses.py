"""Bootstrap server lists, as every client takes them: 'host:port[,host:port...]'.

A leaf module (the standard library only), so that what must not import the client (the
Spark source's option parsing in Spark's short-lived Python workers, the log handler)
checks a list by the client's own rules."""

from __future__ import annotations


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """'host:port[,host:port...]' -> [(host, port)]; ValueError naming the bad entry.
    Blank entries are skipped; an IPv6 host may be bracketed ('[::1]:9092')."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap server given")
    return out
