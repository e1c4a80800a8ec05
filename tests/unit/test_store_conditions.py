"""A write that failed without a DynamoDB response (timeout, reset) is a fault, never a lost race."""

from botocore.exceptions import ClientError, ReadTimeoutError
from pynamodb.exceptions import PutError, UpdateError

from controlplane.store import failed_condition


def test_a_timeout_is_not_a_failed_condition():
    error = UpdateError("update failed", cause=ReadTimeoutError(endpoint_url="http://dynamodb"))
    assert failed_condition(error) is False


def test_a_refused_condition_is_recognised():
    cause = ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": "no"}}, "PutItem")
    assert failed_condition(PutError("put failed", cause=cause)) is True
