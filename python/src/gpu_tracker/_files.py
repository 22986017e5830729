"""Tabular files in gpu_tracker's two formats: CSV and SQLite (tables ``data`` and, for tracking
files, ``static_data``). Only rows are handled here; every figure in them comes from the
library's sampler."""
from __future__ import annotations

import csv
import os
import sqlite3

EXTENSIONS = ('.csv', '.sqlite')

# Files this process has already written rows to: later writers append to them instead of
# checking them against ``overwrite`` again (several SubTrackers share one file).
_written: set[str] = set()


def check_name(path: str) -> str:
    """The file's extension, or ValueError when it is neither .csv nor .sqlite."""
    for ext in EXTENSIONS:
        if str(path).endswith(ext):
            return ext
    raise ValueError(f'Invalid file name: "{path}". Valid file extensions are ".csv" and ".sqlite".')


def check_overwrite(path: str, overwrite: bool) -> None:
    """FileExistsError when ``path`` exists and may not be replaced; removes it when it may."""
    if os.path.isfile(path):
        if not overwrite:
            raise FileExistsError(f'File {path} already exists. Set overwrite to True to overwrite the existing file.')
        os.remove(path)


def _sql_type(value) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return 'INTEGER'
    if isinstance(value, float):
        return 'FLOAT'
    return 'VARCHAR'


def _sqlite_insert(path: str, table: str, rows: list[dict]) -> None:
    if not rows:
        return
    cols = list(rows[0].keys())
    with sqlite3.connect(path) as db:
        spec = ', '.join(f'"{c}" {_sql_type(rows[0][c])}' for c in cols)
        db.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({spec})')
        marks = ', '.join('?' for _ in cols)
        db.executemany(f'INSERT INTO "{table}" VALUES ({marks})', [tuple(r[c] for c in cols) for r in rows])
    db.close()


def append_row(path: str, row: dict, overwrite: bool) -> None:
    """Appends one row (a dict, keys in column order) to a CSV or SQLite file: the first write of
    this process to ``path`` checks ``overwrite`` and writes the header or creates the table."""
    ext = check_name(path)
    key = os.path.abspath(path)
    first = key not in _written
    if first:
        check_overwrite(path, overwrite)
        _written.add(key)
    elif not os.path.isfile(path):
        raise FileNotFoundError(f'The file {path} was removed while rows were being written to it.')
    if ext == '.sqlite':
        _sqlite_insert(path, 'data', [row])
        return
    with open(path, 'a', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(row.keys()))
        if first:
            writer.writeheader()
        writer.writerow(row)


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _read_csv(lines: list[str]) -> list[dict]:
    return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(lines)]


def tracking_csv_to_sqlite(csv_path: str, sqlite_path: str) -> None:
    """Copies a tracking file written as CSV by the library (static data, then samples) into
    gpu_tracker's SQLite layout."""
    static, samples = read_tracking_file(csv_path)
    _sqlite_insert(sqlite_path, 'static_data', [static])
    _sqlite_insert(sqlite_path, 'data', samples)


def _read_table(path: str, table: str) -> list[dict]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        try:
            rows = [dict(r) for r in db.execute(f'SELECT * FROM "{table}"')]
        except sqlite3.OperationalError:
            rows = []
    db.close()
    return rows


def read_tracking_file(path: str) -> tuple[dict, list[dict]]:
    """The static data and the sample rows of a tracking file."""
    if check_name(path) == '.sqlite':
        static = _read_table(path, 'static_data')
        return (static[0] if static else {}), _read_table(path, 'data')
    with open(path, newline='') as f:
        lines = f.read().splitlines()
    static = _read_csv(lines[:2])
    return (static[0] if static else {}), _read_csv(lines[2:])


def read_rows(path: str) -> list[dict]:
    """All rows of a sub-tracking file."""
    if check_name(path) == '.sqlite':
        return _read_table(path, 'data')
    with open(path, newline='') as f:
        return _read_csv(f.read().splitlines())
