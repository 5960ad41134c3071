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
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
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
        # The proof bundle, its check in the browser, background verification, the report.
        "proof": "Inclusion proof",
        "download_proof": "Download proof bundle",
        "proof_help": (
            "A proof bundle holds the record's header (its Merkle leaf), the inclusion proof, "
            "the signed checkpoint and the ciphertexts as stored (encrypted): anyone can check "
            "it with localgate audit check-proof and the log's verifier key."
        ),
        "proof_nojs": (
            "Not checked on this page (it checks proofs with JavaScript): check the bundle "
            "with localgate audit check-proof."
        ),
        "verifier_key": "Verifier key",
        "verifier_published": "This gateway publishes the verifier key with key id",
        "verifier_compare": (
            "Compare it with the key you were given, or paste yours below: the proofs on this "
            "page are checked against the key in this field, not against the server."
        ),
        "verifier_missing": (
            "This listener cannot read the signing key, so it publishes no verifier key: "
            "paste the verifier key you hold."
        ),
        "check_again": "Check with this key",
        "check_file": "Check a bundle file",
        "not_signed_yet": (
            "No signed checkpoint covers this record yet (the gateway signs one every "
            "audit.checkpoint_interval_s); its proof can be made once one does."
        ),
        "sign_now": "Sign checkpoints now",
        "audit_report": "Auditor's report",
        "report_help": (
            "The report of one tenant and period, as localgate audit report writes it "
            "(verification, requests, redaction, refusals, payload access). Generating it is "
            "recorded in the admin-action trail."
        ),
        "period_from": "From (YYYY-MM-DD)",
        "period_to": "To, included (YYYY-MM-DD)",
        "format": "Format",
        "download_report": "Download the report",
        "verifying": "verifying…",
        "verify_failed": "could not verify",
        "verify_progress": "{checked} of {total} records checked",
        "verify_now": "Verify now",
        "verified_at": "Computed at",
        "started_by": "started by",
        "refresh": "Refresh",
        "js_checking": "Checking in this browser…",
        "js_ok": (
            "Verified in this browser: {kind} record {seq} of {tenant} is in the log {origin}, "
            "signed at size {size} on {time} by key {key_id}."
        ),
        "js_failed": "Failed: {step}: {reason}",
        "js_unavailable": "Not checked: {reason}",
        "js_step_key": "the verifier key",
        "js_step_bundle": "reading the bundle",
        "js_step_signature": "the checkpoint's signature",
        "js_step_origin": "the log's name",
        "js_step_checkpoint": "the signed tree size and root",
        "js_step_leaf": "the leaf hash",
        "js_step_inclusion": "the inclusion proof",
        "js_step_ciphertext": "the stored ciphertexts",
        "js_key_malformed": "not a verifier key (<name>+<key id>+<base64 key>)",
        "js_key_id": "the key does not match its key id",
        "js_unreadable": "not a proof bundle",
        "js_not_signed": "the checkpoint is not signed by this key",
        "js_bad_signature": (
            "the signature does not verify: the checkpoint was altered, or signed by another key"
        ),
        "js_other_log": "the checkpoint is of another log than the record's",
        "js_mismatch": "the bundle's tree size or root hash is not the signed checkpoint's",
        "js_leaf_mismatch": "the leaf hash is not the hash of the record's header",
        "js_not_included": "the proof does not lead from this record to the signed root",
        "js_ciphertext": "a ciphertext is not the one the record's header fixed",
        "js_no_ed25519": "this browser cannot verify Ed25519 signatures",
        "js_no_key": "paste the verifier key you hold above, then press Check with this key",
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
        "worker": "Worker",
        "outcome_applied": "applied",
        "outcome_rejected": "rejected",
        "outcome_restarted": "started again since (it read the file as it started)",
        "outcome_starting": "starting (it reads the file as it starts)",
        "outcome_no_answer": "did not report a reload",
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
        "proof": "包含性证明",
        "download_proof": "下载证明包",
        "proof_help": (
            "证明包包含该记录的头部（即 Merkle 叶子）、包含性证明、已签名的检查点，"
            "以及按原样存储的密文（加密状态）：任何人都可以用 localgate audit check-proof "
            "和日志的验证公钥进行核验。"
        ),
        "proof_nojs": (
            "本页未验证（页面内验证需要 JavaScript）：请用 localgate audit check-proof 验证证明包。"
        ),
        "verifier_key": "验证公钥",
        "verifier_published": "本网关公布的验证公钥，密钥 ID 为",
        "verifier_compare": (
            "请与您持有的公钥核对，或在下方粘贴您持有的公钥：本页的证明以此输入框中的公钥验证，"
            "而不是依赖服务器。"
        ),
        "verifier_missing": (
            "本服务无法读取签名密钥，因此没有公布验证公钥：请粘贴您持有的验证公钥。"
        ),
        "check_again": "用此公钥验证",
        "check_file": "验证证明包文件",
        "not_signed_yet": (
            "尚无已签名的检查点覆盖此记录（网关每隔 audit.checkpoint_interval_s 签名一次）；"
            "有检查点覆盖后即可生成证明。"
        ),
        "sign_now": "立即签名检查点",
        "audit_report": "审计报告",
        "report_help": (
            "某一租户在某一期间的报告，与 localgate audit report 生成的相同（验证结果、请求、脱敏、"
            "拒绝、内容访问）。生成报告将记入管理操作记录。"
        ),
        "period_from": "起始日期 (YYYY-MM-DD)",
        "period_to": "截止日期，含当日 (YYYY-MM-DD)",
        "format": "格式",
        "download_report": "下载报告",
        "verifying": "正在验证…",
        "verify_failed": "无法验证",
        "verify_progress": "已检查 {checked} / {total} 条记录",
        "verify_now": "立即验证",
        "verified_at": "计算时间",
        "started_by": "发起人",
        "refresh": "刷新",
        "js_checking": "正在本浏览器中验证…",
        "js_ok": (
            "已在本浏览器中验证：租户 {tenant} 的 {kind} 记录 #{seq} 在日志 {origin} 中，"
            "该日志于 {time} 在大小为 {size} 时由密钥 {key_id} 签名。"
        ),
        "js_failed": "验证失败：{step}：{reason}",
        "js_unavailable": "未验证：{reason}",
        "js_step_key": "验证公钥",
        "js_step_bundle": "读取证明包",
        "js_step_signature": "检查点签名",
        "js_step_origin": "日志名称",
        "js_step_checkpoint": "已签名的树大小与根哈希",
        "js_step_leaf": "叶子哈希",
        "js_step_inclusion": "包含性证明",
        "js_step_ciphertext": "存储的密文",
        "js_key_malformed": "不是验证公钥（格式：<名称>+<密钥 ID>+<base64 公钥>）",
        "js_key_id": "公钥与其密钥 ID 不符",
        "js_unreadable": "不是证明包",
        "js_not_signed": "检查点不是由此公钥签名的",
        "js_bad_signature": "签名验证失败：检查点被改动，或由其他密钥签名",
        "js_other_log": "检查点属于另一个日志",
        "js_mismatch": "证明包中的树大小或根哈希与已签名的检查点不符",
        "js_leaf_mismatch": "叶子哈希与记录头部的哈希不符",
        "js_not_included": "该证明无法从此记录推导出已签名的根哈希",
        "js_ciphertext": "密文与记录头部所固定的密文不一致",
        "js_no_ed25519": "此浏览器无法验证 Ed25519 签名",
        "js_no_key": "请在上方粘贴您持有的验证公钥，然后点击“用此公钥验证”",
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
        "worker": "工作进程",
        "outcome_applied": "已应用",
        "outcome_rejected": "已拒绝",
        "outcome_restarted": "之后已重新启动（启动时读取了配置文件）",
        "outcome_starting": "正在启动（启动时读取配置文件）",
        "outcome_no_answer": "未报告重新加载结果",
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


# A verification result older than this is recomputed when the overview is opened.
VERIFICATION_STALE_S = 15 * 60


async def overview(page: Page) -> Response:
    await page.login()
    tenants = (await page.call("listTenants")).tenants
    usage = []
    if page.may(Permission.USAGE_READ):
        for tenant in tenants:
            usage.append(await page.call("tenantUsage", path={"tenant": tenant.name}))
    job = None
    if page.may(Permission.AUDIT_STATUS):
        # Verifying reads every record: it runs in the background, and the page shows the
        # last result with its time, or how far the running one has come.
        job = await page.call("verificationJob", query={})
        finished = job.finished_at.timestamp() if job.finished_at else None
        now = page.services.verifications.now().timestamp()
        if job.state == "none" or (finished is not None and now - finished > VERIFICATION_STALE_S):
            job = await page.call("startVerification", body={})
    health = job.result if job is not None else None
    return page.render("overview.html.j2", usage=usage, job=job, health=health)


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
        "record.html.j2",
        request_id=request_id,
        records=records,
        decrypted=None,
        _json=_json,
        signed=await _signed_sizes(page, records),
        **await _proof_context(page),
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
        signed=await _signed_sizes(page, records),
        **await _proof_context(page),
    )


async def _proof_context(page: Page) -> dict[str, Any]:
    """The published verifier key (None if this listener has none) and the script's texts."""
    verifier = None
    if page.may(Permission.AUDIT_STATUS):
        try:
            verifier = await page.call("verifierKey")
        except LocalgateError:
            verifier = None  # no signing key here: the page asks for the key the user holds
    texts = {name[3:]: text for name, text in TEXT[page.lang].items() if name.startswith("js_")}
    return {"verifier": verifier, "proof_texts": texts}


async def _signed_sizes(page: Page, records: list[Any]) -> dict[str, int]:
    """How many records of each log a checkpoint covers: which records have a proof yet."""
    search = page.services.search
    return await page.services.in_thread(search.signed_sizes, [r.tenant for r in records])


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
