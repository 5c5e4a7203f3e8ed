"""An analyzer that always raises, to test that failures are recorded and never lose other results."""

from dataclasses import dataclass
from typing import ClassVar

from modelxray.analyzers.base import Analyzer


@dataclass
class BoomAnalyzer(Analyzer):
    name: ClassVar[str] = "boom"
    message: str = "boom on purpose"

    def run(self, subject, ctx):
        raise RuntimeError(self.message)


@dataclass
class CountingAnalyzer(Analyzer):
    """Appends a line to the file named by $MODELXRAY_TEST_COUNT each time it runs (a resumed run
    must not run it again)."""

    name: ClassVar[str] = "count"

    def run(self, subject, ctx):
        import os

        with open(os.environ["MODELXRAY_TEST_COUNT"], "a") as f:
            f.write("ran\n")
        result = self.new_result()
        result.metrics["runs"] = 1.0
        return result


@dataclass
class HangingAnalyzer(Analyzer):
    """With $MODELXRAY_TEST_HANG set, creates that file and sleeps (the test kills the process); with
    $MODELXRAY_TEST_INTERRUPT set, raises KeyboardInterrupt (Ctrl-C); otherwise returns at once. The
    variables are not config, so every run has one fingerprint."""

    name: ClassVar[str] = "hang"

    def run(self, subject, ctx):
        import os
        import time

        if os.environ.get("MODELXRAY_TEST_INTERRUPT"):
            raise KeyboardInterrupt
        flag = os.environ.get("MODELXRAY_TEST_HANG")
        if flag:
            open(flag, "w").close()
            time.sleep(600)
        result = self.new_result()
        result.metrics["answer"] = 42.0
        return result


@dataclass
class ServerKillingAnalyzer(Analyzer):
    """Stops the tracking server (the process group $MODELXRAY_TEST_KILL_PGID) mid-run and waits
    until it no longer answers: the analyzers after it must still run."""

    name: ClassVar[str] = "kill"

    def run(self, subject, ctx):
        import os
        import signal
        import time
        import urllib.request

        os.killpg(int(os.environ["MODELXRAY_TEST_KILL_PGID"]), signal.SIGKILL)
        for _ in range(50):
            try:
                urllib.request.urlopen(os.environ["MODELXRAY_TEST_KILL_URI"] + "/health", timeout=1)
                time.sleep(0.2)
            except OSError:
                break
        result = self.new_result()
        result.metrics["killed"] = 1.0
        return result
