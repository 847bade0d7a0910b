"""An OAUTHBEARER session never outlives its token (issue 34, item 4), on a real broker
process: two SASL_PLAINTEXT listeners taking OAUTHBEARER (a JWKS file, Kafka's default
clock skew of 30 s), one of them with connections.max.reauth.ms=6000.

A token that expired a few seconds ago is still valid within the clock skew. Kafka's
SaslServerAuthenticator then answers a session lifetime of 0 and sets the session's
expiry to the end of the authentication: the next request (but a re-authentication)
closes the connection. This broker used to take the lifetime of 0 for "no limit", also
over connections.max.reauth.ms, and served the connection for as long as the client
liked. The client here is the project's own connection, the SASL frames sent by hand: no
real client sends a token it knows to be expired."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from broker.client.connection import BrokerConnection, ClientError
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.metadata import MetadataRequest
from broker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from broker.security.oauthbearer import client_initial_response
from tests.interop.test_security import jwks_and_token
from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def oauth(tmp_path_factory):
    d = tmp_path_factory.mktemp("oauth-sessions")
    token = jwks_and_token(d)
    plain, once, reauth = free_port(), free_port(), free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},OAUTH://127.0.0.1:{once},REAUTH://127.0.0.1:{reauth}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{d / 'jwks.json'}",
        "sasl.oauthbearer.expected.audience": "kbroker",
        "sasl.oauthbearer.expected.issuer": "test-idp",
        "listener.name.reauth.connections.max.reauth.ms": 6000,
    }
    with BrokerProcess(d / "data", config=config, port=plain) as b:
        yield SimpleNamespace(broker=b, token=token, ports={"OAUTH": once, "REAUTH": reauth})


def authenticate(oauth, listener: str, token: str) -> tuple[BrokerConnection, object]:
    """ApiVersions, SaslHandshake and SaslAuthenticate v2 with the token: the connection
    and the SaslAuthenticate answer."""
    conn = BrokerConnection("127.0.0.1", oauth.ports[listener], client_id="oauth-session")
    assert conn.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), version=1).error_code == 0
    return conn, conn.request(SaslAuthenticateRequest(auth_bytes=client_initial_response(token)), version=2)


def served(conn: BrokerConnection) -> bool:
    """Whether a Metadata request is answered (False: the broker closed the connection)."""
    try:
        conn.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), timeout=10)
        return True
    except ClientError:
        return False


@pytest.mark.parametrize("listener", ["OAUTH", "REAUTH"])
def test_a_token_expired_within_the_clock_skew_gets_a_session_that_ends_at_once(oauth, listener):
    conn, resp = authenticate(oauth, listener, oauth.token(exp_s=-5))
    assert (resp.error_code, resp.session_lifetime_ms) == (0, 0)
    assert not served(conn)
    conn.close()
    # (the audit log holds back repeats: one line for both listeners may be all there is)
    assert "refused User:alice from 127.0.0.1 on " in oauth.broker.log_path.read_text()
    assert ": api key 3 session expired; closing" in oauth.broker.log_path.read_text()


def test_a_token_expired_beyond_the_clock_skew_is_refused(oauth):
    conn, resp = authenticate(oauth, "OAUTH", oauth.token(exp_s=-60))
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    conn.close()


def test_the_token_caps_the_re_authentication_limit_and_the_session_ends_with_it(oauth):
    # a token good for an hour: the listener's 6 s, or no limit where none is set
    conn, resp = authenticate(oauth, "REAUTH", oauth.token(exp_s=3600))
    assert (resp.error_code, resp.session_lifetime_ms) == (0, 6000) and served(conn)
    conn.close()
    conn, resp = authenticate(oauth, "OAUTH", oauth.token(exp_s=3600))
    assert resp.error_code == 0 and 3_590_000 < resp.session_lifetime_ms <= 3_600_000
    conn.close()
    # a token good for 3 s: its lifetime on both, and a request after it closes the connection
    for listener in ("REAUTH", "OAUTH"):
        conn, resp = authenticate(oauth, listener, oauth.token(exp_s=3))
        assert resp.error_code == 0 and 1000 < resp.session_lifetime_ms <= 3000, resp
        assert served(conn)
        time.sleep(resp.session_lifetime_ms / 1000 + 0.2)
        assert not served(conn)
        conn.close()
