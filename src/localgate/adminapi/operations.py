"""The admin API's operations: each parses nothing itself, calls one admin service, and
records in the admin-action trail, before acting, every change and every decryption. The
table at the end is the API (``OPERATIONS``); logins are in ``logins``, the audit
operations in ``auditing``."""

from __future__ import annotations

import functools
from typing import Any

from localgate import __version__
from localgate.admin.cache import CacheAdmin
from localgate.admin.operators import Role, parse_duration
from localgate.admin.rag import RagAdmin
from localgate.admin.tenants import TenantAdmin
from localgate.adminapi.auditing import (
    decrypt_request,
    list_checkpoints,
    prove_request,
    request_records,
    search_audit,
    sign_checkpoints,
    start_verification,
    verification_job,
    verifier_key,
    verify_audit,
)
from localgate.adminapi.logins import login, logout, oidc_callback, oidc_login, whoami
from localgate.adminapi.models import (
    AuditSearchParams,
    AuditSearchResult,
    CacheParams,
    CacheStatsOut,
    CheckpointsOut,
    CheckpointsParams,
    ClearedOut,
    CollectionsOut,
    ConfigOut,
    DecryptedOut,
    DecryptRequest,
    Finding,
    KeyCreate,
    KeyCreated,
    KeyList,
    LimitsOut,
    LimitUsageOut,
    LoginRequest,
    LoginResult,
    OidcCallbackParams,
    Ok,
    ProofOut,
    ProofParams,
    RecordsOut,
    RedactRequest,
    RedactResult,
    ReloadOut,
    SignedOut,
    TenantList,
    TokenCreate,
    TokenCreated,
    TokenList,
    UpstreamOut,
    UpstreamsOut,
    UsageOut,
    UsageParams,
    UserCreate,
    UserCreated,
    UserList,
    VerifierKeyOut,
    VerifyJobOut,
    VerifyJobRequest,
    VerifyOut,
    VerifyParams,
    WhoAmI,
    WorkerReloadOut,
)
from localgate.adminapi.permissions import GRANTS, Permission
from localgate.adminapi.routing import Call, Operation
from localgate.errors import FailedPrecondition, NotFound, PermissionDenied, ServiceUnavailable
from localgate.limits import LimitsUnavailable
from localgate.policy.host_reload import NO_ANSWER, WorkerOutcome
from localgate.policy.reload import ConfigReloader, ReloadResult
from localgate.policy.snapshot import config_hash
from localgate.redaction.session import PolicyBlocked
from localgate.redaction.stage import build_detector, new_session
from localgate.secret import Secret

__all__ = ["OPERATIONS", "creatable_roles"]

# With several workers, how long a reload through the API waits for each to report.
WORKERS_RELOAD_TIMEOUT_S = 30.0


# -- tenants and keys ------------------------------------------------------------------


def _tenants(call: Call) -> TenantAdmin:
    return TenantAdmin(call.services.settings, call.services.keys)


async def list_tenants(call: Call) -> TenantList:
    """Tenants (a tenant-admin's own only)."""
    tenants = await call.services.in_store_thread(lambda: _tenants(call).list())
    if call.operator.role is Role.TENANT_ADMIN:
        tenants = [t for t in tenants if t.name == call.operator.tenant]
    return TenantList(tenants=tenants)


async def get_tenant(call: Call) -> TenantList:
    """One tenant and its effective policy."""
    name = call.scope(call.path["tenant"])
    tenant = await call.services.in_store_thread(lambda: _tenants(call).get(name))
    return TenantList(tenants=[tenant])


async def list_keys(call: Call) -> KeyList:
    """A tenant's keys."""
    tenant = call.scope(call.path["tenant"])
    return KeyList(keys=await call.services.in_store_thread(call.services.keys.list, tenant))


async def create_key(call: Call) -> KeyCreated:
    """A new key for a tenant."""
    tenant = call.scope(call.path["tenant"])
    await call.record("key.create", target={"tenant": tenant, "label": call.body.label})
    issued = await call.services.in_store_thread(call.services.keys.create, tenant, call.body.label)
    return KeyCreated(tenant=issued.tenant, key_id=issued.key_id, key=issued.key.reveal())


async def revoke_key(call: Call) -> Ok:
    """Revoke a key; a tenant-admin's key ids outside its tenant are "not found"."""
    key_id = call.path["key_id"]
    keys = await call.services.in_store_thread(call.services.keys.list, None)
    owner = next((k.tenant for k in keys if k.key_id == key_id), None)
    if owner is None or (call.operator.role is Role.TENANT_ADMIN and owner != call.operator.tenant):
        raise NotFound(f"no key with id {key_id}")
    await call.record("key.revoke", target={"tenant": owner, "key_id": key_id})
    await call.services.in_store_thread(call.services.keys.revoke, key_id)
    return Ok()


async def tenant_usage(call: Call) -> UsageOut:
    """A tenant's requests and tokens in a time range, from its completion records."""
    tenant = call.scope(call.path["tenant"])
    usage = await call.services.in_thread(
        call.services.search.usage, tenant, call.query.since, call.query.until
    )
    return UsageOut(
        tenant=usage.tenant, requests=usage.requests, outcomes=usage.outcomes, models=usage.models
    )


async def tenant_limits(call: Call) -> LimitsOut:
    """A tenant's limits, from the running configuration, against what the gateway's limits
    backend has counted now."""
    tenant = call.scope(call.path["tenant"])
    reloader, _, _ = call.services.link.running()
    limiter = call.services.link.limiter
    if limiter is None:
        raise FailedPrecondition("The running gateway counts no limits (its limits stage is off).")
    await call.services.in_store_thread(lambda: _tenants(call).get(tenant))  # NotFound
    limits = reloader.current.for_tenant(tenant).limits
    try:
        counted = await limiter.tenant_usage(tenant)
    except LimitsUnavailable as exc:
        raise ServiceUnavailable("The limits backend cannot be reached; try again.") from exc
    windows = (counted.requests_per_minute, counted.tokens_per_minute, counted.tokens_per_day)
    values = (limits.requests_per_minute, limits.tokens_per_minute, limits.tokens_per_day)
    names = ("requests_per_minute", "tokens_per_minute", "tokens_per_day")
    rows = [
        LimitUsageOut(limit=name, value=value, used=window.used, resets_in_s=window.resets_in_s)
        for name, value, window in zip(names, values, windows, strict=True)
    ]
    rows.append(
        LimitUsageOut(
            limit="concurrent_requests",
            value=limits.concurrent_requests,
            used=counted.in_flight,
            resets_in_s=None,
        )
    )
    backend = "redis" if call.services.settings.limits.backend == "redis" else "memory"
    return LimitsOut(tenant=tenant, backend=backend, limits=rows)


# -- cache, configuration, redaction ---------------------------------------------------


async def cache_stats(call: Call) -> CacheStatsOut:
    """What the answer cache holds."""

    def stats() -> Any:
        with CacheAdmin.open(call.services.settings) as admin:
            return admin.stats(call.query.tenant)

    return CacheStatsOut(caches=await call.services.in_thread(stats))


async def clear_cache(call: Call) -> ClearedOut:
    """Drop cached answers (of one tenant, or all)."""
    await call.record("cache.clear", target={"tenant": call.query.tenant})

    def clear() -> Any:
        with CacheAdmin.open(call.services.settings) as admin:
            return admin.clear(call.query.tenant)

    dropped = await call.services.in_thread(clear)
    return ClearedOut(collections=[info.name for info in dropped])


async def list_collections(call: Call) -> CollectionsOut:
    """Retrieval collections (those a tenant searches, if one is given)."""

    def collections() -> Any:
        with RagAdmin.open(call.services.settings) as admin:
            return admin.collections(call.query.tenant)

    return CollectionsOut(collections=await call.services.in_thread(collections))


async def delete_collection(call: Call) -> Ok:
    """Delete a retrieval collection of a tenant (the shared one if no tenant is given)."""
    name, tenant = call.path["collection"], call.query.tenant
    await call.record("rag.delete", target={"collection": name, "tenant": tenant})

    def delete() -> None:
        with RagAdmin.open(call.services.settings) as admin:
            admin.delete(name, tenant)

    await call.services.in_thread(delete)
    return Ok()


async def show_config(call: Call) -> ConfigOut:
    """The running configuration's version and hash, and the last reload's result."""
    services = call.services
    reloader = services.link.reloader
    if reloader is None:
        return ConfigOut(
            localgate_version=__version__,
            running=False,
            version=None,
            hash=config_hash(services.settings),
            source=str(services.source) if services.source else None,
            reload_attempts=0,
            last_reload=None,
        )
    current = reloader.current
    return ConfigOut(
        localgate_version=__version__,
        running=True,
        version=current.version,
        hash=current.hash,
        source=current.source,
        reload_attempts=reloader.attempts,
        last_reload=_reload_out(reloader.last) if reloader.last else None,
    )


def _reload_out(result: ReloadResult) -> ReloadOut:
    return ReloadOut(
        applied=result.applied,
        version=result.version,
        hash=result.hash,
        at=result.at,
        problems=list(result.problems),
        restart_needed=list(result.restart_needed),
    )


async def reload_config(call: Call) -> ReloadOut:
    """Reload the configuration file, as ``localgate reload`` does (every worker, with
    several); a rejected file changes nothing."""
    reloader, _, _ = call.services.link.running()
    host = call.services.link.host_reload
    await call.record("config.reload")
    if host is None:
        out = _reload_out(await reloader.reload())
    else:
        outcomes = await host.reload(WORKERS_RELOAD_TIMEOUT_S)
        out = _workers_reload_out(reloader, outcomes)
    if not out.applied:
        await call.record(
            "config.reload", outcome="rejected", target={"problems": list(out.problems)}
        )
    return out


def _workers_reload_out(reloader: ConfigReloader, outcomes: list[WorkerOutcome]) -> ReloadOut:
    """Every worker's outcome; the top-level fields are this worker's, except ``applied``
    (by every worker) and ``problems`` (of each worker that did not apply it)."""
    own = reloader.last
    current = reloader.current
    silent = f"did not report a reload within {WORKERS_RELOAD_TIMEOUT_S:g} s"
    problems = [
        f"worker {outcome.worker}: {problem}"
        for outcome in outcomes
        if outcome.failed
        for problem in (outcome.problems or ((silent,) if outcome.outcome == NO_ANSWER else ()))
    ]
    return ReloadOut(
        applied=not any(outcome.failed for outcome in outcomes),
        version=current.version,
        hash=current.hash,
        at=own.at if own is not None else 0.0,
        problems=problems,
        restart_needed=list(own.restart_needed) if own is not None else [],
        workers=[
            WorkerReloadOut(
                worker=outcome.worker,
                pid=outcome.pid,
                outcome=outcome.outcome,
                version=outcome.version,
                hash=outcome.hash,
                problems=list(outcome.problems),
                restart_needed=list(outcome.restart_needed),
            )
            for outcome in outcomes
        ],
    )


async def list_upstreams(call: Call) -> UpstreamsOut:
    """The running gateway's upstreams and their circuit breakers."""
    _, router, dispatcher = call.services.link.running()
    circuits = dispatcher.circuits()
    return UpstreamsOut(
        upstreams=[
            UpstreamOut(
                name=upstream.name,
                local=upstream.local,
                ready=upstream.ready,
                circuit=circuits.get(upstream.name, "closed"),
            )
            for upstream in router.upstreams
        ]
    )


async def redact(call: Call) -> RedactResult:
    """What ``localgate redact`` shows: what would be sent, and the findings."""
    settings = call.services.settings
    tenant = call.body.tenant
    policy = settings.redaction_for(tenant) if tenant else settings.proxy.redaction
    detector = call.services.detectors.get(tenant)
    if detector is None:
        detector = await call.services.in_thread(build_detector, settings, policy)
        call.services.detectors[tenant] = detector

    def run() -> RedactResult:
        session = new_session(settings, policy, detector)
        findings = [
            Finding(
                type=f.type,
                start=f.start,
                end=f.end,
                action=session.action_for(f.type),
                score=f.score,
            )
            for f in detector.detect(call.body.text)
        ]
        try:
            sent = session.redact(call.body.text, "text")
        except PolicyBlocked as exc:
            return RedactResult(sent=None, blocked=True, message=exc.message, findings=findings)
        return RedactResult(sent=sent, blocked=False, message=None, findings=findings)

    return await call.services.in_thread(run)


# -- operators -------------------------------------------------------------------------


async def list_tokens(call: Call) -> TokenList:
    """Admin tokens."""
    return TokenList(
        tokens=await call.services.in_store_thread(call.services.operators.list_tokens)
    )


def _no_more_than_the_caller(call: Call, role: Role) -> None:
    """Nobody mints access it does not hold: an admin minting an auditor's token could read
    payloads. Other roles' tokens and users are made on the gateway's host (the CLI)."""
    if not GRANTS[role] <= GRANTS[call.operator.role]:
        raise PermissionDenied(
            f"The role {call.operator.role.value} may not create a {role.value}: it would "
            "hold permissions its creator does not; use 'localgate admin' on the host."
        )


def creatable_roles(role: Role) -> list[Role]:
    """The roles whose tokens and users ``role`` may create through the API."""
    return [other for other in Role if GRANTS[other] <= GRANTS[role]]


async def create_token(call: Call) -> TokenCreated:
    """A new admin token, as ``localgate admin token create`` makes it."""
    body: TokenCreate = call.body
    _no_more_than_the_caller(call, body.role)
    expires_in = parse_duration(body.expires) if body.expires else None
    await call.record(
        "token.create",
        target={
            "role": body.role.value,
            "tenant": body.tenant,
            "label": body.label,
            "expires": body.expires,
        },
    )
    issued = await call.services.in_store_thread(
        functools.partial(
            call.services.operators.create_token, body.role, body.tenant, expires_in, body.label
        )
    )
    return TokenCreated(
        token_id=issued.token_id,
        role=issued.role,
        tenant=issued.tenant,
        expires_at=issued.expires_at,
        token=issued.token.reveal(),
    )


async def revoke_token(call: Call) -> Ok:
    """Revoke an admin token."""
    token_id = call.path["token_id"]
    await call.record("token.revoke", target={"token_id": token_id})
    await call.services.in_store_thread(call.services.operators.revoke_token, token_id)
    return Ok()


async def list_users(call: Call) -> UserList:
    """Local users."""
    return UserList(users=await call.services.in_store_thread(call.services.operators.list_users))


async def create_user(call: Call) -> UserCreated:
    """A new local user, as ``localgate admin user create`` makes it (the password is
    kept only as its argon2id hash; neither appears in the trail)."""
    body: UserCreate = call.body
    _no_more_than_the_caller(call, body.role)
    await call.record(
        "user.create", target={"user": body.name, "role": body.role.value, "tenant": body.tenant}
    )
    user = await call.services.in_store_thread(
        call.services.operators.create_user,
        body.name,
        body.role,
        Secret(body.password),
        body.tenant,
    )
    return UserCreated(user=user)


async def disable_user(call: Call) -> Ok:
    """Disable a local user; their sessions end."""
    name = call.path["name"]
    await call.record("user.disable", target={"user": name})
    await call.services.in_store_thread(call.services.operators.disable_user, name)
    return Ok()


P = Permission
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET", "/whoami", "whoami", "Show the caller.", P.WHOAMI, whoami, WhoAmI, tag="session"
    ),
    Operation(
        "POST",
        "/session",
        "login",
        "Log in.",
        P.WHOAMI,
        login,
        LoginResult,
        body=LoginRequest,
        tag="session",
        public=True,
    ),
    Operation(
        "GET",
        "/oidc/login",
        "oidcLogin",
        "Log in with the identity provider.",
        P.WHOAMI,
        oidc_login,
        Ok,
        tag="session",
        public=True,
        redirect=True,
    ),
    Operation(
        "GET",
        "/oidc/callback",
        "oidcCallback",
        "Finish a login at the identity provider.",
        P.WHOAMI,
        oidc_callback,
        LoginResult,
        query=OidcCallbackParams,
        tag="session",
        public=True,
    ),
    Operation("DELETE", "/session", "logout", "Log out.", P.WHOAMI, logout, Ok, tag="session"),
    Operation(
        "GET",
        "/tenants",
        "listTenants",
        "List tenants.",
        P.TENANTS_READ,
        list_tenants,
        TenantList,
        tag="tenants",
    ),
    Operation(
        "GET",
        "/tenants/{tenant}",
        "getTenant",
        "Show a tenant.",
        P.TENANTS_READ,
        get_tenant,
        TenantList,
        tag="tenants",
    ),
    Operation(
        "GET",
        "/tenants/{tenant}/keys",
        "listKeys",
        "List keys.",
        P.KEYS_READ,
        list_keys,
        KeyList,
        tag="keys",
    ),
    Operation(
        "POST",
        "/tenants/{tenant}/keys",
        "createKey",
        "Create keys.",
        P.KEYS_WRITE,
        create_key,
        KeyCreated,
        body=KeyCreate,
        tag="keys",
    ),
    Operation(
        "GET",
        "/tenants/{tenant}/usage",
        "tenantUsage",
        "Show a tenant's usage.",
        P.USAGE_READ,
        tenant_usage,
        UsageOut,
        query=UsageParams,
        tag="tenants",
    ),
    Operation(
        "GET",
        "/tenants/{tenant}/limits",
        "tenantLimits",
        "Show a tenant's limits and their use.",
        P.USAGE_READ,
        tenant_limits,
        LimitsOut,
        tag="tenants",
    ),
    Operation(
        "DELETE",
        "/keys/{key_id}",
        "revokeKey",
        "Revoke keys.",
        P.KEYS_WRITE,
        revoke_key,
        Ok,
        tag="keys",
    ),
    Operation(
        "GET",
        "/audit/records",
        "searchAudit",
        "Search the audit trail.",
        P.AUDIT_READ,
        search_audit,
        AuditSearchResult,
        query=AuditSearchParams,
        tag="audit",
    ),
    Operation(
        "GET",
        "/audit/requests/{request_id}",
        "getRequestRecords",
        "Read audit metadata.",
        P.AUDIT_READ,
        request_records,
        RecordsOut,
        tag="audit",
    ),
    Operation(
        "POST",
        "/audit/requests/{request_id}/decrypt",
        "decryptRequest",
        "Decrypt audit payloads.",
        P.AUDIT_DECRYPT,
        decrypt_request,
        DecryptedOut,
        body=DecryptRequest,
        tag="audit",
    ),
    Operation(
        "GET",
        "/audit/requests/{request_id}/proof",
        "proveRequest",
        "Prove inclusion.",
        P.AUDIT_READ,
        prove_request,
        ProofOut,
        query=ProofParams,
        tag="audit",
    ),
    Operation(
        "GET",
        "/audit/verify",
        "verifyAudit",
        "Verify the audit trail.",
        P.AUDIT_STATUS,
        verify_audit,
        VerifyOut,
        query=VerifyParams,
        tag="audit",
    ),
    Operation(
        "POST",
        "/audit/verify/jobs",
        "startVerification",
        "Start verifying the audit trail in the background.",
        P.AUDIT_STATUS,
        start_verification,
        VerifyJobOut,
        body=VerifyJobRequest,
        tag="audit",
    ),
    Operation(
        "GET",
        "/audit/verify/job",
        "verificationJob",
        "Show the background verification.",
        P.AUDIT_STATUS,
        verification_job,
        VerifyJobOut,
        query=VerifyParams,
        tag="audit",
    ),
    Operation(
        "GET",
        "/audit/verifier-key",
        "verifierKey",
        "Show the verifier key.",
        P.AUDIT_STATUS,
        verifier_key,
        VerifierKeyOut,
        tag="audit",
    ),
    Operation(
        "GET",
        "/audit/checkpoints",
        "listCheckpoints",
        "List checkpoints.",
        P.AUDIT_STATUS,
        list_checkpoints,
        CheckpointsOut,
        query=CheckpointsParams,
        tag="audit",
    ),
    Operation(
        "POST",
        "/audit/checkpoints",
        "signCheckpoints",
        "Sign checkpoints.",
        P.AUDIT_SIGN,
        sign_checkpoints,
        SignedOut,
        tag="audit",
    ),
    Operation(
        "GET",
        "/cache",
        "cacheStats",
        "Show cache statistics.",
        P.CACHE_READ,
        cache_stats,
        CacheStatsOut,
        query=CacheParams,
        tag="cache",
    ),
    Operation(
        "DELETE",
        "/cache",
        "clearCache",
        "Clear the cache.",
        P.CACHE_WRITE,
        clear_cache,
        ClearedOut,
        query=CacheParams,
        tag="cache",
    ),
    Operation(
        "GET",
        "/rag/collections",
        "listCollections",
        "List retrieval collections.",
        P.CACHE_READ,
        list_collections,
        CollectionsOut,
        query=CacheParams,
        tag="retrieval",
    ),
    Operation(
        "DELETE",
        "/rag/collections/{collection}",
        "deleteCollection",
        "Delete retrieval collections.",
        P.CACHE_WRITE,
        delete_collection,
        Ok,
        query=CacheParams,
        tag="retrieval",
    ),
    Operation(
        "GET",
        "/config",
        "showConfig",
        "Show the configuration.",
        P.CONFIG_READ,
        show_config,
        ConfigOut,
        tag="config",
    ),
    Operation(
        "POST",
        "/config/reload",
        "reloadConfig",
        "Reload the configuration.",
        P.CONFIG_WRITE,
        reload_config,
        ReloadOut,
        tag="config",
    ),
    Operation(
        "GET",
        "/upstreams",
        "listUpstreams",
        "Show upstreams and their circuits.",
        P.CONFIG_READ,
        list_upstreams,
        UpstreamsOut,
        tag="upstreams",
    ),
    Operation(
        "POST",
        "/redact",
        "redact",
        "Try the redactor.",
        P.REDACT,
        redact,
        RedactResult,
        body=RedactRequest,
        tag="redaction",
    ),
    Operation(
        "GET",
        "/tokens",
        "listTokens",
        "List admin tokens.",
        P.OPERATORS_READ,
        list_tokens,
        TokenList,
        tag="operators",
    ),
    Operation(
        "POST",
        "/tokens",
        "createToken",
        "Create admin tokens.",
        P.OPERATORS_WRITE,
        create_token,
        TokenCreated,
        body=TokenCreate,
        tag="operators",
    ),
    Operation(
        "DELETE",
        "/tokens/{token_id}",
        "revokeToken",
        "Revoke admin tokens.",
        P.OPERATORS_WRITE,
        revoke_token,
        Ok,
        tag="operators",
    ),
    Operation(
        "GET",
        "/users",
        "listUsers",
        "List users.",
        P.OPERATORS_READ,
        list_users,
        UserList,
        tag="operators",
    ),
    Operation(
        "POST",
        "/users",
        "createUser",
        "Create users.",
        P.OPERATORS_WRITE,
        create_user,
        UserCreated,
        body=UserCreate,
        tag="operators",
    ),
    Operation(
        "DELETE",
        "/users/{name}",
        "disableUser",
        "Disable users.",
        P.OPERATORS_WRITE,
        disable_user,
        Ok,
        tag="operators",
    ),
)
