"""Driving the console in Debian's headless Chromium (Selenium with chromium-driver), for browser tests.

``chromium_driver`` starts the browser (the test fails, never skips, when the packages are missing);
``text`` reads an element again when a refresh replaced it; ``click`` waits for the page a submit leads
to; ``screenshot`` saves the whole page, also into ``TIDELOG_CONSOLE_SCREENSHOTS`` when set (how
docs/console/*.png are made).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from helpers.broker_process import wait_until
from helpers.console_process import ConsoleProcess


def chromium_driver() -> WebDriver:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.fail("chromium and chromium-driver are not installed: run `scripts/bootstrap test`")
    options = Options()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.implicitly_wait(0)
    return driver


def screenshot(driver: WebDriver, shots: Path, name: str) -> None:
    height = int(driver.execute_script("return Math.min(2400, document.documentElement.scrollHeight)"))
    metrics = {"width": 1280, "height": max(600, height), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)  # the whole page, not the window
    path = shots / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    if target := os.environ.get("TIDELOG_CONSOLE_SCREENSHOTS"):
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def _node_gone(exc: WebDriverException) -> bool:
    """The page replaced the node (a navigation or a refresh): chromedriver says "stale", or during a
    navigation "does not belong to the document"."""
    return isinstance(exc, StaleElementReferenceException) or "does not belong to the document" in str(exc)


def _stale(element: WebElement) -> bool:
    try:
        element.is_enabled()
    except WebDriverException as exc:
        if _node_gone(exc):
            return True
        raise
    return False


def text(driver: WebDriver, css: str) -> str:
    """The element's text; found again if the page replaced it in between."""
    for _ in range(20):
        try:
            return str(driver.find_element(By.CSS_SELECTOR, css).text)
        except WebDriverException as exc:
            if not _node_gone(exc):
                raise
            time.sleep(0.1)
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def fill(driver: WebDriver, css: str, value: str) -> None:
    element = driver.find_element(By.CSS_SELECTOR, css)
    element.clear()
    element.send_keys(value)


def click(driver: WebDriver, css: str) -> None:
    """Click a submit button and wait for the page it leads to (the old page's root goes stale)."""
    click_element(driver, driver.find_element(By.CSS_SELECTOR, css))


def click_element(driver: WebDriver, element: WebElement) -> None:
    """Click a link or button found before and wait for the page it leads to. Selenium's own
    staleness_of is not enough: during a navigation chromedriver may answer "does not belong to the
    document" instead of "stale", and staleness_of lets that through as an error."""
    from selenium.webdriver.support.wait import WebDriverWait
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 15).until(lambda _: _stale(old))
    WebDriverWait(driver, 15).until(lambda d: d.execute_script("return document.readyState") == "complete")


def open_details(driver: WebDriver, css: str) -> None:
    driver.execute_script("document.querySelector(arguments[0]).open = true", css)


def flash(driver: WebDriver) -> str:
    return text(driver, "#flash")


def login(driver: WebDriver, console: ConsoleProcess, user: str, password: str) -> None:
    driver.get(f"{console.url}/login")
    driver.delete_all_cookies()
    driver.get(f"{console.url}/login")
    fill(driver, "#user", user)
    fill(driver, "#password", password)
    click(driver, "#login")
    wait_until(lambda: user in text(driver, "#whoami"), 5, message="logged in")
