//! AMD GPUs, read from the kernel's own files (amdgpu, KFD, hwmon) under a root directory.
