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
