"""Summarise a py-spy raw profile (`py-spy record -f raw`): seconds per thread, and the functions with the most
samples inclusive and self. Usage: summarise.py PROFILE.raw RATE_HZ [TOP]"""
import re, sys
from collections import Counter
path, rate = sys.argv[1], float(sys.argv[2])
top = int(sys.argv[3]) if len(sys.argv) > 3 else 35
inclusive, selfs, roots = Counter(), Counter(), Counter()
total = 0
for line in open(path):
    stack, _, count = line.rstrip("\n").rpartition(" ")
    count = int(count); total += count
    frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
    roots["reader thread" if "Thread._bootstrap" in frames[0] else "main thread"] += count
    for f in set(frames):
        inclusive[f] += count
    selfs[frames[-1]] += count
ms = 1000 / rate
print(f"{total} samples at {rate:g} Hz = {total * ms / 1000:.2f} s sampled")
for name, count in roots.most_common():
    print(f"  {name}: {count * ms / 1000:.2f} s")
print(f"\ninclusive (top {top}): seconds  share  function (file)")
for name, count in inclusive.most_common(top):
    if "<frozen" in name: continue
    print(f"  {count * ms / 1000:7.2f}  {count / total:5.1%}  {name}")
print(f"\nself (top {top}): seconds  share  function (file)")
for name, count in selfs.most_common(top):
    print(f"  {count * ms / 1000:7.2f}  {count / total:5.1%}  {name}")
