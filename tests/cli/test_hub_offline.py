"""Issue 22, item 11: without --allow-download nothing reaches the network, not even a DNS
query, when a hub tokenizer or model is asked for. The child process replaces the socket
functions with one that reports the attempt and ends the process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, os, socket, sys
def refuse(*args, **kwargs):  # the first attempt ends the process (a client would retry for a minute)
    print("ATTEMPT " + json.dumps([CASE, repr(args[:2])]), file=sys.stderr, flush=True)
    os._exit(3)
socket.getaddrinfo = refuse
socket.create_connection = refuse
socket.socket.connect = lambda self, *args: refuse(*args)
from gpu_neighbors import NeighborsScorer
from gpu_neighbors.kernels.parts import Bleu
from gpu_neighbors.cli import main
for CASE, argv in json.loads(sys.argv[1]):
    if argv == ["library"]:
        try:
            NeighborsScorer(kernel=Bleu(tokenizer="hf:bert-base-uncased"), device="cpu").fit(["a b", "c d"], [0.1, 0.2])
        except ValueError as error:
            print(error, file=sys.stderr)
    else:
        main(argv)
print("NO ATTEMPT", file=sys.stderr)
"""


def attempted(tmp_path, cases: dict[str, list[str]]) -> tuple[str | None, str]:
    """The first case that tried to connect (None: none did), and the child's stderr. One child
    runs every case (each loads torch and transformers once)."""
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": f"text {i} here", "score": i / 10}) + "\n" for i in range(8)))
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    environment["HF_HOME"] = str(tmp_path / "hf")  # an empty cache: the name can only come from the hub
    filled = [[name, [part.format(data=data, out=tmp_path / f"{name}.jsonl") for part in argv]]
              for name, argv in cases.items()]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(filled)], env=environment,
                          capture_output=True, text=True, timeout=300)
    for line in done.stderr.splitlines():
        if line.startswith("ATTEMPT "):
            return json.loads(line.removeprefix("ATTEMPT "))[0], done.stderr
    assert "NO ATTEMPT" in done.stderr, done.stderr
    return None, done.stderr


SCORE = ["score", "--train", "{data}", "--candidates", "{data}", "--output", "{out}", "--device", "cpu", "--quiet"]


def test_no_connection_is_attempted_without_allow_download(tmp_path):
    cases = {"tokenizer": [*SCORE, "--tokenizer", "hf:bert-base-uncased"],
             "bertscore-model": [*SCORE, "--kernel", "bertscore", "--model", "bert-base-uncased"],
             "library": ["library"]}
    case, stderr = attempted(tmp_path, cases)
    assert case is None, stderr
    assert stderr.count("--allow-download") >= 2 and "hub name" in stderr, stderr


def test_the_probe_sees_the_attempt_that_allow_download_makes(tmp_path):
    case, stderr = attempted(tmp_path, {"allowed": [*SCORE, "--tokenizer", "hf:bert-base-uncased", "--allow-download"]})
    assert case == "allowed", stderr  # the hub was asked: the probe would see a leak


def outside_connections(trace: str) -> list[str]:
    """The lines of an `strace -f -e trace=network` log where a process reached past this
    machine: a connection to an address that is not its own, other than the one Ray uses to
    learn its own address (a UDP socket "connected" to a DNS server, from which nothing is sent);
    a DNS server counts as reached when anything is sent on a socket connected to it."""
    import ipaddress
    import re

    import psutil

    own = {address.address.split("%")[0] for addresses in psutil.net_if_addrs().values() for address in addresses}
    pattern = re.compile(r'^(\d+) +connect\((\d+), \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\),'
                         r'.*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")')
    to_dns: dict[tuple[str, str], str] = {}
    reached = []
    for line in trace.splitlines():
        found = pattern.match(line)
        if found:
            pid, descriptor, port, four, six = found.groups()
            address = ipaddress.ip_address(four or six)
            address = getattr(address, "ipv4_mapped", None) or address
            if address.is_loopback or str(address) in own:
                to_dns.pop((pid, descriptor), None)
            elif port == "53":
                to_dns[(pid, descriptor)] = line
            else:
                reached.append(line)
            continue
        sent = re.match(r"^(\d+) +send(?:to|msg|mmsg)\((\d+),", line)
        if sent and (sent.group(1), sent.group(2)) in to_dns:
            reached.append(to_dns.pop((sent.group(1), sent.group(2))))
    return reached


def test_score_with_ray_sends_nothing_out(tmp_path):
    """Issue 32: `score --ray` without --allow-download connected to a cloud metadata address
    (169.254.169.254) and looked up metadata.google.internal: Ray's head process probes for a
    cloud whatever its usage statistics setting. Every process Ray starts is traced."""
    import shutil

    import pytest

    pytest.importorskip("ray")
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed: the processes Ray starts cannot be traced")
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": f"text {i} here", "score": i / 10}) + "\n" for i in range(8)))
    trace = tmp_path / "trace.txt"
    environment = dict(os.environ)
    argv = [part.format(data=data, out=tmp_path / "out.jsonl") for part in SCORE]
    done = subprocess.run(["strace", "-f", "-qq", "-e", "trace=network", "-o", str(trace), sys.executable, "-m",
                           "gpu_neighbors.cli", *argv, "--ray"], env=environment, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()) == 8
    log = trace.read_text(encoding="utf-8", errors="replace")
    assert "connect(" in log  # the trace saw Ray's own connections
    assert outside_connections(log) == []
