"""Sub-tracking: ``SubTracker`` and ``@sub_track`` log when named code blocks start and stop;
``SubTrackingAnalyzer`` joins those times with a ``Tracker``'s ``tracking_file`` into per-block
figures. gpu_tracker 5.0.1's names, rows and file formats; no pandas needed (results are pandas
objects when pandas is importable, plain dicts otherwise)."""
from __future__ import annotations

import dataclasses as dc
import functools
import inspect
import math
import os
import time

from . import _files

START, STOP = 0, 1
STATS = ('min', 'max', 'mean', 'std')


class SubTracker:
    """A ``with`` block whose start and stop are logged, one row each (process id, code block
    name, position 0 = start / 1 = stop, Unix timestamp), to ``sub_tracking_file`` (.csv or
    .sqlite; default ``<pid>.csv``). The name defaults to ``<relative path>:<line>`` of the
    caller, or ``<relative path>:<code_block_attribute>``."""

    def __init__(self, code_block_name: str | None = None, code_block_attribute: str | None = None,
                 sub_tracking_file: str | None = None, overwrite: bool = False):
        if code_block_name is None:
            caller = inspect.stack()[1]
            where = caller.lineno if code_block_attribute is None else code_block_attribute
            code_block_name = f'{os.path.relpath(caller.filename)}:{where}'
        self.code_block_name = code_block_name
        self.process_id = os.getpid()
        self.sub_tracking_file = f'{self.process_id}.csv' if sub_tracking_file is None else os.fspath(sub_tracking_file)
        _files.check_name(self.sub_tracking_file)
        self._overwrite = overwrite

    def _log(self, position: int):
        row = {'process_id': self.process_id, 'code_block_name': self.code_block_name, 'position': position,
               'timestamp': time.time()}
        _files.append_row(self.sub_tracking_file, row, self._overwrite)

    def __enter__(self):
        self._log(START)
        return self

    def __exit__(self, *_):
        self._log(STOP)


def sub_track(code_block_name: str | None = None, code_block_attribute: str | None = None,
              sub_tracking_file: str | None = None, overwrite: bool = False):
    """Decorator: each call of the function is a sub-tracked block, named by default
    ``<absolute path>:<function name>``."""
    def wrap(func):
        name = code_block_name
        if name is None:
            where = func.__name__ if code_block_attribute is None else code_block_attribute
            name = f'{os.path.abspath(inspect.stack()[1].filename)}:{where}'

        @functools.wraps(func)
        def tracked(*args, **kwargs):
            with SubTracker(code_block_name=name, sub_tracking_file=sub_tracking_file, overwrite=overwrite):
                return func(*args, **kwargs)
        return tracked
    return wrap


def _pandas():
    try:
        import pandas
        return pandas
    except ImportError:
        return None


def _stats(values: list[float]) -> dict:
    """min, max, mean and population standard deviation (NaN for none)."""
    if not values:
        return {k: math.nan for k in STATS}
    lo, hi = float(min(values)), float(max(values))
    mean = min(max(math.fsum(values) / len(values), lo), hi)  # no rounding past the extremes
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return {'min': lo, 'max': hi, 'mean': mean, 'std': math.sqrt(var)}


def _table(rows: list[dict], columns: list[str]):
    """Per-column statistics: a DataFrame (columns min/max/mean/std, one row per column of the
    samples) with pandas, else ``{column: {stat: value}}``."""
    table = {c: _stats([float(r[c]) for r in rows]) for c in columns}
    pd = _pandas()
    return pd.DataFrame.from_dict(table, orient='index', columns=list(STATS)) if pd else table


def _series(d: dict):
    pd = _pandas()
    return pd.Series(d) if pd else d


def _as_dict(x) -> dict:
    if isinstance(x, dict):
        return x
    if hasattr(x, 'iterrows'):
        return {i: row.to_dict() for i, row in x.iterrows()}
    return x.to_dict()


def _stat_lines(table: dict, indent: str = '\t') -> str:
    width = max((len(k) for k in table), default=0)
    head = indent + ' ' * width + ''.join(f'{s:>12}' for s in STATS)
    rows = [indent + k.ljust(width) + ''.join(f'{v[s]:12.6g}' for s in STATS) for k, v in table.items()]
    return '\n'.join([head] + rows)


@dc.dataclass
class CodeBlockResults:
    """Figures of one sub-tracked code block over all its calls."""
    name: str
    num_timepoints: int
    num_calls: int
    num_non_empty_calls: int
    compute_time: object
    resource_usage: object


@dc.dataclass
class SubTrackingResults:
    """Figures over all samples, the tracking file's static data, and each code block's."""
    overall: object
    static_data: object
    code_block_results: list

    def __str__(self) -> str:
        doc = self.to_json()
        out = ['Overall:', _stat_lines(doc['overall']), 'Static Data:']
        out += [f'\t{k}: {v}' for k, v in doc['static_data'].items()]
        out.append('Code Block Results:')
        for block in doc['code_block_results']:
            out.append(f"\tName: {block['name']}")
            for key in ('num_timepoints', 'num_calls', 'num_non_empty_calls'):
                out.append(f"\t{key.replace('_', ' ').capitalize()}: {block[key]}")
            out.append('\tCompute Time:')
            out += [f'\t\t{k}: {v:.6g}' for k, v in block['compute_time'].items()]
            out += ['\tResource Usage:', _stat_lines(block['resource_usage'], '\t\t')]
        return '\n'.join(out)

    def to_json(self) -> dict:
        """The results as plain dicts."""
        return {
            'overall': _as_dict(self.overall),
            'static_data': _as_dict(self.static_data),
            'code_block_results': [
                {'name': c.name, 'num_timepoints': c.num_timepoints, 'num_calls': c.num_calls,
                 'num_non_empty_calls': c.num_non_empty_calls, 'compute_time': _as_dict(c.compute_time),
                 'resource_usage': _as_dict(c.resource_usage)}
                for c in self.code_block_results],
        }


def _pairs(rows: list[dict], name: str) -> list[tuple[float, float]]:
    """(start, stop) times of each call of block ``name``; a last start with no stop (a block
    still running) is left out."""
    mine = sorted((r for r in rows if r['code_block_name'] == name),
                  key=lambda r: (r['process_id'], r['timestamp'], r['position']))
    by_pid: dict[int, list[dict]] = {}
    for r in mine:
        by_pid.setdefault(r['process_id'], []).append(r)
    pairs = []
    for pid, logs in by_pid.items():
        if logs and logs[-1]['position'] == START:
            logs = logs[:-1]
        for a, b in zip(logs[0::2], logs[1::2]):
            if a['position'] != START or b['position'] != STOP:
                raise ValueError(f'Sub-tracking file is invalid: block {name!r} of process {pid} has a stop '
                                 f'without a start near {a["timestamp"]}.')
            pairs.append((float(a['timestamp']), float(b['timestamp'])))
        if len(logs) % 2:
            raise ValueError(f'Sub-tracking file is invalid: block {name!r} of process {pid} is unbalanced.')
    return pairs


class SubTrackingAnalyzer:
    """Per-code-block figures from a ``Tracker``'s ``tracking_file`` and a sub-tracking file."""

    def __init__(self, tracking_file: str | None, sub_tracking_file: str):
        for f in (tracking_file, sub_tracking_file):
            if f is not None:
                _files.check_name(f)
        self._tracking_file = tracking_file
        self._sub_tracking_file = sub_tracking_file

    def _samples(self) -> tuple[dict, list[dict]]:
        return _files.read_tracking_file(self._tracking_file)

    def read_static_data(self):
        """Units, capacities and counts from the tracking file."""
        return _series(self._samples()[0])

    def load_code_block_names(self) -> list[str]:
        """The names of the sub-tracked blocks, sorted."""
        return sorted({r['code_block_name'] for r in _files.read_rows(self._sub_tracking_file)})

    def load_timestamp_pairs(self, code_block_name: str) -> list[tuple[float, float]]:
        """(start, stop) of each call of a block."""
        return _pairs(_files.read_rows(self._sub_tracking_file), code_block_name)

    def combine_sub_tracking_files(self, files: list[str]):
        """Writes the rows of several sub-tracking files (several processes') into this
        analyzer's sub-tracking file, which must not exist yet."""
        if os.path.exists(self._sub_tracking_file):
            raise ValueError(f'Cannot create sub-tracking file {self._sub_tracking_file}: it already exists.')
        ext = _files.check_name(self._sub_tracking_file)
        for f in files:
            if not f.endswith(ext):
                raise ValueError(f'File {f} does not end in "{ext}" as {self._sub_tracking_file} does.')
        for f in files:
            for row in _files.read_rows(f):
                _files.append_row(self._sub_tracking_file, row, False)

    def sub_tracking_results(self) -> SubTrackingResults:
        """Statistics (min, max, mean, std) of every sampled figure over the whole run and within
        each block's calls, with each block's call count and call durations."""
        static, samples = self._samples()
        columns = [c for c in (samples[0].keys() if samples else []) if c != 'timestamp']
        subs = _files.read_rows(self._sub_tracking_file)
        blocks = []
        for name in sorted({r['code_block_name'] for r in subs}):
            pairs = _pairs(subs, name)
            durations = [b - a for a, b in pairs]
            compute_time = _stats(durations)
            compute_time['total'] = sum(durations)
            inside = [s for s in samples if any(a <= s['timestamp'] <= b for a, b in pairs)]
            non_empty = sum(1 for a, b in pairs if any(a <= s['timestamp'] <= b for s in samples))
            blocks.append(CodeBlockResults(
                name=name, num_timepoints=len(inside), num_calls=len(pairs), num_non_empty_calls=non_empty,
                compute_time=_series(compute_time), resource_usage=_table(inside, columns)))
        return SubTrackingResults(_table(samples, columns), _series(static), blocks)
