"""The web console in real Chromium (Debian's chromium and chromium-driver, headless, driven
by Selenium): an auditor searches the trail, opens a record, decrypts it with a reason and
sees that access listed; a security officer creates a key, revokes it, and the data plane
refuses the next request with it. The page's script runs under the strict CSP (the copy
button it reveals shows) and the browser reports no CSP violation.

With LOCALGATE_CONSOLE_SCREENSHOTS=DIR the pages are saved there as PNGs (docs/console.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localgate.admin.operators import Role
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
