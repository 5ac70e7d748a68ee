"""The playground page (`warden serve`'s `/`) in a real browser: Debian's chromium, headless,
driven by Playwright, against a real daemon. Every wait is on the page's state (no sleeps);
timeouts are generous (harness.TIMEOUT_MS)."""

from __future__ import annotations

import hashlib
import json
import urllib.request

import pytest

from harness import Daemon, finished_cells, open_page, run_and_wait, set_code, wait_ready


@pytest.fixture
def page(browser, daemon):  # type: ignore[no-untyped-def]
    p = open_page(browser, daemon.url)
    yield p
    p.context.close()


def choose_profile(page, name: str) -> None:  # type: ignore[no-untyped-def]
    page.select_option("#profile", name)


def test_opens_ready_to_type_and_a_one_shot_streams_its_output(page) -> None:  # type: ignore[no-untyped-def]
    wait_ready(page)
    # The editor has the focus, line numbers and Python highlighting.
    assert page.evaluate("Boolean(document.activeElement.closest('.CodeMirror'))")
    assert page.locator(".CodeMirror-linenumber").count() >= 1
    choose_profile(page, "data_science")
    page.check("#oneshot")
    page.click(".CodeMirror-lines")
    page.keyboard.type("print(1 + 1)")
    assert page.locator(".CodeMirror .cm-builtin", has_text="print").count() == 1
    set_code(
        page,
        "import sys, time\nprint('first', flush=True)\nprint('oops', file=sys.stderr, flush=True)\n"
        "time.sleep(3)\nprint('second')\n",
    )
    page.keyboard.press("Control+Enter")
    # The first line is on the page while the run still goes on: it streamed.
    page.wait_for_function(
        "() => { const c = document.querySelector('#cells .cell'); if (!c) return false;"
        " const out = c.querySelector('.stream .stdout');"
        " return c.classList.contains('running') && out && out.textContent.includes('first'); }"
    )
    page.wait_for_selector("#cells .cell .result-line")
    cell = page.locator("#cells .cell").first
    stdout = "".join(cell.locator(".stream .stdout").all_text_contents())
    stderr = "".join(cell.locator(".stream .stderr").all_text_contents())
    assert "first" in stdout and "second" in stdout and "oops" not in stdout
    assert "oops" in stderr
    line = cell.locator(".result-line").inner_text()
    assert line.startswith("exit 0 · exited · ") and " ms" in line, line
    assert cell.locator(".prompt").inner_text() == "One-shot:"
    # A one-shot keeps no sandbox.
    assert "One-shot" in page.locator("#sandbox-label").inner_text()


def test_cells_keep_state_and_show_a_chart_with_pixels(page) -> None:  # type: ignore[no-untyped-def]
    wait_ready(page)
    choose_profile(page, "data_science")
    first = run_and_wait(page, "x = 21\nprint('set')", button=False)
    assert "set" in first.locator(".stream").inner_text()
    second = run_and_wait(page, "x * 2")
    assert second.locator(".out-prompt").inner_text() == "Out[2]:"
    assert second.locator("pre.text").inner_text() == "42"
    assert second.locator(".prompt").inner_text() == "In [2]:"
    chart = run_and_wait(
        page,
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots(figsize=(4, 3))\n"
        "ax.plot([0, 1, 2, 3], [0, 1, 4, 9], linewidth=4)\n"
        "ax.set_title('squares');\n",
    )
    img = chart.locator("img.rich")
    img.wait_for()
    info = img.evaluate(
        """async (img) => {
            await img.decode();
            const c = document.createElement('canvas');
            c.width = img.naturalWidth; c.height = img.naturalHeight;
            const g = c.getContext('2d');
            g.drawImage(img, 0, 0);
            const d = g.getImageData(0, 0, c.width, c.height).data;
            const colours = new Set();
            for (let i = 0; i < d.length; i += 4 * 37) colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
            return { w: img.naturalWidth, h: img.naturalHeight, colours: colours.size };
        }"""
    )
    assert info["w"] > 100 and info["h"] > 100, info
    assert info["colours"] > 2, info
    # An exception shows its traceback; the state lives on.
    err = run_and_wait(page, "def f():\n    return 1 / 0\nf()")
    assert "ZeroDivisionError" in err.locator("pre.traceback").inner_text()
    assert "exit 1" in err.locator(".result-line").inner_text()
    again = run_and_wait(page, "x + 1")
    assert again.locator("pre.text").inner_text() == "22"
    # A DataFrame is a table.
    df = run_and_wait(page, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    assert df.locator(".table-wrap table td").count() >= 4


def test_upload_drop_read_download_and_destroy(page) -> None:  # type: ignore[no-untyped-def]
    wait_ready(page)
    page.set_input_files("#upload", files=[{"name": "data.txt", "mimeType": "text/plain", "buffer": b"hello from a file\n"}])
    page.wait_for_selector('#files li[data-path="data.txt"]')
    # Drag and drop onto the drop zone.
    page.evaluate(
        """() => {
            const dt = new DataTransfer();
            dt.items.add(new File(['dropped,1\\n'], 'drop.csv', { type: 'text/csv' }));
            const zone = document.getElementById('dropzone');
            zone.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
            zone.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
        }"""
    )
    page.wait_for_selector('#files li[data-path="drop.csv"]')
    cell = run_and_wait(page, "print(open('data.txt').read().upper() + open('drop.csv').read())")
    out = cell.locator(".stream").inner_text()
    assert "HELLO FROM A FILE" in out and "dropped,1" in out, out
    # A file the code wrote, downloaded through the API.
    run_and_wait(page, "with open('made.txt', 'w') as f:\n    f.write('made here')")
    row = page.locator('#files li[data-path="made.txt"]')
    row.wait_for()
    with page.expect_download() as d:
        row.locator("button.download").click()
    with open(d.value.path(), "rb") as f:
        assert f.read() == b"made here"
    # The sandbox is listed as the open one; destroying it leaves none open.
    sandbox_id = page.locator("#sandbox-label code").inner_text()
    row = page.locator(f'#sandboxes li[data-id="{sandbox_id}"]')
    row.wait_for()
    assert "current" in (row.get_attribute("class") or "")
    assert "standard" in row.locator(".meta").inner_text()
    row.locator("button.destroy").click()
    page.wait_for_selector(f'#sandboxes li[data-id="{sandbox_id}"]', state="detached")
    assert "No sandbox yet" in page.locator("#sandbox-label").inner_text()


def test_pause_free_memory_and_resume_keep_the_variables(page) -> None:  # type: ignore[no-untyped-def]
    wait_ready(page)
    run_and_wait(page, "kept = 20\nnumbers = (i for i in range(3))\nprint('set')")
    sandbox_id = page.locator("#sandbox-label code").inner_text()
    row = page.locator(f'#sandboxes li[data-id="{sandbox_id}"]')
    row.locator("button.evict").wait_for()
    row.locator("button.evict").click()
    # Paused: the row offers Resume, and the status names what was saved and what was lost.
    row.locator("button.resume").wait_for()
    assert "paused" in row.locator(".meta").inner_text()
    status = page.locator("#status").inner_text()
    assert "kept" in status and "lost: numbers" in status, status
    row.locator("button.resume").click()
    row.locator("button.pause").wait_for()
    assert "loaded kept" in page.locator("#status").inner_text()
    again = run_and_wait(page, "kept * 2 + 2")
    assert again.locator("pre.text").inner_text() == "42"
    # A plain pause, then a run resumes it.
    row.locator("button.pause").click()
    row.locator("button.resume").wait_for()
    last = run_and_wait(page, "kept + 1")
    assert last.locator("pre.text").inner_text() == "21"
    row.locator("button.pause").wait_for()


def test_snapshot_fork_and_a_sandbox_from_a_snapshot_keep_files_and_variables(page) -> None:  # type: ignore[no-untyped-def]
    wait_ready(page)
    run_and_wait(page, "kept = 20\nopen('note.txt', 'w').write('hi')\nprint('set')")
    sandbox_id = page.locator("#sandbox-label code").inner_text()
    row = page.locator(f'#sandboxes li[data-id="{sandbox_id}"]')
    row.locator("button.snapshot").wait_for()
    # Snapshot: the name is asked for; the snapshot is listed with its context, and the
    # status names what was saved.
    page.once("dialog", lambda d: d.accept("pw-snap"))
    row.locator("button.snapshot").click()
    snap = page.locator('#snapshots li[data-name="pw-snap"]')
    snap.wait_for()
    assert "default" in snap.locator(".meta").inner_text()
    assert "default: saved kept" in page.locator("#status").inner_text()
    # Fork: two copies, named in the status and listed (beside the sandboxes of the session's
    # other tests: the daemon is shared, so the list is not counted).
    page.once("dialog", lambda d: d.accept("2"))
    with page.expect_response(lambda r: r.url.endswith(f"/v1/sandboxes/{sandbox_id}/fork")) as answer:
        row.locator("button.fork").click()
    assert answer.value.status == 201, answer.value.text()
    copies = [s["id"] for s in answer.value.json()["sandboxes"]]
    assert len(copies) == 2 and sandbox_id not in copies, copies
    # (Predicates as functions: a bare expression is evaluated as a string, which the page's
    # Content-Security-Policy refuses.)
    page.wait_for_function("() => document.querySelector('#status').innerText.startsWith('2 copies')")
    status = page.locator("#status").inner_text()
    assert all(c in status for c in copies) and "default: copied kept" in status, status
    for copy in copies:
        page.locator(f'#sandboxes li[data-id="{copy}"]').wait_for()
    # A sandbox from the snapshot opens with the file and the variable.
    snap.locator("button.from-snapshot").click()
    page.wait_for_function(
        "id => { const c = document.querySelector('#sandbox-label code'); return c && c.innerText !== id; }",
        arg=sandbox_id,
    )
    cell = run_and_wait(page, "print(kept + 1, open('note.txt').read())")
    stdout = "".join(cell.locator(".stream .stdout").all_text_contents())
    assert "21 hi" in stdout, stdout
    # Deleted: gone from the list.
    snap.locator("button.delete-snapshot").click()
    snap.wait_for(state="detached")


def test_a_policy_refusal_is_marked_in_the_editor(page) -> None:  # type: ignore[no-untyped-def]
    wait_ready(page)
    set_code(page, "x = 1\nimport os\nprint(x)\n")
    page.click("#run")
    page.wait_for_selector("#refusal:not([hidden])")
    assert "os" in page.locator("#refusal").inner_text()
    mark = page.locator(".CodeMirror .cm-violation")
    mark.wait_for()
    assert mark.inner_text() == "os"
    marked = page.evaluate(
        """() => { const cm = document.querySelector('.CodeMirror').CodeMirror;
            const m = cm.getAllMarks()[0].find();
            return { line: m.from.line, from: m.from.ch, to: m.to.ch,
                     bg: cm.lineInfo(1).bgClass, gutter: Boolean(cm.lineInfo(1).gutterMarkers) }; }"""
    )
    assert marked == {"line": 1, "from": 7, "to": 9, "bg": "violation-line", "gutter": True}, marked
    # The code was not run: no cell, the code still in the editor.
    assert page.locator("#cells .cell").count() == 0
    assert "import os" in page.evaluate("document.querySelector('.CodeMirror').CodeMirror.getValue()")
    # Editing clears the mark.
    page.keyboard.type("#")
    page.wait_for_selector(".CodeMirror .cm-violation", state="detached")


KEY = "playground-test-key"
OTHER_KEY = "playground-other-key"


@pytest.fixture(scope="module")
def keyed_daemon():  # type: ignore[no-untyped-def]
    digest = lambda k: hashlib.sha256(k.encode()).hexdigest()  # noqa: E731
    settings = (
        f'[[server.api_keys]]\nname = "alice"\nkey_sha256 = "{digest(KEY)}"\n'
        f'[[server.api_keys]]\nname = "bob"\nkey_sha256 = "{digest(OTHER_KEY)}"\n'
    )
    with Daemon(settings=settings) as d:
        yield d


def call(url: str, method: str, path: str, key: str, body: object = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_with_api_keys_the_page_asks_for_one_and_keeps_it_for_the_tab(browser, keyed_daemon) -> None:  # type: ignore[no-untyped-def]
    url = keyed_daemon.url
    # Another key's sandbox, which this tab must never see.
    theirs = call(url, "POST", "/v1/sandboxes", OTHER_KEY, {})["id"]
    page = open_page(browser, url)
    try:
        page.wait_for_selector("#key-overlay:not([hidden])")
        page.fill("#key-input", "wrong-key")
        page.press("#key-input", "Enter")
        # A function, not an expression: Playwright polls an expression with eval(), which the
        # page's Content-Security-Policy (script-src 'self') refuses whenever the first check is
        # false.
        page.wait_for_function("() => document.getElementById('key-message').textContent.includes('refused')")
        assert page.locator("#key-overlay").is_visible()
        page.fill("#key-input", KEY)
        page.click("#key-submit")
        wait_ready(page)
        assert page.locator("#key-overlay").is_hidden()
        cell = run_and_wait(page, "print('with a key')")
        assert "with a key" in cell.locator(".stream").inner_text()
        mine = page.locator("#sandbox-label code").inner_text()
        page.wait_for_selector(f'#sandboxes li[data-id="{mine}"]')
        assert page.locator(f'#sandboxes li[data-id="{theirs}"]').count() == 0
        assert page.evaluate("Object.values(sessionStorage)") == [KEY]
        assert page.evaluate("localStorage.length") == 0
        # The sandbox is the key's own.
        listed = [s["id"] for s in call(url, "GET", "/v1/sandboxes", KEY)["sandboxes"]]
        assert mine in listed and theirs not in listed
        # A reload in the same tab keeps the key; "Forget key" drops it.
        page.reload()
        wait_ready(page)
        assert page.locator("#key-overlay").is_hidden()
        page.click("#forget-key")
        page.wait_for_selector("#key-overlay:not([hidden])")
        assert page.evaluate("sessionStorage.length") == 0
    finally:
        page.context.close()
    # Another tab (a new session) is asked again.
    other = open_page(browser, url)
    try:
        other.wait_for_selector("#key-overlay:not([hidden])")
    finally:
        other.context.close()


def test_works_at_a_phone_width(browser, daemon) -> None:  # type: ignore[no-untyped-def]
    page = open_page(browser, daemon.url, width=390, height=844)
    try:
        wait_ready(page)
        fits = "document.documentElement.scrollWidth <= window.innerWidth"
        assert page.evaluate(fits)
        cell = run_and_wait(page, "print('w' * 300)\nprint(list(range(60)))\n[str(i) * 20 for i in range(5)]")
        assert "www" in cell.locator(".stream").inner_text()
        assert page.evaluate(fits), page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        # The side panels stack below the notebook.
        boxes = page.evaluate(
            "[document.getElementById('notebook').getBoundingClientRect().bottom,"
            " document.getElementById('files-panel').getBoundingClientRect().top]"
        )
        assert boxes[1] >= boxes[0], boxes
        assert page.locator("#run").is_visible()
        assert finished_cells(page) == 1
    finally:
        page.context.close()
