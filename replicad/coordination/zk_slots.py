"""How many pipelines one worker leads at once (coordination.zookeeper.max_pipelines)."""

from __future__ import annotations

import asyncio

from replicad.coordination.zk_leadership import Leadership


class LeadershipSlots:
    """How many pipelines this worker may lead at once (coordination.zookeeper.max_pipelines).

    A slot is taken by *winning*, not by campaigning: candidates for every pipeline queue while
    a slot is free, and withdraw once the worker is full (see `campaign_with_slot`).
    """

    def __init__(self, max_pipelines: int) -> None:
        if max_pipelines < 1:
            raise ValueError("max_pipelines must be at least 1")
        self.capacity = max_pipelines
        self.held = 0
        self._changed = asyncio.Event()

    @property
    def full(self) -> bool:
        return self.held >= self.capacity

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def try_acquire(self) -> bool:
        if self.full:
            return False
        self.held += 1
        self._notify()
        return True

    def release(self) -> None:
        if self.held <= 0:
            raise RuntimeError("release() without a held slot")
        self.held -= 1
        self._notify()

    async def wait_free(self) -> None:
        while self.full:
            await self._changed.wait()

    async def wait_full(self) -> None:
        while not self.full:
            await self._changed.wait()


async def campaign_with_slot(leadership: Leadership, slots: LeadershipSlots) -> int:
    """Campaign for one pipeline within the worker's capacity; returns the epoch once this
    worker leads it *and* holds a slot. The caller releases the slot after it stops leading
    (after `resign()` or a loss).

    While all slots are taken the worker is no candidate at all (it would only win to resign);
    a win that races the last slot away is resigned at once and the campaign waits again.
    """
    while True:
        await slots.wait_free()
        campaign = asyncio.ensure_future(leadership.campaign())
        full = asyncio.ensure_future(slots.wait_full())
        try:
            await asyncio.wait({campaign, full}, return_when=asyncio.FIRST_COMPLETED)
            if not campaign.done():
                campaign.cancel()  # full meanwhile: withdraw the candidacy
                await asyncio.wait({campaign})
        finally:
            full.cancel()
            if not campaign.done():  # we are being cancelled ourselves
                campaign.cancel()
        if campaign.cancelled():
            leadership._log.info("zk_candidacy_withdrawn", reason="no free slot")
            continue
        epoch = campaign.result()  # raises what the campaign raised (operator errors)
        if slots.try_acquire():
            return epoch
        leadership._log.info("zk_capacity_resign", epoch=epoch, held=slots.held)
        await leadership.resign()
