"""The gateway's embedded store lives in a child process: chromadb's embedded writes hold
the GIL for their whole duration, and in the gateway's own process they would stall
every request in flight. These tests start the real child (real Chroma, real files)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localgate.config import Settings
from localgate.vectorstore import store as store_module
from localgate.vectorstore.store import VectorStore, VectorStoreUnavailable
from tests.cache.helpers import settings_from
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_from(tmp_path, "cache:\n  enabled: true\n")


@pytest.fixture
def store(settings: Settings) -> Iterator[VectorStore]:
    store = VectorStore(settings, isolate=True)
    yield store
    store.close()


def children(name: str = "localgate.vectorstore.isolated") -> list[int]:
    """This process's child processes running ``name`` (and not yet exited)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and name.encode() in command:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def kill_child(store: VectorStore) -> int:
    """Kill the store's child outright; its pid."""
    pid = store.child_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid))
    return pid


async def put_and_get(store: VectorStore, entry: str) -> list[str]:
    """Store one entry through the writing thread and read it back on the reading one."""
    collection = await store.run(store.collection, "acme", "cache", "builtin", "builtin")
    await store.write(
        lambda: collection.upsert(ids=[entry], embeddings=[[0.1, 0.2, 0.3]], documents=["d"])
    )
    found = await store.run(lambda: collection.get(ids=[entry], include=["documents"]))
    return [*found["ids"], *found["documents"]]


def test_the_gateway_store_runs_chroma_in_a_child_that_stops_with_the_store(
    store: VectorStore, settings: Settings
) -> None:
    assert asyncio.run(put_and_get(store, "e1")) == ["e1", "d"]
    pid = store.child_pid()
    assert pid is not None
    assert pid != os.getpid()
    assert alive(pid)
    # What the child wrote is on disk, where the CLI (in its own process) reads it.
    cli = VectorStore(settings)
    try:
        assert [info.count for info in cli.sync(cli.collections, "acme")] == [1]
        assert cli.child_pid() is None
    finally:
        cli.close()
    store.close()
    wait_until(lambda: not alive(pid))


def test_a_dead_child_is_replaced_and_the_entries_are_still_there(
    store: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_RETRY_S", 0.0)
    assert asyncio.run(put_and_get(store, "e1")) == ["e1", "d"]
    first = kill_child(store)
    with pytest.raises(VectorStoreUnavailable):
        asyncio.run(put_and_get(store, "e2"))
    assert asyncio.run(put_and_get(store, "e2")) == ["e2", "d"]
    second = store.child_pid()
    assert second is not None
    assert second != first
    collection = store.sync(store.collection, "acme", "cache", "builtin", "builtin")
    assert sorted(store.sync(lambda: collection.get()["ids"])) == ["e1", "e2"]


def test_the_child_exits_when_the_gateway_is_killed(tmp_path: Path) -> None:
    """A gateway killed outright leaves no process holding its store open."""
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from localgate.vectorstore.isolated import IsolatedChroma\n"
        "chroma = IsolatedChroma(Path(sys.argv[1]))\n"
        "print(chroma.pid, flush=True)\n"
        "os._exit(0)\n"  # no clean-up: as if killed
    )
    done = subprocess.run(  # noqa: S603 - our interpreter, our script
        [sys.executable, "-c", script, str(tmp_path / "chroma")],
        capture_output=True,
        text=True,
        check=True,
        timeout=INFRASTRUCTURE_TIMEOUT_S,
    )
    child = int(done.stdout.strip())
    wait_until(lambda: not alive(child))


def test_a_child_that_died_while_another_process_changed_the_store_is_replaced(
    store: VectorStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rag ingest`` or ``cache clear`` beside the gateway, and the child gone meanwhile:
    one call fails cleanly, the next works."""
    monkeypatch.setattr(store_module, "_RETRY_S", 0.0)
    assert asyncio.run(put_and_get(store, "e1")) == ["e1", "d"]
    kill_child(store)
    cli = VectorStore(settings)
    try:
        cli.touch()
    finally:
        cli.close()
    with pytest.raises(VectorStoreUnavailable):
        asyncio.run(put_and_get(store, "e2"))
    assert asyncio.run(put_and_get(store, "e2")) == ["e2", "d"]


def test_a_handle_of_a_replaced_child_does_not_stop_the_new_one(
    store: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_RETRY_S", 0.0)
    old = store.sync(store.collection, "acme", "cache", "builtin", "builtin")
    kill_child(store)
    with pytest.raises(VectorStoreUnavailable):
        asyncio.run(put_and_get(store, "e1"))
    assert asyncio.run(put_and_get(store, "e1")) == ["e1", "d"]
    second = store.child_pid()
    with pytest.raises(VectorStoreUnavailable):
        store.sync(lambda: old.count())
    assert store.child_pid() == second
    assert asyncio.run(put_and_get(store, "e2")) == ["e2", "d"]


def test_the_child_ignores_a_stop_signal_meant_for_the_gateway(store: VectorStore) -> None:
    """Ctrl-C or a service manager's SIGTERM reaches the gateway, which still has cache
    writes to finish: the child keeps serving until the gateway closes the store."""
    asyncio.run(put_and_get(store, "e1"))
    pid = store.child_pid()
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGINT)
    assert asyncio.run(put_and_get(store, "e2")) == ["e2", "d"]
    assert store.child_pid() == pid
    store.close()
    wait_until(lambda: not alive(pid))


def test_closing_the_store_while_it_opens_leaves_no_child(settings: Settings) -> None:
    before = set(children())  # other tests' gateways may have theirs
    store = VectorStore(settings, isolate=True)
    store.open_soon()
    wait_until(lambda: bool(set(children()) - before))  # it is starting
    store.close()
    wait_until(lambda: not set(children()) - before)
    assert store.child_pid() is None


def test_a_collection_made_with_chromas_default_sync_threshold_gets_ours(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores made before keep working, and their writes become as short as new ones'
    from the next opening on (Chroma applies the change then)."""
    with monkeypatch.context() as before:
        before.setattr(store_module, "_SYNC_THRESHOLD", 1000)  # as collections were made
        old = VectorStore(settings)
        made = old.sync(old.collection, "acme", "cache", "builtin", "builtin")
        assert made.configuration_json["hnsw"]["sync_threshold"] == 1000
        old.close()
    for _ in range(2):  # opened (and changed), then opened again
        store = VectorStore(settings, isolate=True)
        try:
            collection = store.sync(store.collection, "acme", "cache", "builtin", "builtin")
            threshold = collection.configuration_json["hnsw"]["sync_threshold"]
        finally:
            store.close()
    assert threshold == 100
