"""Name rules (rillet.names), as Pravega's NameUtils states them."""

from __future__ import annotations

import pytest

from rillet.errors import InvalidArgument
from rillet.names import (
    MAX_GIVEN_NAME_SIZE,
    MAX_NAME_SIZE,
    scoped_name,
    segment_name,
    split_scoped_name,
    validate_reader_group_name,
    validate_scope_name,
    validate_stream_name,
    validate_writer_id,
)

VALID = ["stream123", "a.b-c", "A", "0", "UPPER.lower-123", "-leading-dash", "trailing.", "a" * 250]
INVALID = [
    "_x",  # leading underscore: reserved for internal streams
    "a_b",  # underscore anywhere
    "a b",  # space
    "",  # empty
    "a/b",  # the scoped-name separator
    "naïve",  # non-ASCII letter
    "日本",  # non-ASCII
    "ａｂｃ",  # full-width letters are alphanumeric to str.isalnum() but not ASCII
    "tab\t",
    "new\nline",
    "a*b",
    "a:b",
]


def test_limits_are_pravegas():
    assert MAX_NAME_SIZE == 255
    assert MAX_GIVEN_NAME_SIZE == 250


@pytest.mark.parametrize("name", VALID)
@pytest.mark.parametrize("validate", [validate_scope_name, validate_stream_name, validate_reader_group_name])
def test_valid_names(validate, name):
    assert validate(name) == name


@pytest.mark.parametrize("name", INVALID)
@pytest.mark.parametrize("validate", [validate_scope_name, validate_stream_name, validate_reader_group_name,
                                      validate_writer_id])
def test_invalid_names(validate, name):
    with pytest.raises(InvalidArgument):
        validate(name)


@pytest.mark.parametrize("name", [None, 5, b"bytes", ["a"]])
def test_non_strings_are_invalid(name):
    with pytest.raises(InvalidArgument):
        validate_stream_name(name)


def test_scope_name_length_limit_is_255():
    assert validate_scope_name("s" * 255) == "s" * 255
    with pytest.raises(InvalidArgument):
        validate_scope_name("s" * 256)


def test_stream_name_length_limit_is_250():
    assert validate_stream_name("s" * 250) == "s" * 250
    with pytest.raises(InvalidArgument):
        validate_stream_name("s" * 251)


def test_reader_group_name_length_limit_is_250():
    assert validate_reader_group_name("g" * 250)
    with pytest.raises(InvalidArgument):
        validate_reader_group_name("g" * 251)


def test_writer_id_length_limit_is_64():
    assert validate_writer_id("w" * 64)
    with pytest.raises(InvalidArgument):
        validate_writer_id("w" * 65)


def test_scoped_names_round_trip():
    assert scoped_name("sc", "st") == "sc/st"
    assert split_scoped_name("sc/st") == ("sc", "st")


@pytest.mark.parametrize("scoped", ["nostream", "a/b/c", "/st", "sc/", "_sc/st", "sc/_st", "a b/st"])
def test_split_scoped_name_rejects_bad_input(scoped):
    with pytest.raises(InvalidArgument):
        split_scoped_name(scoped)


def test_segment_name_layout():
    assert segment_name("sc", "st", 4294967296) == "sc/st/4294967296"
