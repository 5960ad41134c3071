"""The workers of ``localgate serve --workers N`` asking each other what only each knows.

Each worker answers on a Unix socket of its own, ``worker-<n>.sock`` in a private directory
the supervisor made: an asker connects, writes the name of a question and a newline, and
reads the answer, JSON, until the worker closes the connection. ``/metrics`` asks for each
sibling's samples (``host.py``); ``localgate reload`` and the admin API's reload ask for each
one's configuration (``policy/host_reload.py``). Nothing is asked per request.

A sibling that is not there (dead, restarting) or does not answer within ``ANSWER_TIMEOUT_S``
is left out of the answers (and logged when it is stuck): the asker answers with what it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ANSWER_TIMEOUT_S", "Siblings", "socket_path"]

logger = logging.getLogger("localgate.observability")

ANSWER_TIMEOUT_S = 2.0
_MAX_ANSWER_BYTES = 64 * 1024 * 1024
_SOCKET_NAME = re.compile(r"worker-(\d+)\.sock")

# Makes an answer (JSON-able) when a sibling asks; run on the answering worker's event loop.
Answer = Callable[[], Any]


def socket_path(directory: Path, index: int) -> Path:
    """Where worker ``index`` answers its siblings."""
    return directory / f"worker-{index}.sock"


class Siblings:
    """Worker ``index``'s side: answer its siblings' questions, and ask them its own."""

    def __init__(self, directory: Path, index: int) -> None:
        self.index = index
        self._directory = directory
        self._answers: dict[str, Answer] = {}
        self._server: asyncio.AbstractServer | None = None

    def answer(self, question: str, answer: Answer) -> None:
        """Answer ``question`` with what ``answer`` returns from now on."""
        self._answers[question] = answer

    async def start(self) -> None:
        """Listen on this worker's socket (replacing a dead predecessor's)."""
        path = socket_path(self._directory, self.index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = await asyncio.start_unix_server(self._answer, path=str(path))

    async def close(self) -> None:
        """Stop answering; the socket file goes."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                socket_path(self._directory, self.index).unlink()

    async def ask(self, question: str) -> dict[int, Any]:
        """Every reachable sibling's answer to ``question``, by worker index."""
        own = socket_path(self._directory, self.index)
        siblings = {
            int(match.group(1)): path
            for path in sorted(self._directory.glob("worker-*.sock"))
            if path != own and (match := _SOCKET_NAME.fullmatch(path.name)) is not None
        }
        answers = await asyncio.gather(*(_ask(path, question) for path in siblings.values()))
        return {
            index: answer
            for index, answer in zip(siblings, answers, strict=True)
            if answer is not None
        }

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                question = (await reader.readline()).decode("ascii", "replace").strip()
            answer = self._answers.get(question)
            if answer is not None:  # else closed unanswered: the asker leaves this one out
                writer.write(json.dumps(answer()).encode())
                await writer.drain()
        except (TimeoutError, ConnectionError, OSError):
            pass  # the sibling gave up waiting, or never asked
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def _ask(path: Path, question: str) -> Any:
    """A sibling's answer, or None (it is restarting, stuck, or gone)."""
    try:
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            reader, writer = await asyncio.open_unix_connection(str(path))
            try:
                writer.write(f"{question}\n".encode("ascii"))
                await writer.drain()
                body = await reader.read(_MAX_ANSWER_BYTES)
                while chunk := await reader.read(_MAX_ANSWER_BYTES):
                    body += chunk
            finally:
                writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.wait_closed()
    except (ConnectionRefusedError, FileNotFoundError):
        return None  # no worker there now: dead, or being restarted
    except (TimeoutError, OSError) as exc:
        logger.warning(
            "worker socket %s did not answer %r (%s); left out", path.name, question, exc
        )
        return None
    try:
        return json.loads(body)
    except ValueError:
        logger.warning("worker socket %s sent an incomplete answer; left out", path.name)
        return None
