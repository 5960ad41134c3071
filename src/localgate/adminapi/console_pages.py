"""More console pages, each a thin face of admin API operations: a tenant's effective
policy and its usage against its limits, the answer cache and the retrieval collections,
admin tokens and users, the audit logs' checkpoints, and the console's OIDC login.

As in ``console``: every page calls the operations as the session's user (roles, tenant
scoping and the admin-action trail are the API's), every change is a POSTed form with the
session's CSRF token, and a destructive one (clearing the cache, deleting a collection)
first shows a page asking to confirm, so it needs no script. A new token is shown only in
the answer to the POST that made it. Lists are cut into pages on the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from localgate.admin.operators import Role
from localgate.adminapi.console import (
    CONSOLE,
    PAGE_SIZE,
    Page,
    _page,
    _see_other,
)
from localgate.adminapi.handoff import CONSOLE_OIDC_COOKIE
from localgate.adminapi.logins import OIDC_COOKIE
from localgate.adminapi.operations import creatable_roles
from localgate.adminapi.permissions import Permission
from localgate.adminapi.routing import API_PREFIX
from localgate.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied

__all__ = ["PAGE_TEXT", "page_routes"]

# The words of these pages; the navigation's are in ``console.TEXT``.
PAGE_TEXT: dict[str, dict[str, str]] = {
    "en": {
        "policy": "Effective policy",
        "redaction": "Redaction",
        "enabled": "Enabled",
        "default_action": "Default action",
        "actions": "Actions differing from the default",
        "binary_data": "Images and files",
        "detect_names": "Detect names",
        "scan_answers": "Scan answers",
        "answer_cache": "Answer cache",
        "exact": "Exact matches",
        "semantic": "Similar questions",
        "ttl": "Kept for (s)",
        "retrieval": "Retrieval",
        "collection": "Collection",
        "top_k": "Passages per request",
        "min_similarity": "Minimum similarity",
        "local_embeddings": "Embeddings computed locally",
        "routing": "Models and upstreams",
        "models": "Models",
        "chain": "Upstreams, in order",
        "model_asked": "Model asked for",
        "as_requested": "as requested",
        "other_requests": "Other requests",
        "allowed_upstreams": "Upstreams it may reach",
        "any_upstream": "any",
        "limits": "Limits",
        "limit": "Limit",
        "used": "Used",
        "left": "Left",
        "no_limit": "no limit",
        "priority": "Priority",
        "queue_timeout": "Queue wait (s)",
        "keys_with_limits": "Keys with limits of their own",
        "requests_per_minute": "Requests per minute",
        "tokens_per_minute": "Tokens per minute",
        "tokens_per_day": "Tokens per day",
        "concurrent_requests": "Concurrent requests",
        "resets_in": "Window resets in (s)",
        "in_flight": "in flight now",
        "backend_memory": (
            "Counted by the gateway in this process (limits.backend: memory): other "
            "workers and replicas count their own."
        ),
        "backend_redis": "Counted in Redis (limits.backend: redis), across every replica.",
        "not_running": (
            "No gateway runs in this process: its counters cannot be read here; the "
            "requests on record follow."
        ),
        "usage": "Usage and limits",
        "all_time": "On record",
        "prompt_tokens": "Prompt tokens",
        "answer_tokens": "Answer tokens",
        "total_tokens": "Tokens",
        "entries": "Entries",
        "expired": "Expired",
        "embedder": "Embedder",
        "passages": "Passages",
        "owner": "Owner",
        "shared": "shared by every tenant",
        "all_tenants": "all tenants",
        "clear_cache": "Clear the cache",
        "clear_confirm": "Clear the cached answers of {who}? They are answered again upstream.",
        "cleared": "Cleared",
        "delete": "Delete",
        "delete_confirm": "Delete the retrieval collection {name} ({who})? Its passages are gone.",
        "deleted": "Deleted",
        "confirm": "Yes, do it",
        "cancel": "Cancel",
        "ingest_note": (
            "Documents are added with 'localgate rag ingest' on the gateway's host; the "
            "passage counts show what each ingest stored."
        ),
        "tokens": "Admin tokens",
        "token_id": "Token id",
        "expires": "Expires",
        "expires_help": "Lifetime, e.g. 30d, 12h (empty: until revoked)",
        "never": "never",
        "create_token": "Create a token",
        "token_once": "The new token, shown this once only; copy it now:",
        "revoke_token_confirm": "Revoke this token? Calls with it will be refused at once.",
        "users": "Users",
        "user": "User",
        "disabled": "disabled",
        "disable": "Disable",
        "disable_confirm": "Disable this user? Their sessions end at once.",
        "create_user": "Create a user",
        "password_help": "Password (at least 12 characters)",
        "user_created": "User created:",
        "tenant_help": "Tenant (a tenant-admin's only)",
        "size": "Size",
        "signers": "Signed by",
        "filter": "Filter",
    },
    "zh": {
        "policy": "生效策略",
        "redaction": "脱敏",
        "enabled": "启用",
        "default_action": "默认动作",
        "actions": "与默认不同的动作",
        "binary_data": "图片与文件",
        "detect_names": "识别人名",
        "scan_answers": "扫描回答",
        "answer_cache": "回答缓存",
        "exact": "完全相同的问题",
        "semantic": "相似的问题",
        "ttl": "保留时长（秒）",
        "retrieval": "检索",
        "collection": "集合",
        "top_k": "每个请求的段落数",
        "min_similarity": "最低相似度",
        "local_embeddings": "在本地计算向量",
        "routing": "模型与上游",
        "models": "模型",
        "chain": "上游（按顺序）",
        "model_asked": "实际请求的模型",
        "as_requested": "与请求相同",
        "other_requests": "其他请求",
        "allowed_upstreams": "允许访问的上游",
        "any_upstream": "任意",
        "limits": "限额",
        "limit": "限额",
        "used": "已用",
        "left": "剩余",
        "no_limit": "不限",
        "priority": "优先级",
        "queue_timeout": "排队等待（秒）",
        "keys_with_limits": "有独立限额的密钥",
        "requests_per_minute": "每分钟请求数",
        "tokens_per_minute": "每分钟令牌数",
        "tokens_per_day": "每天令牌数",
        "concurrent_requests": "并发请求数",
        "resets_in": "窗口重置倒计时（秒）",
        "in_flight": "当前进行中",
        "backend_memory": (
            "由本进程中的网关计数（limits.backend: memory）：其他工作进程和副本各自计数。"
        ),
        "backend_redis": "在 Redis 中计数（limits.backend: redis），涵盖所有副本。",
        "not_running": "本进程中没有运行网关，无法读取其计数；以下是审计记录中的请求。",
        "usage": "用量与限额",
        "all_time": "全部记录",
        "prompt_tokens": "提示令牌",
        "answer_tokens": "回答令牌",
        "total_tokens": "令牌",
        "entries": "条目",
        "expired": "已过期",
        "embedder": "向量模型",
        "passages": "段落数",
        "owner": "所属",
        "shared": "所有租户共享",
        "all_tenants": "所有租户",
        "clear_cache": "清空缓存",
        "clear_confirm": "确定清空 {who} 的缓存回答？之后的请求将重新发往上游。",
        "cleared": "已清空",
        "delete": "删除",
        "delete_confirm": "确定删除检索集合 {name}（{who}）？其中的段落将被删除。",
        "deleted": "已删除",
        "confirm": "确定",
        "cancel": "取消",
        "ingest_note": (
            "文档在网关主机上用 'localgate rag ingest' 导入；段落数即每次导入存入的内容。"
        ),
        "tokens": "管理令牌",
        "token_id": "令牌 ID",
        "expires": "过期时间",
        "expires_help": "有效期，例如 30d、12h（留空：直到吊销）",
        "never": "永不",
        "create_token": "创建令牌",
        "token_once": "新令牌仅显示这一次，请立即复制：",
        "revoke_token_confirm": "确定吊销此令牌？使用它的调用将立即被拒绝。",
        "users": "用户",
        "user": "用户",
        "disabled": "已停用",
        "disable": "停用",
        "disable_confirm": "确定停用此用户？其会话将立即结束。",
        "create_user": "创建用户",
        "password_help": "密码（至少 12 个字符）",
        "user_created": "已创建用户：",
        "tenant_help": "租户（仅限租户管理员角色）",
        "size": "大小",
        "signers": "签名者",
        "filter": "筛选",
    },
}

_SHARED = "*"  # the owner of a retrieval collection every tenant searches


def _words(page: Page) -> dict[str, str]:
    return PAGE_TEXT[page.lang]


def _render(page: Page, template: str, status: int = 200, **context: Any) -> Response:
    return page.render(template, status, u=_words(page), **context)


def _slice(items: list[Any], page: Page) -> dict[str, Any]:
    """One page of ``items`` and the pager's values (the query's other fields kept)."""
    params = page.request.query_params
    try:
        number = max(1, int(params.get("page", "1")))
    except ValueError:
        number = 1
    pages = max(1, -(-len(items) // PAGE_SIZE))
    number = min(number, pages)
    kept = {k: v for k, v in params.items() if k != "page"}
    return {
        "items": items[(number - 1) * PAGE_SIZE : number * PAGE_SIZE],
        "page_number": number,
        "pages": pages,
        "pager_query": urlencode(kept) + "&" if kept else "",
    }


def _refuse(page: Page, permission: Permission, what: str) -> None:
    if not page.may(permission):
        role = page.operator.role.value if page.operator else "-"
        raise PermissionDenied(f"The role {role} may not {what}.")


# -- a tenant's policy and usage -------------------------------------------------------


async def policy_page(page: Page) -> Response:
    await page.login()
    name = page.request.path_params["tenant"]
    [tenant] = (await page.call("getTenant", path={"tenant": name})).tenants
    return _render(page, "policy.html.j2", tenant=tenant, policy=tenant.policy)


async def usage_page(page: Page) -> Response:
    await page.login()
    _refuse(page, Permission.USAGE_READ, "see usage")
    name = page.request.path_params["tenant"]
    [tenant] = (await page.call("getTenant", path={"tenant": name})).tenants
    try:
        counted = await page.call("tenantLimits", path={"tenant": name})
    except FailedPrecondition:
        counted = None  # no gateway in this process: nothing counted here
    total = await page.call("tenantUsage", path={"tenant": name})
    return _render(
        page,
        "usage.html.j2",
        tenant=tenant,
        limits=tenant.policy.limits,
        counted=counted,
        total=total,
    )


# -- the answer cache and the retrieval collections ------------------------------------


def _tenant_field(fields: Mapping[str, str]) -> str | None:
    return fields.get("tenant", "").strip() or None


async def cache_page(page: Page, cleared: list[str] | None = None) -> Response:
    await page.login()
    tenant = page.request.query_params.get("tenant", "").strip() or None
    stats = (await page.call("cacheStats", query={"tenant": tenant})).caches
    return _render(
        page,
        "cache.html.j2",
        tenant=tenant or "",
        cleared=cleared,
        **_slice(stats, page),
    )


async def cache_clear_confirm(page: Page) -> Response:
    await page.login()
    _refuse(page, Permission.CACHE_WRITE, "clear the cache")
    tenant = page.request.query_params.get("tenant", "").strip()
    who = tenant or _words(page)["all_tenants"]
    return _render(
        page,
        "confirm.html.j2",
        question=_words(page)["clear_confirm"].format(who=who),
        action=f"{CONSOLE}/cache/clear",
        fields={"tenant": tenant},
        button=_words(page)["clear_cache"],
        back=f"{CONSOLE}/cache",
    )


async def cache_clear(page: Page) -> Response:
    await page.login()
    fields = await page.form()
    cleared = await page.call("clearCache", query={"tenant": _tenant_field(fields)})
    return await cache_page(page, cleared=cleared.collections)


async def collections_page(page: Page, deleted: str | None = None) -> Response:
    await page.login()
    tenant = page.request.query_params.get("tenant", "").strip() or None
    found = (await page.call("listCollections", query={"tenant": tenant})).collections
    return _render(
        page,
        "collections.html.j2",
        tenant=tenant or "",
        shared=_SHARED,
        deleted=deleted,
        **_slice(found, page),
    )


async def collection_delete_confirm(page: Page) -> Response:
    await page.login()
    _refuse(page, Permission.CACHE_WRITE, "delete retrieval collections")
    name = page.request.path_params["collection"]
    tenant = page.request.query_params.get("tenant", "").strip()
    words = _words(page)
    return _render(
        page,
        "confirm.html.j2",
        question=words["delete_confirm"].format(name=name, who=tenant or words["shared"]),
        action=f"{CONSOLE}/collections/{name}/delete",
        fields={"tenant": tenant},
        button=words["delete"],
        back=f"{CONSOLE}/collections",
    )


async def collection_delete(page: Page) -> Response:
    await page.login()
    fields = await page.form()
    name = page.request.path_params["collection"]
    await page.call(
        "deleteCollection", path={"collection": name}, query={"tenant": _tenant_field(fields)}
    )
    return await collections_page(page, deleted=name)


# -- admin tokens and users ------------------------------------------------------------


def _creatable(page: Page) -> list[Role]:
    return creatable_roles(page.operator.role) if page.operator else []


async def tokens_page(page: Page, created: Any = None) -> Response:
    await page.login()
    tokens = (await page.call("listTokens")).tokens
    return _render(
        page, "tokens.html.j2", created=created, roles=_creatable(page), **_slice(tokens, page)
    )


async def token_create(page: Page) -> Response:
    await page.login()
    fields = await page.form()
    created = await page.call(
        "createToken",
        body={
            "role": fields.get("role", ""),
            "tenant": _tenant_field(fields),
            "expires": fields.get("expires", "").strip() or None,
            "label": fields.get("label", ""),
        },
    )
    return await tokens_page(page, created=created)


async def token_revoke(page: Page) -> Response:
    await page.login()
    await page.form()
    await page.call("revokeToken", path={"token_id": page.request.path_params["token_id"]})
    return _see_other(f"{CONSOLE}/tokens")


async def users_page(page: Page, created: Any = None) -> Response:
    await page.login()
    users = (await page.call("listUsers")).users
    return _render(page, "users.html.j2", created=created, roles=list(Role), **_slice(users, page))


async def user_create(page: Page) -> Response:
    await page.login()
    fields = await page.form()
    created = await page.call(
        "createUser",
        body={
            "name": fields.get("name", "").strip(),
            "role": fields.get("role", ""),
            "tenant": _tenant_field(fields),
            "password": fields.get("password", ""),
        },
    )
    return await users_page(page, created=created.user)


async def user_disable(page: Page) -> Response:
    await page.login()
    await page.form()
    await page.call("disableUser", path={"name": page.request.path_params["name"]})
    return _see_other(f"{CONSOLE}/users")


# -- checkpoints -----------------------------------------------------------------------


async def checkpoints_page(page: Page) -> Response:
    await page.login()
    tenant = page.request.query_params.get("tenant", "").strip() or None
    try:
        found = (await page.call("listCheckpoints", query={"tenant": tenant})).checkpoints
    except NotFound:
        found = []  # no audit log yet: nothing signed
    # Newest first: the head an auditor checks against is the latest one.
    found.sort(key=lambda c: (c.time is None, c.time), reverse=True)
    return _render(page, "checkpoints.html.j2", tenant=tenant or "", **_slice(found, page))


# -- OIDC login ------------------------------------------------------------------------


async def oidc_start(page: Page) -> Response:
    """Send the browser to the identity provider; its answer comes back to the API's
    callback, which (seeing this login began here) ends in a console session."""
    oidc = page.services.oidc
    if oidc is None:
        raise NotFound("OIDC login is not configured (admin.oidc).")
    if page.request.query_params:
        raise InvalidArgument("This page takes no query parameters.")
    url, state = await page.services.in_thread(oidc.begin)
    secure = "; Secure" if page.request.url.scheme == "https" else ""
    response = RedirectResponse(url, status_code=302, headers={"cache-control": "no-store"})
    # Lax, not Strict: the browser must send them back on the provider's redirect.
    for cookie in (f"{OIDC_COOKIE}={state}", f"{CONSOLE_OIDC_COOKIE}=1"):
        response.headers.append(
            "set-cookie",
            f"{cookie}; Path={API_PREFIX}/oidc/; HttpOnly; SameSite=Lax; Max-Age=600{secure}",
        )
    return response


def page_routes() -> list[Route]:
    """These pages' routes, under /admin/."""
    c = CONSOLE
    return [
        Route(f"{c}/tenants/{{tenant}}/policy", _page(policy_page), methods=["GET"]),
        Route(f"{c}/tenants/{{tenant}}/usage", _page(usage_page), methods=["GET"]),
        Route(f"{c}/cache", _page(cache_page), methods=["GET"]),
        Route(f"{c}/cache/clear", _page(cache_clear_confirm), methods=["GET"]),
        Route(f"{c}/cache/clear", _page(cache_clear), methods=["POST"]),
        Route(f"{c}/collections", _page(collections_page), methods=["GET"]),
        Route(
            f"{c}/collections/{{collection}}/delete",
            _page(collection_delete_confirm),
            methods=["GET"],
        ),
        Route(f"{c}/collections/{{collection}}/delete", _page(collection_delete), methods=["POST"]),
        Route(f"{c}/tokens", _page(tokens_page), methods=["GET"]),
        Route(f"{c}/tokens", _page(token_create), methods=["POST"]),
        Route(f"{c}/tokens/{{token_id}}/revoke", _page(token_revoke), methods=["POST"]),
        Route(f"{c}/users", _page(users_page), methods=["GET"]),
        Route(f"{c}/users", _page(user_create), methods=["POST"]),
        Route(f"{c}/users/{{name}}/disable", _page(user_disable), methods=["POST"]),
        Route(f"{c}/checkpoints", _page(checkpoints_page), methods=["GET"]),
        Route(f"{c}/oidc/login", _page(oidc_start), methods=["GET"]),
    ]
