"""A standalone function whose handler cannot be imported fails to start, and stopping it returns."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import pytest

from standalone.gateway import FunctionSpec, FunctionUrl, InvocationMeter


@pytest.mark.timeout(60)  # the failure this guards against was a hang
def test_a_function_whose_handler_does_not_import_fails_to_start_and_stops():
    function = FunctionUrl(FunctionSpec("broken", "no_such_module_of_rillet.handler", workers=1), {},
                           InvocationMeter())
    with pytest.raises(BrokenProcessPool):
        function.start()
    function.stop()  # used to wait forever for a server loop that never ran
    assert not function.thread.is_alive()
