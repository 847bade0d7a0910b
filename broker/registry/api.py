"""Confluent's REST API v1 on the registry (routes, authentication, authorization,
forwarding of writes to the writer).

Every answer is JSON (application/vnd.schemaregistry.v1+json), an error
{"error_code": N, "message": "..."} with Confluent's status and code (errors.py). A
request body must be JSON of one of Confluent's content types (else 415); a path not
served is 404, a method not served on a path 405 — with the codes Confluent's Jersey
gives them.

Reads are answered from this broker's view, in the callback that read the request when
the credentials were checked before (the answer for an id is encoded once and kept with
the schema). Writes go to the writer: run here when this broker leads `_schemas`,
else forwarded (method, path, body, the client's Authorization) to the writer's URL,
which its NOOP in `_schemas` names; a forwarded write is retried, following leadership,
until schema.registry.request.timeout.ms (every write is idempotent or refused the same
way twice). Before answering a forwarded write this broker waits until its own view has
read what the writer wrote (the offset the writer's answer carries): a client reads its
own writes from the broker it wrote through.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.registry import errors as E
from broker.registry.auth import ANONYMOUS, BasicAuthenticator, topic_of
from broker.registry.formats import SCHEMA_TYPES
from broker.registry.http import JSON_TYPE, HttpClient, Request, Response
from broker.registry.log import NotWriter, SchemasLog
from broker.registry.registry import SchemaRegistry, SchemaRequest, parse_version
from broker.security.acl import Authorizer, Operation, ResourceType

log = logging.getLogger(__name__)

CONTENT_TYPES = (
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
    "application/octet-stream",
)
OFFSET_HEADER = "x-kbroker-schemas-offset"
FORWARDED_HEADER = "x-kbroker-forwarded"
CLUSTER = "kafka-cluster"


def _json(status: int, value: Any, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Response:
    return Response(status, json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(), JSON_TYPE, headers)


def _error(exc: E.RestError) -> Response:
    extra: tuple[tuple[bytes, bytes], ...] = ()
    if exc.status == 401:
        extra = ((b"WWW-Authenticate", b'Basic realm="kbroker schema registry", charset="UTF-8"'),)
    return _json(exc.status, {"error_code": exc.code, "message": exc.message}, extra)


class _Denied(E.RestError):
    def __init__(self, principal: str, operation: Operation, what: str):
        super().__init__(
            403, 40301, f"User {principal.removeprefix('User:')} is denied operation {operation.name} on {what}"
        )


class RegistryApi:
    def __init__(
        self,
        registry: SchemaRegistry,
        schemas_log: SchemasLog,
        authenticator: BasicAuthenticator | None,
        authorizer: Callable[[], Authorizer | None],
        client: HttpClient,
        timeout_s: float,
    ):
        self.registry = registry
        self.state = registry.state
        self.log = schemas_log
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.client = client
        self.timeout_s = timeout_s
        self.requests = 0
        self.forwarded = 0

    # ------------------------------------------------------------------ entry

    def handle(self, req: Request) -> Response | Awaitable[Response]:
        self.requests += 1
        if not self.state.caught_up:
            return self._when_caught_up(req)
        return self._handle(req)

    def _handle(self, req: Request) -> Response | Awaitable[Response]:
        if self.authenticator is None:
            return self._dispatch(req, ANONYMOUS)
        header = req.headers.get("authorization", "")
        principal = self.authenticator.cached(header) if header else None
        if principal is not None:
            return self._dispatch(req, principal)
        if not header:
            return _error(E.RestError(401, 401, "Unauthorized"))
        return self._authenticate(req, header)

    async def _when_caught_up(self, req: Request) -> Response:
        """A request that came while the view was still reading `_schemas` (after a
        start): answered once it has read what was there, or after the timeout from what
        it has."""
        if not await self.state.wait_caught_up(self.timeout_s):
            log.warning(
                "schema registry: the view of %s has not caught up in %.0f s; answering from what it has",
                self.log.topic,
                self.timeout_s,
            )
            self.state.mark_caught_up()
        result = self._handle(req)
        return result if isinstance(result, Response) else await result

    async def _authenticate(self, req: Request, header: str) -> Response:
        assert self.authenticator is not None
        principal = await self.authenticator.check(header)
        if principal is False:
            return _error(E.RestError(429, 429, "Too many authentication checks waiting; try again"))
        if not isinstance(principal, str):
            log.warning("schema registry: basic authentication failed from %s", req.peer)
            return _error(E.RestError(401, 401, "Unauthorized"))
        result = self._dispatch(req, principal)
        return result if isinstance(result, Response) else await result

    def _dispatch(self, req: Request, principal: str) -> Response | Awaitable[Response]:
        try:
            result = self._route(req, principal)
        except E.RestError as exc:
            return _error(exc)
        if isinstance(result, Response):
            return result
        return self._finish(result)

    async def _finish(self, coro: Awaitable[Response]) -> Response:
        try:
            return await coro
        except E.RestError as exc:
            return _error(exc)

    # ------------------------------------------------------------------ routing

    def _route(self, req: Request, principal: str) -> Response | Awaitable[Response]:
        seg = req.segments
        m = req.method
        n = len(seg)
        if n == 0:
            return self._only(m, "GET") or _json(200, {})
        head = seg[0]
        if head == "schemas":
            if n == 1:
                return self._only(m, "GET") or self._list_schemas(req, principal)
            if n == 2 and seg[1] == "types":
                return self._only(m, "GET") or _json(200, list(SCHEMA_TYPES))
            if seg[1] == "ids" and 3 <= n <= 4:
                if m != "GET":
                    return self._method()
                return self._schema_by_id(req, principal, seg[2], seg[3] if n == 4 else None)
        elif head == "subjects":
            if n == 1:
                return self._only(m, "GET") or self._subjects(req, principal)
            subject = seg[1]
            if n == 2:
                if m == "POST":
                    self._authorize(principal, req, Operation.READ, subject)
                    return self._lookup(req, subject)
                if m == "DELETE":
                    self._authorize(principal, req, Operation.DELETE, subject)
                    return self._delete_subject(req, subject)
                return self._method()
            if seg[2] == "versions":
                if n == 3:
                    if m == "GET":
                        self._authorize(principal, req, Operation.READ, subject)
                        return self._versions(req, subject)
                    if m == "POST":
                        self._authorize(principal, req, Operation.WRITE, subject)
                        return self._register(req, subject)
                    return self._method()
                if n == 4:
                    if m == "GET":
                        self._authorize(principal, req, Operation.READ, subject)
                        return self._version(req, subject, seg[3])
                    if m == "DELETE":
                        self._authorize(principal, req, Operation.DELETE, subject)
                        return self._delete_version(req, subject, seg[3])
                    return self._method()
                if n == 5 and seg[4] in ("schema", "referencedby"):
                    if m != "GET":
                        return self._method()
                    self._authorize(principal, req, Operation.READ, subject)
                    if seg[4] == "schema":
                        return self._raw(self._get_version(req, subject, seg[3]).id, req.query("format"))
                    return self._referenced_by(req, subject, seg[3])
        elif head in ("config", "mode"):
            if n <= 2:
                return self._settings(req, principal, head, seg[1] if n == 2 else None)
        elif (
            head == "compatibility" and n >= 3 and seg[1] == "subjects" and (n == 4 or n == 5) and seg[3] == "versions"
        ):
            if m != "POST":
                return self._method()
            self._authorize(principal, req, Operation.READ, seg[2])
            return self._compatibility(req, seg[2], seg[4] if n == 5 else None)
        elif head == "contexts" and n == 1:
            return self._only(m, "GET") or _json(200, ["."])
        raise E.http(404, "Not Found")

    @staticmethod
    def _only(method: str, allowed: str) -> Response | None:
        return None if method == allowed else _error(E.http(405, "Method Not Allowed"))

    @staticmethod
    def _method() -> Response:
        return _error(E.http(405, "Method Not Allowed"))

    # ------------------------------------------------------------------ authorization

    def _authorize(self, principal: str, req: Request, operation: Operation, subject: str | None) -> None:
        authorizer = self.authorizer()
        if authorizer is None:
            return
        if subject is None:
            if not authorizer.authorize(principal, req.peer, operation, ResourceType.CLUSTER, CLUSTER):
                raise _Denied(principal, operation, "the cluster")
            return
        topic = topic_of(subject)
        if not authorizer.authorize(principal, req.peer, operation, ResourceType.TOPIC, topic):
            raise _Denied(principal, operation, f"topic {topic} (subject {subject})")

    def _may(self, principal: str, req: Request, operation: Operation, subject: str) -> bool:
        authorizer = self.authorizer()
        return authorizer is None or authorizer.authorize(
            principal, req.peer, operation, ResourceType.TOPIC, topic_of(subject)
        )

    # ------------------------------------------------------------------ reads

    def _schema_id(self, text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise E.schema_not_found() from None

    def _schema_by_id(self, req: Request, principal: str, id_text: str, sub: str | None) -> Response:
        schema_id = self._schema_id(id_text)
        s = self.state.schemas.get(schema_id)
        if s is None:
            raise E.schema_not_found(schema_id)
        if self.authorizer() is not None:
            subjects = {u[0] for u in self.state.uses.get(schema_id, ())}
            if not any(self._may(principal, req, Operation.READ, subj) for subj in subjects):
                raise _Denied(principal, Operation.READ, f"schema {schema_id} (no subject of it)")
        if sub is None:
            fmt = req.query("format")
            key = ("id", fmt)
            body = s.cache.get(key)
            if body is None:
                body = s.cache[key] = json.dumps(
                    self.registry.schema_json(schema_id, fmt), separators=(",", ":"), ensure_ascii=False
                ).encode()
            return Response(200, body)
        if sub == "schema":
            return self._raw(schema_id, req.query("format"))
        if sub == "versions":
            return _json(200, self.registry.id_versions(schema_id, req.flag("deleted")))
        if sub == "subjects":
            versions = self.registry.id_versions(schema_id, req.flag("deleted"))
            return _json(200, sorted({v["subject"] for v in versions}))
        raise E.http(404, "Not Found")

    def _raw(self, schema_id: int, fmt: str) -> Response:
        text = self.registry.formatted(schema_id, fmt)
        return Response(200, text.encode())

    def _list_schemas(self, req: Request, principal: str) -> Response:
        prefix, deleted, latest = req.query("subjectPrefix"), req.flag("deleted"), req.flag("latestOnly")
        out = []
        for subject in self.state.subject_names(deleted):
            if not subject.startswith(prefix) or not self._may(principal, req, Operation.READ, subject):
                continue
            versions = self.state.versions(subject, deleted)
            for v in versions[-1:] if latest else versions:
                out.append(self.registry.version_json(v))
        return _json(200, out)

    def _subjects(self, req: Request, principal: str) -> Response:
        prefix = req.query("subjectPrefix")
        if req.flag("deletedOnly"):
            names = [s for s in self.state.subject_names(True) if not self.state.has_subject(s)]
        else:
            names = self.state.subject_names(req.flag("deleted"))
        return _json(
            200, [s for s in names if s.startswith(prefix) and self._may(principal, req, Operation.DESCRIBE, s)]
        )

    def _versions(self, req: Request, subject: str) -> Response:
        deleted_only = req.flag("deletedOnly")
        include = req.flag("deleted") or deleted_only
        if not self.state.has_subject(subject, include):
            raise E.subject_not_found(subject)
        versions = self.state.versions(subject, include)
        if deleted_only:
            versions = [v for v in versions if v.deleted]
        return _json(200, [v.version for v in versions])

    def _get_version(self, req: Request, subject: str, version_text: str) -> Any:
        return self.registry.get_version(subject, parse_version(version_text), req.flag("deleted"))

    def _version(self, req: Request, subject: str, version_text: str) -> Response:
        v = self._get_version(req, subject, version_text)
        return _json(200, self.registry.version_json(v, req.query("format")))

    def _referenced_by(self, req: Request, subject: str, version_text: str) -> Response:
        v = self.registry.get_version(subject, parse_version(version_text), True)
        return _json(200, self.state.referenced_by(subject, v.version, req.flag("deleted")))

    def _body(self, req: Request) -> Any:
        ctype = req.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype not in CONTENT_TYPES:
            raise E.http(415, "Unsupported Media Type")
        try:
            return json.loads(req.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise E.RestError(400, 400, f"Unexpected character in the JSON body: {exc}") from None

    def _lookup(self, req: Request, subject: str) -> Response:
        schema_req = SchemaRequest.from_json(self._body(req))
        v = self.registry.lookup(subject, schema_req, req.flag("deleted"))
        return _json(200, self.registry.version_json(v, req.query("format")))

    def _compatibility(self, req: Request, subject: str, version_text: str | None) -> Response:
        schema_req = SchemaRequest.from_json(self._body(req))
        version = None if version_text is None else parse_version(version_text)
        verbose = req.flag("verbose")
        try:
            problems = self.registry.test_compatibility(subject, version, schema_req)
        except E.RestError as exc:
            if exc.code != 42201 or not verbose:
                raise
            problems = [exc.message]
        out: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            out["messages"] = problems
        return _json(200, out)

    # ------------------------------------------------------------------ settings

    def _settings(self, req: Request, principal: str, what: str, subject: str | None) -> Response | Awaitable[Response]:
        m = req.method
        read_op, write_op = Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS
        if m == "GET":
            self._authorize(principal, req, read_op, subject)
            if what == "config":
                level = self.state.config(subject)
                if level is None:
                    if subject is not None and not req.flag("defaultToGlobal"):
                        raise E.no_subject_compatibility(subject)
                    level = self.registry.compatibility_level(None)
                return _json(200, {"compatibilityLevel": level})
            mode = self.state.mode(subject)
            if mode is None:
                if subject is not None and not req.flag("defaultToGlobal"):
                    raise E.no_subject_mode(subject)
                mode = self.registry.mode(None)
            return _json(200, {"mode": mode})
        if m == "PUT":
            self._authorize(principal, req, write_op, subject)
            body = self._body(req)
            if not isinstance(body, dict):
                raise (E.invalid_compatibility(body) if what == "config" else E.invalid_mode(body))
            if what == "config":
                level = body.get("compatibility", body.get("compatibilityLevel"))
                self.registry.plan_config(subject, level)  # refused here before forwarding
                return self._write(req, lambda: self.registry.plan_config(subject, level))
            mode, force = body.get("mode"), req.flag("force")
            self.registry.plan_mode(subject, mode, True)
            return self._write(req, lambda: self.registry.plan_mode(subject, mode, force))
        if m == "DELETE" and subject is not None:
            self._authorize(principal, req, write_op, subject)
            if what == "config":
                return self._write(req, lambda: self.registry.plan_delete_config(subject))
            return self._write(req, lambda: self.registry.plan_delete_mode(subject))
        return self._method()

    # ------------------------------------------------------------------ writes

    def _register(self, req: Request, subject: str) -> Awaitable[Response]:
        schema_req = SchemaRequest.from_json(self._body(req))
        if not subject or subject.strip() != subject or any(ord(c) < 32 for c in subject):
            raise E.invalid_subject(subject)
        return self._write(req, lambda: self.registry.plan_register(subject, schema_req))

    def _delete_subject(self, req: Request, subject: str) -> Awaitable[Response]:
        permanent = req.flag("permanent")
        return self._write(req, lambda: self.registry.plan_delete_subject(subject, permanent))

    def _delete_version(self, req: Request, subject: str, version_text: str) -> Awaitable[Response]:
        version = parse_version(version_text)
        permanent = req.flag("permanent")
        return self._write(req, lambda: self.registry.plan_delete_version(subject, version, permanent))

    async def _write(self, req: Request, plan: Callable[[], tuple[Any, list[Any]]]) -> Response:
        deadline = time.monotonic() + self.timeout_s
        await self.log.ensure_topic()
        last = "the writer is not known yet"
        while True:
            if self.log.writer_epoch >= 0:
                try:
                    result, end = await self.log.write(plan)
                    return _json(200, result, ((OFFSET_HEADER.encode(), str(end).encode()),))
                except NotWriter:
                    last = "this broker stopped leading the registry's topic"
            elif req.headers.get(FORWARDED_HEADER):
                raise E.unknown_leader("Leader not known: this broker does not take writes")
            else:
                url = self._writer_url()
                if url is not None:
                    answer = await self._forward(req, url, deadline)
                    if answer is not None:
                        return answer
                    last = f"forwarding to {url} failed"
            if time.monotonic() >= deadline:
                if last.startswith("forwarding"):
                    raise E.forwarding_failed(f"Error while forwarding the request to the leader: {last}")
                raise E.unknown_leader(f"Leader not known: {last}")
            await asyncio.sleep(0.1)

    def _writer_url(self) -> str | None:
        found = self.log._leader()
        if found is None:
            return None
        _info, leader = found
        if leader == self.log.broker_id:
            return None  # about to take writes itself
        known = self.state.writers.get(leader)
        return known[1] if known is not None else None

    async def _forward(self, req: Request, url: str, deadline: float) -> Response | None:
        headers = {
            FORWARDED_HEADER: "1",
            "Content-Type": req.headers.get("content-type", "application/vnd.schemaregistry.v1+json"),
        }
        if "authorization" in req.headers:
            headers["Authorization"] = req.headers["authorization"]
        try:
            status, got, body = await self.client.request(url, req.method, req.target, headers, req.body)
        except (OSError, asyncio.TimeoutError) as exc:
            log.debug("schema registry: forwarding to %s: %s", url, exc)
            return None
        self.forwarded += 1
        if status == 500:
            try:
                code = json.loads(body).get("error_code")
            except (ValueError, AttributeError):
                code = None
            if code in (50002, 50003, 50004):
                return None  # the writer moved, or was not ready: again
        offset = got.get(OFFSET_HEADER)
        if offset is not None:
            remaining = max(deadline - time.monotonic(), 0.1)
            if not await self.state.wait_for(int(offset), remaining):
                raise E.timeout("the write was made, but this broker's view has not read it yet")
        extra = ((OFFSET_HEADER.encode(), offset.encode()),) if offset is not None else ()
        return Response(status, body, JSON_TYPE, extra)
