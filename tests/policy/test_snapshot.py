"""Tenant policy snapshots: resolved once, immutable, one per configuration version."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from localgate.config import load_settings
from localgate.policy import PolicySnapshot

CONFIG = """
proxy:
  redaction:
    default_action: mask
tenants:
  acme:
    redaction: {default_action: pseudonymize, detect_names: false}
    cache: {enabled: true, ttl_s: 60}
    rag: {enabled: true, collection: handbook, top_k: 2}
    local_embeddings: true
"""


def snapshot_of(tmp_path: Path, text: str, **build: object) -> PolicySnapshot:
    path = tmp_path / "localgate.yaml"
    path.write_text(text)
    settings, _ = load_settings(path, {})
    return PolicySnapshot.build(settings, **build)  # type: ignore[arg-type]


def test_a_named_tenant_gets_its_changes_and_every_other_tenant_the_defaults(
    tmp_path: Path,
) -> None:
    snapshot = snapshot_of(tmp_path, CONFIG)

    acme = snapshot.for_tenant("acme")
    assert acme.redaction.default_action == "pseudonymize"
    assert acme.redaction.detect_names is False
    assert (acme.cache.enabled, acme.cache.ttl_s) == (True, 60)
    assert (acme.rag.enabled, acme.rag.collection, acme.rag.top_k) == (True, "handbook", 2)
    assert acme.local_embeddings is True

    other = snapshot.for_tenant("globex")
    assert other is snapshot.default
    assert other.redaction.default_action == "mask"
    assert other.redaction.detect_names is True
    assert other.cache.enabled is False
    assert other.rag.enabled is False
    assert other.local_embeddings is False


def test_a_snapshot_cannot_be_changed_after_it_is_built(tmp_path: Path) -> None:
    snapshot = snapshot_of(tmp_path, CONFIG)
    acme = snapshot.for_tenant("acme")

    with pytest.raises(dataclasses.FrozenInstanceError):
        acme.local_embeddings = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        snapshot.tenants["globex"] = acme  # type: ignore[index]
    with pytest.raises(ValueError, match="frozen"):
        acme.cache.enabled = False  # type: ignore[misc]


def test_the_hash_follows_the_effective_settings_not_the_file_text(tmp_path: Path) -> None:
    first = snapshot_of(tmp_path, CONFIG)
    reformatted = snapshot_of(tmp_path, CONFIG.replace("top_k: 2", "top_k:    2") + "\n# note\n")
    changed = snapshot_of(tmp_path, CONFIG.replace("top_k: 2", "top_k: 3"))

    assert first.hash == reformatted.hash
    assert first.hash != changed.hash
    assert len(first.hash) == 16


def test_each_policy_knows_its_configuration_version(tmp_path: Path) -> None:
    snapshot = snapshot_of(tmp_path, CONFIG, version=7)

    assert {policy.version for policy in snapshot.policies()} == {7}
