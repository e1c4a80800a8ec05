"""The checked-in OpenAPI documents are exactly what the handlers' code generates."""

import pytest

from lambdas.openapi import API_DOC, APIS, OUT_DIR, render, render_markdown


@pytest.mark.parametrize("name", sorted(APIS))
def test_checked_in_openapi_matches_the_code(name):
    path = OUT_DIR / f"{name}.json"
    assert path.exists(), f"{path} is missing: run `make openapi`"
    assert path.read_text() == render(name), f"{path} is stale: run `make openapi` and commit the result"


def test_api_reference_matches_the_code():
    assert API_DOC.read_text() == render_markdown(), f"{API_DOC} is stale: run `make openapi`"
