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

The child is ``python -P -m localgate.vectorstore.isolated`` started with :mod:`subprocess`,
not a multiprocessing "spawn", which would import the parent's main module again. It
exits with its parent. The CLI keeps the client in its own process: it has no event loop
to stall.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from multiprocessing.managers import BaseManager, BaseProxy
from pathlib import Path
from typing import Any

__all__ = ["IsolatedChroma", "Listing", "listing", "open_embedded"]

# (name, metadata, number of entries) of one collection.
Listing = tuple[str, dict[str, Any], int]


def open_embedded(path: Path | str) -> Any:
    """chromadb's embedded client of ``path``, with its telemetry off (a data-localization
    gateway phones home to nobody): in the child, or in the CLI's own process."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    return chromadb.PersistentClient(
        path=str(path), settings=ChromaSettings(anonymized_telemetry=False)
    )


def listing(client: Any) -> list[Listing]:
    """Every collection of a chromadb client: name, metadata and size."""
    return [
        (model.name, dict(model.metadata or {}), model.count())
        for model in client.list_collections()
    ]


class IsolatedChroma:
    """The gateway's handle on the child: the calls the store makes of a Chroma client.

    The child lives in a session of its own and ignores SIGINT and SIGTERM, so a Ctrl-C
    or a service manager's stop reaches the gateway, which finishes its cache writes
    and then stops the child by closing the child's standard input (the pipe also
    closes when the gateway dies, however it dies).
    """

    def __init__(self, path: Path, start_timeout_s: float = 60.0) -> None:
        self._socket_dir: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._address = ""
        try:
            self._socket_dir = tempfile.mkdtemp(prefix="localgate-chroma-")
            self._address = os.path.join(self._socket_dir, "chroma.sock")
            authkey = secrets.token_bytes(32)
            self._process = subprocess.Popen(  # noqa: S603 - our own module, our interpreter
                # -P: nothing from the gateway's working directory is imported.
                [sys.executable, "-P", "-m", __name__, self._address, self._socket_dir],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            stdin, stdout = self._process.stdin, self._process.stdout
            if stdin is None or stdout is None:  # pragma: no cover - both are pipes
                raise RuntimeError("no pipes to the vector store's process")
            stdin.write(authkey.hex().encode() + b"\n")  # never on the command line
            stdin.flush()
            ready = _read_line(stdout, start_timeout_s)
            stdout.close()
            if ready != b"ready\n":
                raise RuntimeError(
                    f"the vector store's process did not start (exit code {self._process.poll()})"
                )
            manager = _Manager(address=self._address, authkey=authkey)
            manager.connect()
            self._client: Any = manager.Embedded(str(path))  # type: ignore[attr-defined]
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._process.pid if self._process is not None else -1

    @property
    def exited(self) -> bool:
        """Whether the child is gone."""
        return self._process is None or self._process.poll() is not None

    def answers(self) -> bool:
        """Whether the child is there and answers (a heartbeat on this thread's connection).

        Asked after a call failed on a connection: ``exited`` alone can lag, since a killed
        process cannot be waited for until all its threads are gone.
        """
        if self.exited:
            return False
        try:
            self.heartbeat()
        except (EOFError, OSError):
            return False
        return True

    def kill(self) -> None:
        """End a child that does not answer: callers waiting on it get an error at once."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()

    def get_or_create_collection(self, name: str, **options: Any) -> Any:
        """A proxy of the collection (created with ``options`` if absent)."""
        options.pop("embedding_function", None)  # the child never embeds
        return self._client._remote("get_or_create_collection", name, **options)

    def get_collection(self, name: str, **options: Any) -> Any:
        """A proxy of the collection; Chroma's NotFoundError if there is none."""
        return self._client._remote("get_collection", name)

    def listing(self) -> list[Listing]:
        """Every collection's name, metadata and size."""
        result: list[Listing] = self._client._remote("listing")
        return result

    def delete_collection(self, name: str) -> None:
        """Delete a collection."""
        self._client._remote("delete_collection", name)

    def heartbeat(self) -> int:
        """Chroma's heartbeat, from the child."""
        result: int = self._client._remote("heartbeat")
        return result

    def reopen(self) -> None:
        """Open the directory afresh in the child (another process changed it)."""
        self._client._remote("reopen")

    def close(self) -> None:
        """Stop the child (killed if it has not stopped within 10 s) and forget it."""
        process = self._process
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()  # the child's signal to stop
            if process.stdout is not None:
                process.stdout.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        # The proxies' per-thread connections to this child are kept by address in a
        # class-wide table; a replaced child's would stay open as long as the threads.
        _connections(self._address)


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
        self._client = open_embedded(path)

    def get_or_create_collection(self, name: str, **options: Any) -> Any:
        return self._client.get_or_create_collection(name, embedding_function=None, **options)

    def get_collection(self, name: str) -> Any:
        return self._client.get_collection(name, embedding_function=None)

    def listing(self) -> list[Listing]:
        return listing(self._client)

    def delete_collection(self, name: str) -> None:
        self._client.delete_collection(name)

    def heartbeat(self) -> int:
        result: int = self._client.heartbeat()
        return result

    def reopen(self) -> None:
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient.clear_system_cache()
        self._client = open_embedded(self._path)


def _connections(address: str) -> None:
    """Forget this process's proxy connections to ``address``: each thread's closes once
    the proxies that used it are gone (the store drops them with the child)."""
    table: dict[str, Any] = getattr(BaseProxy, "_address_to_local", {})
    table.pop(address, None)


def _exit_at_eof(socket_dir: str) -> None:
    """In the child: end when standard input closes (the gateway stopped it, or died)."""
    while sys.stdin.buffer.read(4096):
        pass
    shutil.rmtree(socket_dir, ignore_errors=True)
    os._exit(0)


class _Proxy(BaseProxy):
    def _remote(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` on the object in the child, and its result."""
        call: Any = self._callmethod  # typeshed types its result as None
        return call(method, args, kwargs)


class _CollectionProxy(_Proxy):
    """A chromadb Collection in the child: its methods, and the attributes localgate reads."""

    _exposed_ = ("get", "query", "upsert", "add", "delete", "count", "modify", "__getattribute__")

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

    def modify(self, *args: Any, **kwargs: Any) -> Any:
        return self._remote("modify", *args, **kwargs)

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
    def configuration_json(self) -> dict[str, Any]:
        result: dict[str, Any] = self._remote("__getattribute__", "configuration_json")
        return result

    @property
    def metadata(self) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._remote("__getattribute__", "metadata")
        return result


class _ClientProxy(_Proxy):
    """The child's ``_Embedded``: ``IsolatedChroma`` calls it by name."""

    _exposed_ = (
        "get_or_create_collection",
        "get_collection",
        "listing",
        "delete_collection",
        "heartbeat",
        "reopen",
    )


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


def _serve(address: str, socket_dir: str) -> None:
    """The child: serve the store on ``address`` until the gateway closes our stdin."""
    # The gateway decides when its store stops: after its last cache writes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    authkey = bytes.fromhex(sys.stdin.buffer.readline().strip().decode())
    server = _Manager(address=address, authkey=authkey).get_server()
    threading.Thread(target=_exit_at_eof, args=(socket_dir,), daemon=True).start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    # Nobody reads our stdout any more: anything written there must not fill a pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    server.serve_forever()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
