"""The SQLite fast lane (ADRs 0045-0059, in one place): the sqlite3 driver on the event loop
(`on_loop`), one queue of write transactions per file across processes (`writes`), and WAL
checkpoints taken off the writers' path (`checkpoints`)."""
