"""The web console at ``/admin/``: server-rendered pages over the admin API's operations.

Each page calls the same operations the API serves (``OPERATIONS``), as the logged-in
user of the session cookie, so roles, tenant scoping and the admin-action trail are the
API's own: the console adds no way around them. Every form that changes something carries
the session's CSRF token in a hidden field; the login form carries a token of its own
(double-submitted in a cookie), so nobody can log a browser in as someone else. Pages
are served with a strict Content-Security-Policy: no inline script or style, the one
script and stylesheet come from this listener. Secrets (a new key, decrypted payloads)
appear only in the body of the answer to a POST, never in a URL, and are never cached.
Text is English or Chinese (the ``lg_console_lang`` cookie, switched from every page).
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jinja2
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from localgate.admin.operators import Operator, Role
from localgate.adminapi.handoff import provider_name
from localgate.adminapi.operations import OPERATIONS
from localgate.adminapi.permissions import Permission, allowed
from localgate.adminapi.routing import (
    Call,
    Operation,
    parse,
    record_failure,
    session_operator,
)
from localgate.adminapi.services import AdminServices
from localgate.adminapi.sessions import Session
from localgate.adminapi.trail import ADMIN_LOG
from localgate.errors import (
    InvalidArgument,
    LocalgateError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    Unauthenticated,
)

__all__ = ["CONSOLE_CSP", "console_routes"]

logger = logging.getLogger("localgate.adminapi")

CONSOLE = "/admin"
LANG_COOKIE = "lg_console_lang"
LOGIN_COOKIE = "lg_console_login"
PAGE_SIZE = 20
CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": CONSOLE_CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}
_HERE = Path(__file__).parent
_STATIC = {
    "console.js": "text/javascript",
    "console.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
_OPS: dict[str, Operation] = {op.operation_id: op for op in OPERATIONS}

TEXT: dict[str, dict[str, str]] = {
    "en": {
        "title": "localgate console",
        "login": "Log in",
        "logout": "Log out",
        "name": "User name",
        "password": "Password",
        "overview": "Overview",
        "tenants": "Tenants",
        "audit": "Audit trail",
        "trail": "Admin actions",
        "config": "Configuration",
        "signed_in_as": "Signed in as",
        "role": "Role",
        "tenant": "Tenant",
        "requests": "Requests",
        "outcomes": "Outcomes",
        "audit_health": "Audit health",
        "verified": "verified",
        "broken": "BROKEN",
        "records": "Records",
        "checkpoints": "Checkpoints",
        "problem": "Problem",
        "traffic": "Traffic by tenant",
        "api_keys": "Keys",
        "key_id": "Key id",
        "label": "Label",
        "created": "Created",
        "status": "Status",
        "active": "active",
        "revoked": "revoked",
        "revoke": "Revoke",
        "revoke_confirm": "Revoke this key? Requests with it will be refused at once.",
        "create_key": "Create a key",
        "key_once": "The new key, shown this once only; copy it now:",
        "copy_key": "Copy",
        "back": "Back",
        "search": "Search",
        "request_id": "Request id",
        "trace_id": "Trace id",
        "outcome": "Outcome",
        "model": "Model",
        "kind": "Kind",
        "since": "Since (ISO 8601)",
        "until": "Until (ISO 8601)",
        "time": "Time",
        "seq": "Seq",
        "next_page": "Next page",
        "first_page": "First page",
        "previous_page": "Previous page",
        "record": "Audit record",
        "decrypt": "Decrypt",
        "reason": "Reason (recorded in the admin-action trail, at least 8 characters)",
        "reason_short": "Reason",
        "decrypted": "Decrypted payloads",
        "decrypt_note": "This access has been recorded in the admin-action trail.",
        "payload": "Payload",
        "original_prompt": "Original prompt",
        "actor": "Actor",
        "action": "Action",
        "target": "Target",
        "none": "Nothing here.",
        "version": "Version",
        "hash": "Hash",
        "source": "Source",
        "running": "Gateway running",
        "reload": "Reload the configuration",
        "reload_attempts": "Reload attempts",
        "last_reload": "Last reload",
        "applied": "applied",
        "rejected": "rejected",
        "upstreams": "Upstreams and circuit breakers",
        "circuit": "Circuit",
        "ready": "Ready",
        "yes": "yes",
        "no": "no",
        "error": "Error",
        "refused": "Refused",
        "redact": "Redaction playground",
        "nav_cache": "Cache",
        "nav_collections": "Retrieval",
        "nav_tokens": "Admin tokens",
        "nav_users": "Users",
        "nav_checkpoints": "Checkpoints",
        "nav_policy": "Effective policy",
        "nav_usage": "Usage and limits",
        "sign_in_with": "Sign in with",
        "text": "Text",
        "sent": "What would be sent",
        "blocked": "Blocked by policy",
        "findings": "Findings",
        "type": "Type",
        "score": "Score",
        "try": "Try",
        "global_policy": "(global policy)",
        "language": "中文",
        "skip": "Skip to content",
    },
    "zh": {
        "title": "localgate 控制台",
        "login": "登录",
        "logout": "退出登录",
        "name": "用户名",
        "password": "密码",
        "overview": "概览",
        "tenants": "租户",
        "audit": "审计记录",
        "trail": "管理操作记录",
        "config": "配置",
        "signed_in_as": "当前用户",
        "role": "角色",
        "tenant": "租户",
        "requests": "请求数",
        "outcomes": "结果",
        "audit_health": "审计健康状况",
        "verified": "已验证",
        "broken": "已损坏",
        "records": "记录数",
        "checkpoints": "检查点",
        "problem": "问题",
        "traffic": "各租户流量",
        "api_keys": "密钥",
        "key_id": "密钥 ID",
        "label": "标签",
        "created": "创建时间",
        "status": "状态",
        "active": "有效",
        "revoked": "已吊销",
        "revoke": "吊销",
        "revoke_confirm": "确定吊销此密钥？使用它的请求将立即被拒绝。",
        "create_key": "创建密钥",
        "key_once": "新密钥仅显示这一次，请立即复制：",
        "copy_key": "复制",
        "back": "返回",
        "search": "搜索",
        "request_id": "请求 ID",
        "trace_id": "追踪 ID",
        "outcome": "结果",
        "model": "模型",
        "kind": "类型",
        "since": "起始时间 (ISO 8601)",
        "until": "截止时间 (ISO 8601)",
        "time": "时间",
        "seq": "序号",
        "next_page": "下一页",
        "first_page": "第一页",
        "previous_page": "上一页",
        "record": "审计记录",
        "decrypt": "解密",
        "reason": "原因（记入管理操作记录，至少 8 个字符）",
        "reason_short": "原因",
        "decrypted": "解密后的内容",
        "decrypt_note": "本次访问已记入管理操作记录。",
        "payload": "内容",
        "original_prompt": "原始提示词",
        "actor": "操作人",
        "action": "操作",
        "target": "对象",
        "none": "暂无内容。",
        "version": "版本",
        "hash": "哈希",
        "source": "来源",
        "running": "网关运行中",
        "reload": "重新加载配置",
        "reload_attempts": "重新加载次数",
        "last_reload": "上次重新加载",
        "applied": "已应用",
        "rejected": "已拒绝",
        "upstreams": "上游与熔断器",
        "circuit": "熔断状态",
        "ready": "可用",
        "yes": "是",
        "no": "否",
        "error": "错误",
        "refused": "拒绝访问",
        "redact": "脱敏试验场",
        "nav_cache": "缓存",
        "nav_collections": "检索",
        "nav_tokens": "管理令牌",
        "nav_users": "用户",
        "nav_checkpoints": "检查点",
        "nav_policy": "生效策略",
        "nav_usage": "用量与限额",
        "sign_in_with": "使用以下方式登录：",
        "text": "文本",
        "sent": "将要发送的内容",
        "blocked": "被策略拦截",
        "findings": "识别结果",
        "type": "类型",
        "score": "置信度",
        "try": "试一试",
        "global_policy": "（全局策略）",
        "language": "English",
        "skip": "跳到正文",
    },
}

_environment = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_HERE / "console_templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


class _Redirect(Exception):
    def __init__(self, url: str) -> None:
        self.url = url


class Page:
    """One console request: who asks, in which language, and the operations it calls."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.services: AdminServices = request.state.services
        self.request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        lang = request.cookies.get(LANG_COOKIE, "en")
        self.lang = lang if lang in TEXT else "en"
        self.operator: Operator | None = None
        self.session: Session | None = None

    async def login(self) -> Operator:
        """The session's user; not logged in: to the login page."""
        try:
            self.operator, self.session = await session_operator(self.request, self.services)
        except Unauthenticated as exc:
            raise _Redirect(f"{CONSOLE}/login") from exc
        return self.operator

    async def form(self) -> Mapping[str, str]:
        """A POSTed form whose CSRF token is the session's."""
        fields = await _read_form(self.request)
        if self.session is None or not self.session.csrf_matches(fields.get("csrf")):
            raise PermissionDenied("This form's CSRF token is missing or not this session's.")
        return fields

    def may(self, permission: Permission) -> bool:
        return self.operator is not None and allowed(self.operator.role, permission)

    async def call(
        self,
        operation_id: str,
        *,
        path: dict[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call an operation as the session's user, as the API would."""
        op = _OPS[operation_id]
        operator = self.operator or await self.login()
        if not allowed(operator.role, op.permission):
            raise PermissionDenied(
                f"The role {operator.role.value} may not {op.summary[0].lower()}"
                f"{op.summary[1:].rstrip('.')}."
            )
        call = Call(
            self.request,
            operator,
            "session",
            self.services,
            path or {},
            parse(op.query, dict(query or {})) if op.query else None,
            parse(op.body, dict(body or {})) if op.body else None,
            self.request_id[:100],
        )
        try:
            return await op.handler(call)
        except LocalgateError as exc:
            await record_failure(call, exc)
            raise

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        text = TEXT[self.lang]
        body = _environment.get_template(template).render(
            t=text,
            lang=self.lang,
            operator=self.operator,
            csrf=self.session.csrf_token if self.session else "",
            may=self.may,
            P=Permission,
            path=self.request.url.path,
            **context,
        )
        return Response(
            body,
            status,
            headers={**_HEADERS, "x-request-id": self.request_id[:100]},
            media_type="text/html",
        )


Handler = Callable[[Page], Awaitable[Response]]
MAX_FORM_BYTES = 64 * 1024


async def _read_form(request: Request) -> dict[str, str]:
    """An url-encoded form (the only kind the console's pages send), at most 64 KiB."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM_BYTES:
            raise PayloadTooLarge(f"The form is larger than {MAX_FORM_BYTES} bytes.")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if raw and media != "application/x-www-form-urlencoded":
        raise InvalidArgument("Send the form as application/x-www-form-urlencoded.")
    try:
        pairs = parse_qsl(raw.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError as exc:
        raise InvalidArgument("The form is not UTF-8.") from exc
    return dict(pairs)


def _page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        page = Page(request)
        try:
            return await handler(page)
        except _Redirect as moved:
            return _see_other(moved.url)
        except LocalgateError as exc:
            return page.render("error.html.j2", exc.code, code=exc.code, message=exc.message)
        except Exception:
            logger.exception("console: %s %s failed", request.method, request.url.path)
            return page.render("error.html.j2", 500, code=500, message="Internal error.")

    return endpoint


def _see_other(url: str) -> Response:
    return RedirectResponse(url, status_code=303, headers=_HEADERS)


# -- login -----------------------------------------------------------------------------


async def login_form(page: Page, message: str | None = None, status: int = 200) -> Response:
    token = secrets.token_urlsafe(32)
    response = page.render(
        "login.html.j2",
        status,
        login_token=token,
        message=message,
        oidc_provider=provider_name(page.services),
    )
    secure = "; Secure" if page.request.url.scheme == "https" else ""
    response.headers.append(
        "set-cookie",
        f"{LOGIN_COOKIE}={token}; Path={CONSOLE}/login; HttpOnly; SameSite=Strict; "
        f"Max-Age=600{secure}",
    )
    return response


async def login_page(page: Page) -> Response:
    return await login_form(page)


async def login_submit(page: Page) -> Response:
    fields = await _read_form(page.request)
    expected = page.request.cookies.get(LOGIN_COOKIE, "")
    presented = fields.get("login_token", "")
    if not expected or not hmac.compare_digest(expected.encode(), presented.encode()):
        return await login_form(page, "This login form has expired; try again.", 403)
    op = _OPS["login"]
    call = Call(
        page.request,
        Operator("anonymous", Role.VIEWER, None),
        "session",
        page.services,
        {},
        None,
        None,
        page.request_id[:100],
    )
    try:
        call.body = parse(
            op.body or BaseModel,
            {"name": fields.get("name", ""), "password": fields.get("password", "")},
        )
        await op.handler(call)
    except LocalgateError as exc:
        return await login_form(page, exc.message, exc.code)
    response = _see_other(f"{CONSOLE}/")
    for name, value in call.response_headers:
        response.headers.append(name, value)
    response.headers.append("set-cookie", f"{LOGIN_COOKIE}=; Path={CONSOLE}/login; Max-Age=0")
    return response


async def logout_submit(page: Page) -> Response:
    await page.login()
    await page.form()
    result = _see_other(f"{CONSOLE}/login")
    op = _OPS["logout"]
    assert page.operator is not None
    call = Call(page.request, page.operator, "session", page.services, {}, None, None, "-")
    await op.handler(call)
    for name, value in call.response_headers:
        result.headers.append(name, value)
    return result


async def switch_language(page: Page) -> Response:
    lang = page.request.path_params["lang"]
    response = _see_other(f"{CONSOLE}/")
    if lang in TEXT:
        response.headers.append(
            "set-cookie",
            f"{LANG_COOKIE}={lang}; Path={CONSOLE}/; SameSite=Strict; Max-Age=31536000",
        )
    return response


# -- overview --------------------------------------------------------------------------


async def overview(page: Page) -> Response:
    await page.login()
    tenants = (await page.call("listTenants")).tenants
    usage = []
    if page.may(Permission.USAGE_READ):
        for tenant in tenants:
            usage.append(await page.call("tenantUsage", path={"tenant": tenant.name}))
    health = await page.call("verifyAudit") if page.may(Permission.AUDIT_STATUS) else None
    return page.render("overview.html.j2", usage=usage, health=health)


# -- tenants and keys ------------------------------------------------------------------


def _paged(items: list[Any], request: Request) -> tuple[list[Any], int, int]:
    try:
        number = max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        number = 1
    pages = max(1, -(-len(items) // PAGE_SIZE))
    number = min(number, pages)
    return items[(number - 1) * PAGE_SIZE : number * PAGE_SIZE], number, pages


async def tenants_page(page: Page) -> Response:
    await page.login()
    tenants = (await page.call("listTenants")).tenants
    shown, number, pages = _paged(tenants, page.request)
    return page.render("tenants.html.j2", tenants=shown, page_number=number, pages=pages)


async def tenant_page(page: Page, created: Any = None, status: int = 200) -> Response:
    await page.login()
    name = page.request.path_params["tenant"]
    [tenant] = (await page.call("getTenant", path={"tenant": name})).tenants
    keys = (
        (await page.call("listKeys", path={"tenant": name})).keys
        if page.may(Permission.KEYS_READ)
        else []
    )
    shown, number, pages = _paged(keys, page.request)
    return page.render(
        "tenant.html.j2",
        status,
        tenant=tenant,
        keys=shown,
        page_number=number,
        pages=pages,
        created=created,
    )


async def create_key(page: Page) -> Response:
    await page.login()
    form = await page.form()
    name = page.request.path_params["tenant"]
    created = await page.call(
        "createKey", path={"tenant": name}, body={"label": form.get("label", "")}
    )
    return await tenant_page(page, created=created)


async def revoke_key(page: Page) -> Response:
    await page.login()
    await page.form()
    key_id = page.request.path_params["key_id"]
    keys = (await page.call("listKeys", path={"tenant": page.request.path_params["tenant"]})).keys
    if not any(k.key_id == key_id for k in keys):
        raise NotFound(f"no key with id {key_id}")
    await page.call("revokeKey", path={"key_id": key_id})
    return _see_other(f"{CONSOLE}/tenants/{page.request.path_params['tenant']}")


# -- audit -----------------------------------------------------------------------------

_SEARCH_FIELDS = ("tenant", "request_id", "trace_id", "outcome", "model", "kind", "since", "until")


async def audit_page(page: Page) -> Response:
    await page.login()
    params = page.request.query_params
    filters = {k: params[k].strip() for k in _SEARCH_FIELDS if params.get(k, "").strip()}
    query: dict[str, Any] = {**filters, "limit": PAGE_SIZE}
    for cursor in ("after_tenant", "after_seq"):
        if params.get(cursor):
            query[cursor] = params[cursor]
    result = await page.call("searchAudit", query=query)
    following = f"?{urlencode({**filters, **result.next})}" if result.next else None
    return page.render(
        "audit.html.j2",
        records=result.records,
        filters=filters,
        next_url=following,
        first_url=f"?{urlencode(filters)}" if "after_seq" in query else None,
    )


async def record_page(page: Page) -> Response:
    await page.login()
    request_id = page.request.path_params["request_id"]
    records = (await page.call("getRequestRecords", path={"request_id": request_id})).records
    return page.render(
        "record.html.j2", request_id=request_id, records=records, decrypted=None, _json=_json
    )


async def decrypt(page: Page) -> Response:
    await page.login()
    form = await page.form()
    request_id = page.request.path_params["request_id"]
    decrypted = await page.call(
        "decryptRequest",
        path={"request_id": request_id},
        body={"reason": form.get("reason", "")},
    )
    records = (await page.call("getRequestRecords", path={"request_id": request_id})).records
    return page.render(
        "record.html.j2",
        request_id=request_id,
        records=records,
        decrypted=decrypted.records,
        _json=_json,
    )


async def trail_page(page: Page) -> Response:
    await page.login()
    params = page.request.query_params
    query: dict[str, Any] = {"tenant": ADMIN_LOG, "kind": "admin", "limit": PAGE_SIZE}
    if params.get("after_seq"):
        query["after_tenant"], query["after_seq"] = ADMIN_LOG, params["after_seq"]
    result = await page.call("searchAudit", query=query)
    following = f"?{urlencode({'after_seq': result.next['after_seq']})}" if result.next else None
    return page.render(
        "trail.html.j2",
        records=result.records,
        next_url=following,
        first_url="?" if "after_seq" in query else None,
        _json=_json,
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


# -- configuration ---------------------------------------------------------------------


async def config_page(page: Page, reloaded: Any = None) -> Response:
    await page.login()
    config = await page.call("showConfig")
    upstreams = (await page.call("listUpstreams")).upstreams if config.running else []
    return page.render("config.html.j2", config=config, upstreams=upstreams, reloaded=reloaded)


async def reload_config(page: Page) -> Response:
    await page.login()
    await page.form()
    reloaded = await page.call("reloadConfig")
    return await config_page(page, reloaded=reloaded)


# -- redaction playground --------------------------------------------------------------


async def redact_page(page: Page) -> Response:
    await page.login()
    if not page.may(Permission.REDACT):
        raise PermissionDenied(
            f"The role {page.operator.role.value if page.operator else '-'} "
            "may not try the redactor."
        )
    tenants = (await page.call("listTenants")).tenants
    return page.render("redact.html.j2", tenants=tenants, text="", tenant="", result=None)


async def redact_submit(page: Page) -> Response:
    await page.login()
    form = await page.form()
    text, tenant = form.get("text", ""), form.get("tenant", "")
    result = await page.call("redact", body={"text": text, "tenant": tenant or None})
    tenants = (await page.call("listTenants")).tenants
    return page.render("redact.html.j2", tenants=tenants, text=text, tenant=tenant, result=result)


# -- static files ----------------------------------------------------------------------


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _STATIC:
        return Response("not found", 404, headers=_HEADERS, media_type="text/plain")
    return Response(
        (_HERE / "console_static" / name).read_bytes(),
        headers={**_HEADERS, "cache-control": "no-cache"},
        media_type=_STATIC[name],
    )


async def root(request: Request) -> Response:
    return _see_other(f"{CONSOLE}/")


def console_routes() -> list[Route]:
    """The console's routes, under /admin/."""
    return [
        Route(CONSOLE, root, methods=["GET"]),
        Route(f"{CONSOLE}/", _page(overview), methods=["GET"]),
        Route(f"{CONSOLE}/static/{{name}}", static, methods=["GET"]),
        Route(f"{CONSOLE}/login", _page(login_page), methods=["GET"]),
        Route(f"{CONSOLE}/login", _page(login_submit), methods=["POST"]),
        Route(f"{CONSOLE}/logout", _page(logout_submit), methods=["POST"]),
        Route(f"{CONSOLE}/lang/{{lang}}", _page(switch_language), methods=["GET"]),
        Route(f"{CONSOLE}/tenants", _page(tenants_page), methods=["GET"]),
        Route(f"{CONSOLE}/tenants/{{tenant}}", _page(tenant_page), methods=["GET"]),
        Route(f"{CONSOLE}/tenants/{{tenant}}/keys", _page(create_key), methods=["POST"]),
        Route(
            f"{CONSOLE}/tenants/{{tenant}}/keys/{{key_id}}/revoke",
            _page(revoke_key),
            methods=["POST"],
        ),
        Route(f"{CONSOLE}/audit", _page(audit_page), methods=["GET"]),
        Route(f"{CONSOLE}/audit/requests/{{request_id}}", _page(record_page), methods=["GET"]),
        Route(f"{CONSOLE}/audit/requests/{{request_id}}/decrypt", _page(decrypt), methods=["POST"]),
        Route(f"{CONSOLE}/trail", _page(trail_page), methods=["GET"]),
        Route(f"{CONSOLE}/config", _page(config_page), methods=["GET"]),
        Route(f"{CONSOLE}/config/reload", _page(reload_config), methods=["POST"]),
        Route(f"{CONSOLE}/redact", _page(redact_page), methods=["GET"]),
        Route(f"{CONSOLE}/redact", _page(redact_submit), methods=["POST"]),
    ]
