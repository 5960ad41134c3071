"""One request's redaction: the policy applied to each text, findings counted, placeholders kept."""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections import Counter
from collections.abc import Callable, Mapping

from localgate.config import Action, RedactionSettings
from localgate.errors import InvalidArgument
from localgate.redaction.detector import Detector
from localgate.redaction.findings import Finding
from localgate.redaction.placeholders import Pseudonyms
from localgate.redaction.reveal import plain

__all__ = ["PolicyBlocked", "RedactionSession", "spaced"]

# Letters and digits pulled apart, dashes and underscores as spaces.
_GLUED = re.compile(r"(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])|[-_]")
_SPACE = re.compile(r"\s")
_TOKEN_MAX = 256


def _forms(value: str) -> list[str]:
    """A value that cannot be rewritten, as a model or a server could read it: spaced, and
    decoded if it is base64 (an opaque-looking token can be a number in disguise)."""
    forms = [spaced(value)]
    # The whole value (base64url too), and each part between the model-name grammar's
    # separators: "gemini-MTM4MTIzNDU2Nzg" is a prefix and a number in base64.
    whole = value.rstrip("=").replace("-", "+").replace("_", "/")
    parts = (part.rstrip("=") for part in _PARTS.split(value))
    for compact in dict.fromkeys((whole, *parts)):
        if len(compact) >= 8 and _BASE64.fullmatch(compact):
            with contextlib.suppress(binascii.Error, ValueError):
                raw = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
                decoded = raw.decode("latin-1")
                # As it is, too: pulled apart, 11010519491231002X loses its check character.
                forms += (decoded, spaced(decoded))
    return forms


_BASE64 = re.compile(r"[A-Za-z0-9+/]+")
_PARTS = re.compile(r"[-_.@:]")


def spaced(value: str) -> str:
    """``value`` with letters and digits pulled apart: ``gemini-13812345678`` and
    ``c13812345678`` read as ``gemini 13812345678`` and ``c 13812345678``."""
    return _GLUED.sub(" ", value)


class PolicyBlocked(InvalidArgument):
    """A finding whose action is ``block``: the request is refused, nothing is forwarded."""


class RedactionSession:
    """Applies one tenant's policy to the texts of one request."""

    def __init__(
        self,
        settings: RedactionSettings,
        detector: Detector,
        rule_actions: Mapping[str, Action] | None = None,
        rule_replacements: Mapping[str, str] | None = None,
        *,
        reversible: bool = True,
        open_signature: Callable[[object], str | None] | None = None,
        detect: Callable[[str], list[Finding]] | None = None,
    ) -> None:
        self.settings = settings
        # What finds the values in the request's texts and its model name: ``detector``'s
        # own ``detect``, or one that remembers a tenant's recent texts
        # (``Detector.remembering``: a conversation's history is sent again every turn).
        self._detect = detector.detect if detect is None else detect
        # Opens a thought signature the gateway sealed for this tenant (signatures.py);
        # without one, every signature counts as foreign.
        self._open_signature = open_signature
        # False for text that is stored, not sent (retrieval passages): ``pseudonymize``
        # then writes the bare type, ``[PERSON]``, which no request's table can restore.
        self.reversible = reversible
        self.detector = detector
        self.pseudonyms = Pseudonyms()
        self.counts: Counter[tuple[str, str]] = Counter()
        # Every value found in the request, whatever its action: an answer may repeat
        # these. Lives and dies with the request, like the placeholder table.
        self.request_values: set[str] = set()
        # Of those, the ones the policy let through in clear (action allow).
        self.allowed_values: set[str] = set()
        self.answer_counts: Counter[str] = Counter()
        self.original_texts: list[str] = []
        self._rule_actions = rule_actions or {}
        self._rule_replacements = rule_replacements or {}

    def action_for(self, entity_type: str) -> Action:
        """The tenant's action for a type, else the custom rule's own, else the default."""
        action = self.settings.actions.get(entity_type) or self._rule_actions.get(entity_type)
        return action or self.settings.default_action

    def redact(self, text: str, where: str, *, original: bool = False) -> str:
        """``text`` with every finding replaced as the policy says; raise on ``block``.

        ``original`` marks prompt text, whose pre-redaction form the audit trail HMACs.
        """
        if original:
            self.original_texts.append(text)
        findings = self._detect(text)
        if not findings:
            findings = self._glued(text)
        if not findings:
            return text
        pieces: list[str] = []
        last = 0
        actions: dict[str, Action] = {}  # per type, for this text
        for finding in findings:
            action = actions.get(finding.type)
            if action is None:
                action = actions[finding.type] = self.action_for(finding.type)
            self.counts[(finding.type, action)] += 1
            # The value as the model would read it: the same number escaped or not is one
            # value with one placeholder, and the answer gets it back readable.
            value = plain(text[finding.start : finding.end])
            self.request_values.add(value)
            if action == "allow":
                self.allowed_values.add(value)
                continue
            if action == "block":
                raise PolicyBlocked(
                    f"Request blocked by the data-localization policy: {finding.type} found in "
                    f"{where}. Remove it and send the request again."
                )
            if action == "pseudonymize" and self.reversible:
                replacement = self.pseudonyms.placeholder(finding.type, value)
            elif action == "pseudonymize":
                replacement = f"[{finding.type}]"
            else:
                replacement = self._mask(finding.type, value)
            pieces += (text[last : finding.start], replacement)
            last = finding.end
        pieces.append(text[last:])
        return "".join(pieces)

    def signature(self, presented: object, where: str) -> str | None:
        """The upstream's own signature for one the client sent back; None to drop it.

        A signature the gateway did not seal for this tenant could carry anything: it is
        refused, or dropped if the policy says so.
        """
        opened = self._open_signature(presented) if self._open_signature else None
        if opened is not None:
            return opened
        if self.settings.foreign_signatures == "drop":
            return None
        raise PolicyBlocked(
            f"{where} is not a thought signature localgate received from the model for your "
            "tenant, and an opaque field cannot be checked for personal data. Send back the "
            "signatures exactly as the gateway returned them, or leave them out."
        )

    def refusals(self, text: str) -> list[str]:
        """Types found in ``text`` that the policy does not let through in clear (for
        values that cannot be rewritten, such as a model name in the path)."""
        types = {finding.type for form in _forms(text) for finding in self._detect(form)}
        return sorted(t for t in types if self.action_for(t) != "allow")

    def _glued(self, text: str) -> list[Finding]:
        """A token with no prose around it (an id, a key, a label: ``u13812345678``) holding
        an identifier glued to letters: the whole token, as one finding. In prose a number
        glued to a word is deliberately not taken for a phone number; a token has no prose
        to protect."""
        # Prose (any white space) first: it is most texts, and found at once, where
        # looking for a letter beside a digit reads the whole text.
        if len(text) > _TOKEN_MAX or _SPACE.search(text) or not _GLUED.search(text):
            return []
        found = self.detector.detect(spaced(text))
        return [Finding(0, len(text), found[0].type, found[0].score)] if found else []

    def typed(self, text: str) -> str:
        """``text`` with every finding replaced by its bare type, ``[CN_MOBILE]``: for
        recording a value that was refused, whatever the policy's action."""
        pieces: list[str] = []
        last = 0
        for finding in self.detector.detect(text):
            pieces += (text[last : finding.start], f"[{finding.type}]")
            last = finding.end
        pieces.append(text[last:])
        return "".join(pieces)

    def refuse_binary(self, where: str, mime_type: str) -> None:
        """Raise unless the policy lets content that cannot be scanned through."""
        if self.settings.binary_data == "block":
            raise PolicyBlocked(
                f"Request blocked by the data-localization policy: {where} holds "
                f"{mime_type or 'unscannable'} content, which localgate cannot check for "
                "personal data. Send text instead, or ask the gateway operator to set "
                "proxy.redaction.binary_data: allow for your tenant."
            )

    def mask_new_values(self, text: str, context: str = "") -> str:
        """Mask personal data in answer ``text`` that did not come from the request.

        ``context`` is text just before ``text`` (already sent), read for context words
        only. Types the policy allows are left alone.
        """
        findings = self.detector.detect(context + text) if text else []
        offset = len(context)
        pieces: list[str] = []
        last = 0
        for finding in findings:
            start, end = finding.start - offset, finding.end - offset
            if start < 0:
                continue
            value = plain(text[start:end])
            if value in self.request_values or self.action_for(finding.type) == "allow":
                continue
            self.answer_counts[finding.type] += 1
            pieces += (text[last:start], self._mask(finding.type, value))
            last = end
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)

    def _mask(self, entity_type: str, value: str) -> str:
        rule_replacement = self._rule_replacements.get(entity_type)
        mask = self.settings.mask
        if rule_replacement is not None:
            return rule_replacement
        if mask.keep_start or mask.keep_end:
            kept = mask.keep_start + mask.keep_end
            if len(value) > kept:
                end = len(value) - mask.keep_end
                return value[: mask.keep_start] + mask.fill * (end - mask.keep_start) + value[end:]
        return mask.replacement
