"""``parse_access_body``: the JSON body of ``POST /x402/access`` (docs/protocol/wire.md).

Bad input is always ``InvalidRequest`` (400) or ``UnsupportedMediaType`` (415),
never a Python exception that would become a 500.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from x402srv.errors import InvalidRequest, UnsupportedMediaType
from x402srv.wire.protocol import MAX_BODY_BYTES, AccessBody, parse_access_body

JSON = "application/json"
REQUEST_ID = "6f1c2f3e-8a4b-4c1d-9e2f-0123456789ab"


def parse(document: object, content_type: str | None = JSON) -> AccessBody:
    return parse_access_body(json.dumps(document).encode(), content_type)


def refused(raw: bytes, content_type: str | None = JSON) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_access_body(raw, content_type)
    assert caught.value.status == 400
    assert caught.value.code == "INVALID_REQUEST"
    return caught.value


# ------------------------------------------------------------- empty & defaults


@pytest.mark.parametrize("raw", [b"", b"   ", b"\n\t"])
@pytest.mark.parametrize("content_type", [None, "", "text/plain", JSON])
def test_empty_body_means_defaults_whatever_the_content_type(
    raw: bytes, content_type: str | None
) -> None:
    assert parse_access_body(raw, content_type) == AccessBody(None, None, "default")


def test_empty_object_means_defaults() -> None:
    assert parse({}) == AccessBody(None, None, "default")


def test_all_fields() -> None:
    body = parse({"planId": "hourly", "requestId": REQUEST_ID, "resourceId": "city:/paris"})
    assert body == AccessBody("hourly", REQUEST_ID, "city:/paris")


def test_null_fields_are_absent() -> None:
    assert parse({"planId": None, "requestId": None, "resourceId": None}) == AccessBody(
        None, None, "default"
    )


def test_unknown_fields_are_ignored() -> None:
    assert parse({"planId": "hourly", "extra": {"nested": [1, 2]}}).plan_id == "hourly"


# --------------------------------------------------------------- content type


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON ; charset=UTF-8",
        "application/vnd.api+json",
        "application/problem+json; charset=utf-8",
    ],
)
def test_json_content_types_are_accepted(content_type: str) -> None:
    assert parse({"planId": "hourly"}, content_type).plan_id == "hourly"


@pytest.mark.parametrize(
    "content_type",
    [None, "", "text/plain", "application/x-www-form-urlencoded", "text/json", "application/jsonx"],
)
def test_other_content_types_are_415(content_type: str | None) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        parse({"planId": "hourly"}, content_type)
    assert caught.value.status == 415
    assert caught.value.code == "INVALID_REQUEST"


# -------------------------------------------------------------------- size


def padded_object(size: int) -> bytes:
    raw = b'{"pad":""}'
    return raw[:-2] + b"x" * (size - len(raw)) + raw[-2:]


def test_body_of_exactly_64_kib_is_accepted() -> None:
    raw = padded_object(MAX_BODY_BYTES)
    assert len(raw) == MAX_BODY_BYTES == 65536
    assert parse_access_body(raw, JSON) == AccessBody(None, None, "default")


def test_body_over_64_kib_is_refused() -> None:
    error = refused(padded_object(MAX_BODY_BYTES + 1))
    assert "larger than 65536 bytes" in error.detail


def test_size_is_checked_before_the_content_type() -> None:
    refused(b" " * (MAX_BODY_BYTES + 1), "text/plain")


# ------------------------------------------------------------ JSON & shapes


@pytest.mark.parametrize("raw", [b"{", b"{'planId': 1}", b"planId=hourly", b'{"a":1}x', b"\xff"])
def test_invalid_json_is_refused(raw: bytes) -> None:
    assert refused(raw).detail == "request body is not valid JSON"


@pytest.mark.parametrize("document", [[], [{"planId": "hourly"}], "hourly", 1, None, True])
def test_non_object_json_is_refused(document: object) -> None:
    assert refused(json.dumps(document).encode()).detail == "request body must be a JSON object"


@pytest.mark.parametrize("depth", [2_000, 32_000])
def test_deeply_nested_json_is_invalid_request_not_recursion_error(depth: int) -> None:
    # Whether json gives up (RecursionError) depends on the interpreter's recursion limit,
    # which libraries raise (py_ecc sets 100000); either way the answer is a 400.
    raw = b'{"planId":' + b"[" * depth + b"]" * depth + b"}"
    assert len(raw) < MAX_BODY_BYTES
    refused(raw)


def test_huge_integer_is_invalid_request_not_value_error() -> None:
    refused(b'{"planId": ' + b"9" * 50_000 + b"}")


def test_non_utf8_body_is_invalid_request() -> None:
    refused(b'{"planId": "\xff\xfe"}')


# ------------------------------------------------------------------ planId


@pytest.mark.parametrize("plan_id", [1, 1.5, True, [], {}, "", "p" * 65])
def test_bad_plan_id_is_refused(plan_id: object) -> None:
    assert (
        "planId must be a non-empty string"
        in refused(json.dumps({"planId": plan_id}).encode()).detail
    )


def test_plan_id_is_not_validated_against_plans_here() -> None:
    assert parse({"planId": "p" * 64}).plan_id == "p" * 64


# ---------------------------------------------------------------- requestId


@pytest.mark.parametrize(
    "given",
    [
        REQUEST_ID,
        REQUEST_ID.upper(),
        REQUEST_ID.replace("-", ""),
        "{" + REQUEST_ID + "}",
        "urn:uuid:" + REQUEST_ID,
    ],
)
def test_request_id_is_normalised_to_the_canonical_uuid_form(given: str) -> None:
    assert parse({"requestId": given}).request_id == REQUEST_ID


def test_random_uuid_round_trips() -> None:
    value = str(uuid.uuid4())
    assert parse({"requestId": value}).request_id == value


@pytest.mark.parametrize("request_id", ["not-a-uuid", REQUEST_ID[:-1], REQUEST_ID + "0", "g" * 32])
def test_non_uuid_request_id_is_refused(request_id: str) -> None:
    assert refused(json.dumps({"requestId": request_id}).encode()).detail == (
        "requestId must be a UUID"
    )


@pytest.mark.parametrize("request_id", [1, [], {}, "", "1" * 65])
def test_request_id_of_a_wrong_type_is_refused(request_id: object) -> None:
    assert (
        "requestId must be a non-empty string"
        in refused(json.dumps({"requestId": request_id}).encode()).detail
    )


# --------------------------------------------------------------- resourceId


@pytest.mark.parametrize("resource_id", ["a", "A-z_0.9:/x", "r" * 256, "city:/paris/2024"])
def test_valid_resource_ids(resource_id: str) -> None:
    assert parse({"resourceId": resource_id}).resource_id == resource_id


@pytest.mark.parametrize(
    "resource_id",
    [
        "r" * 257,
        "has space",
        "semi;colon",
        "caf\u00e9",
        "a\tb",
        pytest.param(
            "report\n",
            id="trailing-newline",
        ),
    ],
)
def test_invalid_resource_ids_are_refused(resource_id: str) -> None:
    refused(json.dumps({"resourceId": resource_id}).encode())


@pytest.mark.parametrize("resource_id", [1, [], {}, ""])
def test_resource_id_of_a_wrong_type_is_refused(resource_id: object) -> None:
    refused(json.dumps({"resourceId": resource_id}).encode())


def test_security_resource_id_cannot_smuggle_a_newline() -> None:
    """Regression guard: resourceId lands in tokens and logs; a newline there is refused."""
    refused(json.dumps({"resourceId": "a\nb"}).encode())


# ------------------------------------------------------------- remembered parses


def test_a_small_body_parsed_again_is_the_same_answer() -> None:
    raw = json.dumps({"planId": "daily", "resourceId": "a:/b", "topUp": REQUEST_ID}).encode()
    first = parse_access_body(raw, JSON)
    assert (
        parse_access_body(bytes(raw), JSON)
        == first
        == AccessBody("daily", None, "a:/b", REQUEST_ID)
    )
    with pytest.raises(UnsupportedMediaType):  # the Content-Type is part of what is remembered
        parse_access_body(raw, "text/plain")


def test_a_refused_small_body_is_refused_every_time() -> None:
    for _ in range(2):
        refused(b'{"planId": 7}')


def test_with_request_id_keeps_every_other_field() -> None:
    body = AccessBody("daily", None, "a:/b", REQUEST_ID)
    assert body.with_request_id("r") == dataclasses.replace(body, request_id="r")
