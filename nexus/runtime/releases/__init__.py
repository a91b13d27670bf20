"""Catalog releases as Runtime takes them: the release API (`endpoints`), preparing and
activating a release under a fencing token (`service`), and the runtime-api replicas that
acknowledge each CatalogRevision (`replicas`)."""
