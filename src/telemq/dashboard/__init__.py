"""The web dashboard's files: its own HTML, CSS and JavaScript, served by the broker at `/`
(broker/dashboard.py), and the browser libraries it uses, installed from npm by
`npm ci` in this directory (package.json and package-lock.json; scripts/bootstrap.sh runs
it) and never copied into the repository. The page needs no build step: the libraries'
own browser bundles are served as they come.
"""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).resolve().parent
# URL name under /dashboard/vendor/ -> the file in node_modules that npm installed.
VENDOR = {
    "chart.umd.js": "chart.js/dist/chart.umd.js",
    "mqtt.min.js": "mqtt/dist/mqtt.min.js",
}
# The dashboard's own files under /dashboard/.
OWN_FILES = ("index.html", "app.js", "style.css")
