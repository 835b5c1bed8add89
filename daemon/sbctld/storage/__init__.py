"""Append-only partition logs (DESIGN.md §2): segments, journal, index, recovery, sync."""

from sbctld.storage.log import PartitionLog, State
from sbctld.storage.sync import Syncer

__all__ = ["PartitionLog", "State", "Syncer"]
