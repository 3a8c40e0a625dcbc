"""How often the `strip` defense changes clean transcripts (it should not: on clean text every
change is a false positive of its rules), per benchmark, request and response apart.

    .venv/bin/python benchmarks/robustness/strip_clean.py humaneval-pairs amb-open

Prints one line per benchmark: samples, texts changed, changes by rule, and the first few
changed sample ids with the text removed.
"""

from __future__ import annotations

import argparse
from collections import Counter

from calimon.data.registry import load_benchmark
from calimon.defenses import strip
from calimon.prompts import load_prompt


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("benchmarks", nargs="+")
    ap.add_argument("--prompt", default="direct")
    args = ap.parse_args(argv)
    template = load_prompt(args.prompt)
    for bench in args.benchmarks:
        samples = load_benchmark(bench)
        rules: Counter[str] = Counter()
        changed, examples = 0, []
        for s in samples:
            for side, text in (("request", s.request), ("response", s.response)):
                got = strip(text, template, side).changes
                changed += bool(got)
                rules.update(c.rule for c in got)
                examples += [(s.id, side, c.text[:60]) for c in got][:3 - len(examples)]
        print(f"{bench}: {len(samples)} samples, {2 * len(samples)} texts, {changed} changed "
              f"by strip; rules {dict(rules)}; first: {examples}")


if __name__ == "__main__":
    main()
