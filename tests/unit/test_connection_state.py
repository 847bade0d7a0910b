"""connection_state: the phases of a connection and the only transitions between them;
the holds on reading, as a connection reports them."""

from __future__ import annotations

import pytest

from broker.server.connection_state import (
    TRANSITIONS,
    Event,
    IllegalTransition,
    Phase,
    initial_phase,
    next_phase,
)


@pytest.mark.parametrize(
    "tls,sasl,phase",
    [
        (False, False, Phase.READY),
        (True, False, Phase.HANDSHAKING),
        (True, True, Phase.HANDSHAKING),
        (False, True, Phase.AUTHENTICATING),
    ],
)
def test_where_a_connection_starts(tls, sasl, phase):
    assert initial_phase(tls, sasl) is phase


def walk(phase, *events):
    for e in events:
        phase = next_phase(phase, e)
    return phase


def test_the_ways_of_a_connection():
    assert walk(Phase.HANDSHAKING, Event.TLS_DONE, Event.AUTHENTICATED) is Phase.READY
    assert walk(Phase.HANDSHAKING, Event.TLS_DONE_NO_SASL) is Phase.READY
    assert walk(Phase.READY, Event.AUTHENTICATED) is Phase.READY  # a re-authentication
    assert walk(Phase.READY, Event.PEER_CLOSED, Event.CLOSE_WHEN_SENT, Event.CLOSE) is Phase.CLOSED
    assert walk(Phase.AUTHENTICATING, Event.PEER_CLOSED, Event.AUTHENTICATED) is Phase.DRAINING_RECEIVED
    for event in Event:  # closed stays closed
        assert next_phase(Phase.CLOSED, event) is Phase.CLOSED


@pytest.mark.parametrize("phase,event", [(p, e) for p in Phase for e in Event if (p, e) not in TRANSITIONS])
def test_anything_else_is_a_bug(phase, event):
    with pytest.raises(IllegalTransition):
        next_phase(phase, event)


def test_what_each_phase_does():
    assert [p for p in Phase if p.reads] == [Phase.HANDSHAKING, Phase.AUTHENTICATING, Phase.READY]
    assert [p for p in Phase if p.authenticating] == [Phase.HANDSHAKING, Phase.AUTHENTICATING]
    assert [p for p in Phase if p.draining] == [Phase.DRAINING_RECEIVED, Phase.DRAINING_ANSWERS]
    # a connection authenticates once: nothing leads back to the phases before READY
    assert not any(new.authenticating for (old, _), new in TRANSITIONS.items() if not old.authenticating)
