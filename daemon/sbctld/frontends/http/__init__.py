"""The HTTP endpoint: management API, REST data plane, health (daemon/README.md §30)."""
