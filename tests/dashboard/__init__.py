"""The web dashboard in headless Chromium (browser.py drives it through browser.mjs)."""
