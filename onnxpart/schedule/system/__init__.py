"""The heterogeneous system both schedule objectives run on: devices and links (:mod:`.model`), the
``--system`` file (:mod:`.system_file`), measured op times (:mod:`.measured`, :mod:`.batch_curve`) and the
per-device op times (:mod:`.costs`)."""

from onnxpart.schedule.system.model import Device, Link, System
from onnxpart.schedule.system.system_file import load_system

__all__ = ["Device", "Link", "System", "load_system"]
