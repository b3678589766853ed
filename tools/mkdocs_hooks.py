"""MkDocs hooks for the documentation site (mkdocs.yml names this file).

The pages escape a pipe inside a table cell's code span as `\\|`, which GitHub
renders as `|`; Python-Markdown keeps the backslash. This hook removes it, in
table cells only, so both renderings show the same text.
"""

import re

_CELL = re.compile(r"<t[dh]\b[^>]*>.*?</t[dh]>", re.DOTALL)


def on_page_content(html, **kwargs):
    return _CELL.sub(lambda m: m.group(0).replace("\\|", "|"), html)
