"""Runtime metadata: immutable definition versions with active pointers, applied atomically."""
