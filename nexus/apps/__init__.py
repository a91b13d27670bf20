"""L1 Apps. They import only `nexus.contracts` and generic `nexus.platform` mechanisms."""
