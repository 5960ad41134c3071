"""The console's audit downloads and jobs: a record's proof bundle, starting a background
verification, and the auditor's report of a tenant and period.

Each calls the admin API's operations as the session's user (``console.Page``), so roles
and the admin-action trail are the API's; the report, which has no API operation (it is a
document, not JSON), is put on record here, before it is generated, as the API would.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote

from starlette.responses import Response
from starlette.routing import Route

from localgate import __version__
from localgate.admin.audit_report import collect, period_bounds
from localgate.adminapi.console import (
    _HEADERS,
    CONSOLE,
    Handler,
    Page,
    _page,
    _see_other,
)
from localgate.adminapi.permissions import Permission
from localgate.adminapi.routing import Call, error_response, record_failure
from localgate.errors import FailedPrecondition, InvalidArgument, LocalgateError, PermissionDenied

if TYPE_CHECKING:
    from localgate.admin.audit_report import ReportFigures

__all__ = ["audit_console_routes"]

_UNSAFE_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9._-]")
FORMATS = {"html": "text/html; charset=utf-8", "pdf": "application/pdf"}


def _attachment(name: str) -> str:
    return f'attachment; filename="{_UNSAFE_IN_FILE_NAME.sub("_", name)[:150]}"'


def _json_errors(handler: Handler) -> Handler:
    """``handler``, whose refusals are the API's JSON envelope when a script asked for JSON
    (the record page's check), and the console's error page otherwise."""

    async def wrapped(page: Page) -> Response:
        try:
            return await handler(page)
        except LocalgateError as exc:
            if "application/json" not in page.request.headers.get("accept", ""):
                raise
            response = error_response(exc, page.request_id)
            response.headers.update(_HEADERS)
            return response

    return wrapped


# -- proof bundles ---------------------------------------------------------------------


async def proof_bundle(page: Page) -> Response:
    """A record's proof bundle (docs/audit.md, "Proof bundles") as a file to keep."""
    await page.login()
    request_id = page.request.path_params["request_id"]
    kind = page.request.query_params.get("kind", "request")
    bundle = await page.call("proveRequest", path={"request_id": request_id}, query={"kind": kind})
    return Response(
        json.dumps(bundle.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n",
        headers={
            **_HEADERS,
            "x-request-id": page.request_id[:100],
            "content-disposition": _attachment(f"proof-{request_id}-{kind}.json"),
        },
        media_type="application/json",
    )


async def sign_checkpoints(page: Page) -> Response:
    """Sign the logs' heads now (as ``localgate audit checkpoint``), then back to the record
    whose proof waited for it."""
    await page.login()
    form = await page.form()
    await page.call("signCheckpoints")
    request_id = form.get("request_id", "")
    if not request_id:
        return _see_other(f"{CONSOLE}/audit")
    return _see_other(f"{CONSOLE}/audit/requests/{quote(request_id, safe='')}")


# -- background verification -----------------------------------------------------------


async def start_verification(page: Page) -> Response:
    """Start verifying every log (unless that is running), then back to the overview."""
    await page.login()
    await page.form()
    await page.call("startVerification", body={})
    return _see_other(f"{CONSOLE}/")


# -- the auditor's report --------------------------------------------------------------


async def report_page(page: Page) -> Response:
    await page.login()
    _may_report(page)
    tenants = (await page.call("listTenants")).tenants
    return page.render("report.html.j2", tenants=tenants, form={}, formats=list(FORMATS))


async def report_download(page: Page) -> Response:
    """The report of one tenant and period, as ``localgate audit report`` writes it; on
    record in the admin-action trail before it is generated."""
    operator = await page.login()
    _may_report(page)
    form = await page.form()
    tenant, start, end = (form.get(name, "").strip() for name in ("tenant", "from", "to"))
    chosen = form.get("format", "html")
    if chosen not in FORMATS:
        raise InvalidArgument(f"The report's format is one of: {', '.join(FORMATS)}.")
    [known] = (await page.call("getTenant", path={"tenant": tenant})).tenants
    try:
        first, last = period_bounds(start, end)
    except ValueError as exc:
        raise InvalidArgument(f"The period is not valid: {exc}") from exc
    call = Call(
        page.request, operator, "session", page.services, {}, None, None, page.request_id[:100]
    )
    target = {"tenant": known.name, "from": start, "to": end, "format": chosen}
    await call.record("audit.report", target=target)
    try:
        figures = await page.services.in_thread(
            lambda: collect(page.services.audit, known.name, first, last)
        )
        body = await page.services.in_thread(_render, figures, chosen, target, operator.name)
    except LocalgateError as exc:
        await record_failure(call, exc)
        raise
    name = f"audit-report-{known.name}-{first.date()}-{last.date()}.{chosen}"
    return Response(
        body,
        headers={
            **_HEADERS,
            "x-request-id": page.request_id[:100],
            "content-disposition": _attachment(name),
        },
        media_type=FORMATS[chosen],
    )


def _render(figures: ReportFigures, chosen: str, target: dict[str, str], by: str) -> bytes:
    # matplotlib and WeasyPrint are slow to import: only when a report is asked for.
    from localgate.admin.audit_report_html import Rendering, render_html, render_pdf

    command = (
        f"localgate console ({by}): audit report --tenant {target['tenant']} "
        f"--from {target['from']} --to {target['to']} --format {chosen}"
    )
    html = render_html(figures, Rendering(command, __version__, datetime.now(UTC)))
    if chosen == "html":
        return html.encode()
    try:
        return render_pdf(html)
    except RuntimeError as exc:
        raise FailedPrecondition(str(exc)) from exc


def _may_report(page: Page) -> None:
    if not page.may(Permission.AUDIT_READ):
        role = page.operator.role.value if page.operator else "-"
        raise PermissionDenied(f"The role {role} may not download the auditor's report.")


def audit_console_routes() -> list[Route]:
    """The routes of the proof bundle, background verification and the report."""
    return [
        Route(
            f"{CONSOLE}/audit/requests/{{request_id}}/proof.json",
            _page(_json_errors(proof_bundle)),
            methods=["GET"],
        ),
        Route(f"{CONSOLE}/audit/checkpoints", _page(sign_checkpoints), methods=["POST"]),
        Route(f"{CONSOLE}/audit/verify", _page(start_verification), methods=["POST"]),
        Route(f"{CONSOLE}/audit/report", _page(report_page), methods=["GET"]),
        Route(f"{CONSOLE}/audit/report", _page(report_download), methods=["POST"]),
    ]
