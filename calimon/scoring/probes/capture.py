"""What to capture from a forward pass: the hidden-state capability's types, defined by the
backends layer (:mod:`calimon.scoring.backends.capture`) and named here for the heads that read them."""

from calimon.scoring.backends.capture import (
    POOLINGS,
    Captured,
    CaptureSpec,
    LayerCollector,
    check_capture_args,
)

__all__ = ["POOLINGS", "CaptureSpec", "Captured", "LayerCollector", "check_capture_args"]
