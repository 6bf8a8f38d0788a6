"""How Service Bus SDK errors map onto the Weft taxonomy (what a retry policy sees)."""

from __future__ import annotations

import pytest
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthenticationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusServerBusyError,
)

from shared.adapters.servicebus_bus import ServiceBusConfigError, _mapped, build_bus
from shared.errors import LockLostError, NotFoundError, PayloadTooLargeError, TransientError, WeftError
from shared.settings import WeftSettings


@pytest.mark.parametrize(
    ("sdk_error", "weft_type", "non_retryable"),
    [
        (MessageLockLostError(message="gone"), LockLostError, False),
        (MessageAlreadySettled(action="complete"), LockLostError, False),
        (MessagingEntityNotFoundError(message="no q"), NotFoundError, True),
        (MessageSizeExceededError(message="big"), PayloadTooLargeError, True),
        (ServiceBusConnectionError(message="reset"), TransientError, False),
        (OperationTimeoutError(message="slow"), TransientError, False),
        (ServiceBusServerBusyError(message="busy"), TransientError, False),
        (ServiceBusError("odd", retryable=False), WeftError, True),
    ],
)
def test_sdk_errors_map_onto_weft_errors(
    sdk_error: Exception, weft_type: type[WeftError], non_retryable: bool
) -> None:
    with pytest.raises(weft_type) as err, _mapped("q"):
        raise sdk_error
    assert err.value.non_retryable is non_retryable
    assert err.value.details["entity"] == "q"
    assert err.value.__cause__ is sdk_error


def test_auth_failure_is_not_retryable_and_says_so() -> None:
    with pytest.raises(WeftError) as err, _mapped("q"):
        raise ServiceBusAuthenticationError(message="bad sas")
    assert err.value.type == "weft.ServiceBusAuth"
    assert err.value.non_retryable
    assert "bad sas" not in err.value.message  # the SDK text may quote the endpoint/key name


def test_bus_needs_a_connection_string_or_a_namespace() -> None:
    with pytest.raises(ServiceBusConfigError):
        build_bus(WeftSettings(bus="servicebus"))
