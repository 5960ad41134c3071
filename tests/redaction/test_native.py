"""The compiled detection core (mypyc) finds exactly what its Python source finds, and is
used only for the source it was compiled from.

Both forms cannot live in one process (the compiled modules call each other directly), so
each runs in a process of its own on the same texts (``native_probe.py``): the labelled
corpus of the quality benchmark, the gateway benchmark's dense body, and a few thousand
generated texts mixing identifiers in the forms an attacker would send them (full-width,
escaped, percent-encoded, with invisible characters, glued to words, split over lines).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import localgate
from localgate.redaction import native
from tests.redaction.values import luhn_complete, resident_id_check

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("native_probe.py")
IN_CI = os.environ.get("CI") == "true"


def _probe(texts: list[str], *, pure: bool, root: Path | None = None) -> dict[str, Any]:
    """What ``native_probe.py`` reports for ``texts``, with localgate from ``root``."""
    env = {key: value for key, value in os.environ.items() if key != "LOCALGATE_PURE_PYTHON"}
    if pure:
        env["LOCALGATE_PURE_PYTHON"] = "1"
    package_root = root or Path(localgate.__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(package_root), str(REPO)])
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, str(PROBE)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _compiled_here() -> None:
    """Skip where the core is not compiled; in CI it must be (the build compiles it)."""
    if native.status().compiled:
        return
    if IN_CI:
        pytest.fail(f"the detection core should be compiled in CI: {native.status().reason}")
    pytest.skip(native.status().reason)


def test_make_compiles_again_when_a_compiled_module_changes() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    listed = re.search(
        r"NATIVE := setup\.py src/localgate/redaction/native\.py "
        r"\$\(addprefix src/localgate/redaction/,\\\n(.*)\)",
        makefile,
    )
    assert listed is not None
    assert tuple(name.removesuffix(".py") for name in listed.group(1).split()) == native.COMPILED


def test_the_test_run_uses_the_compiled_core() -> None:
    _compiled_here()
    from localgate.redaction import names

    assert not str(names.__file__).endswith(".py")


# Pieces of text, in the forms detection must see through.
def _mobile(rng: random.Random) -> str:
    number = "1" + rng.choice("3456789") + "".join(rng.choices("0123456789", k=9))
    return rng.choice(
        [
            number,
            f"+86 {number[:3]} {number[3:7]} {number[7:]}",
            f"{number[:3]}-{number[3:7]}-{number[7:]}",
            number.translate({ord(d): 0xFF10 + int(d) for d in "0123456789"}),
            "".join(f"\\u00{ord(d):x}" for d in number),
            "".join(f"%{ord(d):X}" for d in number),
            "\u200b".join(number),
        ]
    )


def _resident_id(rng: random.Random) -> str:
    body = rng.choice(["110105", "310104", "440305"]) + f"{rng.randint(1950, 2005)}"
    body += f"{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}{rng.randint(0, 999):03d}"
    return body + resident_id_check(body)


def _card(rng: random.Random) -> str:
    number = luhn_complete(
        rng.choice(["6222", "4111", "5500"]) + "".join(rng.choices("0123456789", k=11))
    )
    return rng.choice([number, " ".join(number[i : i + 4] for i in range(0, 16, 4))])


_WORDS = [
    "客户",
    "张伟",
    "王芳",
    "欧阳娜娜",
    "李经理",
    "联系电话",
    "手机",
    "身份证号",
    "银行卡号",
    "地址",
    "北京市朝阳区建国路88号",
    "上海市浦东新区世纪大道100号",
    "请于今天回复。",
    "订单号",
    "Customer",
    "Patricia King",
    "Mr. Smith",
    "Dr Wang Fang",
    "email",
    "zhang.wei@example.com",
    "tel",
    "phone:",
    "version 10.0.0.1",
    "order 2024051218657353846",
    "123 Main Street",
    "Apt 4B",
    "the",
    "and",
    "，",
    "。",
    ":",
    " ",
    " ",
    "\n",
    "\r\n",
    "\t",
    "(",
    ")",
    "-",
    "@",
    "&#49;",
    "&amp;",
    "\\n",
    '\\"',
    "%E5%BC%A0",
    "\u00a0",
    "\u3000",
    "\ufeff",
    "\u00ad",
    "ＡＢＣ",
    "１２３",
    "٣٤٥",
    "❶",
    "x" * 40,
    "9" * 30,
    "@" * 3,
    "\ud7ff",
    "😀",
]


def _text(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 24)):
        roll = rng.random()
        if roll < 0.12:
            pieces.append(_mobile(rng))
        elif roll < 0.18:
            pieces.append(_resident_id(rng))
        elif roll < 0.22:
            pieces.append(_card(rng))
        elif roll < 0.27:
            pieces.append("".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(1, 6))))
        else:
            pieces.append(rng.choice(_WORDS))
    separator = rng.choice(["", " ", "", "\n"])
    return separator.join(pieces)


def _texts() -> list[str]:
    corpus = REPO / "bench" / "pii" / "corpus.jsonl"
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()]
    body = json.loads((REPO / "bench" / "bodies" / "pii-dense.json").read_text(encoding="utf-8"))
    texts += [part["text"] for content in body["contents"] for part in content["parts"]]
    rng = random.Random(18)
    texts += [_text(rng) for _ in range(3000)]
    return texts


def _first_difference(left: Mapping[str, Any], right: Mapping[str, Any], texts: list[str]) -> str:
    for text, one, other in zip(texts, left["results"], right["results"], strict=True):
        if one != other:
            return f"{text!r}: compiled {one} / source {other}"
    return ""


def test_compiled_and_source_find_the_same() -> None:
    _compiled_here()
    texts = _texts()
    compiled = _probe(texts, pure=False)
    source = _probe(texts, pure=True)
    assert compiled["compiled"]
    assert not source["compiled"]
    assert all(not path.endswith(".py") for path in compiled["modules"].values())
    assert all(path.endswith(".py") for path in source["modules"].values())
    assert sum(len(result["findings"]) for result in source["results"]) > len(texts)
    assert compiled["results"] == source["results"], _first_difference(compiled, source, texts)


def _copy_package(target: Path) -> Path:
    """A copy of the installed localgate (compiled modules included) under ``target``."""
    package = Path(localgate.__file__).resolve().parent
    shutil.copytree(package, target / "localgate", ignore=shutil.ignore_patterns("__pycache__"))
    for group in package.parent.glob("localgate_native__mypyc*"):
        shutil.copy2(group, target / group.name)
    return target


def test_a_source_changed_since_the_build_runs_as_source(tmp_path: Path) -> None:
    _compiled_here()
    root = _copy_package(tmp_path)
    text = ["客户张伟，手机13812345678。"]
    assert _probe(text, pure=False, root=root)["compiled"]
    # An edit to one module (a fix, say) that the build has not seen: the whole core runs
    # from source, the edit included, rather than the stale compiled code.
    names = root / "localgate" / "redaction" / "names.py"
    names.write_text(
        names.read_text(encoding="utf-8").replace('"PERSON"', '"EDITED"'),
        encoding="utf-8",
    )
    edited = _probe(text, pure=False, root=root)
    assert not edited["compiled"]
    assert all(path.endswith(".py") for path in edited["modules"].values())
    assert [finding[2] for finding in edited["results"][0]["findings"]] == ["EDITED", "CN_MOBILE"]


def test_a_missing_record_runs_as_source(tmp_path: Path) -> None:
    _compiled_here()
    root = _copy_package(tmp_path)
    (root / "localgate" / "redaction" / native.RECORD).unlink()
    probed = _probe(["手机13812345678"], pure=False, root=root)
    assert not probed["compiled"]
    assert probed["results"][0]["findings"] == [[2, 13, "CN_MOBILE", 0.95]]


def test_the_status_says_why() -> None:
    status = native.status()
    assert status.reason.startswith("compiled with mypyc" if status.compiled else "pure Python:")
