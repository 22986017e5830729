"""``Tracker``: gpu_tracker 5.0.1's class, its arguments, states, errors and result tree, over
the gpu-tracker library. Sampling runs on the library's own thread inside this process (no
``multiprocessing``, no pickle file, the GIL released while it samples); Python maps arguments
and builds the dataclasses from the figures the library returns."""
from __future__ import annotations

import dataclasses as dc
import enum
import json
import os
import typing as t

from . import _core, _files


@dc.dataclass
class RSSValues:
    """Resident memory of a set of processes: total, and split into private and shared pages."""
    total_rss: float = 0.
    private_rss: float = 0.
    shared_rss: float = 0.


@dc.dataclass
class MaxRAM:
    """Peak host memory: the machine's, the tracked process's, its descendants', both together."""
    unit: str
    system_capacity: float
    system: float = 0.
    main: RSSValues = dc.field(default_factory=RSSValues)
    descendants: RSSValues = dc.field(default_factory=RSSValues)
    combined: RSSValues = dc.field(default_factory=RSSValues)


@dc.dataclass
class MaxGPURAM:
    """Peak GPU memory, split as host memory is."""
    unit: str
    system_capacity: float
    system: float = 0.
    main: float = 0.
    descendants: float = 0.
    combined: float = 0.


@dc.dataclass
class ProcessingUnitPercentages:
    """Max and mean utilization, summed over the units (cores or GPUs) and divided by the units
    expected ("hardware")."""
    max_sum_percent: float = 0.
    max_hardware_percent: float = 0.
    mean_sum_percent: float = 0.
    mean_hardware_percent: float = 0.


@dc.dataclass
class CPUUtilization:
    """CPU utilization of the machine and of the tracked processes, and their peak thread counts."""
    system_core_count: int
    n_expected_cores: int
    system: ProcessingUnitPercentages = dc.field(default_factory=ProcessingUnitPercentages)
    main: ProcessingUnitPercentages = dc.field(default_factory=ProcessingUnitPercentages)
    descendants: ProcessingUnitPercentages = dc.field(default_factory=ProcessingUnitPercentages)
    combined: ProcessingUnitPercentages = dc.field(default_factory=ProcessingUnitPercentages)
    main_n_threads: int = 0
    descendants_n_threads: int = 0
    combined_n_threads: int = 0


@dc.dataclass
class GPUUtilization:
    """Utilization of the GPUs tracked."""
    system_gpu_count: int
    n_expected_gpus: int
    gpu_percentages: ProcessingUnitPercentages = dc.field(default_factory=ProcessingUnitPercentages)


@dc.dataclass
class ComputeTime:
    """Wall time of the tracked block."""
    unit: str
    time: float = 0.


@dc.dataclass
class ResourceUsage:
    """Everything measured over one tracking session."""
    max_ram: MaxRAM
    max_gpu_ram: MaxGPURAM
    cpu_utilization: CPUUtilization
    gpu_utilization: GPUUtilization
    compute_time: ComputeTime


def _build(cls, doc: dict):
    """An instance of dataclass ``cls`` from the library's JSON object, keeping gpu_tracker's
    fields only (the library's added keys stay in ``Tracker.details``)."""
    kwargs = {}
    for f in dc.fields(cls):
        value = doc[f.name]
        sub = f.type if isinstance(f.type, type) else _TYPES.get(str(f.type))
        kwargs[f.name] = _build(sub, value) if sub is not None and dc.is_dataclass(sub) else value
    return cls(**kwargs)


_TYPES = {c.__name__: c for c in (RSSValues, MaxRAM, MaxGPURAM, ProcessingUnitPercentages, CPUUtilization,
                                   GPUUtilization, ComputeTime, ResourceUsage)}


def mark(name: str) -> bool:
    """Marks the start of a phase named ``name`` in the Slurm job step (or ``gpu-tracker -e``
    command) this process runs in, as ``gpu-tracker mark NAME`` does, so the phase shows in the
    job's summary. True when a tracker took the mark; False, never an exception, when there is
    none (outside a tracked job) or the name is empty."""
    try:
        ok, _why = _core.mark(str(name))
        return bool(ok)
    except Exception:  # a training script must not fail because tracking is absent
        return False


class Tracker:
    """Tracks the RAM, GPU RAM, CPU and GPU utilization and wall time of this process and its
    descendants (or of ``process_id``'s) between ``start()`` and ``stop()``, or over a ``with``
    block. Same arguments, defaults and units as gpu_tracker 5.0.1's ``Tracker``:

    :param sleep_time: seconds between samples (at least 0.1). Peaks of memory are exact whatever
        it is (the kernel's high-water marks); it sets how often utilization and the
        ``tracking_file`` rows are sampled.
    :param ram_unit: 'bytes', 'kilobytes', 'megabytes', 'gigabytes' or 'terabytes'.
    :param gpu_ram_unit: same choices, for GPU memory.
    :param time_unit: 'seconds', 'minutes', 'hours' or 'days'.
    :param n_expected_cores: denominator of the CPU "hardware" percentages (default: all cores).
    :param gpu_uuids: GPUs whose utilization is tracked (default: all).
    :param disable_logs: no warnings on standard error.
    :param process_id: track that process and its descendants instead of this one.
    :param resource_usage_file: accepted and unused: results never go through a file here.
    :param n_join_attempts: accepted and unused: there is no tracking process to join.
    :param join_timeout: accepted and unused, likewise.
    :param gpu_brand: 'nvidia' (NVML) or 'amd' (the kernel's amdgpu files); None reads both
        where present. NVML is loaded at run time, so CPU-only machines need nothing.
    :param tracking_file: per-sample rows, '.csv' or '.sqlite' (a SQLite file is filled when
        tracking stops).
    :param overwrite: replace an existing ``tracking_file``.
    :param phase: (keyword only, an extension) a phase of this name is marked in the tracked
        Slurm job step when tracking starts (see :func:`gpu_tracker.mark`).
    :raises ValueError: a bad unit, brand, sleep time or file extension.
    :raises FileExistsError: ``tracking_file`` exists and ``overwrite`` is False.
    """

    class State(enum.Enum):
        """Where the tracker is in its life."""
        NEW = 0
        STARTED = 1
        STOPPED = 2

    def __init__(
            self, sleep_time: float = 1.0, ram_unit: str = 'gigabytes', gpu_ram_unit: str = 'gigabytes',
            time_unit: str = 'hours', n_expected_cores: int | None = None, gpu_uuids: t.Iterable[str] | None = None,
            disable_logs: bool = False, process_id: int | None = None, resource_usage_file: str | None = None,
            n_join_attempts: int = 5, join_timeout: float = 10.0, gpu_brand: str | None = None,
            tracking_file: str | None = None, overwrite: bool = False, *, phase: str | None = None):
        self._tracking_file = None if tracking_file is None else os.fspath(tracking_file)
        self._csv_for_sqlite = None
        rust_file = self._tracking_file
        if rust_file is not None and _files.check_name(rust_file) == '.sqlite':
            # The library writes CSV; the rows go into the SQLite file when tracking stops.
            _files.check_overwrite(rust_file, overwrite)
            self._csv_for_sqlite = f'{rust_file}.{os.getpid()}.{id(self)}.csv'
            rust_file = self._csv_for_sqlite
        # Checks every argument, makes the tracking file and opens GPUs named by UUID.
        self._session = _core.Session(
            float(sleep_time), ram_unit, gpu_ram_unit, time_unit, n_expected_cores,
            None if gpu_uuids is None else sorted(gpu_uuids), bool(disable_logs), process_id, gpu_brand,
            rust_file, bool(overwrite))
        self.resource_usage: ResourceUsage | None = None
        #: The library's whole result document: gpu_tracker's keys plus its own (per-GPU figures,
        #: how the figures were obtained, notes). None until tracking stops.
        self.details: dict | None = None
        self.n_join_attempts = n_join_attempts
        self.join_timeout = join_timeout
        self.resource_usage_file = resource_usage_file
        self.phase = phase
        self.state = Tracker.State.NEW

    def __repr__(self):
        return f'State: {self.state.name}'

    def start(self):
        """Starts tracking (what entering the ``with`` block does)."""
        if self.state is not Tracker.State.NEW:
            raise RuntimeError(f'Tracking cannot start: this tracker has already {self.state.name.lower()}.')
        self._session.start()
        self.state = Tracker.State.STARTED
        if self.phase is not None:
            mark(self.phase)

    def stop(self):
        """Stops tracking and fills ``resource_usage`` (what leaving the ``with`` block does).
        Only the process that started the tracker can stop it: in a child forked while it runs,
        this raises ``RuntimeError`` and leaves the parent's tracking alone."""
        if self.state is Tracker.State.NEW:
            raise RuntimeError('Tracking cannot stop: it has not started.')
        if self.state is Tracker.State.STOPPED:
            raise RuntimeError('Tracking cannot stop: it has already stopped.')
        doc = json.loads(self._session.stop())
        self.state = Tracker.State.STOPPED
        self.details = doc
        self.resource_usage = _build(ResourceUsage, doc)
        if self._csv_for_sqlite is not None:
            try:
                _files.tracking_csv_to_sqlite(self._csv_for_sqlite, self._tracking_file)
            finally:
                os.remove(self._csv_for_sqlite)

    def __enter__(self) -> Tracker:
        self.start()
        return self

    def __exit__(self, *_):
        self.stop()

    def to_json(self) -> dict:
        """The result as a dict with gpu_tracker's keys (``dataclasses.asdict`` of
        ``resource_usage``)."""
        if self.resource_usage is None:
            raise RuntimeError('There are no figures yet: call stop() or leave the with block first.')
        return dc.asdict(self.resource_usage)

    def __str__(self) -> str:
        """The result as indented text: gpu_tracker's layout and labels, floats to 3 decimals."""
        return _core.render_text(json.dumps(self.to_json())).rstrip("\n")
