//! AMD GPUs, read from the kernel's own files (amdgpu, KFD, hwmon) under a root directory.

// PLACEHOLDER until the readers land (replaced whole by the amd-src branch).
use std::path::Path;

/// The AMD GPUs under a root.
pub struct AmdSource {
    devices: Vec<super::GpuInfo>,
}

/// Why no AMD GPU can be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AmdError(String);

impl AmdSource {
    /// Opens the AMD GPUs under `root`.
    pub fn open(root: &Path) -> Result<AmdSource, AmdError> {
        Err(AmdError(format!("no KFD under {}", root.display())))
    }
}

impl super::GpuSource for AmdSource {
    fn devices(&self) -> &[super::GpuInfo] {
        &self.devices
    }
    fn read(&mut self, _: usize) -> Option<super::GpuReading> {
        None
    }
}
