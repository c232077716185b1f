#!/usr/bin/env python3
"""bench/trace_overlap.py TRACE.json... — how much of fully_shard's all-gathers ran under compute.

An all-gather is a "comm" span named "all_gather #…". It runs on the communicator's thread, or,
when the transport runs a collective issued to an idle queue in the caller's thread (shm's
inline_when_idle), on the training thread itself, blocking it. The training thread waits for an
all-gather only at its unit ("wait all-gather <unit>", category "fsdp"). Exposed all-gather time
is what the training thread spent waiting or running all-gathers itself; the rest was hidden:
    hidden = 1 − (Σ waits + Σ all-gathers on the training thread) / Σ all-gathers.
(A wait also covers collectives queued ahead of the all-gather, so `hidden` can go below 0.)
"""
import json
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    waits = [e for e in events if e.get("cat") == "fsdp" and e["name"].startswith("wait all-gather")]
    training = {e["tid"] for e in waits}
    gathers = [e for e in events if e.get("cat") == "comm" and e["name"].startswith("all_gather")]
    total = sum(e["dur"] for e in gathers) / 1e3
    inline = sum(e["dur"] for e in gathers if e["tid"] in training) / 1e3
    waited = sum(e["dur"] for e in waits) / 1e3
    hidden = 1 - (waited + inline) / total if total > 0 else float("nan")
    print(f"{path}: {len(gathers)} all-gathers {total:.1f} ms ({inline:.1f} on the training "
          f"thread), waited {waited:.1f} ms: {hidden:.0%} under compute")
