"""The dashboard (docs/dashboard.md) of an `[ha]` group shows which broker is active: the
active member's page says so, with the member's name and its takeovers; a standby serves
no page (503); after a takeover the new active member's page names it. Headless Chromium,
as tests/dashboard drives it, on two ``telemq serve`` members of one PostgreSQL database."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path

import pytest
from ha_support import Group, started_group

from dashboard.browser import Browser, require_browser
from testsupport.postgres import PostgresServer
from testsupport.process import HOST, users_and_acl

pytestmark = [pytest.mark.interop]

PASSWORD = "admin-pw"


def overview(http: int) -> dict[str, object]:
    request = urllib.request.Request(f"http://{HOST}:{http}/api/v1/overview")
    token = b64encode(f"admin:{PASSWORD}".encode()).decode("ascii")
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        body: dict[str, object] = json.loads(answer.read())
        return body


@pytest.fixture
def group(postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path) -> Iterator[Group]:
    extra = users_and_acl({"admin": PASSWORD}, [], admins={"admin"})
    with started_group(postgres_server, postgres_dsn, tmp_path, extra) as members:
        yield members


def test_the_dashboard_shows_the_active_member(group: Group, tmp_path: Path) -> None:
    executable = require_browser()
    a, b = group["a"], group["b"]
    body = overview(a.http)
    assert {k: body[k] for k in ("role", "broker", "ha", "member", "ha_takeovers")} == {
        "role": "active",
        "broker": "telemq",
        "ha": True,
        "member": "a",
        "ha_takeovers": 1,
    }
    with pytest.raises(urllib.error.HTTPError) as refused:
        overview(b.http)
    assert refused.value.code == 503  # a standby serves neither the API nor the page
    with Browser(tmp_path / "profile", executable=executable) as browser:
        assert browser.goto(f"http://{HOST}:{a.http}/") == 200
        browser.fill("#login-user", "admin")
        browser.fill("#login-password", PASSWORD)
        browser.click("#login-submit")
        browser.wait_text("#broker-role", "active member a of telemq since")
        browser.wait_text("#broker-role", "(1 takeover)")
        a.process.kill()
        assert group.wait_for_one_active(other_than=a) is b
        assert browser.goto(f"http://{HOST}:{b.http}/") == 200
        browser.fill("#login-user", "admin")
        browser.fill("#login-password", PASSWORD)
        browser.click("#login-submit")
        browser.wait_text("#broker-role", "active member b of telemq since")
        browser.screenshot(tmp_path / "active-member.png")
    assert overview(b.http)["member"] == "b"
