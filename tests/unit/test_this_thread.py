"""tests/this_thread.py: a patch of ``time.sleep`` acts in the test's thread only; another thread of the
worker that sleeps meanwhile sleeps for real, and is not recorded."""

import threading
import time

from this_thread import patch_in_this_thread


def test_only_the_tests_own_thread_gets_the_replacement(monkeypatch):
    recorded: list[float] = []
    patch_in_this_thread(monkeypatch, time, "sleep", recorded.append)
    slept_for_real: list[float] = []

    def other_thread() -> None:
        start = time.monotonic()
        for _ in range(5):
            time.sleep(0.01)
        slept_for_real.append(time.monotonic() - start)

    poller = threading.Thread(target=other_thread)
    poller.start()
    time.sleep(0.5)  # recorded, not slept
    poller.join(timeout=10)
    assert recorded == [0.5]
    assert slept_for_real and slept_for_real[0] >= 0.05
