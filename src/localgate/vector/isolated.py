"""The embedded Chroma store in a process of its own, so its writes never stall the gateway.

chromadb's embedded client holds the GIL for the whole of every write (``upsert``,
``add``, ``delete``, ``count``), waiting on its own Rust threads: one upsert of one
record measured 8 to 37 ms, and for that long the gateway's event loop, every request
and not only the cache's, stood still. Its reads (``get``, ``query``) release it. So the
gateway runs the embedded client in a child process that alone opens the directory, and
calls it through :mod:`multiprocessing.managers` proxies over a Unix socket: a gateway
thread waiting for an answer waits on the socket, with the GIL released. Each of the
store's threads has its own connection (proxies keep one per thread), served by its own
thread in the child. A Chroma server (``cache.chroma_url``) is a process of its own
already.

The child is ``python -m localgate.vector.isolated`` started with :mod:`subprocess`, not
a multiprocessing "spawn", which would import the parent's main module again. It exits
with its parent. The CLI keeps the client in its own process: it has no event loop to
stall.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.managers import BaseManager, BaseProxy
from pathlib import Path
from typing import Any

__all__ = ["IsolatedChroma", "Listing"]

# (name, metadata, number of entries) of one collection.
Listing = tuple[str, dict[str, Any], int]


class IsolatedChroma:
    """The gateway's handle on the child: the calls the store makes of a Chroma client."""

    def __init__(self, path: Path, start_timeout_s: float = 60.0) -> None:
        self._socket_dir = tempfile.mkdtemp(prefix="localgate-chroma-")
        address = os.path.join(self._socket_dir, "chroma.sock")
        authkey = secrets.token_bytes(32)
        self._process = subprocess.Popen(  # noqa: S603 - our own module, our interpreter
            [sys.executable, "-m", __name__, address, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            stdin, stdout = self._process.stdin, self._process.stdout
            if stdin is None or stdout is None:  # pragma: no cover - both are pipes
                raise RuntimeError("no pipes to the vector store's process")
            stdin.write(authkey.hex().encode() + b"\n")  # never on the command line
            stdin.close()
            ready = _read_line(stdout, start_timeout_s)
            if ready != b"ready\n":
                raise RuntimeError(
                    f"the vector store's process did not start (exit code {self._process.poll()})"
                )
            manager = _Manager(address=address, authkey=authkey)
            manager.connect()
            self._client: Any = manager.Embedded(str(path))  # type: ignore[attr-defined]
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._process.pid

    def get_or_create_collection(self, name: str, **options: Any) -> Any:
        """A proxy of the collection (created with ``options`` if absent)."""
        options.pop("embedding_function", None)  # the child never embeds
        return self._client.get_or_create_collection(name, **options)

    def get_collection(self, name: str, **options: Any) -> Any:
        """A proxy of the collection; Chroma's NotFoundError if there is none."""
        return self._client.get_collection(name)

    def listing(self) -> list[Listing]:
        """Every collection's name, metadata and size."""
        result: list[Listing] = self._client.listing()
        return result

    def delete_collection(self, name: str) -> None:
        """Delete a collection."""
        self._client.delete_collection(name)

    def heartbeat(self) -> int:
        """Chroma's heartbeat, from the child."""
        result: int = self._client.heartbeat()
        return result

    def reopen(self) -> None:
        """Open the directory afresh in the child (another process changed it)."""
        self._client.reopen()

    def close(self) -> None:
        """Stop the child."""
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        shutil.rmtree(self._socket_dir, ignore_errors=True)


def _read_line(stream: Any, timeout_s: float) -> bytes:
    """A line from ``stream``, or b"" if none comes within ``timeout_s``."""
    line: list[bytes] = [b""]
    reader = threading.Thread(target=lambda: line.__setitem__(0, stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return line[0]


class _Embedded:
    """In the child: the directory's one client."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._client = self._open()

    def _open(self) -> Any:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        # A data-localization gateway phones home to nobody.
        settings = ChromaSettings(anonymized_telemetry=False)
        return chromadb.PersistentClient(path=self._path, settings=settings)

    def get_or_create_collection(self, name: str, **options: Any) -> Any:
        return self._client.get_or_create_collection(name, embedding_function=None, **options)

    def get_collection(self, name: str) -> Any:
        return self._client.get_collection(name, embedding_function=None)

    def listing(self) -> list[Listing]:
        return [
            (model.name, dict(model.metadata or {}), model.count())
            for model in self._client.list_collections()
        ]

    def delete_collection(self, name: str) -> None:
        self._client.delete_collection(name)

    def heartbeat(self) -> int:
        result: int = self._client.heartbeat()
        return result

    def reopen(self) -> None:
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient.clear_system_cache()
        self._client = self._open()


def _exit_with(parent: int) -> None:
    """End the child when the gateway is gone (even killed): nobody else may use it."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


class _Proxy(BaseProxy):
    def _remote(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` on the object in the child, and its result."""
        call: Any = self._callmethod  # typeshed types its result as None
        return call(method, args, kwargs)


class _CollectionProxy(_Proxy):
    """A chromadb Collection in the child: its methods, and the attributes localgate reads."""

    _exposed_ = ("get", "query", "upsert", "add", "delete", "count", "__getattribute__")

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote("get", *args, **kwargs)

    def query(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote("query", *args, **kwargs)

    def upsert(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote("upsert", *args, **kwargs)

    def add(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote("add", *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote("delete", *args, **kwargs)

    def count(self) -> int:
        result: int = self._remote("count")
        return result

    @property
    def id(self) -> Any:
        return self._remote("__getattribute__", "id")

    @property
    def name(self) -> str:
        result: str = self._remote("__getattribute__", "name")
        return result

    @property
    def metadata(self) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._remote("__getattribute__", "metadata")
        return result


class _ClientProxy(_Proxy):
    _exposed_ = (
        "get_or_create_collection",
        "get_collection",
        "listing",
        "delete_collection",
        "heartbeat",
        "reopen",
    )

    def get_or_create_collection(self, name: str, **options: Any) -> Any:
        return self._remote("get_or_create_collection", name, **options)

    def get_collection(self, name: str) -> Any:
        return self._remote("get_collection", name)

    def listing(self) -> Any:
        return self._remote("listing")

    def delete_collection(self, name: str) -> None:
        self._remote("delete_collection", name)

    def heartbeat(self) -> Any:
        return self._remote("heartbeat")

    def reopen(self) -> None:
        self._remote("reopen")


class _Manager(BaseManager):
    pass


_Manager.register(
    "Embedded",
    _Embedded,
    proxytype=_ClientProxy,
    # What these return stays in the child; the gateway gets a proxy of it.
    method_to_typeid={"get_or_create_collection": "Collection", "get_collection": "Collection"},
)
_Manager.register("Collection", proxytype=_CollectionProxy, create_method=False)


def _serve(address: str, parent: int) -> None:
    """The child: serve the store on ``address`` until the parent stops it or is gone."""
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    server = _Manager(address=address, authkey=authkey).get_server()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
