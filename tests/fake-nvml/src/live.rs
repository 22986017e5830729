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
    /// `Some(gi)`: a sample of the device's GPU instance `gi` (`nvmlGpmMigSampleGet`).
    pub gpu_instance: Option<u32>,
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
    /// (device, pid) of the faults already queued on this set.
    delivered: BTreeSet<(u32, u32)>,
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

/// Objects handed out by address: boxed, so an address stays put while the vector changes,
/// and found by address, so a handle that is not live is never dereferenced.
pub(crate) struct Handles<T> {
    items: Vec<Box<T>>,
}

impl<T: Default> Handles<T> {
    /// A new default object and its handle.
    pub fn add(&mut self) -> *mut T {
        let mut item = Box::<T>::default();
        let handle: *mut T = &mut *item;
        self.items.push(item);
        handle
    }
}

impl<T> Handles<T> {
    fn new() -> Self {
        Handles { items: Vec::new() }
    }

    /// Frees object `handle`; false when it is not live.
    pub fn remove(&mut self, handle: *const T) -> bool {
        let before = self.items.len();
        self.items.retain(|item| !std::ptr::eq(&**item, handle));
        self.items.len() < before
    }

    /// The live object `handle`.
    pub fn get(&self, handle: *const T) -> Option<&T> {
        self.items
            .iter()
            .map(|item| &**item)
            .find(|item| std::ptr::eq(*item, handle))
    }

    /// The live object `handle`, to change.
    pub fn get_mut(&mut self, handle: *const T) -> Option<&mut T> {
        self.items
            .iter_mut()
            .map(|item| &mut **item)
            .find(|item| std::ptr::eq(&**item, handle))
    }
}

/// The mutable part of a session.
pub(crate) struct Live {
    pub samples: Handles<Sample>,
    pub sets: Handles<EventSet>,
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
            samples: Handles::new(),
            sets: Handles::new(),
            health,
            next_seq: 0,
        }
    }

    /// Stores a sample of `device` (of its GPU instance `gpu_instance` when given) with
    /// `values` in sample `handle`; false when not live.
    pub fn fill_sample(
        &mut self,
        handle: *const Sample,
        device: u32,
        gpu_instance: Option<u32>,
        values: Gpm,
    ) -> bool {
        let seq = self.next_seq;
        let Some(sample) = self.samples.get_mut(handle) else {
            return false;
        };
        self.next_seq += 1;
        sample.taken = Some(Taken {
            device,
            gpu_instance,
            seq,
            values,
        });
        true
    }

    /// Adds `types` of `device` to the event set `handle`; false when it is not a live set.
    pub fn register(&mut self, handle: *const EventSet, device: u32, types: u64) -> bool {
        let Some(set) = self.sets.get_mut(handle) else {
            return false;
        };
        match set.registered.iter_mut().find(|(d, _)| *d == device) {
            Some((_, bits)) => *bits |= types,
            None => set.registered.push((device, types)),
        }
        true
    }

    /// Records that `device` runs faulting process `pid`. The first time for that pid the
    /// device faults: a throttle period of `throttle` from now, one more corrected ECC error.
    /// Every set registered for the device's Xids that has not had this fault yet gets its Xid
    /// event, so a set registered while the process still runs gets it too.
    pub fn notice_fault(&mut self, device: u32, pid: u32, throttle: Duration) {
        let health = &mut self.health[device as usize];
        if health.noticed.insert(pid) {
            health.throttled_until = Some(Instant::now() + throttle);
            if let Some((volatile, aggregate)) = &mut health.ecc {
                volatile.corrected = volatile.corrected.saturating_add(1);
                aggregate.corrected = aggregate.corrected.saturating_add(1);
            }
        }
        let event = Event {
            device,
            xid: FAULT_XID,
        };
        for set in self.sets.items.iter_mut() {
            let wants = set
                .registered
                .iter()
                .any(|&(d, bits)| d == device && bits & XID_CRITICAL_EVENT != 0);
            if wants && set.delivered.insert((device, pid)) {
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
