"""A client connection's states, and the only transitions between them (h11's
``_state.py`` and asyncpg's ``coreproto.pxd`` are the models): what a connection does in
each state is a row of a table here, not a combination of flags in connection.py.

The phase of its life, one at a time::

    HANDSHAKING ──tls_done──> AUTHENTICATING ──authenticated──> READY
         │                     (SASL listeners)                  ^
         └──tls_done_no_sasl─────────────────────────────────────┘
    HANDSHAKING, AUTHENTICATING, READY ──peer_closed──> DRAINING_RECEIVED
    HANDSHAKING, AUTHENTICATING, READY, DRAINING_RECEIVED ──close_when_sent──> DRAINING_ANSWERS
    any ──close──> CLOSED

    (a plaintext connection starts READY; a TLS one HANDSHAKING; a SASL_PLAINTEXT one
    AUTHENTICATING. A re-authentication (KIP-368) leaves the phase READY: the SASL
    Authenticator's own states say which requests it allows meanwhile.)

=================  =====  ==========================  ========
phase              reads  handles                     answers
=================  =====  ==========================  ========
HANDSHAKING        TLS    nothing                     nothing
AUTHENTICATING     yes    ApiVersions and SASL only   yes
READY              yes    every request               yes
DRAINING_RECEIVED  no     what was received           yes
DRAINING_ANSWERS   no     nothing more                what is queued, then CLOSED
CLOSED             no     nothing                     nothing
=================  =====  ==========================  ========

While it may read, a connection still does not read while one of these holds is on
(any number at once; connection.py's ``_holds`` derives them from its state, and reading
follows them every time one of their inputs changes):

- MUTED: a client quota throttles it (Kafka mutes the channel for the throttle time);
- OUTPUT: the answers queued for it exceed MAX_PENDING_OUTPUT (it reads them too slowly);
- FRAMES: MAX_PENDING_FRAMES requests are waiting to be handled (again below half);
- BEHIND: a request is in flight (a long poll, acks=all) and what was received behind it
  reached queued.max.request.bytes.per.connection (0: Kafka's rule, nothing is read while
  a request is in flight);
- MEMORY: between two requests, while the requests queued on the whole broker are at
  queued.max.request.bytes.
"""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    HANDSHAKING = "handshaking"
    AUTHENTICATING = "authenticating"
    READY = "ready"
    DRAINING_RECEIVED = "draining received requests"
    DRAINING_ANSWERS = "draining answers"
    CLOSED = "closed"

    @property
    def reads(self) -> bool:
        return self in _READING

    @property
    def authenticating(self) -> bool:
        """The TLS handshake or SASL authentication is still to complete."""
        return self in (Phase.HANDSHAKING, Phase.AUTHENTICATING)

    @property
    def draining(self) -> bool:
        return self in (Phase.DRAINING_RECEIVED, Phase.DRAINING_ANSWERS)


class Hold(enum.Flag):
    NONE = 0
    MUTED = enum.auto()
    OUTPUT = enum.auto()
    FRAMES = enum.auto()
    BEHIND = enum.auto()
    MEMORY = enum.auto()


class Event(enum.Enum):
    TLS_DONE = "tls_done"  # handshake done, SASL to follow
    TLS_DONE_NO_SASL = "tls_done_no_sasl"  # handshake done, nothing to follow
    AUTHENTICATED = "authenticated"  # SASL authentication (or a re-authentication) completed
    PEER_CLOSED = "peer_closed"  # the client closed its side
    CLOSE_WHEN_SENT = "close_when_sent"
    CLOSE = "close"


_READING = frozenset({Phase.HANDSHAKING, Phase.AUTHENTICATING, Phase.READY})
_LIVE = (Phase.HANDSHAKING, Phase.AUTHENTICATING, Phase.READY)

#: (phase, event) -> the next phase; anything else is a bug (IllegalTransition)
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (Phase.HANDSHAKING, Event.TLS_DONE): Phase.AUTHENTICATING,
    (Phase.HANDSHAKING, Event.TLS_DONE_NO_SASL): Phase.READY,
    (Phase.AUTHENTICATING, Event.AUTHENTICATED): Phase.READY,
    (Phase.READY, Event.AUTHENTICATED): Phase.READY,  # a re-authentication completed
    # a SaslAuthenticate received before the client closed its side completes after it
    (Phase.DRAINING_RECEIVED, Event.AUTHENTICATED): Phase.DRAINING_RECEIVED,
    (Phase.DRAINING_ANSWERS, Event.AUTHENTICATED): Phase.DRAINING_ANSWERS,
    **{(p, Event.PEER_CLOSED): Phase.DRAINING_RECEIVED for p in _LIVE},
    **{(p, Event.CLOSE_WHEN_SENT): Phase.DRAINING_ANSWERS for p in (*_LIVE, Phase.DRAINING_RECEIVED)},
    (Phase.DRAINING_ANSWERS, Event.CLOSE_WHEN_SENT): Phase.DRAINING_ANSWERS,
    # CLOSED takes every event and stays (a request's task may end after its connection)
    **{(Phase.CLOSED, e): Phase.CLOSED for e in Event},
    **{(p, Event.CLOSE): Phase.CLOSED for p in Phase},
}


class IllegalTransition(RuntimeError):
    pass


def initial_phase(tls: bool, sasl: bool) -> Phase:
    """Where a new connection starts, by what its listener asks for."""
    if tls:
        return Phase.HANDSHAKING
    return Phase.AUTHENTICATING if sasl else Phase.READY


def next_phase(phase: Phase, event: Event) -> Phase:
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise IllegalTransition(f"connection: {event.value} in phase {phase.value}") from None
