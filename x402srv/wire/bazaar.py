"""The x402 ``bazaar`` discovery extension of a 402 (docs/bazaar.md), built from config.

Facilitators list a paid resource from what its 402 declares in
``extensions.bazaar``: ``info`` (how to call it: the input, an example answer)
and ``schema`` (a JSON Schema that ``info`` validates against). The shape is
the one the official SDKs' resource-server helpers produce, after their server
extension added the HTTP method of the request that got the 402:

    info.input   {"type": "http", "method", "bodyType", "body"}   a body call (body_type set)
                 {"type": "http", "method", "queryParams"?}       a query call (GET, HEAD, DELETE)
    info.output  {"type": "json", "example"}                      when an example answer is set
    schema       draft 2020-12: ``input`` with the seller's input schema in its place
                 (``body``, or ``queryParams`` as an object), ``output.example`` extended
                 by the seller's output schema

Built once per plan or route when its 402 is first made; the method is the one
the seller declares (a route is a prefix: it serves many calls, the listing
describes one). Nothing here reads a request.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from x402srv.config.discovery import DiscoveryConfig

__all__ = ["BAZAAR", "bazaar_extension"]

BAZAAR: Final = "bazaar"
_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_BODY_METHODS: Final = ["POST", "PUT", "PATCH"]
_QUERY_METHODS: Final = ["GET", "HEAD", "DELETE"]


def _output_schema(discovery: DiscoveryConfig) -> dict[str, Any]:
    example: dict[str, Any] = {"type": "object", **(discovery.output_schema or {})}
    return {
        "type": "object",
        "properties": {"type": {"type": "string"}, "example": example},
        "required": ["type"],
    }


def _input(discovery: DiscoveryConfig, method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``info.input`` and its schema; the method is the request's, as the SDK's server adds it."""
    given = discovery.input_schema if discovery.input_schema is not None else {"properties": {}}
    if discovery.body_type is not None:
        info = {
            "type": "http",
            "bodyType": discovery.body_type,
            "body": copy.deepcopy(discovery.input) if discovery.input else {},
            "method": method,
        }
        properties: dict[str, Any] = {
            "type": {"type": "string", "const": "http"},
            "method": {"type": "string", "enum": list(_BODY_METHODS)},
            "bodyType": {"type": "string", "enum": ["json", "form-data", "text"]},
            "body": copy.deepcopy(given),
        }
        required = ["type", "method", "bodyType", "body"]
    else:
        info = {"type": "http", "method": method}
        if discovery.input:
            info = {"type": "http", "queryParams": copy.deepcopy(discovery.input), "method": method}
        properties = {
            "type": {"type": "string", "const": "http"},
            "method": {"type": "string", "enum": list(_QUERY_METHODS)},
        }
        if given:
            properties["queryParams"] = {"type": "object", **copy.deepcopy(given)}
        required = ["type", "method"]
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return info, schema


def bazaar_extension(discovery: DiscoveryConfig) -> dict[str, Any]:
    """``{"bazaar": {"info", "schema"}}`` for the call ``discovery`` describes."""
    info_input, input_schema = _input(discovery, discovery.call_method)
    info: dict[str, Any] = {"input": info_input}
    properties: dict[str, Any] = {"input": input_schema}
    if discovery.output is not None:
        info["output"] = {"type": "json", "example": copy.deepcopy(discovery.output)}
        properties["output"] = _output_schema(discovery)
    schema = {
        "$schema": _SCHEMA_DIALECT,
        "type": "object",
        "properties": properties,
        "required": ["input"],
    }
    return {BAZAAR: {"info": info, "schema": schema}}
