"""The web console in real Chromium (Debian's chromium and chromium-driver, headless, driven
by Selenium): an auditor searches the trail, opens a record, decrypts it with a reason and
sees that access listed; a security officer creates a key, revokes it, and the data plane
refuses the next request with it. The page's script runs under the strict CSP (the copy
button it reveals shows) and the browser reports no CSP violation.

With LOCALGATE_CONSOLE_SCREENSHOTS=DIR the pages are saved there as PNGs (docs/console.md).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localgate.admin.audit import AuditAdmin, check_proof
from localgate.admin.operators import Role
from localgate.audit.checkpoint import CheckpointSigner
from localgate.audit.crypto import CipherSuite
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditStore
from localgate.audit.trail import database, master_key, signer
from localgate.config import load_settings
from tests.adminapi.conftest import PASSWORD, AdminApi
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI needs chromium and chromium-driver (make tools)")
    pytest.skip("chromium or chromium-driver is not installed", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--lang=en",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(INFRASTRUCTURE_TIMEOUT_S)
    try:
        yield driver
        problems = [
            entry["message"]
            for entry in driver.get_log("browser")  # type: ignore[no-untyped-call]
            if "Content Security Policy" in entry["message"] or entry["level"] == "SEVERE"
        ]
        assert not problems
    finally:
        driver.quit()


def _wait(driver: WebDriver) -> WebDriverWait[WebDriver]:
    return WebDriverWait(driver, INFRASTRUCTURE_TIMEOUT_S)


def _shot(driver: WebDriver, name: str) -> None:
    folder = os.environ.get("LOCALGATE_CONSOLE_SCREENSHOTS")
    if folder:
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def _log_in(driver: WebDriver, api: AdminApi, role: Role) -> None:
    driver.get(api.base_url + "/admin/")
    _wait(driver).until(ec.presence_of_element_located((By.ID, "name")))
    _shot(driver, "login")
    driver.find_element(By.ID, "name").send_keys(api.users[role])
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "login").click()
    _wait(driver).until(ec.text_to_be_present_in_element((By.ID, "who"), api.users[role]))


def test_auditor_searches_opens_decrypts_and_sees_the_access(
    admin_api: AdminApi, browser: WebDriver
) -> None:
    request_id = admin_api.request_ids["acme"]
    _log_in(browser, admin_api, Role.AUDITOR)
    _wait(browser).until(ec.presence_of_element_located((By.ID, "audit-health")))
    browser.find_element(By.LINK_TEXT, "Audit trail").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "f-tenant")))
    browser.find_element(By.ID, "f-tenant").send_keys("acme")
    browser.find_element(By.ID, "search").click()
    _wait(browser).until(ec.url_contains("tenant=acme"))
    _shot(browser, "audit-search")
    browser.find_elements(By.LINK_TEXT, request_id)[0].click()
    reason = _wait(browser).until(ec.element_to_be_clickable((By.ID, "reason")))
    assert "Hello from acme" not in browser.page_source
    reason.send_keys("browser test: ticket 1234")
    _shot(browser, "audit-record")
    browser.find_element(By.ID, "decrypt").click()
    note = _wait(browser).until(ec.presence_of_element_located((By.ID, "decrypt-note")))
    payloads = browser.find_elements(By.CSS_SELECTOR, "section.decrypted")
    assert payloads
    ActionChains(browser).scroll_to_element(note).perform()
    assert "Hello from acme" in browser.page_source
    assert "ticket 1234" not in browser.current_url
    browser.execute_script("arguments[0].scrollIntoView()", note)  # for the picture only
    _shot(browser, "audit-decrypted")
    browser.find_element(By.LINK_TEXT, "Admin actions").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "trail")))
    trail = browser.find_element(By.ID, "trail").text
    assert "browser test: ticket 1234" in trail
    assert "audit.decrypt" in trail
    assert request_id in trail
    _shot(browser, "admin-trail")


def _proof_result(driver: WebDriver, element_id: str) -> str:
    """The check's result once the page's script has one: verified, failed, unavailable."""

    def settled(browser: WebDriver) -> str | bool:
        result = browser.find_element(By.ID, element_id).get_attribute("data-result")
        return result or False

    return str(_wait(driver).until(settled))


def test_auditor_checks_a_proof_in_the_browser(
    admin_api: AdminApi, browser: WebDriver, tmp_path: Path
) -> None:
    request_id = admin_api.request_ids["acme"]
    audit = AuditAdmin(admin_api.settings)
    audit.checkpoint()
    key = audit.verifier_key()
    _log_in(browser, admin_api, Role.AUDITOR)
    browser.get(f"{admin_api.base_url}/admin/audit/requests/{request_id}")

    # Checked on load against the published key: signature, log, root, leaf, ciphertexts.
    assert _proof_result(browser, "proof-request") == "verified"
    assert _proof_result(browser, "proof-answer") == "verified"
    status = browser.find_element(By.ID, "proof-request")
    assert status.get_attribute("role") == "status"
    assert status.text.startswith("\u2713 Verified in this browser: request record")
    assert "of acme is in the log localgate/audit/acme" in status.text
    key_id = key.split("+")[1]
    assert browser.find_element(By.ID, "verifier-key-id").text == key_id
    assert f"by key {key_id}" in status.text
    _shot(browser, "audit-proof-verified")

    # A bundle changed after it was downloaded fails, saying which check.
    with admin_api.client(Role.AUDITOR) as client:
        bundle = client.get(f"/admin/api/v1/audit/requests/{request_id}/proof").json()
    ciphertext = bytearray(base64.b64decode(bundle["ciphertexts"]["payload"]))
    ciphertext[0] ^= 1
    tampered = tmp_path / "tampered.json"
    tampered.write_text(
        json.dumps({**bundle, "ciphertexts": {"payload": base64.b64encode(ciphertext).decode()}})
    )
    intact = tmp_path / "intact.json"
    intact.write_text(json.dumps(bundle))
    picker = browser.find_element(By.ID, "bundle-file")
    picker.send_keys(str(intact))
    assert _proof_result(browser, "bundle-file-status") == "verified"
    browser.execute_script("document.getElementById('bundle-file-status').dataset.result = ''")
    picker.send_keys(str(tampered))
    assert _proof_result(browser, "bundle-file-status") == "failed"
    failed = browser.find_element(By.ID, "bundle-file-status")
    assert failed.get_attribute("data-step") == "ciphertext"
    assert "Failed: the stored ciphertexts" in failed.text

    # Another key than the log's (a forger's, named like it): the signature step fails.
    forged = CheckpointSigner.generate(key.split("+")[0]).verifier_key()
    field = browser.find_element(By.ID, "verifier-key")
    field.clear()
    field.send_keys(forged)
    browser.find_element(By.ID, "check-proofs").click()
    _wait(browser).until(
        lambda b: b.find_element(By.ID, "proof-request").get_attribute("data-step") == "signature"
    )
    assert _proof_result(browser, "proof-request") == "failed"
    assert (
        "the checkpoint is not signed by this key"
        in browser.find_element(By.ID, "proof-request").text
    )
    browser.execute_script("arguments[0].scrollIntoView()", failed)  # for the picture only
    _shot(browser, "audit-proof-failed")
    # No key at all: nothing is claimed either way.
    field.clear()
    browser.find_element(By.ID, "check-proofs").click()
    _wait(browser).until(
        lambda b: (
            b.find_element(By.ID, "proof-request").get_attribute("data-result") == "unavailable"
        )
    )
    assert "paste the verifier key you hold" in browser.find_element(By.ID, "proof-request").text


def _sm_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """A proof bundle of a log of the ``sm`` suite (SM3 tree) and that log's verifier key."""
    monkeypatch.delenv("LOCALGATE_AUDIT_MASTER_KEY", raising=False)
    config = tmp_path / "sm.yaml"
    config.write_text(f"data_dir: {tmp_path / 'sm-data'}\naudit:\n  suite: sm\n")
    settings = load_settings(config, {})[0]
    signer(settings, create=True)
    store = AuditStore(database(settings), master_key(settings, create=True), CipherSuite("sm"))
    store.start()
    for number in range(3):
        store.submit(
            PendingRecord("acme", "request", f"sm-{number}", {}, payload=b'{"n": 1}')
        ).result(timeout=INFRASTRUCTURE_TIMEOUT_S)
    store.close()
    audit = AuditAdmin(settings)
    audit.checkpoint()
    bundle, key = audit.prove("sm-1").as_json(), audit.verifier_key()
    assert bundle["suite"] == "sm"
    assert check_proof(json.dumps(bundle), key).valid
    return bundle, key


def test_a_bundle_of_an_sm3_log_checks_in_the_browser(
    admin_api: AdminApi, browser: WebDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, key = _sm_bundle(tmp_path, monkeypatch)
    changed = {**bundle, "proof": [bundle["proof"][-1], *bundle["proof"][:-1]]}
    _log_in(browser, admin_api, Role.AUDITOR)
    browser.get(f"{admin_api.base_url}/admin/audit/requests/{admin_api.request_ids['globex']}")
    # GB/T 32905-2016, appendix A.1: SM3("abc").
    assert browser.execute_script('return hex(sm3(utf8.encode("abc")))') == (
        "66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0"
    )
    field = browser.find_element(By.ID, "verifier-key")
    field.clear()
    field.send_keys(key)
    picker = browser.find_element(By.ID, "bundle-file")
    for name, content, expected in (("sm", bundle, "verified"), ("sm-bad", changed, "failed")):
        saved = tmp_path / f"{name}.json"
        saved.write_text(json.dumps(content))
        browser.execute_script("document.getElementById('bundle-file-status').dataset.result = ''")
        picker.send_keys(str(saved))
        assert _proof_result(browser, "bundle-file-status") == expected, name
    status = browser.find_element(By.ID, "bundle-file-status")
    assert status.get_attribute("data-step") == "inclusion"


def test_overview_shows_the_background_verification(
    admin_api: AdminApi, browser: WebDriver
) -> None:
    _log_in(browser, admin_api, Role.VIEWER)
    _wait(browser).until(ec.presence_of_element_located((By.ID, "verification")))
    # Running: the script follows its progress and loads the page again once it is done.
    _wait(browser).until(ec.presence_of_element_located((By.ID, "verified-at")))
    assert browser.find_element(By.ID, "audit-health").text == "verified"
    button = browser.find_element(By.ID, "verify-now")
    button.click()
    _wait(browser).until(ec.staleness_of(button))  # the answer to the POST, a new page
    _wait(browser).until(ec.presence_of_element_located((By.ID, "verified-at")))
    assert browser.find_element(By.ID, "audit-health").text == "verified"


def test_security_revokes_a_key_and_the_data_plane_refuses_it(
    admin_api: AdminApi, browser: WebDriver
) -> None:
    _log_in(browser, admin_api, Role.SECURITY)
    _wait(browser).until(ec.presence_of_element_located((By.ID, "audit-health")))
    _shot(browser, "overview")
    browser.find_element(By.LINK_TEXT, "Tenants").click()
    _wait(browser).until(ec.presence_of_element_located((By.LINK_TEXT, "acme"))).click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "label"))).send_keys("browser")
    browser.find_element(By.ID, "create-key").click()
    key = _wait(browser).until(ec.presence_of_element_located((By.ID, "new-key"))).text
    key_id = browser.find_element(By.ID, "new-key-id").text
    # The script, served from the listener under the CSP, revealed the copy button.
    assert browser.find_element(By.CSS_SELECTOR, "button[data-copy]").is_displayed()
    assert key not in browser.current_url
    _shot(browser, "tenant-key-created")

    def generate() -> int:
        with admin_api.gateway.client(headers={"x-goog-api-key": key}) as client:
            return client.post(
                "/v1beta/models/gemini-2.5-flash:generateContent",
                json={"contents": [{"parts": [{"text": "hi"}]}]},
            ).status_code

    assert generate() == 200
    browser.find_element(By.ID, f"revoke-{key_id}").click()
    _wait(browser).until(ec.alert_is_present()).accept()  # the script asks first
    _wait(browser).until(ec.invisibility_of_element_located((By.ID, f"revoke-{key_id}")))
    assert "revoked" in browser.find_element(By.ID, f"key-{key_id}").text
    assert generate() in (401, 403)
    _shot(browser, "tenant-keys")
    browser.find_element(By.LINK_TEXT, "Configuration").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "config-hash")))
    _shot(browser, "configuration")


def test_security_tries_the_redactor_in_chinese(admin_api: AdminApi, browser: WebDriver) -> None:
    _log_in(browser, admin_api, Role.SECURITY)
    browser.find_element(By.ID, "lang").click()
    _wait(browser).until(ec.presence_of_element_located((By.LINK_TEXT, "脱敏试验场"))).click()
    text = _wait(browser).until(ec.element_to_be_clickable((By.ID, "text")))
    text.send_keys("请联系张伟，手机 13800138000，邮箱 zhang.wei@example.com")
    browser.find_element(By.ID, "try").click()
    sent = _wait(browser).until(ec.presence_of_element_located((By.ID, "sent"))).text
    assert "13800138000" not in sent
    assert "CN_MOBILE" in browser.find_element(By.ID, "findings").text
    _shot(browser, "redaction-zh")
