"""The rendered book in headless Chromium, offline: every page of every edition.

Each edition is built once (``MULTIHEAD_EDITION``), served on 127.0.0.1, and every page is
opened in Debian's chromium (driven by selenium and chromium-driver) with every other host
unresolvable, as for a reader with no network. After MathJax has typeset a page we count
unrendered TeX, MathJax errors, missing images, external scripts, stylesheets and other
fetches, and glued values; on the chapter-1 notebook page we click the head viewer. Four
screenshots go to ``_build/screenshots/`` (intro, a proof, the viewer; and MiniLM's viewer
with its MDS panel) for people to look at.

In the reader edition every page must fit the 1,280 px window: no display equation, code
block (a notebook's code cells and outputs included) or table wider than its box, and no
page that scrolls sideways. A failure names the page and the element's first characters.

Skips, saying what is missing, where chromium, chromedriver or selenium are not installed
(``.ci/run`` installs them).
"""

import functools
import http.server
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
EDITIONS = ("reader", "student", "instructor")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:  # pragma: no cover - depends on the machine
    webdriver = None


def _missing() -> str | None:
    if webdriver is None:
        return "selenium is not installed (pip install -r requirements.txt)"
    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} not found: install it with `apt-get install -y {pkg}`"
    return None


if _missing():
    pytest.skip(f"browser tests skipped: {_missing()}", allow_module_level=True)

# Waits for MathJax (if the page loads it) and returns "none", "ok" or the error.
WAIT_MATH = """
const done = arguments[arguments.length - 1];
const hasMathJax = [...document.scripts].some(s => /mathjax/i.test(s.src));
const t0 = Date.now();
(function poll() {
  if (!hasMathJax) { done("none"); return; }
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    MathJax.startup.promise.then(() => done("ok"), e => done("error: " + e));
  } else if (Date.now() - t0 > 60000) { done("timeout"); }
  else { setTimeout(poll, 50); }
})();
"""

COUNT = r"""
const skip = new Set(["SCRIPT", "STYLE", "PRE", "CODE", "TEXTAREA", "NOSCRIPT", "MJX-CONTAINER"]);
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const tex = [], glueText = [];
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  let p = n.parentElement, inCode = false;
  for (; p; p = p.parentElement) { if (skip.has(p.tagName)) { inCode = true; break; } }
  if (inCode) continue;
  const t = n.textContent;
  if (t.includes("\\(") || t.includes("\\[") || t.includes("$$") || t.includes("\\begin{")) {
    tex.push(t.trim().slice(0, 80));
  }
  if (/\{glue(:\w+)?\}/.test(t)) glueText.push(t.trim().slice(0, 80));
}
const local = u => {
  try {
    const h = new URL(u, location.href);
    return !/^https?:$/.test(h.protocol) || h.hostname === "127.0.0.1";
  } catch (e) { return true; }
};
const external = [];
document.querySelectorAll("script[src]").forEach(s => { if (!local(s.src)) external.push(s.src); });
document.querySelectorAll("link[href]").forEach(l => {
  if (/stylesheet|preload|icon|manifest/.test(l.rel) && !local(l.href)) external.push(l.href);
});
performance.getEntriesByType("resource").forEach(r => {
  if (!local(r.name)) external.push(r.name);
});
const unrendered = [...document.querySelectorAll(".math")]
  .filter(m => !m.querySelector("mjx-container")).map(m => m.textContent.slice(0, 60));
// An undefined macro (say \softmax without its _config.yml definition) is not an merror:
// MathJax shows it as red text. Read that from the typeset MathML.
const mathml = window.MathJax && MathJax.startup && MathJax.startup.document
  ? Array.from(MathJax.startup.document.math).map(m => MathJax.startup.toMML(m.root)) : [];
return {
  typeset: document.querySelectorAll("mjx-container").length,
  undefined_macros: mathml.filter(m => /mathcolor="red"/.test(m)).map(m => m.slice(0, 200)),
  unrendered_tex: tex.concat(unrendered),
  merror: document.querySelectorAll("mjx-merror, [data-mjx-error]").length,
  missing_images: [...document.images].filter(i => !i.complete || i.naturalWidth === 0)
    .map(i => i.getAttribute("src")),
  external: [...new Set(external)],
  pasted_text: [...document.querySelectorAll("span.pasted-text")].map(s => s.textContent.trim()),
  images: [...document.images].filter(i => i.naturalWidth > 0).length,
  glue_placeholders: glueText,
  solutions: document.querySelectorAll(".solution").length,
  dropdown_solutions: document.querySelectorAll(".solution.dropdown").length,
  solution_titles: (document.body.textContent.match(/Solution to/g) || []).length,
  instructor_blocks: [...document.querySelectorAll(".admonition-title")]
    .filter(t => t.textContent.includes("instructor edition")).length,
  title: document.title,
};
"""


# Every display equation, code block (cell inputs and outputs too) and table whose content is
# wider than its box, and the page itself if it scrolls sideways. Printed tables in a cell's
# output are measured like any output: outputs wrap (the book's CSS), so a printed table that
# is too wide for the column shows up here rather than as a hidden scrollbar.
TOO_WIDE = r"""
const wide = [];
const start = el => (el.textContent || "").replace(/\s+/g, " ").trim().slice(0, 50);
const check = (kind, el) => {
  if (el.scrollWidth > el.clientWidth + 1) {
    wide.push(`${kind} ${el.scrollWidth} px in ${el.clientWidth} px: "${start(el)}"`);
  }
};
document.querySelectorAll('mjx-container[display="true"]')
  .forEach(el => check("display math", el));
document.querySelectorAll("div.highlight pre, div.cell_output pre").forEach(el =>
  check(el.closest("div.cell_output") ? "cell output" : "code", el));
document.querySelectorAll("table")
  .forEach(el => check("table", el.closest(".pst-scrollable-table-container") || el));
const page = document.documentElement;
if (page.scrollWidth > page.clientWidth + 1) {
  wide.push(`the page scrolls sideways: ${page.scrollWidth} px in ${page.clientWidth} px`);
}
return wide;
"""


@functools.cache
def _edition_page(page: str) -> bool:
    """Whether the page's source holds an exercise, a solution or an ``{only}`` block."""
    source = ROOT / page.replace(".html", ".md")
    if not source.exists():
        return False
    text = source.read_text()
    return any(k in text for k in ("{exercise}", "{solution}", "{only}"))


def _glue_roles(page: str, edition: str) -> tuple[int, int]:
    """(text glue roles, figure glue roles) in the page's MyST source, if it is a book page;
    in the student edition, not counting those inside solutions, and outside the instructor
    edition, not counting those inside its ``{only} instructor`` blocks."""
    source = ROOT / Path(page).with_suffix(".md")
    if not source.exists():
        return 0, 0
    text = source.read_text()
    if edition == "student":
        text = re.sub(r"(?ms)^(:{3,})\{solution\}.*?^\1$", "", text)
    if edition != "instructor":
        text = re.sub(r"(?ms)^([`:]{3,})\{only\} instructor$.*?^\1$", "", text)
    return len(re.findall(r"\{glue:text\}", text)), len(re.findall(r"\{glue(:figure)?\}", text))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(editions):
    """Serve the editions' folder on 127.0.0.1; all three start building at once."""
    editions.start(*EDITIONS)
    folder = editions.folder
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield editions, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        # No network: every host but the local server is unresolvable.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(90)
    driver.set_page_load_timeout(90)
    yield driver
    driver.quit()


def _open(driver, url: str) -> dict:
    driver.get(url)
    state = driver.execute_async_script(WAIT_MATH)
    assert state in ("ok", "none"), f"{url}: MathJax {state}"
    return driver.execute_script(COUNT)


def _screenshot(driver, name: str, selector: str | None = None) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    if selector:
        target = driver.find_element(By.CSS_SELECTOR, selector)
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", target)
        driver.execute_script("window.scrollBy(0, -80);")  # below the sticky header
        time.sleep(0.3)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def _click_viewer(driver, url: str) -> str:
    """Pin a token and pick another head in the first viewer; the DOM must follow."""
    driver.get(url)
    viewer = driver.find_element(By.CSS_SELECTOR, "div.mhv[data-ready]")
    before = viewer.get_attribute("data-state"), viewer.text
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", viewer)
    viewer.find_elements(By.CSS_SELECTOR, "text[data-q]")[5].click()
    status = viewer.find_element(By.CSS_SELECTOR, ".mhv-status").text
    assert "attends most to" in status and "pinned" in status, status
    thumbs = viewer.find_elements(By.CSS_SELECTOR, ".mhv-grid canvas")
    thumbs[-1].click()
    after = viewer.get_attribute("data-state"), viewer.text
    assert after != before, "the head viewer did not respond to clicks"
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg line")) > 0
    return after[0]


def _check_viewers(driver, prefix: str) -> None:
    """Chapter 5's viewer draws the gold arcs; chapter 9's has the MDS panel, which selects."""
    driver.get(f"{prefix}/notebooks/05_head_roles.html")
    viewers = driver.find_elements(By.CSS_SELECTOR, "div.mhv[data-ready]")
    if viewers:
        assert viewers[0].find_elements(By.CSS_SELECTOR, "line.mhv-arc"), "no gold arcs (ch. 5)"
    else:  # the cell is there; its output comes with the notebook's next full-mode run
        print("\n[browser] notebook 5 has no committed viewer output yet")
    driver.get(f"{prefix}/notebooks/09_pretrained_heads.html")
    viewer = driver.find_element(By.CSS_SELECTOR, "div.mhv[data-ready]")
    before = viewer.get_attribute("data-state")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", viewer)
    points = viewer.find_elements(By.CSS_SELECTOR, "circle")
    assert len(points) == 72, len(points)  # 6 layers x 12 heads
    driver.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", points[40]
    )
    assert viewer.get_attribute("data-state") != before, "the MDS panel did not select a head"
    _screenshot(driver, "viewer_minilm", "div.mhv")


def _diagram_shots(driver, page: str) -> set[str]:
    """Check that every drawn diagram (an SVG figure) on the open page loaded; screenshot it."""
    names = set()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for img in driver.find_elements(By.CSS_SELECTOR, "figure img[src$='.svg']"):
        name = Path(img.get_attribute("src")).stem
        loaded = driver.execute_script("return arguments[0].naturalWidth", img)
        assert loaded > 0, f"{page}: diagram {name} did not load"
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", img)
        driver.execute_script("window.scrollBy(0, -80);")
        time.sleep(0.2)
        driver.save_screenshot(str(SHOTS / f"diagram-{page.split('/')[-1][:-5]}-{name}.png"))
        names.add(name)
    return names


@pytest.mark.parametrize("edition", EDITIONS)
def test_rendered_pages(edition, site, browser):
    start = time.perf_counter()
    editions, base = site
    html = editions.html(edition)
    prefix = f"{base}/{edition}/_build/html"
    pages = sorted(
        str(p.relative_to(html))
        for p in html.rglob("*.html")
        if p.parts[len(html.parts)] not in ("_static", "_sources", "_images")
        and p.name != "index.html"  # a redirect to book/intro.html
    )
    if edition != "reader":
        # The editions differ only in solutions, instructor blocks and the title: walk the
        # pages that have them (the reader edition walks every page for math, glue, images).
        pages = [p for p in pages if p == "book/intro.html" or _edition_page(p)]
    totals = dict.fromkeys(
        (
            "typeset",
            "unrendered_tex",
            "merror",
            "undefined_macros",
            "missing_images",
            "external",
            "glue",
            "too_wide",
        ),
        0,
    )
    failures = []
    solutions = dropdowns = instructor = solution_titles = 0
    diagrams = set()  # every drawn diagram (an SVG figure) loads; one screenshot each
    for page in pages:
        c = _open(browser, f"{prefix}/{page}")
        too_wide = browser.execute_script(TOO_WIDE) if edition == "reader" else []
        n_text, n_fig = _glue_roles(page, edition)
        glue_bad = []
        if len(c["pasted_text"]) != n_text:
            glue_bad.append(f"{len(c['pasted_text'])} pasted values for {n_text} glue roles")
        glue_bad += [f"empty or nan value {v!r}" for v in c["pasted_text"] if v in ("", "nan")]
        if c["images"] < n_fig:
            glue_bad.append(f"{c['images']} images shown for {n_fig} glued figures")
        glue_bad += c["glue_placeholders"]
        totals["typeset"] += c["typeset"]
        for key, found in (
            ("unrendered_tex", c["unrendered_tex"]),
            ("merror", [c["merror"]] if c["merror"] else []),
            ("undefined_macros", c["undefined_macros"]),
            ("missing_images", c["missing_images"]),
            ("external", c["external"]),
            ("glue", glue_bad),
        ):
            totals[key] += len(found)
            if found:
                failures.append(f"{page}: {key}: {found[:3]}")
        totals["too_wide"] += len(too_wide)
        failures += [f"{page}: too wide at 1,280 px: {w}" for w in too_wide]
        solutions += c["solutions"]
        dropdowns += c["dropdown_solutions"]
        instructor += c["instructor_blocks"]
        solution_titles += c["solution_titles"]
        if edition == "reader":
            assert "edition)" not in c["title"], page
        else:
            assert f"({edition} edition)" in c["title"], page
        if edition == "reader" and page.startswith("book/"):  # screenshots while it is open
            if page == "book/intro.html":
                _screenshot(browser, "intro")
            if page == "book/01_mha_from_scratch.html":
                _screenshot(browser, "proof", ".proof")
            diagrams |= _diagram_shots(browser, page)

    if edition == "reader":
        assert len(diagrams) == len(list((ROOT / "book" / "figures").glob("*.svg"))), diagrams
        state = _click_viewer(browser, f"{prefix}/notebooks/01_mha_from_scratch.html")
        _screenshot(browser, "viewer", "div.mhv")
        print(f"\n[browser] viewer state after clicks: {state}")
        _check_viewers(browser, prefix)
    seconds = time.perf_counter() - start
    print(
        f"\n[browser] {edition} edition: {len(pages)} pages, {totals['typeset']} math nodes "
        f"typeset, {totals['unrendered_tex']} unrendered TeX, {totals['merror']} MathJax "
        f"errors, {totals['undefined_macros']} undefined macros, {totals['missing_images']} "
        f"missing images, {totals['external']} external URLs, {totals['glue']} glue problems, "
        f"{totals['too_wide']} elements too wide; "
        f"solutions {solutions} "
        f"(dropdown {dropdowns}), instructor blocks {instructor}; {seconds:.0f} s"
    )
    assert not failures, "\n".join(failures)
    assert totals["typeset"] > 1000  # the proofs are there, and typeset
    if edition == "student":
        assert solutions == solution_titles == 0, "the student edition must have no solutions"
    else:
        assert solutions > 30
    if edition == "instructor":
        assert instructor >= 2 and dropdowns == 0
    else:
        assert instructor == 0, "instructor blocks must appear only in the instructor edition"
    if edition == "reader":
        assert dropdowns == solutions
