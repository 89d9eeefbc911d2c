"""Issue 22, item 11: without --allow-download nothing reaches the network, not even a DNS
query, when a hub tokenizer or model is asked for. The child process replaces the socket
functions with one that reports the attempt and ends the process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, socket, sys
attempts = []
def refuse(*args, **kwargs):  # the first attempt ends the process (a client would retry for a minute)
    print("ATTEMPTS " + json.dumps([repr(args[:2])]), file=sys.stderr, flush=True)
    os._exit(3)
socket.getaddrinfo = refuse
socket.create_connection = refuse
socket.socket.connect = lambda self, *args: refuse(*args)
try:
    if sys.argv[1] == "library":
        from gpu_neighbors import NeighborsScorer
        try:
            NeighborsScorer(tokenizer="hf:bert-base-uncased", device="cpu").fit(["a b", "c d"], [0.1, 0.2])
        except ValueError as error:
            print(error, file=sys.stderr)
        code = 0
    else:
        from gpu_neighbors.cli import main
        code = main(sys.argv[1:])
finally:
    print("ATTEMPTS " + json.dumps(attempts), file=sys.stderr)
sys.exit(code)
"""


def attempts(tmp_path, *argv: str) -> tuple[list[str], str]:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": f"text {i} here", "score": i / 10}) + "\n" for i in range(8)))
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    environment["HF_HOME"] = str(tmp_path / "hf")  # an empty cache: the name can only come from the hub
    argv = tuple(part.format(data=data, out=tmp_path / "out.jsonl") for part in argv)
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], env=environment, capture_output=True, text=True,
                          timeout=300)
    line = [text for text in done.stderr.splitlines() if text.startswith("ATTEMPTS ")][-1]
    return json.loads(line.removeprefix("ATTEMPTS ")), done.stderr


SCORE = ["score", "--train", "{data}", "--candidates", "{data}", "--output", "{out}", "--device", "cpu", "--quiet"]


@pytest.mark.parametrize("argv", [
    [*SCORE, "--tokenizer", "hf:bert-base-uncased"],
    [*SCORE, "--kernel", "bertscore", "--model", "bert-base-uncased"],
    ["library"],
], ids=["tokenizer", "bertscore-model", "library"])
def test_no_connection_is_attempted_without_allow_download(tmp_path, argv):
    tried, stderr = attempts(tmp_path, *argv)
    assert tried == [], stderr
    assert "--allow-download" in stderr or "allow_download" in stderr or "hub name" in stderr, stderr


def test_the_probe_sees_the_attempt_that_allow_download_makes(tmp_path):
    tried, stderr = attempts(tmp_path, *SCORE, "--tokenizer", "hf:bert-base-uncased", "--allow-download")
    assert tried, stderr  # the hub was asked: the probe would see a leak
