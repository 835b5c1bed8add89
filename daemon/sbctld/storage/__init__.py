"""Append-only partition logs (daemon/README.md §21): segments, journal, index, recovery, sync."""

from sbctld.storage.log import PartitionLog, State
from sbctld.storage.sync import Syncer

__all__ = ["PartitionLog", "State", "Syncer"]
