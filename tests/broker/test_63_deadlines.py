"""`Deadlines`, the one timer behind every connection's CONNECT timeout and keep-alive: a
connection is called back at the first tick after its deadline, once, unless it was removed;
what files itself again from its callback is called back at its new tick."""

from __future__ import annotations

import asyncio
import random

from telemq.broker.core.deadlines import TICK, Bucket, Deadlines


class Recorder:
    def __init__(self, name: str, log: list[tuple[str, float]], loop: asyncio.AbstractEventLoop):
        self.name = name
        self.log = log
        self.loop = loop
        self.bucket: Bucket | None = None
        self.deadline_slot = 0  # kept by `Deadlines`
        self.again: float | None = None  # a deadline to file itself at when called back
        self.deadlines: Deadlines | None = None

    def deadline_reached(self, bucket: Bucket) -> None:
        assert bucket is self.bucket
        self.log.append((self.name, self.loop.time()))
        self.bucket = None
        if self.again is not None and self.deadlines is not None:
            due, self.again = self.again, None
            self.bucket = self.deadlines.file(self, due)


def test_connections_are_called_back_at_their_ticks_in_order() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        log: list[tuple[str, float]] = []
        now = loop.time()
        late = Recorder("late", log, loop)
        early = Recorder("early", log, loop)
        gone = Recorder("gone", log, loop)
        twice = Recorder("twice", log, loop)
        late.bucket = deadlines.file(late, now + 0.35)
        early.bucket = deadlines.file(early, now + 0.05)
        gone.bucket = deadlines.file(gone, now + 0.05)
        twice.bucket = deadlines.file(twice, now + 0.1)
        twice.again, twice.deadlines = now + 0.25, deadlines
        assert early.bucket is gone.bucket  # one tick, one bucket
        assert deadlines.filed == 4
        Deadlines.remove(gone, gone.bucket)
        while len(log) < 4:
            await asyncio.sleep(TICK / 2)
        assert [name for name, _ in log] == ["early", "twice", "twice", "late"]
        for name, at in log:
            due = {"early": 0.05, "late": 0.35}.get(name, 0.1)
            assert at >= now + due - 0.002, (name, at - now)
        assert [at for name, at in log if name == "twice"][1] >= now + 0.25 - 0.002
        assert deadlines.filed == 0
        deadlines.close()

    asyncio.run(main())


def test_removing_any_of_a_bucket_leaves_the_others_to_be_called_back_once() -> None:
    """A bucket is a list with each connection's place in it: a removal moves the last one
    into the hole, so every order of removals must leave exactly the rest."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        log: list[tuple[str, float]] = []
        due = loop.time() + 0.05
        recorders = [Recorder(str(n), log, loop) for n in range(60)]
        for recorder in recorders:
            recorder.bucket = deadlines.file(recorder, due)
        assert len({id(r.bucket) for r in recorders}) == 1
        gone = random.Random(3).sample(recorders, 35)
        for recorder in gone:
            assert recorder.bucket is not None
            Deadlines.remove(recorder, recorder.bucket)
            Deadlines.remove(recorder, recorder.bucket)  # twice: nothing more happens
        assert deadlines.filed == 25
        while len(log) < 25:
            await asyncio.sleep(TICK / 2)
        await asyncio.sleep(TICK * 2)
        left = sorted(r.name for r in recorders if r not in gone)
        assert sorted(name for name, _ in log) == left
        deadlines.close()

    asyncio.run(main())
