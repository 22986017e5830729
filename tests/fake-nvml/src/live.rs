//! What changes while the library is initialized: GPM sample buffers, event sets and their
//! queues, and each device's fault state (throttling, ECC counts).
//!
//! Sample and event-set handles are the addresses of boxed entries kept here, so a handle that
//! was never handed out, or was freed, is simply not found (INVALID_ARGUMENT) instead of being
//! dereferenced; everything left is freed with the session at the last `nvmlShutdown`.

use crate::scenario::{DeviceSpec, Ecc, Gpm};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// `nvmlEventTypeXidCriticalError`: the only event type the fake supports.
pub(crate) const XID_CRITICAL_EVENT: u64 = 0x8;
/// The Xid a fault raises: 79, "GPU has fallen off the bus".
pub(crate) const FAULT_XID: u64 = 79;

/// A GPM sample buffer (`nvmlGpmSample_t` is its address).
#[derive(Default)]
pub(crate) struct Sample {
    /// Set by `nvmlGpmSampleGet`; `None` until then.
    pub taken: Option<Taken>,
}

/// What `nvmlGpmSampleGet` stored in a sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    pub device: u32,
    /// Order of the samples taken in this session: a later sample has a larger `seq`.
    pub seq: u64,
    /// The device's GPM metrics (percent) at that moment.
    pub values: Gpm,
}

/// One event delivered by `nvmlEventSetWait_v2`: a critical Xid error of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub device: u32,
    pub xid: u64,
}

/// An event set (`nvmlEventSet_t` is its address).
#[derive(Default)]
pub(crate) struct EventSet {
    /// (device index, event type bits) registered on this set.
    registered: Vec<(u32, u64)>,
    queue: VecDeque<Event>,
}

impl EventSet {
    /// The devices registered on this set.
    pub fn devices(&self) -> impl Iterator<Item = u32> + '_ {
        self.registered.iter().map(|&(device, _)| device)
    }

    /// Takes the oldest queued event.
    pub fn pop(&mut self) -> Option<Event> {
        self.queue.pop_front()
    }
}

/// A device's fault state.
struct Health {
    /// Pids whose fault the device has already noticed (each faults once).
    noticed: BTreeSet<u32>,
    /// End of the current throttle period.
    throttled_until: Option<Instant>,
    /// (volatile, aggregate) counts; `None`: ECC not supported.
    ecc: Option<(Ecc, Ecc)>,
}

/// The mutable part of a session.
pub(crate) struct Live {
    samples: Vec<Box<Sample>>,
    sets: Vec<Box<EventSet>>,
    health: Vec<Health>,
    next_seq: u64,
}

impl Live {
    /// The state at init of a session with these devices.
    pub fn new(devices: &[DeviceSpec]) -> Self {
        let health = devices
            .iter()
            .map(|d| Health {
                noticed: BTreeSet::new(),
                throttled_until: None,
                ecc: d.ecc.map(|e| (e, e)),
            })
            .collect();
        Live {
            samples: Vec::new(),
            sets: Vec::new(),
            health,
            next_seq: 0,
        }
    }

    /// A new, empty sample buffer and its handle.
    pub fn alloc_sample(&mut self) -> *mut Sample {
        let mut sample = Box::<Sample>::default();
        let handle: *mut Sample = &mut *sample;
        self.samples.push(sample);
        handle
    }

    /// Frees sample `handle`; false when it is not a live sample.
    pub fn free_sample(&mut self, handle: *const Sample) -> bool {
        let before = self.samples.len();
        self.samples.retain(|s| !std::ptr::eq(&**s, handle));
        self.samples.len() < before
    }

    /// The live sample `handle` (never dereferences the handle itself).
    pub fn sample(&self, handle: *const Sample) -> Option<&Sample> {
        self.samples
            .iter()
            .find(|s| std::ptr::eq(&***s, handle))
            .map(|s| &**s)
    }

    /// Stores a sample of `device` with `values` in sample `handle`; false when not live.
    pub fn fill_sample(&mut self, handle: *const Sample, device: u32, values: Gpm) -> bool {
        let seq = self.next_seq;
        let Some(sample) = self
            .samples
            .iter_mut()
            .find(|s| std::ptr::eq(&***s, handle))
        else {
            return false;
        };
        self.next_seq += 1;
        sample.taken = Some(Taken {
            device,
            seq,
            values,
        });
        true
    }

    /// A new, empty event set and its handle.
    pub fn create_set(&mut self) -> *mut EventSet {
        let mut set = Box::<EventSet>::default();
        let handle: *mut EventSet = &mut *set;
        self.sets.push(set);
        handle
    }

    /// Frees event set `handle`; false when it is not a live set.
    pub fn free_set(&mut self, handle: *const EventSet) -> bool {
        let before = self.sets.len();
        self.sets.retain(|s| !std::ptr::eq(&**s, handle));
        self.sets.len() < before
    }

    /// The live event set `handle`.
    pub fn set_mut(&mut self, handle: *const EventSet) -> Option<&mut EventSet> {
        self.sets
            .iter_mut()
            .find(|s| std::ptr::eq(&***s, handle))
            .map(|s| &mut **s)
    }

    /// Adds `types` of `device` to the event set `handle`; false when it is not a live set.
    pub fn register(&mut self, handle: *const EventSet, device: u32, types: u64) -> bool {
        let Some(set) = self.set_mut(handle) else {
            return false;
        };
        match set.registered.iter_mut().find(|(d, _)| *d == device) {
            Some((_, bits)) => *bits |= types,
            None => set.registered.push((device, types)),
        }
        true
    }

    /// Records that `device` runs faulting process `pid`; the first time for that pid the
    /// device faults: an Xid event on every set that registered it for Xids, a throttle period
    /// of `throttle` from now, one more corrected ECC error.
    pub fn notice_fault(&mut self, device: u32, pid: u32, throttle: Duration) {
        let health = &mut self.health[device as usize];
        if !health.noticed.insert(pid) {
            return;
        }
        health.throttled_until = Some(Instant::now() + throttle);
        if let Some((volatile, aggregate)) = &mut health.ecc {
            volatile.corrected = volatile.corrected.saturating_add(1);
            aggregate.corrected = aggregate.corrected.saturating_add(1);
        }
        let event = Event {
            device,
            xid: FAULT_XID,
        };
        for set in &mut self.sets {
            let wants = set
                .registered
                .iter()
                .any(|&(d, bits)| d == device && bits & XID_CRITICAL_EVENT != 0);
            if wants {
                set.queue.push_back(event);
            }
        }
    }

    /// Whether `device` is in a throttle period now.
    pub fn throttled(&self, device: u32) -> bool {
        self.health[device as usize]
            .throttled_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// (volatile, aggregate) ECC counts of `device`; `None` when it has no ECC.
    pub fn ecc(&self, device: u32) -> Option<(Ecc, Ecc)> {
        self.health[device as usize].ecc
    }
}
