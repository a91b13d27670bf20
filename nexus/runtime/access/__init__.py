"""Authorization, decided only here (`service`): a caller's access, row predicates, and the
permission-set assignments behind them (`repository`, `models`)."""
