"""The default torch thread count of a CPU backend: the cores that are free, capped at the
physical cores, one inter-op thread (calimon.scoring.backends.threads)."""

from __future__ import annotations

import pytest

from calimon.scoring.backends import threads


@pytest.mark.parametrize("busy, available, physical, expected", [
    (0.0, 2, 2, 2),    # a quiet 2-core machine: both cores
    (0.4, 2, 2, 2),    # a little background work rounds away
    (1.0, 2, 2, 1),    # one core busy elsewhere: one thread
    (2.7, 2, 2, 1),    # oversubscribed: still one thread, never zero
    (0.0, 2, 1, 1),    # two hyperthreads of one physical core
    (2.4, 8, 4, 4),    # capped at the physical cores
    (5.6, 8, 4, 2),    # eight cores, six busy elsewhere
])
def test_default_threads_are_the_free_cores(busy, available, physical, expected):
    assert threads.default_threads(busy=busy, available=available,
                                   physical=physical) == expected


def test_machine_readings_are_sane():
    assert 1 <= threads.physical_cores() <= threads.available_cores()
    assert threads.busy_cores(window=0.05) >= 0.0


def test_a_cpu_backend_loads_with_the_default_or_the_given_threads(tiny_qwen3, monkeypatch):
    import torch

    from calimon.scoring.backends.transformers_backend import TransformersBackend

    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(threads, "busy_cores", lambda window=0.25: 64.0)
        busy = TransformersBackend(tiny_qwen3, device="cpu")
        busy.model  # noqa: B018 - loads, setting the threads
        assert busy.threads_used == torch.get_num_threads() == 1
        monkeypatch.setattr(threads, "busy_cores", lambda window=0.25: 0.0)
        quiet = TransformersBackend(tiny_qwen3, device="cpu")
        quiet.model  # noqa: B018
        assert quiet.threads_used == torch.get_num_threads() == min(
            threads.physical_cores(), threads.available_cores())
        given = TransformersBackend(tiny_qwen3, device="cpu", threads=1)
        given.model  # noqa: B018
        assert given.threads_used == torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_one_inter_op_thread_in_a_new_process():
    # settable once per process, before any inter-op work: checked where nothing ran before
    import subprocess
    import sys

    code = ("import torch; from calimon.scoring.backends.threads import apply_threads; "
            "n = apply_threads(None); print(n, torch.get_num_threads(), "
            "torch.get_num_interop_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    n, intra, inter = map(int, out)
    assert n == intra >= 1 and inter == 1


def _since(gov, others_cores: float, seconds: float = 1.0) -> None:
    """Pretend the governor's last reading was ``seconds`` ago, with ``others_cores`` busy."""
    import os

    jiffies, own, now = threads.ThreadGovernor._reading()
    gov._mark = (jiffies - int(others_cores * os.sysconf("SC_CLK_TCK") * seconds), own,
                 now - seconds)


def test_the_governor_follows_the_load_between_calls():
    import torch

    before = torch.get_num_threads()
    try:
        gov = threads.ThreadGovernor(interval=0.5)
        _since(gov, 64.0)
        assert gov.update() == torch.get_num_threads() == 1  # others took every core
        _since(gov, 0.0, seconds=30.0)
        free = min(threads.physical_cores(), threads.available_cores())
        assert gov.update() == torch.get_num_threads() == free  # quiet again
        gov._mark = threads.ThreadGovernor._reading()
        assert gov.update() == free  # within the interval: no new reading, no change
    finally:
        torch.set_num_threads(before)


def test_a_backend_loaded_during_a_spike_takes_the_cores_back(tiny_qwen3, monkeypatch):
    import torch

    from calimon.scoring.backends.transformers_backend import TransformersBackend

    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(threads, "busy_cores", lambda window=0.25: 64.0)
        backend = TransformersBackend(tiny_qwen3, device="cpu")
        backend.model  # noqa: B018 - loads during the spike
        assert backend.threads_used == 1
        _since(backend._governor, 0.0, seconds=30.0)
        backend.next_token_logprobs([[1, 2, 3]])
        assert backend.threads_used == torch.get_num_threads() == min(
            threads.physical_cores(), threads.available_cores())
    finally:
        torch.set_num_threads(before)
