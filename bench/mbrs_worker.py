"""Runs in a separate environment that has `mbrs` (it cannot import beside transformers 5 in the
project's): reads {"groups": [[text, ...], ...]} as JSON on stdin, selects one candidate per group
with mbrs' DecoderMBR and MetricBLEU (its defaults: sacrebleu sentence BLEU, 13a tokens, exp
smoothing, effective order), each group's samples as its own pseudo-references, and prints
{"seconds", "selected", "expected"} as JSON. Only the decoding is timed."""
from __future__ import annotations

import json
import sys
import time
import warnings


def main() -> None:
    warnings.simplefilter("ignore")
    from mbrs.decoders import DecoderMBR
    from mbrs.metrics import MetricBLEU

    groups = json.load(sys.stdin)["groups"]
    decoder = DecoderMBR(DecoderMBR.Config(), MetricBLEU(MetricBLEU.Config()))
    selected, expected = [], []
    start = time.perf_counter()
    for hypotheses in groups:
        output = decoder.decode(hypotheses, hypotheses, nbest=1)
        selected.append(int(output.idx[0]))
    seconds = time.perf_counter() - start
    for hypotheses in groups[:5]:  # utilities of a few groups, untimed, to compare the scales
        expected.append(decoder.metric.expected_scores(hypotheses, hypotheses).tolist())
    print(json.dumps({"seconds": seconds, "selected": selected, "expected": expected}))


if __name__ == "__main__":
    main()
