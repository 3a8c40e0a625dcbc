"""One backend per spec per process: `build_backend` memoizes (as Inspect's `get_model` does),
`drop_backends` forgets, and studies score with a backend they are handed."""

from __future__ import annotations

import pytest

from calimon.errors import InputError
from calimon.scoring.backends import (
    build_backend,
    check_backend_model,
    drop_backends,
    is_shared,
    release,
)
from calimon.scoring.engines import MonitorSpec


class _Closing:
    """Counts close() calls of a backend object without loading anything."""

    def __init__(self, backend):
        self.calls = 0
        self._close = backend.close
        backend.close = self

    def __call__(self):
        self.calls += 1
        self._close()


def _http(url: str) -> MonitorSpec:
    # the http backend needs no weights and no server until it scores
    return MonitorSpec(model="smollm2-135m", backend="http", options={"base_url": url})


def test_the_same_spec_gives_the_same_backend_until_dropped():
    spec = _http("http://127.0.0.1:9/v1")
    a = build_backend(spec)
    assert build_backend(_http("http://127.0.0.1:9/v1")) is a and is_shared(a)
    assert build_backend(_http("http://127.0.0.1:10/v1")) is not a  # other options
    own = build_backend(spec, shared=False)
    assert own is not a and not is_shared(own)
    closing = _Closing(a)
    release(a)  # shared: stays loaded for the next caller
    assert closing.calls == 0 and build_backend(spec) is a
    assert drop_backends(spec) == 1 and closing.calls == 1
    assert build_backend(spec) is not a
    assert drop_backends(spec) == 1 and drop_backends(spec) == 0


def test_an_unshared_backend_is_closed_on_release():
    own = build_backend(_http("http://127.0.0.1:9/v1"), shared=False)
    closing = _Closing(own)
    release(own)
    assert closing.calls == 1


@pytest.mark.model
def test_a_study_refuses_a_backend_of_another_model(smol_backend, tiny_qwen3):
    with pytest.raises(InputError, match="holds model 'smollm2-135m'.*'tiny-qwen3'"):
        check_backend_model(smol_backend, tiny_qwen3)
