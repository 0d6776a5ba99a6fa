"""The documentation site as a reader gets it: built as `make docs` builds it (strictly: a
warning or a broken link fails), served over HTTP on 127.0.0.1 and opened in headless
Chromium. Every page of the navigation loads with its title and no failed request, a
click on the navigation moves to another page, the search finds an API name, every
benchmark plot is drawn, and on a phone's width as on a laptop's no code line wraps and no
table hides a column. Skipped, saying why, without the docs' packages (the `docs`
extra) or without Chromium and chromedriver (Debian: apt-get install chromium
chromium-driver)."""

from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SITE_NAME = "fastload"

#: The public API: every name in these modules' ``__all__`` has its entry in the reference.
PUBLIC_MODULES = (
    "fastload",
    "fastload.loader",
    "fastload.collate",
    "fastload.datasets",
    "fastload.decode",
    "fastload.decode.opencv",
    "fastload.lmdb",
    "fastload.shards",
    "fastload.transforms",
    "fastload.gpu",
    "fastload.gpu.functional",
    "fastload.tools.diagnostics",
    "fastload.testing.s3server",
    "fastload.testing.shapes",
    "fastload.finishing",
)


def nav_pages() -> list[tuple[str | None, str]]:
    """(title given in the nav or None, Markdown path) of every page of mkdocs.yml's nav."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def walk(entries: list[Any]) -> Iterator[tuple[str | None, str]]:
        for entry in entries:
            if isinstance(entry, str):
                yield None, entry
            else:
                ((title, value),) = entry.items()
                if isinstance(value, list):
                    yield from walk(value)
                else:
                    yield title, value

    return list(walk(config["nav"]))


def url_path(page: str) -> str:
    """Where MkDocs puts a page (directory URLs): ``guides/lmdb.md`` -> ``guides/lmdb/``."""
    stem = page.removesuffix(".md")
    if stem == "index":
        return ""
    return stem.removesuffix("/index") + "/"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with ``mkdocs build --strict`` into a temporary folder."""
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs need the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    warnings = [line for line in completed.stderr.splitlines() if "WARNING" in line]
    assert completed.returncode == 0, "\n".join(warnings) or completed.stderr[-5000:]
    return out


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    """The site over HTTP on 127.0.0.1 (search loads its index with fetch, which a
    file:// page may not)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=site))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium driven by Debian's chromedriver (no driver is downloaded)."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="the browser check needs selenium: pip install -e '.[docs]'"
    )
    from selenium.webdriver.chrome.service import Service

    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    chromedriver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
    )
    if chromium is None or chromedriver is None:
        pytest.skip("the browser check needs Chromium: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait_for(browser: Any, condition: Any, timeout: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def failed_requests(browser: Any) -> list[str]:
    """The console's errors since the last call (a resource that failed to load, a script
    error)."""
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def test_the_site_builds_strictly_with_every_page_of_the_nav(site: Path):
    for _, page in nav_pages():
        assert (site / url_path(page) / "index.html").is_file(), page
    assert (site / "search" / "search_index.json").is_file()


def test_every_code_block_is_rendered_as_code(site: Path):
    """A fence the highlighter does not take (say, an option it does not know) leaves its
    backticks in the page and its code as prose."""
    for page in site.rglob("*.html"):
        prose = re.sub(r"<pre\b.*?</pre>", "", page.read_text(), flags=re.DOTALL)
        assert "```" not in prose, page.relative_to(site)


def test_the_reference_documents_every_public_name(site: Path):
    """Each name of a public module's ``__all__`` has an entry (an anchor named by a
    public path to the same object) in the reference, unless it is another library's
    object that fastload re-exports."""
    ids = set()
    for page in (site / "reference").glob("*/index.html"):
        ids |= set(re.findall(r'id="(fastload(?:\.\w+)+)"', page.read_text()))
    documented = {id(found) for path in ids if (found := resolve(path)) is not None}
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            origin = getattr(value, "__module__", module_name) or module_name
            if name == "__version__" or not origin.startswith("fastload"):
                continue
            if f"{module_name}.{name}" not in ids and id(value) not in documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"not in docs/reference/: {missing}"


def resolve(path: str) -> object | None:
    """The object a dotted path names, or None (a method, a parameter's anchor)."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            found = getattr(found, part, None)
            if found is None:
                return None
        return found
    return None


def test_every_nav_page_loads_with_its_title(server: str, browser: Any):
    from selenium.webdriver.common.by import By

    failed_requests(browser)
    for title, page in nav_pages():
        with urllib.request.urlopen(server + url_path(page)) as response:  # a 404 raises
            assert response.status == 200, page
        browser.get(server + url_path(page))
        heading = browser.find_element(By.CSS_SELECTOR, "article h1").text.strip()
        assert heading and "404" not in heading, page
        if page == "index.md":
            assert browser.title == SITE_NAME
        else:
            assert browser.title == f"{title or heading} - {SITE_NAME}", page
        assert not failed_requests(browser), page


def test_a_click_on_the_navigation_opens_the_page(server: str, browser: Any):
    from selenium.webdriver.common.by import By

    def click(xpath: str) -> None:
        link = wait_for(browser, lambda driver: driver.find_element(By.XPATH, xpath))
        wait_for(browser, lambda driver: link.is_displayed())
        link.click()

    browser.get(server)
    click("//a[contains(@class, 'md-tabs__link')][normalize-space()='Reference']")
    wait_for(browser, lambda driver: driver.current_url == server + "reference/loader/")
    click("//nav[contains(@class, 'md-nav--primary')]//a[normalize-space()='Datasets']")
    wait_for(browser, lambda driver: driver.current_url == server + "reference/datasets/")
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text.strip() == "Datasets"


def test_search_finds_an_api_name(server: str, browser: Any):
    from selenium.webdriver.common.by import By

    browser.get(server)
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    if not box.is_displayed():  # a narrow window: the search opens from its button
        browser.find_element(By.CSS_SELECTOR, "label[for='__search']").click()
    box.click()
    box.send_keys("DataPrefetcher")
    results = wait_for(
        browser, lambda driver: driver.find_elements(By.CSS_SELECTOR, ".md-search-result__item")
    )
    assert "DataPrefetcher" in results[0].text
    link = results[0].find_element(By.CSS_SELECTOR, "a")
    target = link.get_attribute("href")
    link.click()
    wait_for(browser, lambda driver: driver.current_url == target)
    assert "DataPrefetcher" in browser.find_element(By.TAG_NAME, "article").text


IMAGES = (
    "return [...document.querySelectorAll('article img')]"
    ".map(image => [image.src, image.complete, image.naturalWidth])"
)


def test_every_benchmark_plot_is_drawn(server: str, browser: Any):
    browser.get(server + "benchmarks/")
    plots = (ROOT / "docs" / "benchmarks.md").read_text().count(".png)")

    def loaded(driver: Any) -> list[list[Any]] | bool:
        # every plot of the page in the article (a page still being put in place by the
        # theme's scripts holds fewer), each loaded or failed
        images = driver.execute_script(IMAGES)
        return images if len(images) == plots and all(c for _, c, _ in images) else False

    try:
        images = wait_for(browser, loaded)
    except Exception:  # selenium's TimeoutException: say what was there instead
        images = browser.execute_script(IMAGES)
    assert len(images) == plots > 0
    not_drawn = [src for src, _, width in images if width == 0]
    assert not not_drawn, f"plots that did not load: {not_drawn}"


#: Each code block whose lines take more height than their count of line boxes: a line that
#: wrapped (its continuation starts at column 0, and Python's indentation is lost).
WRAPPED_CODE = """
document.querySelectorAll('article details').forEach(details => { details.open = true; });
const blocks = [...document.querySelectorAll('article pre > code')];
const wrapped = blocks.filter(code => {
  const style = getComputedStyle(code);
  const lineBox = parseFloat(style.lineHeight);
  const padding = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
  const lines = code.textContent.replace(/\\n$/, '').split('\\n').length;
  return !(lineBox > 0) || code.clientHeight - padding > lines * lineBox + 1;
}).map(code => code.textContent.split('\\n')[0]);
return [blocks.length, wrapped];
"""

#: Each table whose last column cannot be brought into view: with every box around it that
#: a reader can scroll (the table's own included) scrolled to its right end, the header
#: row's last cell must end inside each box that clips (one with overflow hidden clips
#: without a scrollbar) and inside the window.
HIDDEN_COLUMNS = """
document.querySelectorAll('article details').forEach(details => { details.open = true; });
const tables = [...document.querySelectorAll('article table')];
const hidden = tables.filter(table => {
  let right = document.documentElement.clientWidth;
  for (let box = table; box; box = box.parentElement) {
    const overflow = getComputedStyle(box).overflowX;
    if (overflow === 'auto' || overflow === 'scroll') box.scrollLeft = box.scrollWidth;
    if (overflow !== 'visible') right = Math.min(right, box.getBoundingClientRect().right);
  }
  const cells = table.rows[0].cells;
  return cells[cells.length - 1].getBoundingClientRect().right > right + 1;
}).map(table => table.rows[0].innerText.replace(/\\s+/g, ' '));
return [tables.length, hidden];
"""


@pytest.mark.parametrize("width", [390, 1280])
def test_no_code_line_wraps_and_no_table_hides_a_column(server: str, browser: Any, width: int):
    """On a phone (390 px) and a laptop (1280 px), a code line longer than its block
    scrolls inside it, as written, never wrapped; a table wider than the page scrolls,
    its last column within reach."""
    browser.set_window_size(width, 900)
    wrapped, hidden, blocks, tables = {}, {}, 0, 0
    try:
        for _, page in nav_pages():
            browser.get(server + url_path(page))
            count, found = browser.execute_script(WRAPPED_CODE)
            blocks += count
            if found:
                wrapped[page] = found
            count, found = browser.execute_script(HIDDEN_COLUMNS)
            tables += count
            if found:
                hidden[page] = found
    finally:
        browser.set_window_size(1400, 1000)
    assert blocks > 50 and tables > 20  # the pages' code blocks and tables were found at all
    assert wrapped == {}, f"code blocks whose lines wrap at {width} px: {wrapped}"
    assert hidden == {}, f"tables whose last column is out of reach at {width} px: {hidden}"


def test_each_page_is_photographed_at_1280_px(
    server: str, browser: Any, tmp_path_factory: pytest.TempPathFactory
):
    """Each page, whole, in a 1280 px window, for a person to review: in
    $FASTLOAD_SCREENSHOTS if set."""
    folder = Path(os.environ.get("FASTLOAD_SCREENSHOTS") or tmp_path_factory.mktemp("pages"))
    folder.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(1280, 900)
    try:
        for _, page in nav_pages():
            browser.get(server + url_path(page))
            height = browser.execute_script("return document.body.scrollHeight")
            browser.set_window_size(1280, min(max(height, 900), 16000))
            name = page.replace("/", "_").removesuffix(".md")
            browser.save_screenshot(str(folder / f"{name}.png"))
            browser.set_window_size(1280, 900)
    finally:
        browser.set_window_size(1400, 1000)
    assert len(list(folder.glob("*.png"))) == len(nav_pages())
