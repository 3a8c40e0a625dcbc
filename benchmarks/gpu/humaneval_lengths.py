"""Write humaneval-pairs-lengths.json: the prompt length of every humaneval-pairs transcript
under the ``direct`` template's verdict readout, in tokens of the embedded SmolLM2 tokenizer
(the GPU machine has neither the benchmark nor a network: run_gpu_perf.py's real-length cases
read this file).

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/gpu/humaneval_lengths.py
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "humaneval-pairs-lengths.json"


def main() -> Path:
    """Encode every transcript (tokenizer only, no weights) and write the lengths."""
    from calimon.data.registry import load_benchmark
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import backend_options, build_backend
    from calimon.scoring.engines import MonitorSpec
    from calimon.scoring.monitor import Monitor

    backend = build_backend(MonitorSpec(model="smollm2-135m",
                                        options=backend_options("transformers", {})))
    mon = Monitor(backend, load_prompt("direct"), "verdict")
    encoded = [mon.encoder.encode(s.request, s.response) for s in load_benchmark("humaneval-pairs")]
    doc = {"source": "humaneval-pairs, every transcript, the direct template's verdict prompt, "
                     "tokens of the embedded SmolLM2-135M tokenizer (benchmarks/gpu/"
                     "humaneval_lengths.py)",
           "prefix_tokens": mon.encoder.prefix_len,
           "truncated": sum(e.truncation is not None for e in encoded),
           "lengths": [len(e.ids) for e in encoded]}
    OUT.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    return OUT


if __name__ == "__main__":
    print(main())
