"""The GPU suite's jobs, composed and built here, on a machine without a GPU: a key they set that
was renamed, or a combination of options that became an error, fails on every machine rather than
only when the GPU suite next runs."""

import pytest

from modelxray import api
from modelxray.config.components import build_components
from test_gpu import JOBS


@pytest.mark.parametrize("name", sorted(JOBS))
def test_each_job_of_the_gpu_suite_builds_here(name):
    job = [k.replace("model.device=cuda", "model.device=cpu") for k in JOBS[name]]
    assert "model.device=cpu" in job
    build_components(api.compose(job))
