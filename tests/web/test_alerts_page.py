"""The alerts page in a real browser: the rules and the delivery log of a real server whose
evaluator runs every 0.1 s, a real webhook receiver on loopback, a rule switched off here."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from openruns.server import serve_in_thread

from .. import patience
from ..browser import own_page
from ..server.webhooks import Receiver

WAIT_MS = patience.SETTLE * 1000


def test_alerts_page_lists_rules_and_deliveries(browser, tmp_path, screenshot):
    server = serve_in_thread(tmp_path / "data", alert_interval=0.1)
    receiver = Receiver()
    try:
        with httpx.Client(base_url=server.url + "/api/v1", timeout=30) as client:
            rule = {
                "name": "loss high",
                "condition": {"type": "threshold", "metric": "loss", "op": "above", "value": 5},
                "webhook": {"url": receiver.url, "format": "generic"},
            }
            assert client.post("/alerts/rules", json=rule).status_code == 201
            failed = {"name": "failures", "condition": {"type": "failed"}}
            failed["webhook"] = {"url": receiver.url}
            assert client.post("/alerts/rules", json=failed).status_code == 201
            run = client.post("/runs", json={"kind": "train", "name": "web-alert"}).json()
            client.post(f"/runs/{run['id']}/finish", json={"status": "failed", "error": "OOM"})
        receiver.wait(1)
        with own_page(browser, server.url) as page:
            page.goto("/alerts")
            rules = page.locator("#rules tbody tr")
            expect(rules).to_have_count(2)
            expect(rules.nth(0)).to_contain_text("mean(loss, 1 pts) above 5")
            expect(rules.nth(1)).to_contain_text("failed or crashed")
            deliveries = page.locator("#deliveries tbody tr")
            expect(deliveries).to_have_count(1)
            expect(deliveries.nth(0)).to_contain_text("run failed")
            expect(deliveries.nth(0)).to_contain_text("delivered", timeout=WAIT_MS)
            expect(deliveries.nth(0).locator("a")).to_have_attribute("href", f"/runs/{run['id']}")
            screenshot(page, "alerts")
            rules.nth(1).get_by_role("button").click()
            expect(rules.nth(1)).to_contain_text("off (switch on)")
        with httpx.Client(base_url=server.url + "/api/v1", timeout=30) as client:
            states = [r["enabled"] for r in client.get("/alerts/rules").json()["items"]]
            assert states == [True, False]
    finally:
        receiver.close()
        server.stop()
