"""MkDocs hook: links from a docs page to files of the repository outside docs/ (reports, code).

On GitHub such a link opens the file; the site holds only docs/, so there it becomes the file's
path in the repository, shown as code. A link to a file that does not exist is a warning, so
``mkdocs build --strict`` fails on it as on any other broken link.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

LOG = logging.getLogger("mkdocs.hooks.repo_links")
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite each link that leaves docs/ into the repository path it names; warn on a missing target."""
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    here = Path(page.file.abs_src_path).parent

    def rewrite(match: re.Match[str]) -> str:
        target = match["target"]
        if "://" in target or target.startswith(("/", "mailto:")):
            return match[0]
        path = (here / target).resolve()
        if path == docs or docs in path.parents:
            return match[0]
        if repo not in path.parents:
            LOG.warning("%s links to %s, outside the repository", page.file.src_uri, target)
            return match[0]
        if not path.exists():
            LOG.warning("%s links to %s, which does not exist", page.file.src_uri, path.relative_to(repo))
            return match[0]
        return f"{match['text']} (`{path.relative_to(repo).as_posix()}`)"

    return LINK.sub(rewrite, markdown)
