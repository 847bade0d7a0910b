"""SASL (broker/security/sasl.py, scram.py, oauthbearer.py): SCRAM against RFC 7677's
test vector and Kafka's stored form, PLAIN, JAAS, OAUTHBEARER tokens checked against a
JWKS file with PyJWT, the authenticator's rules (what may come before authentication,
re-authentication, session expiry) — and a real listener (server.Server with the real
handlers and dispatch, no broker process) driven by the project's client: refused
requests before authentication, the failure delay and close, principals."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from broker.client.connection import BrokerConnection, ClientError
from broker.config import BrokerConfig
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from broker.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from broker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from broker.security.credentials import CredentialCache
from broker.security.listener import ClientSecurity, listener_securities
from broker.security.oauthbearer import OAuthBearerServer, TokenValidator, client_initial_response
from broker.security.sasl import (
    Authenticator,
    PlainServer,
    SaslAuthenticationError,
    SaslSettings,
    parse_jaas,
    plain_token,
    session_lifetime_ms,
)
from broker.security.scram import ScramClient, ScramCredential, ScramError, ScramServer, salted_password

# ---------------------------------------------------------------------------- SCRAM


def test_scram_sha_256_matches_rfc_7677():
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ScramError):
        c.verify(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_server_and_client(mechanism):
    cred = ScramCredential.from_password(mechanism, "alice-secret", 4096)
    # Kafka's stored form, and back
    text = cred.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=4096")
    assert ScramCredential.from_text(text) == cred
    users = {"alice": cred}
    server = ScramServer(mechanism, users.get)
    client = ScramClient(mechanism, "alice", "alice-secret")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete and server.user == "alice"
    # a wrong password, an unknown user: refused
    server = ScramServer(mechanism, users.get)
    bad = ScramClient(mechanism, "alice", "guess")
    with pytest.raises(ScramError):
        server.evaluate(bad.final(server.evaluate(bad.first())))
    with pytest.raises(ScramError):
        ScramServer(mechanism, users.get).evaluate(ScramClient(mechanism, "mallory", "x").first())
    for junk in (
        b"",
        b"p=tls-unique,,n=a,r=b",
        b"n,,r=x",
        b"\xff\xfe",
        b"n,a=bob,n=alice,r=x",
        b"n,,n=alice,r=x,tokenauth=true",
    ):
        with pytest.raises(ScramError):
            ScramServer(mechanism, users.get).evaluate(junk)


def test_salted_credentials_from_alter_requests_match_a_password():
    salt = b"0123456789abcdef"
    salted = salted_password("SCRAM-SHA-512", "pw", salt, 8192)
    assert ScramCredential.from_salted_password("SCRAM-SHA-512", salted, salt, 8192) == ScramCredential.from_password(
        "SCRAM-SHA-512", "pw", 8192, salt
    )


# ---------------------------------------------------------------------------- PLAIN and JAAS


def test_jaas_as_kafka_writes_it():
    j = parse_jaas(
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="a \\"quoted\\" pw";'
    )
    assert j.login_module.endswith("PlainLoginModule") and j.flag == "required"
    assert j.options == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": 'a "quoted" pw',
    }
    assert parse_jaas("x.ScramLoginModule required username=a password=b;").options == {
        "username": "a",
        "password": "b",
    }
    for bad in ("x required username=a", "x sometimes;", "x required; y required;", "x required a=;"):
        with pytest.raises(ValueError):
            parse_jaas(bad)


def test_plain():
    s = PlainServer({"alice": "alice-secret"})
    s.evaluate(plain_token("alice", "alice-secret"))
    assert s.complete and s.user == "alice"
    for token in (
        plain_token("alice", "wrong"),
        plain_token("bob", "alice-secret"),
        b"alice\0x",
        b"bob\0alice\0alice-secret",
        b"\0\0",
    ):
        with pytest.raises(SaslAuthenticationError) as info:
            PlainServer({"alice": "alice-secret"}).evaluate(token)
        assert info.value.message.startswith("Authentication failed")


# ---------------------------------------------------------------------------- the authenticator


def test_before_authentication_only_sasl_and_api_versions():
    a = Authenticator(SaslSettings(["PLAIN"], plain_users={"alice": "pw", "bob": "pw"}, reauth_ms={"PLAIN": 1000}))
    assert a.allows(18, 0) and a.allows(17, 0) and a.allows(36, 0)
    assert not a.allows(0, 0) and not a.allows(3, 0) and not a.allows(4, 0)
    assert not a.handshake("SCRAM-SHA-256")  # not enabled: the connection closes
    a = Authenticator(a.settings)
    assert a.handshake("PLAIN")
    answer, lifetime = a.authenticate(plain_token("alice", "pw"), now=100.0)
    assert (answer, lifetime, a.principal) == (b"", 1000, "User:alice")
    assert a.allows(0, 100.5) and not a.allows(0, 101.0)  # the session ends after 1 s
    # re-authentication: same mechanism and principal, and the session starts again
    assert a.handshake("PLAIN") and not a.allows(0, 100.1)
    a.authenticate(plain_token("alice", "pw"), now=101.0)
    assert a.allows(0, 101.5)
    assert a.handshake("PLAIN")
    with pytest.raises(SaslAuthenticationError, match="principals"):
        a.authenticate(plain_token("bob", "pw"), now=102.0)


# ---------------------------------------------------------------------------- OAUTHBEARER


@pytest.fixture(scope="module")
def jwks(tmp_path_factory):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", use="sig", alg="RS256")
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return SimpleNamespace(key=key, other=other, path=path)


def token(key, kid="k1", **claims):
    claims = {
        "sub": "alice",
        "exp": int(time.time()) + 60,
        "iat": int(time.time()),
        "aud": "kafka",
        "iss": "https://idp",
        **claims,
    }
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm="RS256", headers={"kid": kid})


def test_oauthbearer_tokens_checked_against_the_jwks(jwks):
    v = TokenValidator(str(jwks.path), audience=["kafka"], issuer="https://idp")
    s = OAuthBearerServer(v)
    s.evaluate(client_initial_response(token(jwks.key)))
    assert s.complete and s.user == "alice" and s.expires_at_ms > time.time() * 1000
    bad = [
        token(jwks.other),
        token(jwks.key, exp=int(time.time()) - 120),
        token(jwks.key, aud="other"),
        token(jwks.key, iss="https://evil"),
        token(jwks.key, sub=None),
        token(jwks.key, kid="k2"),
        jwt.encode({"sub": "alice", "exp": int(time.time()) + 60}, None, algorithm="none"),
    ]
    for t in bad:
        with pytest.raises(SaslAuthenticationError):
            OAuthBearerServer(v).evaluate(client_initial_response(t))
    with pytest.raises(SaslAuthenticationError):
        OAuthBearerServer(v).evaluate(b"n,,\x01auth=Basic abc\x01\x01")


def test_an_oauthbearer_session_ends_with_its_token(jwks):
    v = TokenValidator(str(jwks.path))
    a = Authenticator(SaslSettings(["OAUTHBEARER"], oauth_validator=v, reauth_ms={"OAUTHBEARER": 0}))
    a.handshake("OAUTHBEARER")
    _, lifetime = a.authenticate(client_initial_response(token(jwks.key, exp=int(time.time()) + 30, aud=None)), 0.0)
    assert 25_000 < lifetime <= 30_000


@pytest.mark.parametrize(
    "reauth_ms, expiry_in_ms, lifetime_ms",
    [
        (0, None, None),  # neither: no limit
        (-1, None, None),
        (5000, None, 5000),  # connections.max.reauth.ms alone
        (0, 30_000, 30_000),  # the token alone
        (5000, 30_000, 5000),  # the shorter of both
        (60_000, 30_000, 30_000),
        (0, 0, 0),  # a token that expires now, or expired (within the clock skew):
        (0, -5000, 0),  # a session that has ended already, never one without a limit
        (6000, -5000, 0),  # (issue 34: 0 used to override the re-authentication limit)
    ],
)
def test_a_session_never_outlives_its_credential(reauth_ms, expiry_in_ms, lifetime_ms):
    now_ms = 1_700_000_000_000
    expiry = None if expiry_in_ms is None else now_ms + expiry_in_ms
    assert session_lifetime_ms(reauth_ms, expiry, now_ms) == lifetime_ms


@pytest.mark.parametrize("reauth_ms", [0, 6000])
def test_a_token_expired_within_the_clock_skew_gives_a_session_that_ends_at_once(jwks, reauth_ms):
    """Kafka's SaslServerAuthenticator: the token is valid (within the validator's clock
    skew), the answer's session lifetime is 0 and the session's expiry is the end of the
    authentication: any request after it but a re-authentication is refused."""
    v = TokenValidator(str(jwks.path), clock_skew_s=30)
    a = Authenticator(SaslSettings(["OAUTHBEARER"], oauth_validator=v, reauth_ms={"OAUTHBEARER": reauth_ms}))
    a.handshake("OAUTHBEARER")
    _, lifetime = a.authenticate(client_initial_response(token(jwks.key, exp=int(time.time()) - 5, aud=None)), 100.0)
    assert lifetime == 0 and a.principal == "User:alice"
    assert a.session_expires_at == 100.0
    assert not a.allows(3, 100.001) and not a.allows(0, 125.0)
    assert a.allows(17, 100.001) and a.allows(18, 100.001)  # a re-authentication may start
    # beyond the clock skew the token is refused outright
    a = Authenticator(a.settings)
    a.handshake("OAUTHBEARER")
    with pytest.raises(SaslAuthenticationError):
        a.authenticate(client_initial_response(token(jwks.key, exp=int(time.time()) - 60, aud=None)), 100.0)


# ---------------------------------------------------------------------------- a real listener


class Services:
    """What the SASL handlers and ApiVersions use of BrokerServices."""

    transaction_version, features_epoch = 2, 0

    def __init__(self, config):
        self.config = config
        self.credentials = CredentialCache()
        self.users = {}
        self.authorizer = None

    async def get_user_config(self, user):
        return dict(self.users.get(user, {}))

    async def set_user_config(self, user, configs):
        self.users[user] = dict(configs)
        self.credentials.update(user, configs)


@pytest.fixture
def listener(tmp_path):
    """A SASL_PLAINTEXT listener (PLAIN and SCRAM) of a real Server on loopback, in a thread."""
    from broker.server.server import Server

    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-pw" user_admin="admin-pw" user_alice="alice-pw";'
    )
    config = BrokerConfig(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "connection.failed.authentication.delay.ms": "300",
            "log.dirs": str(tmp_path),
        }
    )
    services = Services(config)
    services.credentials.update(
        "bob", {"SCRAM-SHA-512": ScramCredential.from_password("SCRAM-SHA-512", "bob-pw").to_text()}
    )
    loop = asyncio.new_event_loop()
    server = Server(services, config.endpoints)
    server.set_securities(listener_securities(config, services.credentials.get))
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.call_soon(lambda: (server.start(), ready.set()))
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(5)
    yield SimpleNamespace(port=server.port, server=server, services=services)
    loop.call_soon_threadsafe(lambda: (server.stop_listening(), loop.stop()))
    t.join(5)


def sasl(mechanism, user, password):
    return ClientSecurity("SASL_PLAINTEXT", None, mechanism, user, password)


def test_plain_and_scram_clients_authenticate_and_are_served(listener):
    with BrokerConnection("127.0.0.1", listener.port, security=sasl("PLAIN", "alice", "alice-pw")) as c:
        resp = c.request(DescribeUserScramCredentialsRequest(users=None))
        assert [r.user for r in resp.results] == ["bob"]
    with BrokerConnection("127.0.0.1", listener.port, security=sasl("SCRAM-SHA-512", "bob", "bob-pw")) as c:
        assert c.request(DescribeUserScramCredentialsRequest(users=None)).error_code == 0
    conns = list(listener.server.connections)
    assert not conns or {c.principal for c in conns} <= {"User:alice", "User:bob"}


@pytest.mark.parametrize(
    "mechanism, user, password",
    [
        ("PLAIN", "alice", "wrong"),
        ("PLAIN", "nobody", "x"),
        ("SCRAM-SHA-512", "bob", "wrong"),
        ("SCRAM-SHA-512", "nobody", "x"),
    ],
)
def test_failed_logins_are_answered_late_then_closed(listener, mechanism, user, password, caplog):
    t0 = time.monotonic()
    with pytest.raises(ClientError) as info:
        BrokerConnection("127.0.0.1", listener.port, security=sasl(mechanism, user, password))
    assert "SASL_AUTHENTICATION_FAILED" in str(info.value)
    assert time.monotonic() - t0 >= 0.3  # connection.failed.authentication.delay.ms


def test_requests_before_authentication_close_the_connection(listener):
    c = BrokerConnection("127.0.0.1", listener.port)  # ApiVersions only: allowed
    with pytest.raises(ClientError, match="closed"):
        c.request(DescribeUserScramCredentialsRequest(users=None))
    c = BrokerConnection("127.0.0.1", listener.port)
    assert (
        c.request(SaslHandshakeRequest(mechanism="GSSAPI"), version=1).error_code
        == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    )
    with pytest.raises(ClientError):
        c.request(SaslHandshakeRequest(mechanism="PLAIN"), version=1)  # closed after the refusal
    c = BrokerConnection("127.0.0.1", listener.port)
    assert c.request(SaslAuthenticateRequest(auth_bytes=b"x"), version=1).error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_before_authentication_a_frame_is_held_to_sasl_server_max_receive_size(listener, caplog):
    """As Kafka's SaslServerAuthenticator: an unauthenticated client's frame over
    sasl.server.max.receive.size (524288) closes the connection before its body is read
    (no buffer of socket.request.max.bytes is reserved for it); once authenticated, a
    request of a megabyte is read and answered."""
    import socket
    import struct

    with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as s:
        s.sendall(struct.pack(">i", 524289) + b"\0" * 1000)
        assert s.recv(100) == b""  # closed by the broker
    assert any(
        "524289" in r.getMessage() and "sasl.server.max.receive.size" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    with BrokerConnection("127.0.0.1", listener.port, security=sasl("PLAIN", "alice", "alice-pw")) as c:
        assert [c.principal for c in listener.server.connections] == ["User:alice"]
        assert [c.frames.max_frame_size for c in listener.server.connections] == [100 * 1024 * 1024]
        # a 1 MB request (a long user name list) is read whole and answered
        users = [DescribeUserScramCredentialsRequest.UserName(name="u" * 1000 + str(i)) for i in range(1000)]
        resp = c.request(DescribeUserScramCredentialsRequest(users=users))
        assert len(resp.results) == 1000


def test_alter_and_describe_user_scram_credentials(listener):
    R = AlterUserScramCredentialsRequest
    salt = b"salt-salt-salt"
    up = R.ScramCredentialUpsertion(
        name="carol",
        mechanism=2,
        iterations=8192,
        salt=salt,
        salted_password=salted_password("SCRAM-SHA-512", "carol-pw", salt, 8192),
    )
    with BrokerConnection("127.0.0.1", listener.port, security=sasl("PLAIN", "admin", "admin-pw")) as c:
        resp = c.request(
            R(
                deletions=[R.ScramCredentialDeletion(name="dave", mechanism=1)],
                upsertions=[
                    up,
                    R.ScramCredentialUpsertion(
                        name="erin", mechanism=1, iterations=100, salt=salt, salted_password=salt
                    ),
                    R.ScramCredentialUpsertion(name="", mechanism=1, iterations=4096, salt=salt, salted_password=salt),
                    R.ScramCredentialUpsertion(
                        name="frank", mechanism=9, iterations=4096, salt=salt, salted_password=salt
                    ),
                ],
            )
        )
        assert {r.user: r.error_code for r in resp.results} == {
            "dave": ErrorCode.RESOURCE_NOT_FOUND,
            "carol": 0,
            "erin": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "frank": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        }
        D = DescribeUserScramCredentialsRequest
        resp = c.request(
            D(users=[D.UserName(name="carol"), D.UserName(name="zed"), D.UserName(name="bob"), D.UserName(name="bob")])
        )
        got = {(r.user, r.error_code): [(i.mechanism, i.iterations) for i in r.credential_infos] for r in resp.results}
        assert got == {
            ("carol", 0): [(2, 8192)],
            ("zed", ErrorCode.RESOURCE_NOT_FOUND): [],
            ("bob", ErrorCode.DUPLICATE_RESOURCE): [],
        }
    assert "salted" not in json.dumps(listener.services.users) and "carol-pw" not in json.dumps(listener.services.users)
    # carol logs in with the credential just stored
    with BrokerConnection("127.0.0.1", listener.port, security=sasl("SCRAM-SHA-512", "carol", "carol-pw")):
        pass
