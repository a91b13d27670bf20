"""The database layer every role uses.

engine.py     async engines (SQLite, MySQL/MariaDB/TiDB), units of work, read-only reads
clock.py      the database clock (`db_now_ms()` in SQL, `read_now_ms()` in a transaction)
backend.py    what differs per backend: capability flags and portable statement helpers
fast_sql.py   hot statements compiled once, straight to sqlite3 on the loop for SQLite
sqlite/       the SQLite fast lane: the driver on the event loop (on_loop), write turns
              across processes (writes), WAL checkpoints off the writers' path
              (checkpoints), whole write transactions on a kept sqlite3 connection
              (batch)
"""
