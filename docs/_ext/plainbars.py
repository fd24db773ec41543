"""Sphinx extension: ``|x|`` in a docstring is the size or absolute value of x, not a reST substitution.

The docstrings write set sizes and absolute values as ``|g|``, ``|G_u|``, ``|t(u) − t(v)|``;
reStructuredText reads those as substitution references and reports each undefined one as an
error. This transform runs before docutils resolves substitutions and turns every reference to a
name the document does not define back into the text it was written as. Defined substitutions
(``|version|``) work as usual.
"""
from __future__ import annotations

from docutils import nodes
from docutils.transforms import Transform


class PlainBars(Transform):
    """Undefined ``|name|`` substitution references become the literal text ``|name|``."""

    default_priority = 210        # docutils' Substitutions transform runs at 220

    def apply(self) -> None:
        defined = self.document.substitution_defs
        for ref in list(self.document.findall(nodes.substitution_reference)):
            if ref["refname"] not in defined and nodes.whitespace_normalize_name(ref["refname"]) not in defined:
                ref.replace_self(nodes.Text(f"|{ref.astext()}|"))


def setup(app):
    app.add_transform(PlainBars)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
