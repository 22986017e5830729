//! The TrueType font text is laid out and drawn with: `GPU_TRACKER_FONT`, else the first of a
//! few well-known system paths; registered with plotters once per process.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use plotters::style::FontStyle;

use super::error::{FONT_ENV, PlotError};

/// Where the usual distributions put a plain sans-serif TrueType font, most likely first.
pub(super) const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

/// Set once a font is registered with plotters; the lock also keeps two threads from loading it
/// at the same time.
pub(super) static FONT_REGISTERED: Mutex<bool> = Mutex::new(false);

pub(super) fn ensure_font() -> Result<(), PlotError> {
    let mut registered = FONT_REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if *registered {
        return Ok(());
    }
    let candidates = font_candidates(std::env::var_os(FONT_ENV).map(PathBuf::from));
    let (path, bytes) = find_font(&candidates)?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| PlotError::BadFont { path: path.clone() })?;
    // The bold face is a nicety: without it, bold text falls back to the regular face.
    if let Some(Ok((_, bold_bytes))) = bold_sibling(&path).map(|bold| find_font(&[bold])) {
        let bold_bytes: &'static [u8] = Box::leak(bold_bytes.into_boxed_slice());
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, bold_bytes);
    }
    *registered = true;
    Ok(())
}

/// The font files to try: only the one `GPU_TRACKER_FONT` names when it is set, else the
/// well-known paths.
pub(super) fn font_candidates(from_env: Option<PathBuf>) -> Vec<PathBuf> {
    match from_env {
        Some(p) if !p.as_os_str().is_empty() => vec![p],
        _ => FONT_PATHS.iter().map(PathBuf::from).collect(),
    }
}

/// The first of `candidates` that can be read and looks like a TrueType or OpenType font.
pub(super) fn find_font(candidates: &[PathBuf]) -> Result<(PathBuf, Vec<u8>), PlotError> {
    for path in candidates {
        let Ok(bytes) = fs::read(path) else { continue };
        if looks_like_font(&bytes) {
            return Ok((path.clone(), bytes));
        }
        if candidates.len() == 1 {
            return Err(PlotError::BadFont { path: path.clone() });
        }
    }
    Err(PlotError::NoFont {
        tried: candidates.to_vec(),
    })
}

pub(super) fn looks_like_font(bytes: &[u8]) -> bool {
    matches!(
        bytes.get(..4),
        Some([0, 1, 0, 0]) | Some(b"true") | Some(b"OTTO") | Some(b"ttcf")
    )
}

/// `DejaVuSans.ttf` -> `DejaVuSans-Bold.ttf`, `LiberationSans-Regular.ttf` ->
/// `LiberationSans-Bold.ttf`.
pub(super) fn bold_sibling(path: &Path) -> Option<PathBuf> {
    let stem = path.file_stem()?.to_str()?;
    let ext = path.extension()?.to_str()?;
    let base = stem.strip_suffix("-Regular").unwrap_or(stem);
    Some(path.with_file_name(format!("{base}-Bold.{ext}")))
}
#[cfg(test)]
mod tests {
    use super::super::tests_support::temp_path;
    use super::*;

    #[test]
    fn missing_font_is_a_clear_error() {
        let missing = temp_path("no-such-font.ttf");
        let err = find_font(std::slice::from_ref(&missing)).unwrap_err();
        assert!(matches!(err, PlotError::NoFont { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.starts_with(
                "--plot needs a TrueType font: install fonts-dejavu-core (Debian) or set \
                 GPU_TRACKER_FONT to a .ttf file"
            ),
            "{message}"
        );
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );
    }

    #[test]
    fn a_file_that_is_no_font_is_refused() {
        let path = temp_path("not-a-font.ttf");
        fs::write(&path, "hello").unwrap();
        let err = find_font(std::slice::from_ref(&path)).unwrap_err();
        fs::remove_file(&path).unwrap();
        assert!(matches!(err, PlotError::BadFont { .. }), "{err:?}");
    }

    #[test]
    fn font_candidates_follow_the_environment() {
        let own = PathBuf::from("/opt/fonts/Mine.ttf");
        assert_eq!(font_candidates(Some(own.clone())), vec![own]);
        let defaults = font_candidates(None);
        assert_eq!(
            defaults[0],
            Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
        );
        assert_eq!(font_candidates(Some(PathBuf::new())), defaults);
        assert_eq!(
            bold_sibling(Path::new("/f/LiberationSans-Regular.ttf")),
            Some(PathBuf::from("/f/LiberationSans-Bold.ttf"))
        );
        assert_eq!(
            bold_sibling(Path::new("/f/DejaVuSans.ttf")),
            Some(PathBuf::from("/f/DejaVuSans-Bold.ttf"))
        );
    }
}
