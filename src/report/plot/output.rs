//! The plot's file: SVG or PNG, by the extension of its name.

use std::path::Path;

use plotters::prelude::*;

use super::data::PlotData;
use super::draw::render;
use super::error::PlotError;
use super::font::ensure_font;
use super::layout::Layout;
use super::style::WIDTH;

/// Draws `data` to `path`; the format follows the extension (.svg or .png, case-insensitive).
pub fn draw(data: &PlotData, path: &Path) -> Result<(), PlotError> {
    let format = Format::of(path)?;
    ensure_font()?;
    let layout = Layout::new(data);
    let size = (WIDTH, layout.height);
    let failed = |message: String| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    };
    match format {
        Format::Svg => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            render(&root, data, &layout).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
        Format::Png => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            render(&root, data, &layout).map_err(|e| failed(e.to_string()))?;
            root.present().map_err(|e| failed(e.to_string()))
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

impl Format {
    pub(super) fn of(path: &Path) -> Result<Format, PlotError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(PlotError::UnknownFormat {
                path: path.to_path_buf(),
            }),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::super::tests_support::*;
    use super::*;

    #[test]
    fn unknown_extension_is_refused() {
        let path = temp_path("plot.jpg");
        let err = draw(&sample_data(), &path).unwrap_err();
        assert!(matches!(err, PlotError::UnknownFormat { .. }), "{err:?}");
        assert!(
            err.to_string().contains("must end in .svg or .png"),
            "{err}"
        );
        assert!(!path.exists());
        let err = draw(&sample_data(), Path::new("plot")).unwrap_err();
        assert!(matches!(err, PlotError::UnknownFormat { .. }), "{err:?}");
    }

    #[test]
    fn unwritable_path_names_the_path() {
        require_font();
        for name in ["plot.svg", "plot.png"] {
            let path = temp_path("no-such-dir").join(name);
            let err = draw(&sample_data(), &path).unwrap_err();
            assert!(matches!(err, PlotError::Draw { .. }), "{err:?}");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
        }
    }
}
