"""The index façade: :class:`Index` and what it returns."""
from .build import DEFAULT_PIPELINES
from .index import Index
from .params import validate_params, variant_key
from .reports import AddReport, DeleteReport, Hit

__all__ = ["Index", "Hit", "AddReport", "DeleteReport", "DEFAULT_PIPELINES", "validate_params", "variant_key"]
