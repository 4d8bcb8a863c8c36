"""Rewrites the two generated blocks of docs/architecture.md: the module/test table and the import map.

Run ``python tests/_regen_maps.py`` after adding, moving or re-importing a
module, or adding a test file; tests/house/test_architecture.py and
tests/house/test_test_map.py check both blocks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(os.path.dirname(HERE), "docs", "architecture.md")


def _output(script: str) -> str:
    return subprocess.run([sys.executable, os.path.join(HERE, script)], check=True, capture_output=True,
                          text=True).stdout.rstrip("\n")


def main() -> None:
    text = open(DOC, encoding="utf-8").read()
    table = _output("_test_map.py")
    imports = _output("_import_graph.py")
    text = re.sub(r"(<!-- test-map:begin -->\n).*?(\n<!-- test-map:end -->)",
                  lambda m: m.group(1) + table + m.group(2), text, flags=re.S)
    text = re.sub(r"(<!-- import-map:begin -->\n```text\n).*?(```\n<!-- import-map:end -->)",
                  lambda m: m.group(1) + imports + "\n" + m.group(2), text, flags=re.S)
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
