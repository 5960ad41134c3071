"""Request ids: unique per request, also across forked workers."""

from __future__ import annotations

import os

from localgate.requestid import new_request_id


def test_ids_are_32_hex_digits_and_do_not_repeat() -> None:
    ids = {new_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(len(value) == 32 and int(value, 16) >= 0 for value in ids)


def test_a_forked_process_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child writes its next id and leaves at once
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 64).decode() != new_request_id()
