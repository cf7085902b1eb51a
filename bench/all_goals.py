"""The four ratio goals of issue 27 in one run, with the machine's load average.

    python bench/all_goals.py [--quick]

Runs, one after the other, ``bench/turn.py`` (one-tool turn ÷ minimal loop, goal ≤ 1.15;
200 concurrent conversations ÷ minimal, goal ≥ 0.9; NATS messages per one-tool turn, goal
≤ 25), ``bench/bus.py`` (request/reply ÷ raw nats-py, goal ≤ 1.3) and the 5,000-entry part
of ``bench/conversation.py`` (a one-tool turn after 5,000 entries ÷ fresh, goal ≤ 1.2),
then prints the four ratios, the message count and the 1-minute load average before and
after. ``--quick`` runs smaller samples (a smoke run, not figures to report). Each
script's own output is printed as it comes.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Goal:
    name: str
    script: str
    pattern: str
    goal: float
    at_most: bool


GOALS = (
    Goal(
        "one-tool turn / minimal loop", "turn", r"ratio \(median\): ([0-9.]+)\s+\(goal <= 1\.15\)", 1.15, True
    ),
    Goal("200 concurrent / minimal", "turn", r"ratio \(system / minimal\): ([0-9.]+)", 0.9, False),
    Goal("NATS messages per one-tool turn", "turn", r"NATS messages per one-tool turn: ([0-9.]+)", 25, True),
    Goal("bus request/reply / raw nats-py", "bus", r"ratio \(median\)\s+: ([0-9.]+)", 1.3, True),
    Goal(
        "5,000-entry conversation / fresh",
        "conversation",
        r"entries: ratio ([0-9.]+) \(goal <= 1\.2\)",
        1.2,
        True,
    ),
)


def commands(quick: bool) -> dict[str, list[str]]:
    """The command line of each script (``quick``: small samples)."""
    turn = ["--rounds", "2", "--per-round", "5", "--concurrent", "20"] if quick else []
    bus = ["--rounds", "2", "--per-round", "100"] if quick else []
    conversation = ["--journal", "500", "--latency", "20", "--burst", "50", "--conversations", "5"]
    conversation += ["--per-conv", "2", "--past", "10", "--restarts", "1", "--long", "5000"]
    conversation += ["--turns", "10" if quick else "40"]
    return {
        "turn": [*turn, "--services", "processes"],
        "bus": [*bus, "--loop", "asyncio"],
        "conversation": conversation,
    }


def run(script: str, args: list[str]) -> str:
    """Run ``bench/<script>.py`` with ``args``; its output (also printed)."""
    print(f"=== python bench/{script}.py {' '.join(args)}", flush=True)
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), *args], capture_output=True, text=True, check=False
    )
    print(done.stdout, end="", flush=True)
    if done.returncode != 0:
        print(f"bench/{script}.py exited {done.returncode}:\n{done.stderr[-2000:]}", flush=True)
    return done.stdout


def main(quick: bool) -> int:
    load_before = os.getloadavg()[0]
    outputs = {script: run(script, args) for script, args in commands(quick).items()}
    load_after = os.getloadavg()[0]
    print(f"=== one run, load average (1 min) {load_before:.2f} before, {load_after:.2f} after")
    missing = 0
    for goal in GOALS:
        found = re.search(goal.pattern, outputs[goal.script])
        if found is None:
            print(f"  {goal.name:36s}: not measured (see bench/{goal.script}.py's output)")
            missing += 1
            continue
        value = float(found.group(1))
        met = value <= goal.goal if goal.at_most else value >= goal.goal
        sign = "<=" if goal.at_most else ">="
        print(f"  {goal.name:36s}: {value:7.2f}  (goal {sign} {goal.goal:g}: {'met' if met else 'NOT met'})")
    return 1 if missing else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small samples: a smoke run")
    sys.exit(main(parser.parse_args().quick))
