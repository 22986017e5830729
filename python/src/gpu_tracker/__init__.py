"""gpu_tracker: exact resource tracking of a Python block (RAM, GPU RAM, CPU and GPU
utilization, time), with the API of gpu_tracker 5.0.1, measured by the gpu-tracker library on its
own thread."""
from importlib import metadata as _metadata

from .tracker import Tracker, mark
from .sub_tracker import SubTracker, sub_track, SubTrackingAnalyzer
from .comparison import TrackingComparison

try:
    __version__ = _metadata.version('gpu_tracker')
except _metadata.PackageNotFoundError:  # imported from a source tree
    __version__ = '0+unknown'

__all__ = ['Tracker', 'SubTracker', 'sub_track', 'SubTrackingAnalyzer', 'TrackingComparison', 'mark', '__version__']
