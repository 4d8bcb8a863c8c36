"""Regenerates the README's screenshots with headless Chromium (Debian's ``chromium``, driven by playwright).

    .venv/bin/tflab tour --html /tmp/tour.html
    .venv/bin/python docs/screenshots.py tour /tmp/tour.html      # docs/tour_report.png
    .venv/bin/python docs/screenshots.py notebook                 # docs/notebook_cell.png

``notebook`` builds a two-cell notebook (a TraceReport and a RetraceProbe as
the cells' last expressions), executes it with nbclient on an ipykernel
kernel, converts it to HTML with nbconvert (``pip install nbconvert``) and
shoots the rendered cells.
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

NOTEBOOK_CELLS = [
    "import os; os.environ[\"TF_CPP_MIN_LOG_LEVEL\"] = \"3\"\n"
    "import tensorflow as tf, tflab\n"
    "v = tf.Variable(tf.ones([3, 4]))\n"
    "def layer(x, training):\n"
    "    y = tf.nn.relu(x @ v)\n"
    "    if training:\n"
    "        y = tf.nn.dropout(y, 0.1)\n"
    "    return tf.reduce_mean(y, axis=-1)\n"
    "tflab.trace_and_inspect(layer, tf.TensorSpec([None, 3]), True)",
    "probe = tflab.RetraceProbe(layer)\n"
    "for n, training in [(4, True), (4, True), (2, True), (2, False)]:\n"
    "    probe(tf.ones([n, 3]), training)\n"
    "probe",
]


def shoot(html_path: str, png: str, width: int = 1200, height: int = 1100, scroll: str | None = None) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto("file://" + os.path.abspath(html_path))
        if scroll:
            page.locator(scroll).first.scroll_into_view_if_needed()
        page.screenshot(path=png)
        browser.close()


def notebook(png: str) -> None:
    import nbclient
    import nbformat
    from nbconvert import HTMLExporter
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell(c) for c in NOTEBOOK_CELLS])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    for cell in nb.cells:  # TF's C++ start-up lines on stderr are not what the picture shows
        cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
    body, _ = HTMLExporter().from_notebook_node(nb)
    out = os.path.join(tempfile.mkdtemp(), "nb.html")
    with open(out, "w") as f:
        f.write(body)
    shoot(out, png, width=1100, height=1300)


if __name__ == "__main__":
    if sys.argv[1] == "tour":
        shoot(sys.argv[2], os.path.join(HERE, "tour_report.png"), height=1400)
    else:
        notebook(os.path.join(HERE, "notebook_cell.png"))
