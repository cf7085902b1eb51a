"""What the PRD core costs the loop per transition, on the largest PRD allowed.

    PYTHONPATH=. .venv/bin/python bench/prd_files.py [--stories 500] [--rounds 50]

A PRD of ``--stories`` stories (100-character titles, 1 000-character descriptions, three
criteria each: about 0.8 MB of ``prd.json`` at 500) is created in a temporary project; then, each
``--rounds`` times: ``load_prd`` (link-free open, size cap, JSON, validation), ``save_prd``
(temporary file, fsync, rename, fsync of the directory) and the pure ops of one story
(``next_story`` + ``mark_in_progress`` + ``mark_passed``). Prints the median of each in ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from jidocode.services.prd import ops
from jidocode.services.prd.files import PrdPaths, create_prd, load_prd, save_prd
from jidocode.services.prd.model import Prd, UserStory


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stories", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    stories = [
        UserStory(
            id=f"US-{i:03d}",
            title="t" * 100,
            description="d" * 1000,
            acceptance_criteria=["c" * 100] * 3,
            priority=i % 7,
        )
        for i in range(args.stories)
    ]
    prd = Prd(name="bench", title="Bench", user_stories=stories)
    with tempfile.TemporaryDirectory() as tmp:
        paths = PrdPaths(Path(tmp), "bench")
        create_prd(paths, prd)
        size = paths.prd_json.stat().st_size

        def one_story() -> Prd:
            story = ops.next_story(prd)
            assert story is not None
            return ops.mark_passed(ops.mark_in_progress(prd, story.id), story.id)

        load = _median_ms(lambda: load_prd(paths.prd_json), args.rounds)
        save = _median_ms(lambda: save_prd(paths.prd_json, prd), args.rounds)
        pure = _median_ms(one_story, args.rounds)
    print(f"{args.stories} stories, prd.json {size} bytes, median of {args.rounds}:")
    print(f"  load_prd                                   {load:8.2f} ms")
    print(f"  save_prd (fsync, rename, fsync dir)        {save:8.2f} ms")
    print(f"  next_story + mark_in_progress + mark_passed {pure:7.2f} ms")


if __name__ == "__main__":
    main()
