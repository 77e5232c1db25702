"""The documentation site builds strictly and reads in a real browser.

`mkdocs build --strict` (mkdocs.yml) fails on a broken link or anchor, a page missing from the navigation, an
included file that is not there, or a docstring that does not render. The built site is then served on
127.0.0.1 and opened in Debian's headless Chromium (scripts/install_browser.sh) through its WebDriver: the home
page, a tutorial and the configuration reference render with their navigation and code blocks, and the site's
search finds a config key.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Chromium on a machine without a display, a GPU or a network, with a profile of its own.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
)
SEARCHED_KEY = "gae_lambda"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in (
        "index.html",
        "getting-started.html",
        "architecture.html",
        "tutorials/metaworld.html",
        "tutorials/maniskill.html",
        "tutorials/libero.html",
        "tutorials/robotwin.html",
        "concepts/placement.html",
        "concepts/pipelining.html",
        "concepts/offload.html",
        "concepts/weight-sync.html",
        "concepts/checkpoints.html",
        "migration.html",
        "benchmarks.html",
        "reference/configuration.html",
        "reference/commands.html",
        "reference/api/vla-algos.html",
        "reference/api/vla-envs.html",
        "reference/api/vla-models.html",
        "reference/api/vla-infra.html",
    ):
        assert (site / page).is_file(), page
    # included files arrive whole: the benchmarks page is RESULTS.md, the API pages hold the packages' docstrings
    results = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    first_section = next(
        line for line in results.splitlines() if line.startswith("## ") and "Contents" not in line
    )
    benchmarks = (site / "benchmarks.html").read_text(encoding="utf-8")
    assert first_section.removeprefix("## ").split(" (")[0] in benchmarks
    algos = (site / "reference/api/vla-algos.html").read_text(encoding="utf-8")
    assert "compute_grpo_advantages" in algos


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (requirements-dev.txt)"
    )
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(
            "headless Chromium is not installed: run bash scripts/install_browser.sh "
            "(apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    service = webdriver.ChromeService(executable_path=driver, log_output=os.devnull)
    browser = webdriver.Chrome(options=options, service=service)
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


def _open(browser, url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 20).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "article h1"))
    )


def _navigation_titles(browser) -> list[str]:
    from selenium.webdriver.common.by import By

    entries = browser.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary .md-nav__link")
    return [" ".join(entry.get_attribute("textContent").split()) for entry in entries]


@pytest.mark.parametrize(
    ("page", "title", "code"),
    [
        ("index.html", "vla-rl", "bash scripts/quickstart.sh"),
        ("tutorials/metaworld.html", "MetaWorld", "vla-sft metaworld_ppo_tiny_cpu"),
        ("reference/configuration.html", "Configuration reference", "algorithm.gae_lambda"),
    ],
)
def test_pages_render_with_navigation_and_code(
    browser, served: str, page: str, title: str, code: str
) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, f"{served}/{page}")
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text.strip() == title
    titles = _navigation_titles(browser)
    for entry in ("Getting started", "Tutorials", "MetaWorld", "Concepts", "Configuration", "Benchmarks"):
        assert entry in titles, titles
    blocks = [b.get_attribute("textContent") for b in browser.find_elements(By.CSS_SELECTOR, "article code")]
    assert any(code in b for b in blocks), (page, code)
    # the theme's stylesheet applied: code blocks shaded and laid out, the navigation a sidebar
    if page != "reference/configuration.html":
        block = browser.find_element(By.CSS_SELECTOR, "article pre > code")
        assert block.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "transparent")
        assert block.size["height"] > 0
    sidebar = browser.find_element(By.CSS_SELECTOR, "div.md-sidebar--primary")
    assert sidebar.size["width"] > 100


def test_search_finds_a_config_key(browser, served: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, f"{served}/index.html")
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.click()
    box.send_keys(SEARCHED_KEY)

    def hits(driver) -> list[str]:
        # read in one script: the result list re-renders as each typed character's results arrive, so element
        # handles found by one call can be gone by the next
        return driver.execute_script(
            "return Array.from(document.querySelectorAll('.md-search-result__item a'), a => a.href);"
        )

    found = WebDriverWait(browser, 30).until(lambda d: [h for h in hits(d) if "reference/configuration" in h])
    assert found, hits(browser)
