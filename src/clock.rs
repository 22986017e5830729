//! The wall clock as the records and timelines count it.

/// Now, in Unix seconds (0 before 1970: a clock that far off dates nothing usefully).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
