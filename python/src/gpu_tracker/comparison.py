"""``TrackingComparison``: the sub-tracking results of several runs (pickled
``SubTrackingResults``), compared figure by figure and block by block, as in gpu_tracker 5.0.1.
Works on results holding pandas objects or plain dicts alike."""
from __future__ import annotations

import dataclasses as dc
import logging
import pickle

from .sub_tracker import STATS, SubTrackingResults, _series


def _line(name: str) -> str | None:
    """The line number a default block name ends in (``path:line``), if it does."""
    tail = name.rsplit(':', 1)[-1] if ':' in name else ''
    return tail if tail.isdigit() else None


def _ordered(results: SubTrackingResults) -> list:
    """Blocks by name, line numbers compared as numbers."""
    width = max((len(_line(b.name) or '') for b in results.code_block_results), default=0)

    def key(block):
        line = _line(block.name)
        return block.name if line is None else block.name.rsplit(':', 1)[0] + ':' + line.zfill(width)
    return sorted(results.code_block_results, key=key)


def _value(table, stat: str, measurement: str | None = None) -> float:
    """One statistic from a results table: a DataFrame/Series or this package's dicts."""
    if isinstance(table, dict):
        v = table[stat] if measurement is None else table[measurement][stat]
    else:
        v = table[stat] if measurement is None else table[stat][measurement]
    return float(v)


def _ranked(values: dict):
    """Sessions by value, smallest first (a Series with pandas)."""
    return _series(dict(sorted(values.items(), key=lambda kv: kv[1])))


@dc.dataclass
class ComparisonResults:
    """Per figure, per block and figure, and per block's compute time: each session's value."""
    overall_resource_usage: dict
    code_block_resource_usage: dict
    code_block_compute_time: dict

    def to_json(self) -> dict:
        def plain(x):
            return {k: plain(v) for k, v in x.items()} if hasattr(x, 'items') else x
        return plain(dc.asdict(self))


class TrackingComparison:
    """Loads pickled ``SubTrackingResults`` (``{session name: file}``) and checks that they hold
    the same code blocks; ``compare()`` sets them side by side. Blocks are matched by name, or by
    position where their default names differ only in the line number (with a warning)."""

    def __init__(self, file_path_map: dict[str, str]):
        self._first = sorted(file_path_map)[0]
        self.results_map: dict[str, SubTrackingResults] = {}
        for name, path in file_path_map.items():
            with open(path, 'rb') as f:
                self.results_map[name] = pickle.load(f)
        first = _ordered(self.results_map[self._first])
        for name, results in self.results_map.items():
            blocks = _ordered(results)
            if len(blocks) != len(first):
                raise ValueError(f'Session "{name}" has {len(blocks)} code blocks where session "{self._first}" '
                                 f'has {len(first)}: every session must have the same blocks.')
            for a, b in zip(first, blocks):
                if a.name == b.name:
                    continue
                if _line(a.name) and _line(b.name) and a.name.rsplit(':', 1)[0] == b.name.rsplit(':', 1)[0]:
                    logging.warning('Block "%s" of session "%s" is compared with block "%s" of session "%s": their '
                                    'names differ only in the line number.', a.name, self._first, b.name, name)
                else:
                    raise ValueError(f'Block "{b.name}" of session "{name}" does not match block "{a.name}" '
                                     f'of session "{self._first}".')
            results.code_block_results = blocks

    def _per_block(self, get) -> dict:
        out = {}
        sessions = list(self.results_map.items())
        for blocks in zip(*[r.code_block_results for _, r in sessions]):
            key = ' -> '.join(sorted({b.name for b in blocks}))
            out[key] = _ranked({name: get(b) for (name, _), b in zip(sessions, blocks)})
        return out

    def compare(self, statistic: str = 'mean') -> ComparisonResults:
        """Each session's ``statistic`` ('min', 'max', 'mean' or 'std') of every figure, overall
        and per block, and of each block's call durations."""
        if statistic not in STATS:
            raise ValueError(f'Invalid summary statistic "{statistic}". Valid values are {" ".join(STATS)}.')
        first = self.results_map[self._first]
        overall_names = list(first.overall.keys() if isinstance(first.overall, dict) else first.overall.index)
        overall, per_block = {}, {}
        for m in overall_names:
            overall[m] = _ranked({n: _value(r.overall, statistic, m) for n, r in self.results_map.items()})
            if first.code_block_results:
                per_block[m] = self._per_block(lambda b, m=m: _value(b.resource_usage, statistic, m))
        times = self._per_block(lambda b: _value(b.compute_time, statistic)) if first.code_block_results else {}
        return ComparisonResults(overall, per_block, times)
