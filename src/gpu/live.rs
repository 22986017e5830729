//! What lives as long as the NVML library handle and borrows it: each device's previous GPM
//! sample (GPM's figures come from two samples) and the event set that delivers critical Xid
//! errors. [`Session`] owns the library and these together, so that they are released before
//! the library shuts down.

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use nvml_wrapper::{Device, EventSet, Nvml};

use super::figures::{NoData, figure};
use super::query::{Optional, no_data};
use super::{GpmReading, GpuInfo, GpuReading, Missing};

/// The GPM metrics read, in the order of [`GpmReading`]'s fields.
const GPM_METRICS: [GpmMetricId; 4] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
];

/// Most Xid events taken in one call: a device that floods them cannot hold the sampler.
const MAX_XIDS_PER_CALL: usize = 32;

/// One device's GPM state.
enum Gpm<'n> {
    /// Not asked yet.
    Unknown,
    /// The device has no GPM, or the driver refused it: why.
    Off(NoData),
    /// The latest sample, the base of the next reading's figures.
    Last(Option<GpmSample<'n>>),
}

/// What borrows the library.
pub struct Live<'n> {
    gpm: Vec<Gpm<'n>>,
    /// The set that critical Xid errors of the devices registered on it arrive in.
    events: Option<EventSet<'n>>,
    /// Per device: why its Xid errors are not watched, when they are not.
    xid_off: Vec<Option<NoData>>,
}

self_cell::self_cell!(
    /// The NVML library and the samples and event set that borrow it.
    pub struct Session {
        owner: Nvml,
        #[not_covariant]
        dependent: Live,
    }
);

impl Session {
    /// Takes the library and registers every one of `devices` that is a whole GPU for critical
    /// Xid errors where the device and driver allow it. A MIG instance's Xid errors arrive as
    /// its parent's.
    pub fn open(nvml: Nvml, devices: &[GpuInfo]) -> Session {
        Session::new(nvml, |nvml| {
            let mut live = Live {
                gpm: devices.iter().map(|_| Gpm::Unknown).collect(),
                events: None,
                xid_off: vec![None; devices.len()],
            };
            live.register_xids(nvml, devices);
            live
        })
    }

    /// Keeps the state of the devices `kept` marks (in device order).
    pub fn keep(&mut self, kept: &[bool]) {
        self.with_dependent_mut(|_, live| {
            let mut k = kept.iter();
            live.gpm.retain(|_| *k.next().unwrap_or(&false));
            let mut k = kept.iter();
            live.xid_off.retain(|_| *k.next().unwrap_or(&false));
        });
    }

    /// The Xid errors waiting in the event set, by device (an index into `devices`), without
    /// waiting; and a note when the set failed (it is then dropped).
    pub fn take_xids(&mut self, devices: &[GpuInfo]) -> (Vec<(usize, u64)>, Option<String>) {
        self.with_dependent_mut(|_, live| {
            let mut out = Vec::new();
            let Some(set) = &live.events else {
                return (out, None);
            };
            for _ in 0..MAX_XIDS_PER_CALL {
                match set.wait(0) {
                    Ok(ev) => {
                        let Some(XidError::Value(xid)) = ev.event_data else {
                            continue;
                        };
                        let Ok(uuid) = ev.device.uuid() else { continue };
                        // The GPU's own, or each of its MIG instances'.
                        for (i, d) in devices.iter().enumerate() {
                            let parent = d.mig.as_ref().map(|m| m.parent_uuid.as_str());
                            if d.uuid == uuid || parent == Some(uuid.as_str()) {
                                out.push((i, xid));
                            }
                        }
                    }
                    Err(NvmlError::Timeout) => return (out, None),
                    Err(e) => {
                        live.events = None;
                        let why = NoData::not_sampled(format!("Xid events stopped: NVML: {e}"));
                        live.xid_off.iter_mut().for_each(|x| *x = Some(why.clone()));
                        return (
                            out,
                            Some(format!("Xid events are no longer read: NVML: {e}")),
                        );
                    }
                }
            }
            (out, None)
        })
    }
}

impl<'n> Live<'n> {
    fn register_xids(&mut self, nvml: &'n Nvml, devices: &[GpuInfo]) {
        for (i, info) in devices.iter().enumerate() {
            if info.mig.is_some() {
                continue;
            }
            let device = match nvml.device_by_index(info.index) {
                Ok(d) => d,
                Err(e) => {
                    self.xid_off[i] = Some(no_data("Xid events", &e));
                    continue;
                }
            };
            let set = match self.events.take() {
                Some(s) => s,
                None => match nvml.create_event_set() {
                    Ok(s) => s,
                    Err(e) => {
                        self.xid_off[i] = Some(no_data("Xid events", &e));
                        continue;
                    }
                },
            };
            // A refused registration releases the set: the next device starts a new one.
            match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(s) => self.events = Some(s),
                Err(e) => self.xid_off[i] = Some(no_data("Xid events", &e.error)),
            }
        }
    }

    /// Reads GPM and ECC for device `i` into `r`. `mig_parent`: the parent GPU and the GPU
    /// instance id, when `d` is a MIG instance (GPM is read per instance through the parent).
    pub fn read_extra(
        &mut self,
        i: usize,
        nvml: &'n Nvml,
        d: &Device<'n>,
        mig_parent: Option<(&Device<'n>, u32)>,
        r: &mut GpuReading,
        q: &mut Optional,
    ) {
        if let Some(why) = self.xid_off.get(i).cloned().flatten() {
            r.missing.push(Missing {
                figure: figure::XID,
                why,
            });
        }
        let corrected = q.get(
            figure::ECC,
            "ECC errors",
            d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
        );
        if let Some(c) = corrected {
            let u = q.get(
                figure::ECC,
                "ECC errors",
                d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            );
            r.ecc = u.map(|u| (c, u));
        }
        self.read_gpm(i, nvml, d, mig_parent, r, q);
    }

    fn read_gpm(
        &mut self,
        i: usize,
        nvml: &'n Nvml,
        d: &Device<'n>,
        mig_parent: Option<(&Device<'n>, u32)>,
        r: &mut GpuReading,
        q: &mut Optional,
    ) {
        // GPM belongs to the whole GPU: a MIG instance asks its parent, for its GPU instance.
        let gpm_device = mig_parent.map_or(d, |(p, _)| p);
        let Some(state) = self.gpm.get_mut(i) else {
            return;
        };
        if let Gpm::Unknown = state {
            *state = match gpm_device.gpm_support() {
                Ok(true) => Gpm::Last(None),
                Ok(false) => Gpm::Off(NoData::not_supported(
                    "this GPU has no GPM (NVML's GPU performance metrics need Hopper or newer)",
                )),
                Err(NvmlError::GpuLost) => {
                    q.lost = true;
                    return;
                }
                Err(e) => Gpm::Off(no_data("GPM", &e)),
            };
        }
        let last = match state {
            Gpm::Off(why) => {
                r.missing.push(Missing {
                    figure: figure::SM_ACTIVITY,
                    why: why.clone(),
                });
                return;
            }
            Gpm::Last(last) => last,
            Gpm::Unknown => return,
        };
        let sampled = match mig_parent {
            Some((p, gi)) => p.gpm_mig_sample(gi),
            None => d.gpm_sample(),
        };
        let now = match sampled {
            Ok(s) => s,
            Err(NvmlError::GpuLost) => {
                q.lost = true;
                return;
            }
            Err(e) => {
                let why = no_data("GPM sample", &e);
                r.missing.push(Missing {
                    figure: figure::SM_ACTIVITY,
                    why: why.clone(),
                });
                if why.kind == super::figures::NOT_SUPPORTED {
                    *state = Gpm::Off(why);
                }
                return;
            }
        };
        if let Some(before) = last.take() {
            match gpm_metrics_get(nvml, &before, &now, &GPM_METRICS) {
                Ok(values) => {
                    let v: Vec<Option<f64>> = values
                        .into_iter()
                        .map(|m| m.ok().map(|m| m.value).filter(|x| x.is_finite()))
                        .collect();
                    r.gpm = Some(GpmReading {
                        sm_active: v[0],
                        sm_occupancy: v[1],
                        tensor_active: v[2],
                        dram_bandwidth: v[3],
                    });
                }
                Err(e) => r.missing.push(Missing {
                    figure: figure::SM_ACTIVITY,
                    why: no_data("GPM metrics", &e),
                }),
            }
        }
        *last = Some(now);
    }
}
