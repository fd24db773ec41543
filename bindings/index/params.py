"""An index's pipeline parameters (:mod:`hopgraph.engine.index.params`: checked, stored) and the
label of a pipeline variant."""
from __future__ import annotations

from typing import Any, Mapping

from ..engine.index.params import fit_params_only, validate_params

__all__ = ["fit_params_only", "validate_params", "variant_key"]


def variant_key(name: str, overrides: Mapping[str, Any]) -> str:
    """``name[key=value,...]`` with keys sorted: the label of a pipeline variant."""
    return f"{name}[{','.join(f'{k}={overrides[k]!r}' for k in sorted(overrides))}]"
