"""A child process for the crash tests: appends from many threads until it is killed.

Usage: ``python crash_writer.py DATA_DIR CYCLE THREADS``. Every returned append is printed as one
JSON line on stdout and flushed before the thread appends again, so a line the parent has read is
an acknowledged (committed) append. Each event is a ``run.output`` whose ``run_id`` names the
append (``cycle.thread.i``), ``turn`` its index in the append and ``text`` the append's size, so
the parent can tell a whole append from a partly written one.

Streams: ``shared/0..2`` (every thread, ``expected_seq=None``), ``contended`` (every thread, exact
expected seqs, retried on conflict) and ``own/<cycle>/<thread>`` (one thread, exact seqs).
"""

from __future__ import annotations

import json
import random
import sys
import threading
from pathlib import Path

from events import ConcurrencyConflict, Journal, NodeKey
from events.catalog import RunOutput


def main() -> None:
    data, cycle, threads = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    key = NodeKey.load_or_create(data / "node.key")
    journal = Journal(data / "journal.db", node_key=key, checkpoint_every_events=64)
    out = threading.Lock()

    def emit(record: dict[str, object]) -> None:
        line = json.dumps(record) + "\n"
        with out:
            sys.stdout.write(line)
            sys.stdout.flush()

    def worker(thread: int) -> None:
        rng = random.Random(cycle * 1000 + thread)
        own_next = 0
        i = 0
        while True:
            i += 1
            size = rng.randint(1, 3)
            name = f"{cycle}.{thread}.{i}"
            events = [RunOutput(run_id=name, turn=k, text=str(size)) for k in range(size)]
            choice = rng.random()
            if choice < 0.4:
                stream = f"shared/{rng.randint(0, 2)}"
                result = journal.append(stream, events, expected_seq=None, idempotency_key=name)
            elif choice < 0.6:
                stream = "contended"
                while True:
                    try:
                        result = journal.append(
                            stream,
                            events,
                            expected_seq=journal.stream_next_seq(stream),
                            idempotency_key=name,
                        )
                        break
                    except ConcurrencyConflict:
                        continue
            else:
                stream = f"own/{cycle}/{thread}"
                result = journal.append(stream, events, expected_seq=own_next)
                own_next = result.next_seq
            emit(
                {
                    "name": name,
                    "stream": result.stream,
                    "first_position": result.first_position,
                    "last_position": result.last_position,
                    "first_seq": result.first_seq,
                    "event_ids": list(result.event_ids),
                }
            )

    workers = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()


if __name__ == "__main__":
    main()
