//! Pure parsers of the small text files the kernel's amdgpu and KFD drivers give: numbers, the
//! KFD topology's `properties`, PCI addresses and `unique_id`. No I/O here.

use std::collections::BTreeMap;

/// A number file's value: one unsigned decimal, surrounding white space allowed (sysfs ends
/// it with a newline). `None` for anything else: empty, negative, not a number, or more than
/// one word.
pub fn parse_number(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// A KFD topology node's `properties`: one `key value` pair per line, the value an unsigned
/// decimal. A line of another shape is left out (a later kernel may add one), so a key that
/// is asked for and absent reads as missing, never as 0.
pub fn parse_properties(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(k), Some(v), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if let Some(v) = parse_number(v) {
            out.insert(k.to_string(), v);
        }
    }
    out
}

/// The PCI address (`0000:c1:00.0`) the KFD topology gives a GPU: `domain` and `location_id`
/// (the kernel's `pci_dev_id`: bus in bits 15..8, device 7..3, function 2..0). Bits above 15
/// are left out: a partitioned GPU keeps its partition there (the PCI device is the
/// partitions' one).
pub fn pci_address_from_kfd(domain: u64, location_id: u64) -> Option<String> {
    if domain > 0xffff {
        return None;
    }
    let bus = (location_id >> 8) & 0xff;
    let device = (location_id >> 3) & 0x1f;
    let function = location_id & 0x7;
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

/// A PCI address as sysfs names a device's directory (`0000:c1:00.0`), in lower case; `None`
/// for any other name (a partition's platform device, say).
pub fn parse_pci_address(name: &str) -> Option<String> {
    let b = name.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_hexdigit());
    let ok = b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11]);
    ok.then(|| name.to_ascii_lowercase())
}

/// The amdgpu device file `unique_id`: the GPU's serial, 16 hex digits (the kernel writes it
/// with `%016llx`). `None` when empty (a GPU without one writes nothing) or not hex; 0 is no
/// id either.
pub fn parse_unique_id(text: &str) -> Option<u64> {
    let t = text.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if t.is_empty() || t.len() > 16 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(t, 16).ok().filter(|v| *v != 0)
}

/// The UUID a GPU is recorded under: ROCm's form of its `unique_id`, `GPU-` and 16 lower-case
/// hex digits (what `rocminfo` shows and `ROCR_VISIBLE_DEVICES` accepts), or where the GPU has
/// none, its PCI address (stable for the node's life, unique on it).
pub fn uuid_of(unique_id: Option<u64>, pci: &str) -> String {
    match unique_id {
        Some(u) => format!("GPU-{u:016x}"),
        None => pci.to_string(),
    }
}

/// A product name from an amdgpu `product_name` file: its first line, trimmed; `None` when
/// empty (the board's ROM gave none).
pub fn parse_product_name(text: &str) -> Option<String> {
    let t = text.lines().next().unwrap_or("").trim();
    (!t.is_empty()).then(|| crate::text::clean_text(t, 128))
}

/// A name for a GPU whose board gives no product name, from the KFD node's `name` (the
/// graphics target, `gfx942`): `AMD GPU (gfx942)`, or `AMD GPU` without one.
pub fn fallback_name(kfd_name: &str) -> String {
    let t = kfd_name.trim();
    let ok = !t.is_empty() && t.len() <= 32 && t.bytes().all(|b| b.is_ascii_alphanumeric());
    if ok {
        format!("AMD GPU ({t})")
    } else {
        "AMD GPU".to_string()
    }
}

/// The pid a KFD `proc` directory entry stands for (its name is the process's host pid).
pub fn parse_pid(name: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(name).ok()?;
    parse_number(s)
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_file_is_one_unsigned_decimal() {
        assert_eq!(parse_number("60\n"), Some(60));
        assert_eq!(parse_number("  1073741824 \n"), Some(1 << 30));
        for bad in ["", "\n", "-1\n", "12 13\n", "0x10", "1.5", "busy"] {
            assert_eq!(parse_number(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn properties_keep_the_pairs_and_leave_other_lines_out() {
        let p = parse_properties(
            "cpu_cores_count 0\nsimd_count 1216\nsimd_per_cu 4\n\
             drm_render_minor 128\nlocation_id 4352\ndomain 0\n\
             unique_id 5547384938462516833\nodd line here\nnegative -3\n",
        );
        assert_eq!(p.get("simd_count"), Some(&1216));
        assert_eq!(p.get("simd_per_cu"), Some(&4));
        assert_eq!(p.get("drm_render_minor"), Some(&128));
        assert_eq!(p.get("unique_id"), Some(&5547384938462516833));
        assert_eq!(p.get("negative"), None);
        assert_eq!(p.get("odd"), None);
        assert_eq!(p.len(), 7);
    }

    #[test]
    fn kfd_location_is_bus_device_function_and_a_partition_is_left_out() {
        // 0x1100: bus 0x11, device 0, function 0.
        assert_eq!(
            pci_address_from_kfd(0, 0x1100).as_deref(),
            Some("0000:11:00.0")
        );
        // bus 0xc1, device 0x1f, function 3.
        assert_eq!(
            pci_address_from_kfd(1, 0xc1fb).as_deref(),
            Some("0001:c1:1f.3")
        );
        // Partition 2 of a partitioned GPU, in bits 31..28.
        assert_eq!(
            pci_address_from_kfd(0, (2 << 28) | 0x1100).as_deref(),
            Some("0000:11:00.0")
        );
        assert_eq!(pci_address_from_kfd(0x1_0000, 0x1100), None);
    }

    #[test]
    fn pci_addresses_are_recognised_in_lower_case() {
        assert_eq!(
            parse_pci_address("0000:C1:00.0").as_deref(),
            Some("0000:c1:00.0")
        );
        for bad in [
            "amdgpu_xcp_1",
            "0000:c1:00",
            "0000:c1:00.8",
            "00000:c1:00.0",
        ] {
            assert_eq!(parse_pci_address(bad), None, "{bad}");
        }
    }

    #[test]
    fn unique_id_is_hex_and_empty_or_zero_is_none() {
        assert_eq!(
            parse_unique_id("4cfa3d2e1b0a9988\n"),
            Some(0x4cfa3d2e1b0a9988)
        );
        assert_eq!(parse_unique_id("0x00000000000000ff"), Some(0xff));
        for bad in [
            "",
            "\n",
            "0000000000000000\n",
            "not-hex",
            "1234567890abcdef0",
        ] {
            assert_eq!(parse_unique_id(bad), None, "{bad:?}");
        }
        assert_eq!(
            uuid_of(Some(0x4cfa3d2e1b0a9988), "0000:11:00.0"),
            "GPU-4cfa3d2e1b0a9988"
        );
        assert_eq!(uuid_of(Some(0xff), "x"), "GPU-00000000000000ff");
        assert_eq!(uuid_of(None, "0000:11:00.0"), "0000:11:00.0");
    }

    #[test]
    fn names_come_from_the_board_else_the_graphics_target() {
        assert_eq!(
            parse_product_name("AMD Instinct MI300X\n").as_deref(),
            Some("AMD Instinct MI300X")
        );
        assert_eq!(parse_product_name("\n"), None);
        assert_eq!(parse_product_name(""), None);
        assert_eq!(fallback_name("gfx942\n"), "AMD GPU (gfx942)");
        assert_eq!(fallback_name(""), "AMD GPU");
        assert_eq!(fallback_name("gfx942; rm -rf"), "AMD GPU");
    }

    #[test]
    fn kfd_proc_entries_are_pids() {
        assert_eq!(parse_pid(b"4242"), Some(4242));
        for bad in [&b"0"[..], b".4242.new", b"self", b"99999999999", b""] {
            assert_eq!(parse_pid(bad), None, "{bad:?}");
        }
    }
}
