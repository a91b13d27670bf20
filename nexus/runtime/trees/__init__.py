"""Record trees: create parents with their children (`records/tree`), read a relationship
(`records/related`)."""
