"""End-to-end tests drive the standalone stack over HTTP; the `stack`, `url` and `manager` fixtures
are in tests/conftest.py so that the Spark tests share the same stack."""
