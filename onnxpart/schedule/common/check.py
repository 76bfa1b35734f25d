"""What checking both objectives' output folders shares (``--check-certificate``): the manifest's
entries as read-back schemas, the certificate's ``--max-pieces``, the closed-form bounds re-derived, and
how a difference names its entry. Each objective's :mod:`check` rebuilds its schedule from the manifest
without trusting the code that made it (:mod:`onnxpart.schedule.latency.check`,
:mod:`onnxpart.schedule.throughput.check`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from onnxpart.certificate import Certificate
from onnxpart.certificate_check import ModelRef
from onnxpart.validate import Count, NonNegative, ReadBackSchema, validate as read_as


class OpEntry(ReadBackSchema):
    name: str
    device: str
    start: NonNegative
    end: NonNegative


class TransferEntry(ReadBackSchema):
    src_op: str
    dst_op: str
    from_: str = Field(alias="from")
    to: str
    start: NonNegative
    end: NonNegative
    bytes: NonNegative


class DeviceEntry(ReadBackSchema):
    name: str
    busy: NonNegative
    ops: Count
    memory: NonNegative
    capacity: NonNegative | None


class Manifest(ReadBackSchema):
    """What both objectives' ``manifest.json`` (``onnxpart.schedule-manifest/1``) hold."""

    model: ModelRef
    method: str
    makespan: NonNegative
    pieces: list[dict[str, Any]]
    devices: list[DeviceEntry]


class _Options(ReadBackSchema):
    max_pieces: Annotated[int, Field(ge=1)] | None = None


class CertificateDetails(ReadBackSchema):
    """The certificate's ``details`` the instance hash depends on (``--max-pieces``)."""

    options: _Options = Field(default_factory=_Options)


#: how the diff names the entries of the manifest's lists (a throughput entry by its device or inputs too)
ENTITIES = {
    "ops": lambda e: f"ops[{e.get('name')!r}" + (f"@{e.get('device')}" if "inputs" in e else "") + "]",
    "transfers": lambda t: (f"transfers['{t.get('src_op')}→{t.get('dst_op')} {t.get('from')}→{t.get('to')}"
                            + (f" inputs {t['inputs']}" if "inputs" in t else "") + "']"),
    "devices": lambda d: f"devices[{d.get('name')!r}]",
}


@dataclass
class CertificateCheck:
    upper_bound: float
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def max_pieces(cert: Certificate, where: str) -> int | None:
    """The ``--max-pieces`` the certificate was made with (part of its instance hash)."""
    details = read_as(CertificateDetails, cert.details, f"{Path(where).with_name('certificate.json')}: details")
    return details.options.max_pieces

