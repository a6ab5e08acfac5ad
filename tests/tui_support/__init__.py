"""The dashboard's test fixtures: a fixed sample state (`sample`), the app on it and the keys
that reach each view (`pilot`), and the web dashboard seen from a browser (`web`).

They live with the tests, not in the wheel; scripts/screenshots.py and scripts/web_screenshot.py
import them from a clone.
"""
