//! One reading's queries to NVML: what a failed query means for its figure.

use nvml_wrapper::error::NvmlError;

use super::figures::NoData;

/// One reading's optional queries: a device that does not support one (or fails it) gives
/// `None`, not an error; the failures are kept for a note and for the figure's "no data".
pub struct Optional {
    pub lost: bool,
    pub failed: Vec<(&'static str, &'static str, NvmlError)>,
}

impl Optional {
    /// The answer to query `what` (in words) for figure `fig`.
    pub fn get<T>(
        &mut self,
        fig: &'static str,
        what: &'static str,
        r: Result<T, NvmlError>,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(NvmlError::GpuLost) => {
                self.lost = true;
                None
            }
            Err(e) => {
                self.failed.push((fig, what, e));
                None
            }
        }
    }
}

/// "No data" for a query NVML answered with `e`: not supported by this GPU or driver, or
/// supported but failed (then the figure was not sampled).
pub fn no_data(what: &str, e: &NvmlError) -> NoData {
    match e {
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) => {
            NoData::not_supported(format!("{what}: NVML says {e}"))
        }
        NvmlError::NoPermission => {
            NoData::not_supported(format!("{what}: NVML refuses it to this user ({e})"))
        }
        _ => NoData::not_sampled(format!("{what} failed: NVML: {e}")),
    }
}
