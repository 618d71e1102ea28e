"""The saga page in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
selenium with no browser download) loads the page that ``safebunny view`` serves from its own process, for the
small saga of ``cli_saga.py`` after a drain; the counts it renders are the ones ``saga.status()`` gives for the
same moment, and redrive from the page asks first and goes through the CLI's code."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest

from helpers import wait_until
from safebunny.cli.locate import load_saga
from safebunny.saga.look.view_html import STEP_FIELDS

SAGA_FILE = str(Path(__file__).with_name("cli_saga.py"))
EXE = str(Path(sys.executable).with_name("safebunny"))
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

def _browser(profile: str):  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    assert not missing, f"{missing} missing: apt-get install chromium chromium-driver (.ci/run does)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # with the driver's path given too, selenium-manager downloads nothing
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1500,1400", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def _serve(*flags: str) -> tuple[subprocess.Popen, str]:  # type: ignore[type-arg]
    """``safebunny view`` in a process of its own; (the process, the page's URL)."""
    proc = subprocess.Popen([EXE, "view", SAGA_FILE, "--port", "0", "--refresh", "600", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    line = proc.stdout.readline() if proc.stdout else ""
    found = re.search(r"at (http://127\.0\.0\.1:\d+/) ", line)
    assert found, f"no URL in {line!r}: {proc.stderr.read() if proc.stderr and proc.poll() is not None else ''}"
    return proc, found.group(1)


def _rendered(driver, **want: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The texts of the page's elements with these data attributes (not a shard's cells)."""
    from selenium.webdriver.common.by import By

    css = "".join(f'[data-{k.replace("_", "-")}="{v}"]' for k, v in want.items()) + ":not([data-shard])"
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def test_the_page_in_chromium_shows_what_status_says(spark, cli_env: Path, amqp_uri: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    saga = load_saga(SAGA_FILE)
    orders = [{"orderId": f"order-{i}", "qty": 1} for i in range(3)] + [{"orderId": "order-bad", "qty": 1}]
    saga.start(spark.createDataFrame(orders, "orderId string, qty int"), node="orders", type="OrderPlaced",
               business_key="orderId")
    saga.drain(spark)
    status = {f"{s.node}.{s.type}": s for s in saga.status()}  # drained and idle: the numbers hold still
    assert status["stock.OrderPlaced"].parked == 1 and status["shipping.StockReserved"].processed == 3

    proc, url = _serve("--allow-actions")
    profile = tempfile.mkdtemp(prefix="sb-chromium-")
    driver = _browser(profile)
    try:
        driver.get(url)
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-view .sb-graph"))
        assert driver.title == f"saga {saga.name}"
        for label, s in status.items():
            for field, _, _ in STEP_FIELDS:
                expected = getattr(s, field)
                shown = _rendered(driver, step=label, field=field)
                assert shown and set(shown) == {"-" if expected is None else str(expected)}, (label, field, shown)
        # the graph: one box per step, the poison sink with the parked total, compensation marked nowhere here
        boxes = {e.get_attribute("data-node") for e in driver.find_elements(By.CSS_SELECTOR, "g.sb-node")}
        assert boxes == {"stock.OrderPlaced", "shipping.StockReserved", "orders", "poison"}
        assert _rendered(driver, node="poison", field="parked_total") == [str(sum(s.poisoned for s in status.values()))]
        # instances by state, as saga.instances() counts them
        from safebunny.saga.look.instances import instances_table

        states = {}
        for row in instances_table(saga).to_pylist():
            states[row["state"]] = states.get(row["state"], 0) + 1
        assert states == {"completed": 3, "parked": 1}
        for state, n in states.items():
            assert _rendered(driver, state=state, field="instances") == [str(n)]
        # the poison list: the one parked message, with its reason and attempts
        parked = saga.poison_rows("stock", "OrderPlaced")
        assert len(parked) == 1
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-message-id="{parked[0].messageId}"]')
        assert "sku not in the catalogue" in row.text
        assert _rendered(driver, message_id=parked[0].messageId, field="attempts") == [str(parked[0].attempts)]
        assert ":guest@" not in driver.page_source  # the URI's password never on the page
        shot = os.environ.get("SAFEBUNNY_VIEW_SCREENSHOT")
        if shot:
            driver.save_screenshot(shot)

        # redrive from the page: cancelled, nothing happens; confirmed, the CLI's redrive records it
        button = driver.find_element(By.CSS_SELECTOR, f'button.sb-redrive[data-message-id="{parked[0].messageId}"]')
        button.click()
        WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert).dismiss()
        assert saga.poison_rows("stock", "OrderPlaced")[0].state == "parked"
        button.click()
        alert = WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert)
        assert parked[0].messageId in alert.text
        alert.accept()
        WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "sb-action-result").text)
        assert driver.find_element(By.ID, "sb-action-result").text == "redrove 1 message(s) of step stock.OrderPlaced"
        assert [p.state for p in saga.poison_rows("stock", "OrderPlaced", all=True)] == ["redriven"]

        # one instance's trace as a timeline, and the JSON beside the page
        driver.get(url + "?instance=order-bad")
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".sb-timeline circle"))
        trace = saga.trace("order-bad")
        assert _rendered(driver, field="trace_entries") == [str(len(trace))]
        assert len(driver.find_elements(By.CSS_SELECTOR, ".sb-timeline circle")) == len(trace)
        import urllib.request

        with urllib.request.urlopen(url + "status.json", timeout=60) as response:
            data = orjson.loads(response.read())
        assert {s["label"]: s["status"]["processed"] for s in data["steps"]} == {
            label: s.processed for label, s in status.items()}
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def test_the_page_is_read_only_without_the_flag(cli_env: Path) -> None:  # type: ignore[no-untyped-def]
    """No buttons and no script on a read-only page; the server refuses an action posted anyway."""
    import urllib.error
    import urllib.request

    proc, url = _serve()
    try:
        wait_until(lambda: proc.poll() is None, timeout=5, what="the server")
        with urllib.request.urlopen(url, timeout=60) as response:
            page = response.read().decode()
        assert "sb-view" in page and "<button" not in page
        request = urllib.request.Request(url + "actions/redrive", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=30)
        assert info.value.code == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _rgb(hex_colour: str) -> tuple[int, ...]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


def _colour(element, prop: str) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    """An element's computed colour as (r, g, b), whether the browser says rgb(...) or rgba(..., 1)."""
    return tuple(int(v) for v in re.findall(r"\d+", element.value_of_css_property(prop))[:3])


def _shot(driver, name: str) -> None:  # type: ignore[no-untyped-def]
    """A screenshot for docs/operations.md when ``SAFEBUNNY_VIEW_SCREENSHOTS`` names a folder."""
    folder = os.environ.get("SAFEBUNNY_VIEW_SCREENSHOTS")
    if folder:
        driver.save_screenshot(os.path.join(folder, f"saga-view-{name}.png"))


def _step_shows(driver, label: str, state: str) -> None:  # type: ignore[no-untyped-def]
    """Step ``label``'s box and row say ``state`` in words, in the state's colours, and so does the banner."""
    from selenium.webdriver.common.by import By

    from safebunny.saga.look.status import ALARMING
    from safebunny.saga.look.view_html import STATE_COLOURS

    assert _rendered(driver, step=label, field="state") == [state, state], label
    fill, outline = STATE_COLOURS[state]
    rect = driver.find_element(By.CSS_SELECTOR, f'g[data-node="{label}"] > rect')
    assert (_colour(rect, "fill"), _colour(rect, "stroke")) == (_rgb(fill), _rgb(outline)), label
    cell = driver.find_element(By.CSS_SELECTOR, f'tr[data-step="{label}"] td.sb-state')
    assert _colour(cell, "background-color") == _rgb(fill), label
    listed = driver.find_elements(By.CSS_SELECTOR, f'.sb-banner li[data-banner-step="{label}"]')
    assert [e.text.split(":")[0] for e in listed] == ([f"{label} is {state}"] if state in ALARMING else [])


def test_the_page_says_what_is_wrong_in_words_and_colour(spark, cli_env: Path) -> None:  # type: ignore[no-untyped-def]
    """An undeclared saga, then a failing step, a step nobody consumes and a paused one, as an operator sees them:
    the words and colours of each box, row and the banner; the same states as ``status()``, ``safebunny status``
    and ``/status.json``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    saga = load_saga(SAGA_FILE)
    stock, shipping = "stock.OrderPlaced", "shipping.StockReserved"
    # not declared, no state: view --once fails as status warns, and the served page says the same at the top
    once = subprocess.run([EXE, "view", SAGA_FILE, "--once", "--out", str(cli_env / "page.html")],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert once.returncode == 1, once.stderr
    assert "is not declared on this broker" in once.stderr and "no state under the saga's root" in once.stderr
    status_out = subprocess.run([EXE, "status", SAGA_FILE], capture_output=True, text=True, timeout=120,
                                env=dict(os.environ))
    assert status_out.returncode == 0 and "WARNING saga" in status_out.stdout
    for line in once.stderr.strip().splitlines():  # the same words
        assert line.removeprefix("safebunny: ") in status_out.stdout
    assert "is not declared on this broker" in (cli_env / "page.html").read_text()

    proc, url = _serve()
    profile = tempfile.mkdtemp(prefix="sb-chromium-")
    driver = _browser(profile)
    driver.set_window_size(1280, 1000)

    def load() -> None:
        driver.get(url)
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#sb-view .sb-graph"))

    def same_everywhere() -> dict[str, str]:
        """Each step's state: status(), safebunny status --json and /status.json agree (and the page)."""
        here = {f"{s.node}.{s.type}": s.state for s in saga.status()}
        out = subprocess.run([EXE, "status", SAGA_FILE, "--json"], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ))
        assert {r["step"]: r["state"] for r in orjson.loads(out.stdout)} == here
        import urllib.request

        with urllib.request.urlopen(url + "status.json", timeout=60) as response:
            assert {s["label"]: s["status"]["state"] for s in orjson.loads(response.read())["steps"]} == here
        return here

    try:
        load()
        problems = [e.text for e in driver.find_elements(By.CSS_SELECTOR, '.sb-banner li[data-problem="saga"]')]
        assert any("is not declared on this broker" in p for p in problems), problems
        banner = driver.find_element(By.CSS_SELECTOR, ".sb-banner")
        assert _colour(banner, "background-color") == _rgb("#fde2e1")
        _step_shows(driver, stock, "not declared")
        _shot(driver, "undeclared")

        # failing: a drain parks order-bad at stock (recent parkings); shipping is left idle
        orders = [{"orderId": f"order-{i}", "qty": 1} for i in range(3)] + [{"orderId": "order-bad", "qty": 1}]
        saga.start(spark.createDataFrame(orders, "orderId string, qty int"), node="orders", type="OrderPlaced",
                   business_key="orderId")
        saga.drain(spark, restarts=6)  # a loaded machine's Python workers may miss their connect-back
        assert same_everywhere() == {stock: "failing", shipping: "idle"}
        load()
        _step_shows(driver, stock, "failing")
        _step_shows(driver, shipping, "idle")
        assert not driver.find_elements(By.CSS_SELECTOR, '.sb-banner li[data-problem="saga"]')
        _shot(driver, "failing")

        # not consumed: two orders sent straight to shipping's queue, and no query runs
        waiting = [{"orderId": "order-w1"}, {"orderId": "order-w2"}]
        saga.start(spark.createDataFrame(waiting, "orderId string"), node="stock", type="StockReserved",
                   business_key="orderId")
        wait_until(lambda: saga.status()[1].backlog == 2, timeout=60, what="two messages in shipping's queue")
        assert same_everywhere() == {stock: "failing", shipping: "not consumed"}
        load()
        _step_shows(driver, shipping, "not consumed")
        detail = _rendered(driver, step=shipping, field="state_detail")[0]
        assert "2 message(s) waiting and no consumer" in detail and "the oldest has waited" in detail, detail
        waits = {r.find_element(By.CSS_SELECTOR, "td").text: r.find_element(By.CSS_SELECTOR, 'td[data-field="waits"]')
                 .text for r in driver.find_elements(By.CSS_SELECTOR, "table.sb-stuck tr") if r.find_elements(
                     By.CSS_SELECTOR, 'td[data-field="waits"]')}
        assert waits["order-w1"] == waits["order-w2"] == f"queue of {shipping}", waits
        assert waits["order-bad"] == f"parked at {stock}"
        # the file form: no dead links, each id says its trace needs safebunny view
        assert "needs safebunny view" in str(saga.view()) and "?instance=" not in str(saga.view())
        _shot(driver, "not-consumed")

        # paused: the breaker, until when and why, in words and colour
        saga.pause("shipping", "StockReserved", 600)
        assert same_everywhere()[shipping] == "paused"
        load()
        _step_shows(driver, shipping, "paused")
        detail = _rendered(driver, step=shipping, field="state_detail")[0]
        assert "breaker open until" in detail and "set by saga.pause()" in detail, detail
        _shot(driver, "paused")
    finally:
        saga.resume("shipping", "StockReserved")
        driver.quit()
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)
