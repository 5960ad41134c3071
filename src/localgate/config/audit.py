"""The audit trail's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from localgate.config.base import Section

__all__ = ["AuditSettings"]


class AuditSettings(Section):
    """The tamper-evident audit trail (on when proxy.enable_audit is true)."""

    store: Literal["sqlite", "postgres"] = "sqlite"
    postgres_dsn: str | None = Field(None, repr=False)  # may hold a password
    sqlite_path: Path | None = None
    synchronous: Literal["full", "normal"] = "full"
    # Group commit: while at least 4 other requests are in flight, the writer waits up to
    # this long for their records before committing a batch (0: commit at once).
    commit_delay_ms: float = Field(5.0, ge=0, le=100)
    suite: Literal["standard", "sm"] = "standard"
    master_key_file: Path | None = None
    signing_key_file: Path | None = None
    # false is the same as checkpoint_signer: never (kept for configurations that set it).
    sign_checkpoints: bool = True
    # Who signs checkpoints: auto = the one process elected (a PostgreSQL advisory lock, or
    # a lock file beside the SQLite database), always = this process, never = not this one.
    checkpoint_signer: Literal["auto", "always", "never"] = "auto"
    checkpoint_interval_s: float = Field(60.0, gt=0)
    checkpoint_export_dir: Path | None = None
    key_period: Literal["day", "month"] = "day"
    payload_retention_days: int = Field(90, ge=1)
    store_original_prompt: bool = False
    original_prompt_retention_hours: int = Field(72, ge=1)
    metadata_retention_days: int = Field(1095, ge=183)
    log_name: str = Field("localgate", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

    @property
    def signer_mode(self) -> Literal["auto", "always", "never"]:
        """Whether this process signs checkpoints: ``sign_checkpoints: false`` means never."""
        return self.checkpoint_signer if self.sign_checkpoints else "never"
