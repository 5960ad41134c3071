"""Operations, how a request reaches one, and the OpenAPI document made from them.

Each operation names its method, path, permission and models; ``AdminRoutes`` turns the
table into Starlette routes that authenticate the caller (bearer token, or session
cookie plus CSRF token on a change), check the permission, parse the query and body
with the operation's models, call it, and answer JSON. Every refusal is
``{"error": {"code", "message", "status"}}``. ``openapi_document`` describes the same
table with the same models. Hand-written because the table is the contract: a
framework would add a second way to declare routes for a dozen operations.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from localgate import __version__
from localgate.admin.operators import Operator, Role
from localgate.adminapi.models import ErrorEnvelope
from localgate.adminapi.permissions import Permission, allowed
from localgate.adminapi.services import AdminServices
from localgate.adminapi.sessions import Session
from localgate.errors import (
    InvalidArgument,
    LocalgateError,
    PayloadTooLarge,
    PermissionDenied,
    ResourceExhausted,
    ServiceUnavailable,
    Unauthenticated,
)

__all__ = [
    "API_PREFIX",
    "SESSION_COOKIE",
    "AdminRoutes",
    "Call",
    "Operation",
    "error_response",
    "json_response",
    "openapi_document",
    "parse",
    "record_failure",
    "session_operator",
]

logger = logging.getLogger("localgate.adminapi")

API_PREFIX = "/admin/api/v1"
SESSION_COOKIE = "lg_admin_session"
CSRF_HEADER = "x-csrf-token"
MAX_BODY_BYTES = 1024 * 1024
# Who calls a public operation (logging in): no permission is ever checked for it.
ANONYMOUS = Operator("anonymous", Role.VIEWER, None)
_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# No page is served here: nothing may be framed, scripted or sniffed from these answers.
SECURITY_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}
_ERROR_STATUSES = {
    400: "The request is malformed.",
    401: "No valid token or session.",
    403: "The caller's role may not do this (or a CSRF token is missing).",
    404: "Not found.",
    413: "The body is larger than 1 MiB.",
    429: "Too many failed logins.",
    503: "A store or the admin-action trail is unavailable.",
}


@dataclass
class Call:
    """One call of an operation: who, with what."""

    request: Request
    operator: Operator
    via: Literal["token", "session"]
    services: AdminServices
    path: dict[str, str]
    query: Any
    body: Any
    request_id: str
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    # The actions this call put on record as attempted, with their targets.
    attempted: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)

    def scope(self, tenant: str) -> str:
        """``tenant`` if the caller may see it; a tenant-admin sees only its own."""
        if self.operator.role is Role.TENANT_ADMIN and tenant != self.operator.tenant:
            raise PermissionDenied("A tenant-admin can see and change only its own tenant.")
        return tenant

    async def record(
        self,
        action: str,
        *,
        target: dict[str, Any] | None = None,
        reason: str | None = None,
        outcome: str = "attempted",
    ) -> None:
        """Append this call's action to the admin-action trail (before performing it)."""
        await self.services.trail.record(
            self.operator,
            action,
            target=target,
            reason=reason,
            outcome=outcome,
            request_id=self.request_id,
        )
        if outcome == "attempted":
            self.attempted.append((action, target))


# A model to answer as JSON, or (a redirect) a response of its own.
Handler = Callable[[Call], Awaitable[BaseModel | Response]]


@dataclass(frozen=True)
class Operation:
    """One operation of the admin API."""

    method: str
    path: str  # under API_PREFIX, with {parameters}
    operation_id: str
    summary: str
    permission: Permission
    handler: Handler
    response: type[BaseModel]
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    tag: str = "admin"
    public: bool = False  # no token or session needed (logging in)
    redirect: bool = False  # answers 302 to another site (OIDC), not JSON


class AdminRoutes:
    """Starlette routes for a table of operations, and the login they need."""

    def __init__(self, operations: Sequence[Operation]) -> None:
        self._operations = operations

    def routes(self) -> list[Route]:
        """One route per operation."""
        return [
            Route(API_PREFIX + op.path, self._endpoint(op), methods=[op.method])
            for op in self._operations
        ]

    def _endpoint(self, op: Operation) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
            call: Call | None = None
            try:
                services: AdminServices = request.state.services
                via: Literal["token", "session"] = "session"
                if op.public:
                    operator = ANONYMOUS
                else:
                    operator, via = await authenticate(request, services)
                if not op.public and not allowed(operator.role, op.permission):
                    raise PermissionDenied(
                        f"The role {operator.role.value} may not {op.summary[0].lower()}"
                        f"{op.summary[1:].rstrip('.')}."
                    )
                query = parse(op.query, dict(request.query_params)) if op.query else None
                if op.query is None and request.query_params:
                    raise InvalidArgument("This operation takes no query parameters.")
                body = await _body(request, op.body) if op.body else None
                call = Call(
                    request,
                    operator,
                    via,
                    services,
                    dict(request.path_params),
                    query,
                    body,
                    request_id[:100],
                )
                result = await op.handler(call)
            except LocalgateError as exc:
                if call is not None:
                    await record_failure(call, exc)
                return error_response(exc, request_id)
            except Exception:
                logger.exception("admin API: %s %s failed", op.method, op.operation_id)
                if call is not None:
                    await record_failure(call, ServiceUnavailable("internal error"))
                return json_response(
                    {"error": {"code": 500, "message": "Internal error.", "status": "INTERNAL"}},
                    500,
                    request_id,
                )
            if isinstance(result, Response):
                response = result
                response.headers.update({**SECURITY_HEADERS, "x-request-id": request_id[:100]})
            else:
                response = json_response(result.model_dump(mode="json"), 200, request_id)
            for name, value in call.response_headers if call else []:
                response.headers.append(name, value)
            return response

        return endpoint


async def record_failure(call: Call, exc: LocalgateError) -> None:
    """Each action put on record as attempted gets a second record: it failed, and how."""
    for action, target in list(call.attempted):
        try:
            await call.record(action, target=target, outcome=f"failed: {exc.status_name}")
        except LocalgateError:
            logger.warning("admin API: the failure of %s could not be recorded", action)


async def authenticate(
    request: Request, services: AdminServices
) -> tuple[Operator, Literal["token", "session"]]:
    """The caller: a bearer token, else a session cookie (with its CSRF token on a
    change); ``Unauthenticated`` or ``PermissionDenied``."""
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("Send 'Authorization: Bearer <admin token>'.")
        operator = await services.in_store_thread(
            services.operators.authenticate_token, token.strip()
        )
        return operator, "token"
    user, session = await session_operator(request, services)
    if request.method in _CHANGES and not session.csrf_matches(request.headers.get(CSRF_HEADER)):
        raise PermissionDenied(
            f"A change made with a session needs its CSRF token in the {CSRF_HEADER} header."
        )
    return user, "session"


async def session_operator(request: Request, services: AdminServices) -> tuple[Operator, Session]:
    """The user of the request's session cookie and the session (its CSRF token is the
    caller's to check); ``Unauthenticated`` without a live session."""
    session_id = request.cookies.get(SESSION_COOKIE)
    session = (
        await services.in_store_thread(services.sessions.get, session_id) if session_id else None
    )
    if session is None:
        raise Unauthenticated(
            "Log in (POST /admin/api/v1/session) or send 'Authorization: Bearer <admin token>'."
        )
    user = session.operator
    if session.local:
        found = await services.in_store_thread(services.operators.user, session.user)
        if found is None:
            raise Unauthenticated("This user has been disabled; the session has ended.")
        user = found
    return user, session


def parse(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgument(_describe(exc)) from exc


async def _body(request: Request, model: type[BaseModel]) -> Any:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise InvalidArgument("Send the body as application/json.")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"The body is larger than {MAX_BODY_BYTES} bytes.")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidArgument("The body is not JSON.") from exc
    return parse(model, data)


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        problems.append(f"{where}: {error['msg']}")
    return "Invalid request: " + "; ".join(problems)


def json_response(content: Any, status: int, request_id: str) -> Response:
    """JSON with the admin API's security headers."""
    return Response(
        json.dumps(content, ensure_ascii=False),
        status,
        headers={**SECURITY_HEADERS, "x-request-id": request_id[:100]},
        media_type="application/json",
    )


def error_response(exc: LocalgateError, request_id: str) -> Response:
    """The error envelope for ``exc`` (with a refusal's own headers: Retry-After)."""
    response = json_response(
        {"error": {"code": exc.code, "message": exc.message, "status": exc.status_name}},
        exc.code,
        request_id,
    )
    if isinstance(exc, ResourceExhausted):
        response.headers.update(exc.headers)
    return response


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, method not allowed) in the envelope."""
    code = exc.status_code if isinstance(exc, HTTPException) else 500
    status = {404: "NOT_FOUND", 405: "INVALID_ARGUMENT"}.get(code, "INTERNAL")
    message = {404: "No such admin API route.", 405: "Method not allowed here."}.get(
        code, "Internal error."
    )
    return json_response(
        {"error": {"code": code, "message": message, "status": status}},
        code,
        request.headers.get("x-request-id") or uuid.uuid4().hex,
    )


def openapi_document(operations: Sequence[Operation]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``, from their own models."""
    models: list[type[BaseModel]] = [ErrorEnvelope]
    for op in operations:
        models += [m for m in (op.response, op.body) if m is not None]
    unique = list(dict.fromkeys(models))
    refs, top = models_json_schema(
        [(model, "validation") for model in unique],
        ref_template="#/components/schemas/{model}",
    )
    ref = {model: refs[(model, "validation")] for model in unique}
    envelope = {"application/json": {"schema": ref[ErrorEnvelope]}}
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        operation: dict[str, Any] = {
            "operationId": op.operation_id,
            "summary": op.summary,
            "tags": [op.tag],
            "x-permission": op.permission.value,
            "parameters": _path_parameters(op.path) + _query_parameters(op.query),
            "responses": {
                **(
                    {
                        "302": {
                            "description": "To the identity provider.",
                            "headers": {"location": {"schema": {"type": "string"}}},
                        }
                    }
                    if op.redirect
                    else {
                        "200": {
                            "description": "Done.",
                            "content": {"application/json": {"schema": ref[op.response]}},
                        }
                    }
                ),
                **{
                    str(code): {"description": text, "content": envelope}
                    for code, text in _ERROR_STATUSES.items()
                },
            },
        }
        if op.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref[op.body]}},
            }
        if op.public:
            operation["security"] = []
        paths.setdefault(API_PREFIX + op.path, {})[op.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "localgate admin API",
            "version": __version__,
            "description": "Operators' and auditors' API (docs/admin-api.md).",
        },
        "paths": paths,
        "components": {
            "schemas": top.get("$defs", {}),
            "securitySchemes": {
                "bearerToken": {"type": "http", "scheme": "bearer"},
                "sessionCookie": {"type": "apiKey", "in": "cookie", "name": SESSION_COOKIE},
            },
        },
        "security": [{"bearerToken": []}, {"sessionCookie": []}],
    }


def _path_parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$"},
        }
        for name in names
    ]


def _query_parameters(model: type[BaseModel] | None) -> list[dict[str, Any]]:
    if model is None:
        return []
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    parameters = []
    for name, prop in schema["properties"].items():
        branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
        plain = {k: v for k, v in branches[0].items() if k != "title"}
        if "default" in prop and prop["default"] is not None:
            plain["default"] = prop["default"]
        parameters.append(
            {"name": name, "in": "query", "required": name in required, "schema": plain}
        )
    return parameters
