"""The web dashboard (docs/dashboard.md) in headless Chromium, against a real broker.

One broker for the module, with an administrator, a user who is not one, and an HTTP
listener serving the page, the admin API and MQTT over WebSockets. Each test gets its own
browser with a new profile (browser.py). The page is driven as a person would: log in, open
a tab, type, click; every check waits for what the page shows, with a deadline.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.paho import PahoClient
from testsupport.process import BrokerProcess, free_port, unique, users_and_acl

from .browser import Browser, require_browser

PASSWORDS = {"admin": "admin-pw", "app": "app-pw"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    """A broker (MQTT on TCP, and an HTTP listener) and its HTTP port."""
    http_port = free_port()
    config = (
        users_and_acl(PASSWORDS, [], admins={"admin"})
        + f'\n[[http]]\nhost = "127.0.0.1"\nport = {http_port}\n'
    )
    broker = BrokerProcess(tmp_path_factory.mktemp("dashboard"), config_text=config)
    try:
        broker.start()
        yield broker, http_port
    finally:
        broker.finalize()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """Chromium with a new, empty profile; closed at the end of the test, whatever happens."""
    executable = require_browser()
    with Browser(tmp_path / "profile", executable=executable) as started:
        yield started


@pytest.fixture
def paho() -> Iterator[list[PahoClient]]:
    """Where a test puts the MQTT clients it connects; all are closed at its end."""
    clients: list[PahoClient] = []
    yield clients
    for client in clients:
        try:
            client.close()
        except Exception:
            client.client.loop_stop()


def page_url(http_port: int) -> str:
    return f"http://127.0.0.1:{http_port}/"


def api_error(http_port: int, user: str, password: str) -> tuple[int, str]:
    """The status and `error` the admin API answers these credentials with."""
    request = urllib.request.Request(f"{page_url(http_port)}api/v1/overview")
    token = b64encode(f"{user}:{password}".encode()).decode("ascii")
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10):
            pass
    except urllib.error.HTTPError as error:
        return error.code, str(json.loads(error.read())["error"])
    raise AssertionError(f"{user!r} was let in")


def log_in(browser: Browser, user: str, password: str) -> None:
    browser.fill("#login-user", user)
    browser.fill("#login-password", password)
    browser.click("#login-submit")


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > len(PNG_SIGNATURE) and data.startswith(PNG_SIGNATURE), path


def stat(key: str) -> str:
    """JavaScript: the overview's number `key` (see app.js's STATS)."""
    cell = f"document.querySelector('[data-stat=\"{key}\"] dd')"
    return f"Number({cell}.textContent.replace(/,/g, ''))"


def script_errors(browser: Browser) -> list[str]:
    """Uncaught errors and refusals by the page's Content-Security-Policy."""
    errors = [str(event.get("message")) for event in browser.page_events("pageerror")]
    errors += [
        str(event.get("text"))
        for event in browser.page_events("console")
        if "Content Security Policy" in str(event.get("text"))
    ]
    return errors


def test_bad_credentials_show_the_api_error(
    served: tuple[BrokerProcess, int], browser: Browser, tmp_path: Path
) -> None:
    _, http_port = served
    assert browser.goto(page_url(http_port)) == 200
    browser.wait_visible("#login-form")

    status, wrong_password = api_error(http_port, "admin", "not-the-password")
    assert status == 401
    log_in(browser, "admin", "not-the-password")
    browser.wait_text("#login-error", wrong_password)

    status, not_admin = api_error(http_port, "app", PASSWORDS["app"])
    assert status == 403
    log_in(browser, "app", PASSWORDS["app"])
    browser.wait_text("#login-error", not_admin)

    assert browser.evaluate("document.getElementById('app').hidden") is True
    assert_png(browser.screenshot(tmp_path / "login-refused.png"))
    assert script_errors(browser) == []


def test_clients_and_the_topic_viewer(
    served: tuple[BrokerProcess, int],
    browser: Browser,
    paho: list[PahoClient],
    tmp_path: Path,
) -> None:
    broker, http_port = served
    assert browser.goto(page_url(http_port)) == 200
    log_in(browser, "admin", PASSWORDS["admin"])
    browser.wait_visible("#app")
    assert browser.text("#login-error") == ""
    # The overview: the numbers, and Chart.js's two charts (npm's bundle, served by the broker).
    browser.wait_text("#overview-stats", "Connections")
    browser.wait_text("#broker-role", "broker telemq")  # no [ha]: just its name
    assert browser.evaluate("typeof Chart") == "function"
    assert browser.evaluate("document.getElementById('charts-notice').hidden") is True

    # A client connected over TCP shows up in the clients table.
    client_id = unique("dash")
    client = PahoClient(broker.port, client_id, username="app", password=PASSWORDS["app"])
    paho.append(client)
    client.connect()
    browser.click("#tab-clients")
    browser.wait_visible("#clients-table")
    browser.wait_text("#clients-table", client_id)
    browser.fill("#clients-search", "no such client")
    browser.wait_text("#clients-table", "No connected client matches.")
    browser.fill("#clients-search", client_id)
    browser.wait_text("#clients-table", client_id)
    browser.wait_text("#clients-count", "of 1")

    # The topic viewer subscribes from the browser over WebSocket, and shows what arrives,
    # as text: markup in a payload stays visible characters.
    topic_root = unique("dash/viewer")
    browser.click("#tab-viewer")
    browser.fill("#viewer-filter", topic_root + "/#")
    browser.click("#viewer-subscribe")
    browser.wait_text("#viewer-status", f"Subscribed to {topic_root}/#")
    payload = f"<b>reading {unique('')}</b>"
    client.publish(f"{topic_root}/temperature", payload.encode(), qos=1)
    browser.wait_text("#viewer-messages", payload)
    browser.wait_text("#viewer-messages", f"{topic_root}/temperature")
    screenshot = browser.screenshot(tmp_path / "dashboard.png")
    assert_png(screenshot)

    # The viewer's own subscription (its MQTT.js client's, over WebSocket).
    browser.click("#tab-subscriptions")
    browser.fill("#subs-search", topic_root)
    browser.wait_text("#subs-table", f"{topic_root}/#")

    # A retained message: listed under a topic filter, then deleted from the table.
    kept = f"kept {unique('')}"
    client.publish(f"{topic_root}/kept", kept.encode(), qos=1, retain=True)
    browser.click("#tab-retained")
    browser.fill("#retained-filter", f"{topic_root}/#")
    browser.wait_text("#retained-table", kept)
    browser.click("#retained-table button.danger")
    browser.wait_no_text("#retained-table", kept)

    # Disconnect from the clients table (the page's confirm() is accepted by browser.mjs).
    browser.click("#tab-clients")
    browser.click(f'#clients-table button[data-client-id="{client_id}"]')
    client.wait_disconnected()
    browser.wait_no_text("#clients-table", client_id)

    # The overview: its counters have seen the message, and both charts have points (the
    # message rates need two polls).
    browser.click("#tab-overview")
    browser.wait_visible("#chart-messages")
    browser.wait_for(f"{stat('messages_received')} >= 1")
    browser.wait_for(
        "Object.values(Chart.instances).length === 2 && "
        "Object.values(Chart.instances).every((chart) => chart.data.labels.length >= 1)"
    )
    assert_png(browser.screenshot(tmp_path / "overview.png"))
    assert script_errors(browser) == []


def test_without_the_npm_libraries_the_tables_still_work(
    served: tuple[BrokerProcess, int],
    browser: Browser,
    paho: list[PahoClient],
    tmp_path: Path,
) -> None:
    """As when `npm ci` was not run: the vendor bundles are 404s. The page says that the
    charts and the topic viewer are unavailable, and the rest works."""
    broker, http_port = served
    browser.block("**/dashboard/vendor/**")
    assert browser.goto(page_url(http_port)) == 200
    log_in(browser, "admin", PASSWORDS["admin"])
    browser.wait_visible("#app")
    browser.wait_visible("#charts-notice")
    browser.wait_for(f"{stat('connections')} >= 0")  # a number: the overview was read

    client_id = unique("nolib")
    client = PahoClient(broker.port, client_id, username="app", password=PASSWORDS["app"])
    paho.append(client)
    client.connect()
    browser.click("#tab-clients")
    browser.wait_text("#clients-table", client_id)

    browser.click("#tab-viewer")
    browser.wait_visible("#viewer-notice")
    assert_png(browser.screenshot(tmp_path / "without-libraries.png"))
    assert script_errors(browser) == []
