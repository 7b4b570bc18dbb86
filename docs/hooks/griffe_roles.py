"""Griffe extension for the API reference: Sphinx cross-reference roles in docstrings become code.

The code's docstrings name other objects the Sphinx way (``:class:`~fed.encoders.base.Encoder```,
``:meth:`RunSpec.from_mapping```). The reference pages are rendered by mkdocstrings, which does not
read these roles: left alone they show as ":class:" before the name. This extension rewrites each
role into the code span a reader expects, before the docstring is parsed: ``~a.b.C`` shows as ``C``
(Sphinx's short form), ``Title <a.b.C>`` as ``Title``, anything else as written. mkdocs.yml loads
it for the python handler (``extensions``); tests/test_docs_pages.py checks the built pages.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|ref|term):`(?P<body>[^`]+)`")
"""A Sphinx role with its target, such as :class:`~a.b.C` (the ``py:`` domain prefix optional)."""


def plain(docstring: str) -> str:
    """``docstring`` with each Sphinx role replaced by a Markdown code span of the name a reader sees."""

    def shown(match: re.Match[str]) -> str:
        body = match["body"].strip()
        titled = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", body)
        if titled:
            return f"`{titled['title']}`"
        if body.startswith("~"):
            return f"`{body[1:].rsplit('.', 1)[-1]}`"
        return f"`{body.lstrip('!')}`"

    return ROLE.sub(shown, docstring)


class SphinxRoles(griffe.Extension):
    """Rewrites every loaded object's docstring (modules, classes, functions, attributes) with :func:`plain`."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002 - griffe's hook signature
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = plain(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:  # noqa: ARG002 - griffe's hook signature
        """A package itself (``ldpfed``), which griffe hands to this hook rather than to ``on_object``."""
        self.on_object(obj=pkg)
