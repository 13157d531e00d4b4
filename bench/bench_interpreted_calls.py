"""A census of the interpreted Python calls a broker makes per message (not a test).

``python bench/bench_interpreted_calls.py [--qos 0,1,2] [--window 10] [--seconds 2] [--top 12]``

In the compiled build (docs/performance.md, "the compiled build") the per-message path is C,
and every call it still makes into interpreted Python costs a frame: 0.1 to 0.3 us, a few
percent of a QoS 2 message each. The profiler does not show them well (their time is spread
over the interpreter's own functions), so this counts them. For each QoS a broker runs as a
subprocess of this script, with the default store (SQLite, here `sync = "normal"`), under
`sys.setprofile` on the event loop's thread, which sees a call into Python code whoever makes
it (compiled code makes no Python call event of its own); the commits the loop runs itself
are counted, the writer thread's are not. bench_broker.py's clients drive it over loopback: one
publisher with a window of `--window` messages, one subscriber at the same QoS. Calls are
counted only during the measured run, then divided by the messages delivered, and printed by
function (a dataclass's generated `__init__` is named after its class: its code is "<string>").

The counts describe the build the broker imports: run it from an installed compiled build
(or with PYTHONPATH at one) to see what is left there; from the source every call is
interpreted and the census is the whole per-message path. A store's commit is counted once
per batch: its share per message shrinks as batches grow.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

HOST = "127.0.0.1"


def serve_with_census(census_file: str, telemq_args: list[str]) -> int:
    """The broker process: telemq's CLI under a call counter that SIGUSR1 starts and
    SIGUSR2 stops, writing the counts to `census_file` as JSON."""
    counts: collections.Counter[str] = collections.Counter()

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = code.co_qualname
        if code.co_filename == "<string>":  # made by exec: a dataclass's generated method
            owner = frame.f_locals.get("self")
            name = f"{type(owner).__qualname__}.{code.co_name} (generated)"
        where = code.co_filename.rpartition("/telemq/")[2] if "/telemq/" in code.co_filename else ""
        counts[f"{where}:{name}" if where else name] += 1

    def start(signum: int, frame: FrameType | None) -> None:
        counts.clear()
        sys.setprofile(count)  # the event loop's thread: signals are handled there

    def stop(signum: int, frame: FrameType | None) -> None:
        sys.setprofile(None)
        Path(census_file).write_text(json.dumps(dict(counts)))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from telemq.cli.main import main as telemq_main

    sys.argv = ["telemq", *telemq_args]
    return telemq_main()


def census(qos: int, window: int, seconds: float) -> tuple[int, dict[str, int]]:
    """Messages delivered in the measured run, and the calls counted meanwhile."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_broker import free_port, run_load

    with tempfile.TemporaryDirectory(prefix="telemq-census-") as scratch:
        port = free_port()
        census_file = Path(scratch) / "census.json"
        broker = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve-with-census",
                str(census_file),
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(Path(scratch) / "data"),
                "--sync",
                "normal",
                "--log-level",
                "warning",
            ],
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, broker)
            asyncio.run(run_load(port, qos, 1, window, min(seconds, 0.5)))  # warm up
            broker.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
            sent, _, tally = asyncio.run(run_load(port, qos, 1, window, seconds))
            broker.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 10
            while not census_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            counts: dict[str, int] = json.loads(census_file.read_text())
        finally:
            broker.terminate()
            broker.wait(10)
    if qos and tally.received < sent:
        raise SystemExit(f"QoS {qos}: {sent - tally.received} of {sent} messages lost")
    return tally.received, counts


def wait_for_port(port: int, broker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if broker.poll() is not None:
            raise SystemExit(f"the broker exited with {broker.returncode}")
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the broker did not start")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-with-census":
        return serve_with_census(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--qos", default="0,1,2", help="comma-separated QoS levels")
    parser.add_argument("--window", type=int, default=10, help="messages in flight")
    parser.add_argument("--seconds", type=float, default=2.0, help="the measured run")
    parser.add_argument("--top", type=int, default=12, help="functions listed per QoS")
    args = parser.parse_args()
    import telemq

    build = "compiled" if telemq.compiled() else "pure Python"
    print(f"telemq {build} build, window {args.window}, {args.seconds:g} s per QoS")
    for qos in (int(level) for level in args.qos.split(",")):
        delivered, counts = census(qos, args.window, args.seconds)
        total = sum(counts.values())
        print(
            f"\nQoS {qos}: {delivered} messages, {total / max(delivered, 1):.2f} interpreted"
            " calls per message"
        )
        for name, calls in sorted(counts.items(), key=lambda item: -item[1])[: args.top]:
            print(f"  {calls / max(delivered, 1):8.3f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
