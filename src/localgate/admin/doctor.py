"""``localgate doctor``: is this host ready to run the gateway, and if not, what to fix.

Each check is one line: what it found, and the fix when it failed. Nothing is created,
migrated or written (the data-directory check writes and removes one temporary file).
The connectivity checks (audit store, keys against the store, clock, vector store,
upstream) are also what ``localgate check --connect`` runs. The TLS files' checks live in
``doctor_tls``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from localgate.admin.checks import Check
from localgate.admin.doctor_tls import tls_checks
from localgate.audit.database import Database, DatabaseUnavailable
from localgate.audit.migrate import head_revision
from localgate.audit.trail import database, schema_version, startup_problems
from localgate.config import ENV_AUDIT_MASTER_KEY, ENV_SIGNATURE_KEY, Settings
from localgate.upstream.egress import Egress, EgressError, egress_for

__all__ = ["Check", "Doctor"]

# Below this much free space in the data directory the audit trail is at risk.
MIN_FREE_BYTES = 512 * 1024 * 1024
# Farther apart than this, the database's and this host's clocks disagree about record times.
MAX_CLOCK_SKEW_S = 2.0


class Doctor:
    """Runs the checks for one configuration."""

    def __init__(
        self,
        settings: Settings,
        *,
        offline: bool = False,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        tls_warn_days: float = 14.0,
    ) -> None:
        self._settings = settings
        self._offline = offline
        self._environ = os.environ if environ is None else environ
        self._timeout_s = timeout_s
        self._tls_warn_days = tls_warn_days

    def run(self, *, connectivity_only: bool = False) -> list[Check]:
        """Every check (or only those that talk to other systems), in a fixed order."""
        local: list[Callable[[], list[Check]]] = [self._data_dir, self._key_files, self._tls]
        remote: list[Callable[[], list[Check]]] = [
            self._state_store,
            self._audit_store,
            self._vector_store,
            self._upstream,
        ]
        checks = [] if connectivity_only else [c for run in local for c in run()]
        return checks + [c for run in remote for c in run()]

    # -- on this host ----------------------------------------------------------------

    def _data_dir(self) -> list[Check]:
        data = self._settings.data_dir
        existing = next((p for p in (data, *data.parents) if p.exists()), Path("."))
        try:
            with tempfile.NamedTemporaryFile(dir=existing, prefix=".localgate-doctor-"):
                pass
        except OSError as exc:
            return [
                Check(
                    "data directory",
                    False,
                    f"{existing} is not writable ({exc.strerror})",
                    f"give the gateway's user write access to {existing}, or set data_dir",
                )
            ]
        free = shutil.disk_usage(existing).free
        if free < MIN_FREE_BYTES:
            return [
                Check(
                    "data directory",
                    False,
                    f"{data}: only {free // (1024 * 1024)} MiB free",
                    "free disk space: with a full disk the audit trail refuses every request",
                )
            ]
        return [Check("data directory", True, f"{data}: writable, {free // 1024**3} GiB free")]

    def _key_files(self) -> list[Check]:
        settings = self._settings
        files = {
            "audit master key": (settings.audit_master_key_path, ENV_AUDIT_MASTER_KEY),
            "checkpoint signing key": (settings.audit_signing_key_path, None),
            "signature seal key": (settings.signature_key_path, ENV_SIGNATURE_KEY),
            "upstream API key": (settings.upstream.api_key_file, "GEMINI_API_KEY"),
        }
        checks = []
        for name, (path, variable) in files.items():
            if variable is not None and self._environ.get(variable):
                checks.append(Check(name, True, f"from {variable}"))
                continue
            if path is None or not path.exists():
                where = f"{path}: " if path is not None else ""
                checks.append(Check(name, True, f"{where}none yet"))
                continue
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                checks.append(
                    Check(
                        name,
                        False,
                        f"{path} can be read by others (mode {mode:04o})",
                        f"chmod 600 {path}",
                    )
                )
            else:
                checks.append(Check(name, True, f"{path}: owner only"))
        return checks

    def _tls(self) -> list[Check]:
        return tls_checks(self._settings, self._environ, warn_days=self._tls_warn_days)

    # -- other systems ---------------------------------------------------------------

    def _state_store(self) -> list[Check]:
        """With ``database_url``: the database answers, its schema, the shared seal key."""
        url = self._settings.database_url
        if url is None:
            return []
        from localgate.state import StateDatabaseUnavailable, connect
        from localgate.state.migrate import head_revision as state_head
        from localgate.state.startup import schema_version as state_version
        from localgate.state.startup import seal_problems

        try:
            db = connect(url)
        except StateDatabaseUnavailable as exc:
            return [
                Check(
                    "state store",
                    False,
                    str(exc),
                    "start the database, or fix database_url / LOCALGATE_DATABASE_URL",
                )
            ]
        try:
            version, head = state_version(db), state_head()
            problems = seal_problems(self._settings, db)
        finally:
            db.close()
        if version is None:
            schema = f"postgres: empty; the gateway creates schema {head} at start"
        elif version != head:
            schema = f"postgres: schema {version}; the gateway migrates it to {head} at start"
        else:
            schema = f"postgres: schema {head}, current"
        return [
            Check("state store", True, schema),
            Check(
                "shared seal key",
                not problems,
                "; ".join(problems) if problems else "present, the one the replicas use",
                "give every replica the same seal.key (docs/shared-state.md)" if problems else None,
            ),
        ]

    def _audit_store(self) -> list[Check]:
        settings = self._settings
        if not settings.proxy.enable_audit:
            return [Check("audit store", True, "audit trail off (proxy.enable_audit: false)")]
        store = settings.audit.store
        try:
            db = database(settings)()
        except DatabaseUnavailable as exc:
            return [
                Check(
                    "audit store",
                    False,
                    f"{store}: {exc}",
                    "start the database, or fix audit.postgres_dsn / LOCALGATE_AUDIT_POSTGRES_DSN",
                )
            ]
        try:
            version, head = schema_version(db), head_revision()
            skew = _clock_skew(db) if db.dialect == "postgres" else None
        finally:
            db.close()
        if version is None:
            schema = f"{store}: empty; the gateway creates schema {head} at start"
        elif version != head:
            schema = f"{store}: schema {version}; the gateway migrates it to {head} at start"
        else:
            schema = f"{store}: schema {head}, current"
        checks = [Check("audit store", True, schema)]
        problems = startup_problems(settings, inspect_only=True)
        checks.append(
            Check(
                "audit keys",
                not problems,
                "; ".join(problems) if problems else "the keys open and verify what is stored",
                "start every replica with the same keys (docs/shared-state.md)"
                if problems
                else None,
            )
        )
        if skew is not None:
            checks.append(
                Check(
                    "clock",
                    abs(skew) <= MAX_CLOCK_SKEW_S,
                    f"{skew:+.2f} s against the database",
                    None
                    if abs(skew) <= MAX_CLOCK_SKEW_S
                    else "synchronise this host's clock (NTP)",
                )
            )
        return checks

    def _vector_store(self) -> list[Check]:
        url = self._settings.cache.chroma_url
        if url is None:
            return []
        headers = {}
        if self._settings.chroma_token is not None:
            headers["authorization"] = f"Bearer {self._settings.chroma_token.reveal()}"
        status, problem = self._get(f"{url}/api/v2/heartbeat", headers)
        if status == 200:
            return [Check("vector store", True, f"{url}: answers")]
        return [
            Check(
                "vector store",
                False,
                f"{url}: {problem or f'answered {status}'}",
                "start the Chroma server or fix cache.chroma_url (requests are still served: "
                "the cache misses)",
            )
        ]

    def _upstream(self) -> list[Check]:
        settings = self._settings
        base = settings.upstream.base_url.rstrip("/")
        if self._offline:
            return [Check("upstream", True, f"{base}: not checked (--offline)")]
        key = settings.upstream_api_key
        if key is None:
            return [
                Check(
                    "upstream",
                    False,
                    "no upstream API key",
                    "set GEMINI_API_KEY or upstream.api_key_file",
                )
            ]
        # The cheapest call there is: one page of the model list, no tokens used.
        try:
            egress = egress_for(base, settings.upstream, environ=self._environ)
        except EgressError as exc:
            return [Check("upstream", False, str(exc), "fix the file (docs/tls.md)")]
        status, problem = self._get(
            f"{base}/v1beta/models?pageSize=1", {"x-goog-api-key": key.reveal()}, egress
        )
        if status == 200:
            return [Check("upstream", True, f"{base}: reachable, the key is accepted")]
        if status in (400, 401, 403):
            return [
                Check(
                    "upstream",
                    False,
                    f"{base}: the key was refused ({status})",
                    "check GEMINI_API_KEY / upstream.api_key_file",
                )
            ]
        return [
            Check(
                "upstream",
                False,
                f"{base}: {problem or f'answered {status}'}",
                "check upstream.base_url and the egress route to it (a proxy, a firewall)",
            )
        ]

    def _get(
        self, url: str, headers: dict[str, str], egress: Egress | None = None
    ) -> tuple[int | None, str | None]:
        """GET ``url``; through the upstream's CAs and proxy when ``egress`` is given."""
        request = urllib.request.Request(url, headers=headers)  # noqa: S310 - configured URL
        handlers: list[urllib.request.BaseHandler] = []
        if egress is not None:
            scheme = urllib.parse.urlsplit(url).scheme
            handlers.append(
                urllib.request.ProxyHandler({scheme: egress.proxy} if egress.proxy else {})
            )
            if egress.ssl is not None:
                handlers.append(urllib.request.HTTPSHandler(context=egress.ssl))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(request, timeout=self._timeout_s) as response:
                return int(response.status), None
        except urllib.error.HTTPError as exc:
            return int(exc.code), None
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return None, f"unreachable ({reason})"


def _clock_skew(db: Database) -> float:
    """This host's clock minus the database's, in seconds."""
    before = time.time()
    row = db.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()
    after = time.time()
    return (before + after) / 2 - float(row[0])
