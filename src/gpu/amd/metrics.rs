//! The amdgpu `gpu_metrics` file: a binary table whose layout the kernel versions by a header
//! (`struct metrics_table_header` in `drivers/gpu/drm/amd/include/kgd_pp_interface.h`:
//! `u16 structure_size`, `u8 format_revision`, `u8 content_revision`, in the CPU's byte order),
//! followed by `struct gpu_metrics_v<format>_<content>`.
//!
//! Only the energy accumulator is read, and only from the revisions whose header documents its
//! unit: 1.4 to 1.8 (the Instinct MI300 series' tables) say "Energy (15.259uJ (2^-16) units)",
//! a `u64` at a fixed place. Earlier revisions (1.0 to 1.3: MI100, MI200, consumer GPUs) have a
//! field of that name without a documented unit, and 2.x and 3.x (APUs) none: from those no
//! energy is taken here, never a figure of a guessed unit.
//!
//! Offsets (natural C alignment, as the kernel builds the tables):
//! - 1.4, 1.7, 1.8: `energy_accumulator` at byte 24 (1.4 after `vcn_activity[4]`; 1.7 and 1.8
//!   after `mem_max_bandwidth`).
//! - 1.5, 1.6: at byte 88 (after `vcn_activity[4]` and `jpeg_activity[32]`).
//!
//! Later kernels append fields to a revision's table: only a table too short to hold the
//! counter is refused.

/// The table's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsHeader {
    /// `structure_size`: the table's length in bytes as the kernel filled it.
    pub size: u16,
    /// `format_revision`.
    pub format: u8,
    /// `content_revision`.
    pub content: u8,
}

impl MetricsHeader {
    /// `1.6`, as the docs and notes name a revision.
    pub fn revision(&self) -> String {
        format!("{}.{}", self.format, self.content)
    }
}

/// Why a `gpu_metrics` table gave no energy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoEnergy {
    /// Shorter than its header.
    NoHeader,
    /// A revision without an energy counter of a documented unit.
    Revision(MetricsHeader),
    /// The header's size, or the bytes read, too short to hold the counter.
    Short(MetricsHeader, usize),
}

impl std::fmt::Display for NoEnergy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoEnergy::NoHeader => write!(f, "gpu_metrics is shorter than its header"),
            NoEnergy::Revision(h) => write!(
                f,
                "gpu_metrics revision {} has no energy counter of a documented unit",
                h.revision()
            ),
            NoEnergy::Short(h, n) => write!(
                f,
                "gpu_metrics revision {} is cut short ({n} bytes read, {} in its header)",
                h.revision(),
                h.size
            ),
        }
    }
}

/// Energy per accumulator step: 2^-16 J.
const ACCUMULATOR_STEPS_PER_JOULE: u128 = 1 << 16;

/// The header at the start of `blob`, if it is long enough.
pub fn parse_header(blob: &[u8]) -> Option<MetricsHeader> {
    let b = blob.get(..4)?;
    Some(MetricsHeader {
        size: u16::from_ne_bytes([b[0], b[1]]),
        format: b[2],
        content: b[3],
    })
}

/// The largest table of revision 1.6's first layout (384 bytes, with the VCN and JPEG activity
/// arrays before the counter), which the kernel took back; the layout it kept (about 1.6 KiB)
/// has the counter right after the utilization.
pub const FIRST_V1_6_MAX_SIZE: u16 = 512;

/// Where a revision keeps its energy accumulator (`u64`), for those whose unit is documented;
/// `size` (the header's) tells revision 1.6's two layouts apart.
pub fn energy_offset(format: u8, content: u8, size: u16) -> Option<usize> {
    match (format, content) {
        (1, 4) | (1, 7) | (1, 8) => Some(24),
        (1, 5) => Some(88),
        (1, 6) if size <= FIRST_V1_6_MAX_SIZE => Some(88),
        (1, 6) => Some(16),
        _ => None,
    }
}

/// The energy accumulator's raw value (2^-16 J steps) in `blob`.
pub fn parse_energy_accumulator(blob: &[u8]) -> Result<(MetricsHeader, u64), NoEnergy> {
    let h = parse_header(blob).ok_or(NoEnergy::NoHeader)?;
    let at = energy_offset(h.format, h.content, h.size).ok_or(NoEnergy::Revision(h))?;
    let end = at + 8;
    if usize::from(h.size) < end {
        return Err(NoEnergy::Short(h, blob.len()));
    }
    let raw = blob.get(at..end).ok_or(NoEnergy::Short(h, blob.len()))?;
    let mut b = [0u8; 8];
    b.copy_from_slice(raw);
    Ok((h, u64::from_ne_bytes(b)))
}

/// Millijoules in `steps` of 2^-16 J, rounded down.
pub fn accumulator_to_mj(steps: u64) -> u64 {
    let mj = u128::from(steps) * 1000 / ACCUMULATOR_STEPS_PER_JOULE;
    u64::try_from(mj).unwrap_or(u64::MAX)
}

/// The energy in millijoules the table `blob` counts, and its header.
pub fn parse_energy_mj(blob: &[u8]) -> Result<(MetricsHeader, u64), NoEnergy> {
    parse_energy_accumulator(blob).map(|(h, steps)| (h, accumulator_to_mj(steps)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `size` bytes, revision `format.content`, with `energy` at `at`.
    fn table(size: u16, format: u8, content: u8, at: usize, energy: u64) -> Vec<u8> {
        let mut b = vec![0xeeu8; usize::from(size)];
        b[..2].copy_from_slice(&size.to_ne_bytes());
        b[2] = format;
        b[3] = content;
        if at + 8 <= b.len() {
            b[at..at + 8].copy_from_slice(&energy.to_ne_bytes());
        }
        b
    }

    #[test]
    fn the_header_is_size_then_format_then_content() {
        let h = parse_header(&[0x80, 0x01, 1, 6, 0, 0]).unwrap();
        assert_eq!(
            h,
            MetricsHeader {
                size: u16::from_ne_bytes([0x80, 0x01]),
                format: 1,
                content: 6
            }
        );
        assert_eq!(h.revision(), "1.6");
        assert_eq!(parse_header(&[1, 2, 3]), None);
    }

    #[test]
    fn each_mi300_revision_has_its_counter_where_the_kernel_puts_it() {
        // 65536 steps are one joule.
        for (content, at) in [(4u8, 24usize), (5, 88), (6, 88), (7, 24), (8, 24)] {
            let b = table(384, 1, content, at, 3 * 65536);
            let (h, mj) = parse_energy_mj(&b).unwrap();
            assert_eq!((h.content, mj), (content, 3000), "1.{content}");
        }
        // The first 1.6 table: the value at 24 is jpeg activity, not energy.
        let mut b = table(384, 1, 6, 88, 65536);
        b[24..32].copy_from_slice(&(99 * 65536u64).to_ne_bytes());
        assert_eq!(parse_energy_mj(&b).unwrap().1, 1000);
        // The 1.6 table the kernel kept (1664 bytes): the counter right after the utilization.
        let mut b = table(1664, 1, 6, 16, 5 * 65536);
        b[88..96].copy_from_slice(&(99 * 65536u64).to_ne_bytes());
        assert_eq!(parse_energy_mj(&b).unwrap().1, 5000);
    }

    #[test]
    fn revisions_without_a_documented_unit_give_no_energy() {
        for (f, c) in [
            (1u8, 0u8),
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 9),
            (2, 4),
            (3, 0),
            (0, 0),
        ] {
            let b = table(384, f, c, 24, 65536);
            assert!(
                matches!(parse_energy_mj(&b), Err(NoEnergy::Revision(_))),
                "{f}.{c}"
            );
        }
    }

    #[test]
    fn a_table_too_short_for_the_counter_gives_none() {
        // The header says 64 bytes: the counter at 88 is not in it.
        let b = table(64, 1, 6, 88, 65536);
        assert!(matches!(parse_energy_mj(&b), Err(NoEnergy::Short(_, 64))));
        // The header claims 384 bytes but only 90 were read.
        let mut b = table(384, 1, 6, 88, 65536);
        b.truncate(90);
        assert!(matches!(parse_energy_mj(&b), Err(NoEnergy::Short(_, 90))));
        assert_eq!(parse_energy_mj(&[1, 0]), Err(NoEnergy::NoHeader));
        assert_eq!(parse_energy_mj(&[]), Err(NoEnergy::NoHeader));
    }

    #[test]
    fn steps_are_converted_to_millijoules_without_overflow() {
        assert_eq!(accumulator_to_mj(0), 0);
        assert_eq!(accumulator_to_mj(65536), 1000);
        // 15.26 µJ: below a millijoule.
        assert_eq!(accumulator_to_mj(1), 0);
        assert_eq!(accumulator_to_mj(66), 1);
        assert_eq!(accumulator_to_mj(u64::MAX), u64::MAX / 65536 * 1000 + 999);
    }
}
