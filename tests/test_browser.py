"""The browser tier: every notebook opened in JupyterLab and run with Run All, as a student would, in
headless Chromium driven by selenium, under the CPU preset (the notebooks' default).

Each notebook's test asserts: no error output; every ipywidgets widget renders as a widget (no text
fallback such as ``VBox(children=...)``, no static stand-in where a notebook asks for a browser); moving
each control (slider, dropdown, buttons) changes what the widget shows; the attempt-pair view
(``show_attempt_pair``, also inside ``reflection_browser``) is left-aligned and never breaks a word
(computed style). Screenshots go to ``browser_screenshots/<notebook>/`` (git-ignored; ``ERL_LITE_SCREENSHOTS``
moves them) and every failure message names them.

Runs only when selected (``python -m pytest -q -m browser tests/test_browser.py``; ``.ci/run`` does so as
its own tier, with ``-n 2``: two pytest-xdist workers, each its own JupyterLab and Chromium) and when Chromium,
its driver, selenium and JupyterLab are installed; skipped otherwise, saying which is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SHOTS = pathlib.Path(os.environ.get("ERL_LITE_SCREENSHOTS", ROOT / "browser_screenshots"))
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# Generous waits (seconds) for a 2-core machine shared with other work: there the slowest notebook's
# Run All took 333 s (about 75 s of CPU), so 900 s is a hang, not a slow machine.
SERVER_START, PAGE_LOAD, KERNEL_START, RUN_ALL, WIDGET_UPDATE = 90, 90, 120, 900, 60
# After the kernel has answered a control's move, the page redraws within milliseconds; this allows more.
SETTLE = 5.0
# A widget shown as its repr: the front-end could not draw it (no widget manager, a model it lost).
TEXT_FALLBACK = re.compile(
    r"\b(VBox|HBox|Box|GridBox|Tab|Accordion|\w*Slider|Dropdown|ToggleButtons|"
    r"Button|Checkbox|RadioButtons|Select\w*|HTML|Output|Label)\("
)
WIDGET_CALLS = ("reflection_browser(", "memory_viewer(", "ipywidgets", "interact(")


def _missing_tools() -> list[str]:
    missing = [name for name in ("selenium", "jupyterlab") if _no_module(name)]
    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        missing.append("Chromium (apt-get install chromium)")
    if not shutil.which("chromedriver"):
        missing.append("chromedriver (apt-get install chromium-driver)")
    return missing


def _no_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


def _selected(config) -> bool:
    """Only a run that names the marker (``-m browser``) starts a browser: the tier takes minutes."""
    return "browser" in (config.getoption("markexpr") or "")


pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(request, tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 (a free port, a token) serving a copy of notebooks/."""
    if not _selected(request.config):
        pytest.skip("the browser tier runs on its own: python -m pytest -m browser tests/test_browser.py")
    missing = _missing_tools()
    if missing and os.environ.get("ERL_LITE_NOTEBOOKS_IN_BROWSER") == "1":  # the main suite left them to us
        pytest.fail(f"the notebooks were left to the browser tier, which lacks {', '.join(missing)}")
    if missing:
        pytest.skip(f"browser tier needs {', '.join(missing)}; pip install jupyterlab selenium")
    base = tmp_path_factory.mktemp("lab")
    work = base / "notebooks"
    shutil.copytree(ROOT / "notebooks", work, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    settings = base / "settings"
    _write_settings(settings)
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "CI", "JPY_SESSION_NAME")}
    env.update(
        OMP_NUM_THREADS="1",
        ERL_LITE_STATIC="0",  # widgets, not their static stand-ins: this front-end draws them
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTER_CONFIG_DIR=str(base / "config"),
    )
    log = open(base / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={work}",
            "--ServerApp.port_retries=0",
            "--allow-root",  # CI runs as root
            "--LabApp.expose_app_in_browser=True",
        ],  # window.jupyterapp: the notebook's model and kernel status
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(url, token, server, base / "jupyterlab.log")
        yield {"url": url, "token": token, "work": work, "log": base / "jupyterlab.log"}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _write_settings(folder: pathlib.Path) -> None:
    """JupyterLab's user settings: every cell in the page (no windowing), no news or update toasts."""
    plugins = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    }
    for name, values in plugins.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, token: str, server: subprocess.Popen, log: pathlib.Path) -> None:
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"JupyterLab exited ({server.returncode}); its log: {log}\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as reply:
                if reply.status == 200:
                    return
        time.sleep(0.5)
    raise RuntimeError(f"JupyterLab did not answer within {SERVER_START} s; its log: {log}")


@pytest.fixture(scope="module")
def browser(lab):
    """One headless Chromium with JupyterLab loaded, for every notebook in turn, as a student opens them
    one after another (a page loaded once saves ~10 s a notebook); ``reload`` marks it for a fresh load."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1800",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary:
        options.binary_location = binary
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(PAGE_LOAD)
    try:
        yield {"driver": driver, "reload": True}
    finally:
        driver.quit()


# JavaScript run in the page (through execute_script), on JupyterLab's own objects.
JS_RESTORED = """
if (window.jupyterapp && !window.erlRestored) {
    window.erlRestored = 'waiting';
    window.jupyterapp.restored.then(() => { window.jupyterapp.shell.collapseLeft(); window.erlRestored = 'yes'; });
}
return window.erlRestored === 'yes';"""
JS_OPEN = "window.jupyterapp.commands.execute('docmanager:open', {path: arguments[0]});"
JS_PANEL = "const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
JS_OPENED = (
    JS_PANEL
    + """
return !!(w && w.context && w.context.path === arguments[0] && w.context.isReady && w.content.model);"""
)
# Shut the notebook's kernel down and close it without asking to save (its outputs are not kept).
JS_CLOSE = (
    JS_PANEL
    + """
const done = arguments[arguments.length - 1];
if (!w || !w.sessionContext) { done(false); } else {
    w.sessionContext.shutdown().then(() => { w.dispose(); done(true); }, () => done(false));
}"""
)
JS_KERNEL_STATUS = (
    JS_PANEL
    + """
return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel
    ? w.sessionContext.session.kernel.status : null;"""
)
JS_NOTEBOOK_MODEL = JS_PANEL + "return w && w.content && w.content.model ? w.content.model.toJSON() : null;"
# The outputs drawn by the widget manager: a widget view (class jupyter-widgets) as the output's child.
JS_WIDGET_VIEWS = """
return [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')]
    .filter(o => [...o.children].some(c => c.classList.contains('jupyter-widgets')));"""
# Busy -> idle transitions of the kernel since the notebook opened (counted by a listener _open installs).
JS_COUNT_IDLE = (
    JS_PANEL
    + """
window.erlIdleCount = 0;
w.sessionContext.session.kernel.statusChanged.connect((_, s) => { if (s === 'idle') window.erlIdleCount++; });"""
)
JS_IDLE_COUNT = "return window.erlIdleCount;"
JS_RUNNING_CELLS = """
return [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
    .filter(p => p.textContent.includes('*')).length;"""
# The attempt-pair views: rendered HTML (an output's or an HTML widget's) with a "First attempt" and a
# "Second attempt" title, the innermost such (a pair printed as text is stdout, which JupyterLab wraps
# anywhere on purpose; a table that merely mentions both attempts has no such titles).
JS_PAIR_ROOTS = r"""
const titled = (el, re) => [...el.querySelectorAll('*')].some(x => re.test(x.textContent.trim()));
const has = el => titled(el, /^first attempt$/i) && titled(el, /^second attempt$/i);
const html = [...document.querySelectorAll(
    '.jp-OutputArea-output.jp-RenderedHTMLCommon, .jp-OutputArea-output .widget-html-content')].filter(has);
return html.filter(el => !html.some(other => other !== el && el.contains(other)));"""
# The computed style of every element in a pair view that holds a word of its own.
JS_TEXT_STYLES = r"""
const root = arguments[0];
return [root, ...root.querySelectorAll('*')]
    .filter(el => [...el.childNodes].some(n => n.nodeType === 3 && /[A-Za-z0-9]/.test(n.textContent)))
    .map(el => {
        const s = getComputedStyle(el);
        return {tag: el.tagName.toLowerCase(), text: el.textContent.trim().slice(0, 40), textAlign: s.textAlign,
                wordBreak: s.wordBreak, overflowWrap: s.overflowWrap, whiteSpace: s.whiteSpace};
    });"""


class Report:
    """One notebook's findings and screenshots; the failure message lists both."""

    def __init__(self, driver, name: str) -> None:
        self.driver, self.problems, self.shots = driver, [], []
        self.folder = SHOTS / pathlib.Path(name).stem
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)

    def shot(self, label: str, element=None) -> pathlib.Path:
        path = self.folder / f"{len(self.shots) + 1:02d}_{re.sub(r'[^A-Za-z0-9]+', '_', label).strip('_')}.png"
        with contextlib.suppress(Exception):  # a screenshot that fails must not hide the finding it documents
            if element is not None:
                self.driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", element)
                element.screenshot(str(path))
            else:
                self.driver.save_screenshot(str(path))
            self.shots.append(path)
        return path

    def fail(self, problem: str, element=None, shot: pathlib.Path | None = None) -> None:
        """Note a problem with a new screenshot (of ``element``, else the page), or the one named by ``shot``."""
        self.problems.append(f"{problem} (screenshot {shot or self.shot(problem[:50], element)})")

    def message(self, name: str) -> str:
        return (
            f"{name} in JupyterLab:\n  "
            + "\n  ".join(self.problems)
            + f"\nscreenshots ({self.folder}):\n  "
            + "\n  ".join(str(p) for p in self.shots)
        )


def _wait(driver, timeout: float, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.5).until(lambda d: condition(d), message=what)


def _open(page, lab, name: str) -> None:
    """Open the notebook as the file browser does; a page that does not show it within PAGE_LOAD is loaded
    afresh, once."""
    from selenium.common.exceptions import WebDriverException

    driver = page["driver"]
    for attempt in (1, 2):
        try:
            if page["reload"] or attempt == 2:
                driver.get(f"{lab['url']}/lab?reset&token={lab['token']}")
                _wait(
                    driver,
                    PAGE_LOAD,
                    lambda d: d.execute_script(JS_RESTORED),
                    f"JupyterLab did not load within {PAGE_LOAD} s",
                )
                page["reload"] = False
            driver.execute_script(JS_OPEN, name)
            _wait(
                driver,
                PAGE_LOAD,
                lambda d: d.execute_script(JS_OPENED, name),
                f"{name}: the notebook did not open within {PAGE_LOAD} s",
            )
            break
        except WebDriverException:  # a wait that timed out, a page that crashed
            page["reload"] = True
            if attempt == 2:
                raise
    _wait(
        driver,
        KERNEL_START,
        lambda d: d.execute_script(JS_KERNEL_STATUS) == "idle",
        f"{name}: the kernel did not start (idle) within {KERNEL_START} s",
    )
    driver.execute_script(JS_COUNT_IDLE)


def _run_all(driver, name: str) -> float:
    """Run ▸ Run All Cells from the menu bar; waits until no cell is queued or running and the kernel is idle."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    def started(d) -> bool:  # the page marks every queued cell [*] at once, before the kernel answers
        return d.execute_script(JS_RUNNING_CELLS) > 0 or _all_executed(d)

    start = time.monotonic()
    try:
        _wait(
            driver,
            30,
            lambda d: next(
                (m for m in d.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item") if m.text.strip() == "Run"), None
            ),
            "no Run menu",
        ).click()
        _wait(
            driver,
            30,
            lambda d: next(
                (
                    i
                    for i in d.find_elements(By.CSS_SELECTOR, ".lm-Menu-item")
                    if i.text.strip().startswith("Run All Cells")
                ),
                None,
            ),
            "no Run All Cells",
        ).click()
        _wait(driver, 20, started, "no cell started")
    except WebDriverException:  # a click the page missed: a menu still drawing, a toast over it
        driver.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells');")
        _wait(driver, 30, started, f"{name}: Run All started no cell")
    # The kernel goes idle between cells, so "done" is: idle and no cell marked [*], three times in a row
    # half a second apart.
    settled = []

    def done(d) -> bool:
        quiet = d.execute_script(JS_RUNNING_CELLS) == 0 and d.execute_script(JS_KERNEL_STATUS) == "idle"
        settled.append(quiet)
        return len(settled) >= 3 and all(settled[-3:])

    _wait(driver, RUN_ALL, done, f"{name}: Run All did not finish within {RUN_ALL} s")
    return time.monotonic() - start


def _all_executed(driver) -> bool:
    model = driver.execute_script(JS_NOTEBOOK_MODEL)
    return all(c.get("execution_count") for c in model["cells"] if c["cell_type"] == "code")


def _check_outputs(model: dict, report: Report, driver) -> None:
    """Error outputs, and a traceback printed to stderr, in the notebook's model after Run All."""
    from selenium.webdriver.common.by import By

    cells = driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")
    for i, cell in enumerate(model["cells"]):
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", "")) if out["output_type"] == "stream" else ""
            if out["output_type"] == "error" or "Traceback (most recent call last)" in text:
                what = f"{out.get('ename', 'stderr')}: {out.get('evalue', text[-200:])}"
                report.fail(f"cell {i} failed: {what}", cells[i] if i < len(cells) else None)
    never = [i for i, c in enumerate(model["cells"]) if c["cell_type"] == "code" and not c.get("execution_count")]
    if never:
        report.fail(f"cells {never} never ran (Run All stopped before them)")


def _check_widgets_render(model: dict, source: str, report: Report, driver) -> list:
    """Every widget output drawn as a widget; returns the outputs' DOM nodes."""
    from selenium.webdriver.common.by import By

    expected = sum(WIDGET_MIME in out.get("data", {}) for c in model["cells"] for out in c.get("outputs", []))
    if any(call in source for call in WIDGET_CALLS) and not expected:
        report.fail("the notebook builds widgets but shows none (a static stand-in was rendered instead)")
    for out in driver.find_elements(By.CSS_SELECTOR, '.jp-OutputArea-output[data-mime-type="text/plain"]'):
        text = out.text
        if "Error displaying widget" in text or TEXT_FALLBACK.match(text.strip()):
            report.fail(f"a widget rendered as text: {text.strip()[:80]!r}", out)
    from selenium.common.exceptions import TimeoutException

    def drawn(d):
        views = d.execute_script(JS_WIDGET_VIEWS)
        return (views,) if len(views) >= expected else None

    try:
        return _wait(driver, WIDGET_UPDATE, drawn, "widgets not drawn")[0]
    except TimeoutException:
        views = driver.execute_script(JS_WIDGET_VIEWS)
        report.fail(f"{expected} widget outputs, {len(views)} drawn as widgets within {WIDGET_UPDATE} s")
        return views


# What a widget shows, apart from its controls: HTML and output areas, images, and the options other
# controls offer (a filter's output is the list it leaves to pick from).
JS_SHOWN = """
const [view, control] = arguments;
const parts = [...view.querySelectorAll('.widget-html-content, .widget-output, img, select')]
    .filter(el => !control.contains(el))
    .map(el => el.tagName === 'SELECT' ? [...el.options].map(o => o.text).join('|')
                                       : el.tagName === 'IMG' ? el.src : el.innerHTML);
return parts.join('\\n--\\n');"""


def _moves(driver, control):
    """The ways a student moves ``control``, each a callable; none for a display-only widget."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    classes = control.get_attribute("class").split()
    if "widget-dropdown" in classes or "widget-select" in classes:
        select = Select(control.find_element(By.CSS_SELECTOR, "select"))
        current = select.first_selected_option.text if select.all_selected_options else None
        return [lambda i=i: select.select_by_index(i) for i, o in enumerate(select.options) if o.text != current]
    if "widget-toggle-buttons" in classes or "widget-radio" in classes:
        inputs = control.find_elements(By.CSS_SELECTOR, "button, input[type=radio]")
        return [
            b.click
            for b in inputs
            if "mod-active" not in (b.get_attribute("class") or "") and not b.get_attribute("checked")
        ]
    if "widget-slider" in classes:
        handle = control.find_element(By.CSS_SELECTOR, ".noUi-handle")
        low, now, top = (float(handle.get_attribute(f"aria-value{a}") or 0) for a in ("min", "now", "max"))
        if low == top:
            return []
        key = Keys.ARROW_RIGHT if now < top else Keys.ARROW_LEFT  # one notch, away from the end it sits at
        return [lambda: (handle.click(), handle.send_keys(key))]
    if "widget-button" in classes or "widget-checkbox" in classes:
        target = control if control.tag_name == "button" else control.find_element(By.CSS_SELECTOR, "input")
        return [target.click]
    return []


CONTROLS = (
    ".widget-dropdown, .widget-select, .widget-toggle-buttons, .widget-radio, .widget-slider, "
    "button.widget-button, .widget-checkbox"
)


def _check_controls(views: list, report: Report, driver) -> int:
    """Each control's moves, tried in turn until one changes what its widget shows; returns the count."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By

    count = 0
    for v, view in enumerate(views):
        report.shot(f"widget {v} as drawn", view)
        # Found again before each one: a move may redraw the widget's other parts.
        for k in range(len(view.find_elements(By.CSS_SELECTOR, CONTROLS))):
            control = view.find_elements(By.CSS_SELECTOR, CONTROLS)[k]
            if control.find_elements(By.CSS_SELECTOR, CONTROLS):
                continue  # a box around controls: its own controls are checked
            label = control.text.strip().split("\n")[0][:30] or control.get_attribute("class").split()[0]
            moves = _moves(driver, control)
            if not moves:
                report.fail(f"widget {v}: control {label!r} offers nothing to move to", view)
                continue
            count += 1
            for move in moves:
                before = driver.execute_script(JS_SHOWN, view, control)
                idle = driver.execute_script(JS_IDLE_COUNT)
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", control)
                move()
                answered = []  # when the kernel went idle after the move: it has sent the widget's new state

                def changed(d) -> bool:
                    if d.execute_script(JS_SHOWN, view, control) != before:
                        return True
                    if (
                        not answered
                        and d.execute_script(JS_IDLE_COUNT) > idle
                        and d.execute_script(JS_KERNEL_STATUS) == "idle"
                    ):
                        answered.append(time.monotonic())
                    if answered and time.monotonic() - answered[0] > SETTLE:
                        raise TimeoutException("the kernel answered; nothing shown changed")
                    return False

                try:
                    _wait(driver, WIDGET_UPDATE, changed, "unchanged")
                    report.shot(f"widget {v} after moving {label}", view)
                    break
                except TimeoutException:
                    continue
            else:
                report.fail(
                    f"widget {v}: moving control {label!r} ({len(moves)} ways tried) changed nothing it shows", view
                )
    return count


def _check_pair_views(source: str, report: Report, driver) -> int:
    """The attempt-pair views: left-aligned, words never broken (computed style); returns the count."""

    roots = driver.execute_script(JS_PAIR_ROOTS)
    if ("show_attempt_pair(" in source or "reflection_browser(" in source) and not roots:
        report.fail("the notebook shows an attempt pair, but none was found on the page")
    for i, root in enumerate(roots):
        shot = report.shot(f"attempt pair {i}", root)
        bad = [
            s
            for s in driver.execute_script(JS_TEXT_STYLES, root)
            if s["textAlign"] not in ("left", "start", "-webkit-left")
            or s["wordBreak"] in ("break-all", "break-word")
            or s["overflowWrap"] == "anywhere"
        ]
        for s in bad[:5]:
            report.fail(
                f"attempt pair {i}: <{s['tag']}> {s['text']!r} has text-align {s['textAlign']}, "
                f"word-break {s['wordBreak']}, overflow-wrap {s['overflowWrap']}, white-space "
                f"{s['whiteSpace']} (left-aligned, breaking only at spaces, expected)",
                shot=shot,
            )
        if len(bad) > 5:
            report.fail(f"attempt pair {i}: {len(bad) - 5} more such elements", shot=shot)
    return len(roots)


def _close(page, lab) -> None:
    """Close the notebook and shut its kernel down; where the page cannot, the REST API does, and the next
    notebook gets a freshly loaded page."""
    with contextlib.suppress(Exception):
        if page["driver"].execute_async_script(JS_CLOSE):
            return
    page["reload"] = True
    _shut_down_kernels(lab)


def _shut_down_kernels(lab) -> None:
    """Free the kernels' memory before the next notebook (the REST API; the page may be gone)."""
    headers = {"Authorization": f"token {lab['token']}"}
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(urllib.request.Request(f"{lab['url']}/api/kernels", headers=headers)) as r:
            kernels = json.load(r)
        for k in kernels:
            req = urllib.request.Request(f"{lab['url']}/api/kernels/{k['id']}", headers=headers, method="DELETE")
            urllib.request.urlopen(req, timeout=30).close()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab(path, lab, browser):
    name = path.name
    source = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    driver = browser["driver"]
    report = Report(driver, name)
    start = time.monotonic()
    try:
        _open(browser, lab, name)
        took = _run_all(driver, name)
        report.shot("after Run All")
        model = driver.execute_script(JS_NOTEBOOK_MODEL)
        _check_outputs(model, report, driver)
        views = _check_widgets_render(model, source, report, driver)
        controls = _check_controls(views, report, driver)
        pairs = _check_pair_views(source, report, driver)
    except Exception as exc:  # a wait that timed out: the page as it was, then the error
        browser["reload"] = True
        report.fail(f"{type(exc).__name__}: {getattr(exc, 'msg', None) or str(exc).strip()[:300]}")
        pytest.fail(report.message(name) + f"\nJupyterLab's log: {lab['log']}", pytrace=False)
    finally:
        _close(browser, lab)
    print(
        f"{name}: Run All {took:.0f} s, {len(views)} widgets, {controls} controls moved, {pairs} attempt "
        f"pairs; {time.monotonic() - start:.0f} s in all"
    )
    assert not report.problems, report.message(name)
