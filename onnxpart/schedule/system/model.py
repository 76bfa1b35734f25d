"""The system: devices (copies expanded), the directed links between them, and routing.

A transfer of ``bytes`` over a link ``u → v`` takes ``latency + bytes / bandwidth`` seconds (the thesis's
``om_i / β_{u,v}`` plus a fixed latency; Ghannane 2023, Section 2.3). A missing link means no direct
transfer: the data is routed through one intermediate device ``w`` holding both links (store and
forward: ``delay(u,w) + delay(w,v)``, the faster route if several), or the transfer is impossible.
Links are contention-free (:mod:`onnxpart.schedule.common.instance` states the whole cost model).

A device switch costs the receiving device's ``switch`` seconds on top (:attr:`Device.switch`: the launch of
the session of the piece it starts there; default the spec's ``op_overhead``): every transfer into ``v``
arrives ``switch_v`` later, so every method pays for fragmenting a schedule into pieces where it does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnxpart.errors import UserError


@dataclass(frozen=True)
class Device:
    """One physical device (a copy of a group with ``count`` identical copies)."""

    name: str  # "a100", or "gpu:2" for the third copy of group "gpu"
    group: str  # the system file's device entry this copy comes from
    spec: Any  # a cost_models DeviceSpec, or None when costs are measured/given
    memory: float  # bytes
    batch_sizes: tuple[int, ...] = (1,)
    costs: tuple[tuple[int, str], ...] | None = None  # (batch size, measured costs file), ascending
    switch: float = 0.0  # seconds: a device switch onto this device (a piece's launch), paid by each transfer in


@dataclass(frozen=True)
class Link:
    """A directed link: ``delay(bytes) = latency + bytes / bandwidth`` seconds."""

    bandwidth: float  # bytes/s
    latency: float = 0.0  # s

    def delay(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth


@dataclass
class System:
    """Devices (copies expanded) and directed links between device indices (missing = no direct link)."""

    devices: list[Device]
    links: dict[tuple[int, int], Link] = field(default_factory=dict)
    files: tuple[Path, ...] = ()  # the system file and every file it names (what -o must not touch)

    @property
    def k(self) -> int:
        return len(self.devices)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def index(self, name: str) -> int:
        for u, d in enumerate(self.devices):
            if d.name == name:
                return u
        raise UserError(f"unknown device {name!r}: the system has {', '.join(self.names)}")

    def route(self, u: int, v: int, nbytes: float = 0.0) -> tuple[float, tuple[int, ...]]:
        """``(delay, path)`` of the fastest transfer of ``nbytes`` from ``u`` to ``v``: direct, or
        through one intermediate device having both links; ``(inf, ())`` if there is none."""
        if u == v:
            return 0.0, (u,)
        best: tuple[float, tuple[int, ...]] = (math.inf, ())
        switch = self.devices[v].switch
        if (u, v) in self.links:
            best = (self.links[(u, v)].delay(nbytes) + switch, (u, v))
        for w in range(self.k):
            if w in (u, v) or (u, w) not in self.links or (w, v) not in self.links:
                continue
            d = self.links[(u, w)].delay(nbytes) + self.links[(w, v)].delay(nbytes) + switch
            if d < best[0]:
                best = (d, (u, w, v))
        return best

    def switches(self) -> np.ndarray:
        """(K,) seconds: each device's switch cost (:attr:`Device.switch`)."""
        return np.array([d.switch for d in self.devices], dtype=float)

    def direct_links(self) -> tuple[np.ndarray, np.ndarray]:
        """(latency, 1/bandwidth) K×K arrays of the direct links (inf where there is none)."""
        lat = np.full((self.k, self.k), math.inf)
        inv_bw = np.full((self.k, self.k), math.inf)
        for (u, v), link in self.links.items():
            lat[u, v], inv_bw[u, v] = link.latency, 1.0 / link.bandwidth
        return lat, inv_bw

    def delay_matrix(self, nbytes: float, direct: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """K×K delays of :meth:`route` for ``nbytes``, the receiver's switch included (0 on the diagonal, inf
        where no route exists); ``direct`` is :meth:`direct_links`, passed in when called for many tensors."""
        lat, inv_bw = direct if direct is not None else self.direct_links()
        direct = lat + nbytes * inv_bw if nbytes else lat.copy()  # 0 bytes × no link (inf) is NaN, not inf
        np.fill_diagonal(direct, math.inf)
        hop = (direct[:, :, None] + direct[None, :, :]).min(axis=1)  # via one intermediate w
        best = np.minimum(direct, hop) + self.switches()[None, :]
        np.fill_diagonal(best, 0.0)
        return best
