"""A plan's or a route's discovery metadata: the x402 ``bazaar`` extension's input (docs/bazaar.md).

    key             what it declares                          where it goes in the 402
    --------------  ----------------------------------------  ------------------------------------
    description     what the resource does                    ``resource.description``
    mime_type       the media type of the answer              ``resource.mimeType``
    body_type       json, form-data or text: a body call;     ``extensions.bazaar``: a body input
                    absent: a query call (GET, HEAD, DELETE)  or a query input
    method          the call's HTTP method (default POST for  ``extensions.bazaar.info.input``
                    a body call, GET for a query call)
    input           an example input (body or query params)   ``extensions.bazaar.info.input``
    input_schema    its JSON Schema, inline or { file = .. }  ``extensions.bazaar.schema``
    output          an example answer                         ``extensions.bazaar.info.output``
    output_schema   its JSON Schema, inline or { file = .. }  ``extensions.bazaar.schema``

A schema file is read once, when the config is loaded, relative to the config
file, and must hold a JSON object; a schema is checked against the JSON Schema
meta-schema's basic shape (an object) here and by facilitators downstream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, ValidationInfo, model_validator

from x402srv.config.fields import StrictModel
from x402srv.config.secrets import validation_context

__all__ = ["DiscoveryConfig", "JsonSchema"]

#: A schema file larger than this is refused: it travels in every 402 header.
MAX_SCHEMA_BYTES = 16 * 1024


def _schema(value: Any, info: ValidationInfo) -> dict[str, Any]:
    """An inline table, or ``{ file = "path" }`` read from beside the config file."""
    if isinstance(value, dict) and set(value) == {"file"} and isinstance(value["file"], str):
        base_dir, _ = validation_context(info)
        path = Path(value["file"])
        path = path if path.is_absolute() else base_dir / path
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read schema file {path}: {exc.strerror}") from None
        if len(raw) > MAX_SCHEMA_BYTES:
            raise ValueError(f"schema file {path} is larger than {MAX_SCHEMA_BYTES} bytes")
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"schema file {path} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError('must be a JSON Schema object (a table) or { file = "path" }')
    return value


JsonSchema = Annotated[dict[str, Any], PlainValidator(_schema)]


class DiscoveryConfig(StrictModel):
    """``[plans.discovery]`` or ``[routes.discovery]``: see the module docstring."""

    description: str | None = Field(default=None, min_length=1, max_length=1000)
    mime_type: str | None = Field(default=None, pattern=r"^[\w.+-]+/[\w.+-]+$", max_length=100)
    body_type: Literal["json", "form-data", "text"] | None = None
    method: Literal["GET", "HEAD", "DELETE", "POST", "PUT", "PATCH"] | None = None
    input: dict[str, Any] | None = None
    input_schema: JsonSchema | None = None
    output: Any = None
    output_schema: JsonSchema | None = None

    @model_validator(mode="after")
    def _method_fits(self) -> DiscoveryConfig:
        """A body call is POST, PUT or PATCH, a query call GET, HEAD or DELETE (schema enums)."""
        if self.method is None:
            return self
        body = self.method in ("POST", "PUT", "PATCH")
        if body and self.body_type is None:
            raise ValueError(f"method {self.method} takes a body: set body_type")
        if not body and self.body_type is not None:
            raise ValueError(f"method {self.method} takes no body: remove body_type")
        return self

    @property
    def call_method(self) -> str:
        if self.method is not None:
            return self.method
        return "POST" if self.body_type is not None else "GET"
